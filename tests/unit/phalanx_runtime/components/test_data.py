"""The prepared source and loader: labels -100 where they do not count, the global count of
counted labels, the eval split."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tokenizers")

from phalanx_runtime.components.data import DataLoader, PreparedSource, make_eval_source  # noqa: E402
from phalanx_runtime.config import DataSpec  # noqa: E402
from phalanx_runtime.data.options import PrepareOptions  # noqa: E402
from phalanx_runtime.data.prepare import prepare  # noqa: E402
from tests.tiny_tokenizer import make_tokenizer_dir  # noqa: E402

SEQ = 16


@pytest.fixture(scope="module")
def chat_dir(tmp_path_factory):
    base = tmp_path_factory.mktemp("loader")
    tok = make_tokenizer_dir(base / "tok")
    records = [{"messages": [{"role": "user", "content": f"what is {i} plus {i}?"},
                             {"role": "assistant", "content": f"it is {2 * i}." * (1 + i % 4)}]} for i in range(60)]
    (base / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    prepare(PrepareOptions(inputs=(str(base / "chat.jsonl"),), out=str(base / "out"), tokenizer=str(tok),
                           messages_field="messages", eval_fraction=0.2))
    return base / "out"


def test_loader_masks_labels_and_counts_the_global_batch(chat_dir):
    source = PreparedSource(str(chat_dir), SEQ, vocab_size=512)
    assert source.masked and len(source) > 8
    full = DataLoader(source, global_batch=8, dp_rank=0, dp_size=1, seed=3)
    shards = [DataLoader(source, global_batch=8, dp_rank=r, dp_size=2, seed=3) for r in range(2)]
    for _ in range(3):
        x, y = full.next_batch()
        parts = [s.next_batch() for s in shards]
        assert torch.equal(y, torch.cat([p[1] for p in parts])) and torch.equal(x, torch.cat([p[0] for p in parts]))
        counted = y != -100
        assert 0 < int(counted.sum()) < y.numel()  # some labels count, some do not
        assert full.global_count == int(counted.sum()) == shards[0].global_count == shards[1].global_count
        # a counted label is the next input token; a masked one is -100 only in the labels
        assert torch.equal(x[:, 1:][counted[:, :-1]], y[:, :-1][counted[:, :-1]])
        assert (x >= 0).all()


def test_eval_source(chat_dir, tmp_path):
    prepared = DataSpec(source="prepared", path=str(chat_dir), seq_len=SEQ)
    evaluation = make_eval_source(prepared, seq_len=SEQ)
    assert isinstance(evaluation, PreparedSource) and evaluation.split == "eval" and len(evaluation) >= 1
    loader = DataLoader(evaluation, global_batch=2, dp_rank=0, dp_size=1, seed=0, shuffle=False)
    assert torch.equal(loader.next_batch()[0][0], evaluation[0][:-1])
    assert make_eval_source(DataSpec(source="synthetic"), seq_len=SEQ) is None
    with pytest.raises(ValueError, match="data.path: .* holds no prepared data"):
        PreparedSource(str(tmp_path), SEQ)
    with pytest.raises(ValueError, match="vocabulary of 320, more than the model's 256"):
        PreparedSource(str(chat_dir), SEQ, vocab_size=256)
    with pytest.raises(ValueError, match="fewer than seqLen"):
        PreparedSource(str(chat_dir), 1 << 20)


def test_loader_refuses_to_resume_over_other_prepared_data(chat_dir, tmp_path):
    """The loader's position is saved with the prepared split's content id: the same data
    resumes, data prepared again from a changed input is refused naming the field."""
    source = PreparedSource(str(chat_dir), SEQ)
    loader = DataLoader(source, global_batch=4, dp_rank=0, dp_size=1, seed=3)
    loader.next_batch()
    state = loader.state_dict()
    assert state["data"] == source.content_id
    same = DataLoader(PreparedSource(str(chat_dir), SEQ), global_batch=4, dp_rank=0, dp_size=1, seed=3)
    same.load_state_dict(state)
    assert same.step == 1
    records = [json.loads(line) for line in (chat_dir.parent / "chat.jsonl").read_text().splitlines()]
    changed = tmp_path / "chat.jsonl"
    changed.write_text("".join(json.dumps(r) + "\n" for r in records + records[:1]))
    prepare(PrepareOptions(inputs=(str(changed),), out=str(tmp_path / "out"), tokenizer=str(chat_dir.parent / "tok"),
                           messages_field="messages", eval_fraction=0.2))
    other = DataLoader(PreparedSource(str(tmp_path / "out"), SEQ), global_batch=4, dp_rank=0, dp_size=1, seed=3)
    with pytest.raises(ValueError, match=r"data.prepare.inputs / data.path: the prepared data is not the data"):
        other.load_state_dict(state)
    # sources without a content id (synthetic, tokens, corpus) keep their state as it was
    assert "data" not in DataLoader(range(8), global_batch=4, dp_rank=0, dp_size=1, seed=0).state_dict()
