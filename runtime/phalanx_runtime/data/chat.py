"""Chat records through the tokenizer's chat template, with a mask of the answer tokens.

The template is rendered as transformers renders it (a sandboxed jinja2 environment with
``trim_blocks``/``lstrip_blocks``, loop controls, ``tojson``, ``raise_exception``,
``strftime_now``, and ``{% generation %}`` blocks rendering their body). Which characters are an
assistant's answer:

- a template with ``{% generation %}`` blocks marks them (transformers'
  ``return_assistant_tokens_mask``): each block's rendered body is an answer;
- any other template: answer ``i`` starts where the render of ``messages[:i]`` with the
  generation prompt stops agreeing with the full render, and ends where the render of
  ``messages[:i + 1]`` stops agreeing with it (so the end-of-turn text the template writes after
  an answer is part of the answer: the model learns to stop). A template that renders an earlier
  turn differently once later turns follow (Qwen3 writes a ``<think>`` block on the last turn
  only) gives no such span: the answer is then the message's content found in the full render
  after that start, with the end-of-document token when the template writes it right after.

An answer found neither way is counted as missing (meta.json ``answers``, and a warning). A token
counts when its first character is in an answer.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from functools import lru_cache

import numpy as np

from phalanx_runtime.data.options import field_error


def _raise_exception(message: str):
    from jinja2.exceptions import TemplateError

    raise TemplateError(message)


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


# Written around each {% generation %} body, then cut out of the render (the nonce: no content has them).
_NONCE = uuid.uuid4().hex
GENERATION_START, GENERATION_END = f"\x00generation-{_NONCE}\x01", f"\x00end-generation-{_NONCE}\x01"


def _generation_extension():
    from jinja2 import nodes
    from jinja2.ext import Extension

    class GenerationBlock(Extension):
        """``{% generation %}…{% endgeneration %}`` (transformers marks answers with it): the body
        between markers."""

        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller):
            return GENERATION_START + caller() + GENERATION_END

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
        return cut_generation_markers(self._render(messages, add_generation_prompt))[0]

    def _render(self, messages: list[dict], add_generation_prompt: bool = False) -> str:
        return self.template.render(messages=messages, add_generation_prompt=add_generation_prompt,
                                    **self.special_tokens)

    def render_with_answers(self, messages: list[dict]) -> tuple[str, list[tuple[int, int]], int]:
        """The conversation's text, the ``[start, end)`` character spans of its answers and the
        number of assistant turns with no span."""
        full, spans = cut_generation_markers(self._render(messages))
        assistant = [i for i, message in enumerate(messages) if message.get("role") == "assistant"]
        if spans:
            return full, spans, max(0, len(assistant) - len(spans))
        for i in assistant:
            span = self._answer_span(messages, i, full)
            if span is not None:
                spans.append(span)
        return full, spans, len(assistant) - len(spans)

    def _answer_span(self, messages: list[dict], i: int, full: str) -> tuple[int, int] | None:
        start = common_prefix(self.render(messages[:i], add_generation_prompt=True), full)
        end = common_prefix(self.render(messages[:i + 1]), full)
        if end > start:
            return start, end
        content = messages[i].get("content")
        if not isinstance(content, str) or not content.strip():
            return None
        found = full.find(content.strip(), start)
        if found < 0:
            return None
        end = found + len(content.strip())
        eos = self.special_tokens.get("eos_token")
        if eos and full.startswith(eos, end):
            end += len(eos)
        return found, end


def cut_generation_markers(rendered: str) -> tuple[str, list[tuple[int, int]]]:
    """The render without the ``{% generation %}`` markers, and the non-empty spans they enclosed."""
    text, spans, pos, length = [], [], 0, 0
    while (start := rendered.find(GENERATION_START, pos)) >= 0:
        end = rendered.find(GENERATION_END, start)
        if end < 0:
            break
        body = rendered[start + len(GENERATION_START):end]
        text += [rendered[pos:start], body]
        length += start - pos
        if body:
            spans.append((length, length + len(body)))
        length += len(body)
        pos = end + len(GENERATION_END)
    text.append(rendered[pos:])
    return "".join(text), spans


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
