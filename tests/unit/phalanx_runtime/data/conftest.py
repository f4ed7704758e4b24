"""The tokenizer directories the data preparation tests share (trained here, module-scoped)."""

from __future__ import annotations

import pytest

from tests.tiny_tokenizer import CHATML, LLAMA3, make_tokenizer_dir
from tests.unit.phalanx_runtime.data.util import GENERATION_TAGGED


@pytest.fixture(scope="session")
def tokenizers_dir(tmp_path_factory):
    base = tmp_path_factory.mktemp("tokenizers")
    return {"chatml": make_tokenizer_dir(base / "chatml", chat_template=CHATML),
            "llama3": make_tokenizer_dir(base / "llama3", chat_template=LLAMA3, eos="<|eot_id|>",
                                         bos="<|begin_of_text|>"),
            "tagged": make_tokenizer_dir(base / "tagged", chat_template=GENERATION_TAGGED),
            "plain": make_tokenizer_dir(base / "plain", chat_template=None)}
