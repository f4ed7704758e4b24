"""The prepared source and loader (labels -100 where they do not count, the global count of
counted labels) and the loss normalised by it (components/loss.py)."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tokenizers")

import torch.nn.functional as F  # noqa: E402

from phalanx_runtime.components.data import DataLoader, PreparedSource, make_eval_source  # noqa: E402
from phalanx_runtime.components.loss import CountedLoss, cross_entropy  # noqa: E402
from phalanx_runtime.config import DataSpec  # noqa: E402
from phalanx_runtime.data.options import PrepareOptions  # noqa: E402
from phalanx_runtime.data.prepare import prepare  # noqa: E402
from tests.unit.phalanx_runtime.tiny_tokenizer import make_tokenizer_dir  # noqa: E402

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


def rank_losses(loss_fn, logits, labels, dp: int, microbatches: int) -> list[torch.Tensor]:
    """Each data-parallel rank's step loss, as the trainer computes it (sum of microbatch losses
    each divided by the microbatch count)."""
    global_count = int((labels != -100).sum())
    out = []
    for rank_logits, rank_labels in zip(logits.chunk(dp), labels.chunk(dp), strict=True):
        loss_fn.begin_step(global_count=global_count, global_labels=labels.numel(), dp=dp, microbatches=microbatches)
        out.append(sum(loss_fn(lg, lb) / microbatches
                       for lg, lb in zip(rank_logits.chunk(microbatches), rank_labels.chunk(microbatches), strict=True)))
    return out


@pytest.mark.parametrize("dp,microbatches", [(1, 1), (1, 4), (2, 1), (2, 2), (4, 2), (8, 1)])
def test_counted_loss_is_the_global_mean_over_counted_labels(dp, microbatches):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(8, 5, 11, generator=g, requires_grad=True)
    labels = torch.randint(0, 11, (8, 5), generator=g)
    labels[torch.rand(8, 5, generator=g) < 0.5] = -100
    labels[3] = -100  # a sample (and so some microbatch or rank) with nothing counted
    expected = F.cross_entropy(logits.flatten(0, 1), labels.flatten())
    losses = rank_losses(CountedLoss(), logits, labels, dp, microbatches)
    # the all-reduced mean loss, and the gradient data parallelism averages
    assert torch.allclose(sum(losses) / dp, expected, rtol=1e-6)
    (grad,) = torch.autograd.grad(sum(losses) / dp, logits)
    (expected_grad,) = torch.autograd.grad(expected, logits)
    assert torch.allclose(grad, expected_grad, rtol=1e-5, atol=1e-8)


def test_counted_loss_without_masks_is_the_plain_mean_bit_for_bit():
    g = torch.Generator().manual_seed(1)
    logits, labels = torch.randn(8, 5, 11, generator=g), torch.randint(0, 11, (8, 5), generator=g)
    loss_fn = CountedLoss()
    loss_fn.begin_step(global_count=labels.numel(), global_labels=labels.numel(), dp=2, microbatches=3)
    assert torch.equal(loss_fn(logits[:2], labels[:2]) / 3, cross_entropy(logits[:2], labels[:2]) / 3)
