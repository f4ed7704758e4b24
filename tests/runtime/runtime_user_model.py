"""A user model for the entrypoint test: ``runtime_user_model:build``."""

import torch
from torch import nn


class Bigram(nn.Module):
    def __init__(self, vocab: int = 256, dim: int = 32):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.proj = nn.Linear(dim, vocab)

    def forward(self, x):
        return self.proj(torch.tanh(self.emb(x)))


def build(ctx):
    torch.manual_seed(ctx.seed)
    assert ctx.world_size >= 1 and ctx.mesh.layout.dp == ctx.world_size
    return Bigram()
