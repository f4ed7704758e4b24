"""Tiny byte-level BPE tokenizers trained here (no downloads), saved as a model directory's
tokenizer.json + tokenizer_config.json (``tokenizers`` only, no transformers), and two chat
templates of the common shapes. Shared by the data preparation tests and tests/runtime/hf_models.py."""

from __future__ import annotations

import json
from pathlib import Path

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
LLAMA3 = ("{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
          "{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
          "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|start_header_id|>",
           "<|end_header_id|>", "<|eot_id|>"]
CORPUS = ["the quick brown fox jumps over the lazy dog", "hello world, how are you today?",
          "what is two plus two? two plus two is four.", "user assistant system answer question",
          "a tiny tokenizer for tests: letters, digits 0123456789 and punctuation !?.,;:"] * 4
VOCAB = 320


def make_tokenizer_dir(path: Path, *, chat_template: str | None = CHATML, eos: str | None = "<|endoftext|>",
                       bos: str | None = None, unk: str | None = None, pad: str | None = None,
                       special_tokens: list[str] = SPECIAL, vocab_size: int = VOCAB, corpus: list[str] = CORPUS,
                       alphabet_size: int | None = None) -> Path:
    """``path`` with tokenizer.json (at most ``vocab_size`` tokens; ``alphabet_size``: the first
    that many byte symbols only, for vocabularies smaller than the byte alphabet) and
    tokenizer_config.json (the special tokens given, the chat template)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token=unk))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=special_tokens, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet()[:alphabet_size])
    tok.train_from_iterator(corpus, trainer)
    path.mkdir(parents=True, exist_ok=True)
    tok.save(str(path / "tokenizer.json"))
    config = {key: value for key, value in (("eos_token", eos), ("bos_token", bos), ("unk_token", unk),
                                            ("pad_token", pad), ("chat_template", chat_template)) if value is not None}
    (path / "tokenizer_config.json").write_text(json.dumps(config))
    return path
