"""Chat records through two template shapes (ChatML-like, Llama-3-like) and one with
``{% generation %}`` blocks: only the answer tokens count."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("tokenizers")
np = pytest.importorskip("numpy")

from phalanx_runtime.data.options import PrepareError, PrepareOptions  # noqa: E402
from phalanx_runtime.data.prepare import prepare  # noqa: E402
from tests.unit.phalanx_runtime.data.util import CONVERSATION, decode, read_split, write_jsonl  # noqa: E402


@pytest.mark.parametrize("template,answers", [
    # the answer and the end-of-turn text after it count; prompts, headers and the separator do not
    ("chatml", ["four.<|im_end|>\n", "it jumps over the lazy dog.<|im_end|>\n"]),
    ("llama3", ["four.<|eot_id|>", "it jumps over the lazy dog.<|eot_id|>"]),
    # {% generation %} blocks render their body (trim_blocks drops the newline after {% endif %})
    ("tagged", ["four.<|im_end|>", "it jumps over the lazy dog.<|im_end|>"]),
])
def test_chat_mask_counts_answer_tokens_only(template, answers, tokenizers_dir, tmp_path):
    tok = tokenizers_dir[template]
    data = write_jsonl(tmp_path / "chat.jsonl", [{"messages": CONVERSATION}])
    prepare(PrepareOptions(inputs=(str(data),), out=str(tmp_path / "out"), tokenizer=str(tok),
                           messages_field="messages"))
    meta, ids, mask, _ = read_split(tmp_path / "out")
    assert meta["splits"]["train"]["masked"] and mask is not None and len(mask) == len(ids)
    counted_text = decode(tok, ids[mask])
    assert counted_text == "".join(answers)
    # runs of counted tokens are exactly the answers, in order
    runs = np.split(np.arange(len(ids))[mask], np.where(np.diff(np.arange(len(ids))[mask]) != 1)[0] + 1)
    assert [decode(tok, ids[r]) for r in runs] == answers
    assert int(mask.sum()) == meta["splits"]["train"]["counted"]
    # ChatML's end-of-document token is appended after the conversation and does not count; the
    # Llama-3 one's is its eos, <|eot_id|>, which already ends the last answer (nothing appended)
    assert mask[-1] == (template == "llama3")


def test_chat_without_template_is_refused(tokenizers_dir, tmp_path):
    data = write_jsonl(tmp_path / "chat.jsonl", [{"messages": CONVERSATION}])
    with pytest.raises(PrepareError, match=r"data.prepare.messagesField \(--messages-field\): chat data needs a "
                                           r"chat template"):
        prepare(PrepareOptions(inputs=(str(data),), out=str(tmp_path / "out"), tokenizer=str(tokenizers_dir["plain"]),
                               messages_field="messages"))


@pytest.mark.parametrize("template", ["chatml", "llama3", "tagged"])
def test_rendering_and_tokens_are_transformers(template, tokenizers_dir, tmp_path):
    """The text and token ids are what transformers' apply_chat_template gives (plus the end token)."""
    transformers = pytest.importorskip("transformers")
    tok_dir = tokenizers_dir[template]
    data = write_jsonl(tmp_path / "chat.jsonl", [{"messages": CONVERSATION}])
    prepare(PrepareOptions(inputs=(str(data),), out=str(tmp_path / "out"), tokenizer=str(tok_dir),
                           messages_field="messages"))
    meta, ids, _, _ = read_split(tmp_path / "out")
    hf = transformers.PreTrainedTokenizerFast(tokenizer_file=str(tok_dir / "tokenizer.json"),
                                              **json.loads((tok_dir / "tokenizer_config.json").read_text()))
    expected = hf.apply_chat_template(CONVERSATION, tokenize=True, return_dict=False)
    expected = list(expected) if expected[-1] == meta["eos_id"] else [*expected, meta["eos_id"]]
    assert ids.tolist() == expected


# Qwen3's shape: an assistant turn after the last user message (the final answer) gets a <think>
# block the earlier turns do not, so rendering a prefix of the conversation writes an earlier
# answer differently from the full render.
THINKING = ("{%- set ns = namespace(last_user=0) %}{%- for m in messages %}{%- if m['role'] == 'user' %}"
            "{%- set ns.last_user = loop.index0 %}{%- endif %}{%- endfor %}"
            "{%- for m in messages %}{{- '<|im_start|>' + m['role'] + '\\n' }}"
            "{%- if m['role'] == 'assistant' and loop.index0 > ns.last_user %}{{- '<think>\\n\\n</think>\\n\\n' }}"
            "{%- endif %}{{- m['content'] + '<|im_end|>' }}{{- '\\n' }}{%- endfor %}"
            "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
THINKING_TAGGED = THINKING.replace("{{- m['content'] + '<|im_end|>' }}",
                                   "{%- if m['role'] == 'assistant' %}{% generation %}{{- m['content'] + '<|im_end|>' }}"
                                   "{% endgeneration %}{%- else %}{{- m['content'] + '<|im_end|>' }}{%- endif %}")


@pytest.mark.parametrize("template,answers", [
    # no generation blocks: the first answer found by its content, with the eos the template writes
    (THINKING, ["four.<|im_end|>", "<think>\n\n</think>\n\nit jumps over the lazy dog.<|im_end|>\n"]),
    # generation blocks: exactly their bodies
    (THINKING_TAGGED, ["four.<|im_end|>", "it jumps over the lazy dog.<|im_end|>"]),
])
def test_every_answer_counts_when_earlier_turns_render_differently(template, answers, tmp_path):
    from tests.tiny_tokenizer import make_tokenizer_dir

    tok = make_tokenizer_dir(tmp_path / "tok", chat_template=template, eos="<|im_end|>")
    data = write_jsonl(tmp_path / "chat.jsonl", [{"messages": CONVERSATION}])
    meta, _ = prepare(PrepareOptions(inputs=(str(data),), out=str(tmp_path / "out"), tokenizer=str(tok),
                                     messages_field="messages"))
    _, ids, mask, _ = read_split(tmp_path / "out")
    runs = np.split(np.arange(len(ids))[mask], np.where(np.diff(np.arange(len(ids))[mask]) != 1)[0] + 1)
    assert [decode(tok, ids[r]) for r in runs] == answers
    assert meta["answers"] == {"found": 2, "missing": 0}


def test_answers_not_in_the_render_are_counted_missing(tmp_path, caplog):
    from tests.tiny_tokenizer import make_tokenizer_dir

    # a template that writes a placeholder instead of earlier answers: those cannot be found
    template = THINKING.replace("{{- m['content'] + '<|im_end|>' }}",
                                "{{- (m['content'] if loop.last or m['role'] != 'assistant' else '...') + '<|im_end|>' }}")
    tok = make_tokenizer_dir(tmp_path / "tok", chat_template=template, eos="<|im_end|>")
    data = write_jsonl(tmp_path / "chat.jsonl", [{"messages": CONVERSATION}])
    with caplog.at_level("WARNING", logger="phalanx_runtime"):
        meta, _ = prepare(PrepareOptions(inputs=(str(data),), out=str(tmp_path / "out"), tokenizer=str(tok),
                                         messages_field="messages"))
    assert meta["answers"] == {"found": 1, "missing": 1}
    assert "1 of 2 assistant answers were not found" in caplog.text
