"""Helpers of the data preparation tests: a conversation, a template with generation blocks,
writing JSON Lines and reading a prepared split back."""

from __future__ import annotations

import json
from pathlib import Path

GENERATION_TAGGED = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['role'] == 'assistant' %}"
                     "{% generation %}{{ m['content'] }}<|im_end|>{% endgeneration %}{% else %}{{ m['content'] }}"
                     "<|im_end|>{% endif %}\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
                     "{% endif %}")
CONVERSATION = [{"role": "system", "content": "be brief."}, {"role": "user", "content": "what is two plus two?"},
                {"role": "assistant", "content": "four."}, {"role": "user", "content": "and the fox?"},
                {"role": "assistant", "content": "it jumps over the lazy dog."}]


def write_jsonl(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def read_split(out: Path, split: str = "train"):
    import numpy

    meta = json.loads((out / "meta.json").read_text())
    ids = numpy.fromfile(out / f"{split}.bin", dtype=meta["dtype"])
    mask_file = out / f"{split}.mask"
    mask = numpy.fromfile(mask_file, dtype=numpy.uint8).astype(bool) if mask_file.exists() else None
    return meta, ids, mask, numpy.fromfile(out / f"{split}.idx", dtype=numpy.uint64)


def decode(tok_dir: Path, ids) -> str:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(tok_dir / "tokenizer.json")).decode([int(i) for i in ids], skip_special_tokens=False)
