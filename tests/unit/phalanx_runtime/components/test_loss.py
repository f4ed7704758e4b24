"""The loss normalised by the step's global count of counted labels: every data-parallel degree
and microbatching gives the global mean, and with nothing masked the plain mean."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402

from phalanx_runtime.components.loss import CountedLoss, cross_entropy  # noqa: E402


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
