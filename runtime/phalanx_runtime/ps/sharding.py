"""Which server owns what: dense parameters whole (largest first onto the least loaded server,
names breaking ties), embedding tables (``nn.Embedding`` whose weight no other module shares)
by rows, row ``i`` on server ``i % servers`` at local row ``i // servers``."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn


@dataclass
class Plan:
    servers: int
    dense_owner: dict[str, int] = field(default_factory=dict)  # param name → server
    row_sharded: dict[str, int] = field(default_factory=dict)  # param name → rows (num_embeddings)

    def dense_of(self, server: int) -> list[str]:
        return [n for n, s in self.dense_owner.items() if s == server]

    def rows_of(self, server: int, num_rows: int) -> torch.Tensor:
        return torch.arange(server, num_rows, self.servers)

    def owner(self, ids: torch.Tensor) -> torch.Tensor:
        return ids % self.servers

    def local(self, ids: torch.Tensor) -> torch.Tensor:
        return ids // self.servers


def sharded_embeddings(model: nn.Module) -> dict[str, nn.Embedding]:
    """Parameter name of each embedding weight → its module, for weights used by that module only
    (a tied weight is also read densely elsewhere: it stays a dense parameter)."""
    users: dict[int, int] = {}
    for mod in model.modules():
        for p in mod.parameters(recurse=False):
            users[id(p)] = users.get(id(p), 0) + 1
    names = {id(p): n for n, p in model.named_parameters()}
    out = {}
    for mod in model.modules():
        if isinstance(mod, nn.Embedding) and users.get(id(mod.weight)) == 1 and mod.max_norm is None:
            out[names[id(mod.weight)]] = mod
    return out


def make_plan(model: nn.Module, servers: int) -> Plan:
    plan = Plan(servers)
    emb = sharded_embeddings(model)
    load = [0] * servers
    dense = [(n, p) for n, p in model.named_parameters() if p.requires_grad and n not in emb]
    for name, p in sorted(dense, key=lambda x: (-x[1].numel(), x[0])):
        s = min(range(servers), key=lambda i: (load[i], i))
        plan.dense_owner[name] = s
        load[s] += p.numel()
    for name, mod in emb.items():
        if mod.weight.requires_grad:
            plan.row_sharded[name] = mod.num_embeddings
    return plan
