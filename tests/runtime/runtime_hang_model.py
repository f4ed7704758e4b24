"""A user model (``runtime_hang_model:build``) whose rank ``$TEST_HANG_RANK`` blocks for good in a
collective at forward call ``$TEST_HANG_AT``: a ``recv`` that no rank ever sends, so the main thread
waits inside gloo (C++, GIL released) where no Python signal handler can run, and the other ranks
then wait for it in their gradient all-reduce. Before blocking it writes its pid to
``$TEST_HANG_MARKER``."""

import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn


class HangingBigram(nn.Module):
    def __init__(self, rank: int, vocab: int = 256, dim: int = 16):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.proj = nn.Linear(dim, vocab)
        self.rank, self.calls = rank, 0
        self.hang_rank = int(os.environ.get("TEST_HANG_RANK", "-1"))
        self.hang_at = int(os.environ.get("TEST_HANG_AT", "0"))

    def forward(self, x):
        self.calls += 1
        if self.rank == self.hang_rank and self.calls == self.hang_at:
            Path(os.environ["TEST_HANG_MARKER"]).write_text(str(os.getpid()))
            dist.recv(torch.zeros(1), src=(self.rank + 1) % dist.get_world_size())  # never sent
        return self.proj(torch.tanh(self.emb(x)))


def build(ctx):
    torch.manual_seed(ctx.seed)
    return HangingBigram(ctx.rank)


def sleep_forever(cfg):  # noqa: ARG001 - a rank for spawn.run_ranks that never finishes
    import time

    time.sleep(3600)
