"""The built-in loss: token-level cross entropy in fp32 (entrypoint models may bring their own).

Labels of -100 do not count (prepared chat data: everything but the answers). ``CountedLoss``
normalises by the step's counted labels over the whole global batch, so every data-parallel
degree, microbatching and pipeline schedule gives the single-process value: a rank's microbatch
contributes ``sum(CE over its counted labels) · dp / global_count``. When every label counts it
computes exactly what a plain per-microbatch mean divided by the microbatch count computes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())


def summed_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The sum of the counted labels' cross entropy (0 when none counts)."""
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), reduction="sum")


class CountedLoss:
    """Cross entropy for one microbatch, ``loss_fn(logits, labels)``, set up per step by
    ``begin_step``. Its callers divide by the number of microbatches (the trainer's accumulation
    loop its loss, the pipeline schedules their gradients), so a call returns the microbatch's
    mean when every label counts, else ``sum · microbatches · dp / global_count``."""

    def __init__(self):
        self._factor: float | None = None  # None: every label counts (the plain mean)

    def begin_step(self, *, global_count: int, global_labels: int, dp: int, microbatches: int) -> None:
        """``global_count`` of the ``global_labels`` labels of the step's global batch count; this
        rank computes its share in ``microbatches`` calls."""
        if global_count == global_labels:
            self._factor = None
        else:
            self._factor = microbatches * dp / global_count if global_count else 0.0

    def __call__(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if self._factor is None:
            return cross_entropy(logits, labels)
        return summed_cross_entropy(logits, labels) * self._factor
