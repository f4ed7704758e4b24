"""Packing (documents with their end token, no padding), the token dtype and the eval split."""

from __future__ import annotations

import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("numpy")

from phalanx_runtime.data.options import PrepareOptions  # noqa: E402
from phalanx_runtime.data.prepare import prepare  # noqa: E402
from phalanx_runtime.data.writer import eval_by_hash, token_dtype  # noqa: E402
from tests.unit.phalanx_runtime.data.util import read_split, write_jsonl  # noqa: E402


def test_text_documents_packed_with_eos_no_padding(tokenizers_dir, tmp_path):
    from tokenizers import Tokenizer

    tok_dir = tokenizers_dir["chatml"]
    texts = ["hello world", "the quick brown fox", "two plus two is four."]
    data = write_jsonl(tmp_path / "t.jsonl", [{"body": t} for t in texts])
    meta, wrote = prepare(PrepareOptions(inputs=(str(data),), out=str(tmp_path / "out"), tokenizer=str(tok_dir),
                                         text_field="body"))
    assert wrote
    meta, ids, mask, idx = read_split(tmp_path / "out")
    tok = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    eos = tok.token_to_id("<|endoftext|>")
    expected = [i for t in texts for i in tok.encode(t).ids + [eos]]
    assert ids.tolist() == expected and meta["dtype"] == "uint16" and meta["eos_id"] == eos
    assert mask is None and not meta["splits"]["train"]["masked"]
    assert idx.tolist()[-1] == len(ids) and len(idx) == len(texts) + 1
    assert [ids[idx[k + 1] - 1] for k in range(len(texts))] == [eos] * len(texts)
    assert meta["splits"]["train"]["tokens"] == meta["splits"]["train"]["counted"] == len(ids)
    assert "eval" not in meta["splits"] and not (tmp_path / "out" / "eval.bin").exists()


def test_token_dtype():
    assert [token_dtype(v) for v in (256, 65535, 65536, 151_936)] == ["uint16", "uint16", "uint32", "uint32"]


def test_eval_split_is_deterministic_by_document(tokenizers_dir, tmp_path):
    docs = [f"document number {i} about the quick brown fox" for i in range(400)]
    held = {d for d in docs if eval_by_hash(d, 0.25)}
    assert 60 < len(held) < 140  # about a quarter
    assert held == {d for d in reversed(docs) if eval_by_hash(d, 0.25)}  # order does not matter
    a = write_jsonl(tmp_path / "a.jsonl", [{"text": d} for d in docs])
    b = write_jsonl(tmp_path / "b.jsonl", [{"text": d} for d in reversed(docs)])
    extra = write_jsonl(tmp_path / "extra.jsonl", [{"text": "held out on purpose"}])
    tok = str(tokenizers_dir["chatml"])
    meta_a, _ = prepare(PrepareOptions(inputs=(str(a),), out=str(tmp_path / "a"), tokenizer=tok, eval_fraction=0.25))
    meta_b, _ = prepare(PrepareOptions(inputs=(str(b),), out=str(tmp_path / "b"), tokenizer=tok, eval_fraction=0.25,
                                       eval_inputs=(str(extra),)))
    assert meta_a["splits"]["eval"]["documents"] == len(held)
    assert meta_b["splits"]["eval"]["documents"] == len(held) + 1
    assert meta_a["splits"]["train"]["documents"] == meta_b["splits"]["train"]["documents"] == len(docs) - len(held)
    _, ids_a, _, _ = read_split(tmp_path / "a", "eval")
    _, ids_b, _, _ = read_split(tmp_path / "b", "eval")
    assert sorted(ids_a.tolist()) == sorted(ids_b.tolist()[:len(ids_a)])  # the same documents, reversed
    assert len(ids_b) > len(ids_a)
