"""Chat records through the tokenizer's chat template, with a mask of the answer tokens.

The template is rendered as transformers renders it (a sandboxed jinja2 environment with
``trim_blocks``/``lstrip_blocks``, loop controls, ``tojson``, ``raise_exception``,
``strftime_now``, and ``{% generation %}`` blocks rendering their body). Which characters are an
assistant's answer is found by rendering prefixes of the conversation, so it works for any
template: answer ``i`` starts where the render of ``messages[:i]`` with the generation prompt
stops agreeing with the full render, and ends where the render of ``messages[:i + 1]`` stops
agreeing with it (so the end-of-turn text the template writes after an answer is part of the
answer: the model learns to stop). A token counts when its first character is in an answer.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache

import numpy as np

from phalanx_runtime.data.options import field_error


def _raise_exception(message: str):
    from jinja2.exceptions import TemplateError

    raise TemplateError(message)


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _generation_extension():
    from jinja2 import nodes
    from jinja2.ext import Extension

    class GenerationBlock(Extension):
        """``{% generation %}…{% endgeneration %}`` (transformers marks answers with it): the body."""

        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    return GenerationBlock


@lru_cache(maxsize=8)
def compile_template(source: str):
    from jinja2.exceptions import TemplateSyntaxError
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[_generation_extension(), loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return env.from_string(source)
    except TemplateSyntaxError as exc:
        raise field_error("tokenizer", f"chat template: {exc.message} (line {exc.lineno})") from None


class ChatRenderer:
    def __init__(self, template: str | None, special_tokens: dict[str, str], tokenizer_path: str = ""):
        if not template:
            raise field_error("messages_field", f"chat data needs a chat template: {tokenizer_path or 'the tokenizer'} "
                                                "has none (chat_template in tokenizer_config.json or "
                                                "chat_template.jinja)")
        self.template = compile_template(template)
        self.special_tokens = special_tokens

    def render(self, messages: list[dict], add_generation_prompt: bool = False) -> str:
        return self.template.render(messages=messages, add_generation_prompt=add_generation_prompt,
                                    **self.special_tokens)

    def render_with_answers(self, messages: list[dict]) -> tuple[str, list[tuple[int, int]]]:
        """The conversation's text and the ``[start, end)`` character spans of its answers."""
        full = self.render(messages)
        spans = []
        for i, message in enumerate(messages):
            if message.get("role") != "assistant":
                continue
            start = common_prefix(self.render(messages[:i], add_generation_prompt=True), full)
            end = common_prefix(self.render(messages[:i + 1]), full)
            if end > start:
                spans.append((start, end))
        return full, spans


def common_prefix(a: str, b: str) -> int:
    """Length of the longest common prefix (a string compare first: the usual case is a prefix)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def answer_mask(offsets, spans: list[tuple[int, int]]) -> np.ndarray:
    """Per token (its ``(start, end)`` character offsets): True when it starts inside an answer."""
    starts = np.fromiter((start for start, _ in offsets), dtype=np.int64, count=len(offsets))
    mask = np.zeros(len(starts), dtype=bool)
    for start, end in spans:
        mask |= (starts >= start) & (starts < end)
    return mask
