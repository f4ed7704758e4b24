"""A worker's step: pull the dense parameters (and, as each sharded embedding is called, only the
rows its ids need), forward/backward over the local batch in micro-batches, push dense and sparse
row gradients to their servers; sync: combine the servers' gradient norms and send the clipping
factor, async: clip the own gradient before pushing."""

from __future__ import annotations

import math
import time

import torch
from torch import nn

from phalanx_runtime.ps import server as srv
from phalanx_runtime.ps.comm import Traffic
from phalanx_runtime.ps.roles import server_name
from phalanx_runtime.ps.sharding import Plan


class PSWorker:
    def __init__(self, index: int, plan: Plan, model: nn.Module, loss_fn, *, accum: int, grad_clip: float,
                 mode: str):
        self.index, self.plan, self.model, self.loss_fn = index, plan, model, loss_fn
        self.accum, self.grad_clip, self.mode = accum, grad_clip, mode
        self.servers = [server_name(i) for i in range(plan.servers)]
        mods = dict(model.named_modules())
        self.embeddings: dict[str, nn.Embedding] = {n: mods[n.rpartition(".")[0]] for n in plan.row_sharded}
        self.fetched = {n: torch.zeros(rows, dtype=torch.bool) for n, rows in plan.row_sharded.items()}
        self.fetched_ids: list[tuple[str, torch.Tensor]] = []
        for name, mod in self.embeddings.items():
            mod.sparse = True  # row gradients, not a dense table-sized one
            mod.register_forward_pre_hook(self._row_hook(name))
        named = dict(model.named_parameters())
        self.dense = {n: named[n] for n in plan.dense_owner}
        self.traffic = Traffic()
        self.step_no = 0
        self.max_gap = 0
        self.records: list[dict] = []

    # ------------------------------------------------------------------ pulls

    @torch.no_grad()
    def _pull_dense(self) -> None:
        futs = [self.traffic.call_async(s, srv.rpc_pull_dense, self.step_no) for s in self.servers]
        for fut in futs:
            values, gap = self.traffic.wait(fut)
            self.max_gap = max(self.max_gap, gap)
            for name, t in values.items():
                self.dense[name].copy_(t)

    def _row_hook(self, name: str):
        def hook(mod, args):
            self._pull_rows(name, mod, args[0])
        return hook

    @torch.no_grad()
    def _pull_rows(self, name: str, mod: nn.Embedding, ids: torch.Tensor) -> None:
        uniq = torch.unique(ids)
        need = uniq[~self.fetched[name][uniq]]
        if need.numel() == 0:
            return
        owners = self.plan.owner(need)
        futs = []
        for s, server in enumerate(self.servers):
            sel = need[owners == s]
            if sel.numel():
                futs.append((sel, self.traffic.call_async(server, srv.rpc_pull_rows, name, sel, self.step_no)))
        for sel, fut in futs:
            mod.weight[sel] = self.traffic.wait(fut)
        self.fetched[name][need] = True
        self.fetched_ids.append((name, need))

    def _forget_rows(self) -> None:
        for name, ids in self.fetched_ids:
            self.fetched[name][ids] = False
        self.fetched_ids.clear()

    # ------------------------------------------------------------------ compute

    def _forward_backward(self, inputs: torch.Tensor, labels: torch.Tensor) -> float:
        loss = torch.zeros(())
        for x, y in zip(inputs.chunk(self.accum), labels.chunk(self.accum), strict=True):
            mb = self.loss_fn(self.model(x), y) / self.accum
            mb.backward()
            loss += mb.detach()
        return float(loss)

    @torch.no_grad()
    def _gradients(self) -> tuple[list[dict], list[dict], float]:
        """Per server: dense gradients, (ids, rows) of the embeddings; and the local squared norm."""
        dense = [{} for _ in self.servers]
        rows = [{} for _ in self.servers]
        sq = 0.0
        for name, p in self.dense.items():
            g = p.grad if p.grad is not None else torch.zeros_like(p)
            dense[self.plan.dense_owner[name]][name] = g
            sq += float(g.float().pow(2).sum())
        for name, mod in self.embeddings.items():
            g = mod.weight.grad
            if g is None:
                continue
            g = g.coalesce()
            ids, vals = g.indices()[0], g.values()
            sq += float(vals.float().pow(2).sum())
            owners = self.plan.owner(ids)
            for s in range(len(self.servers)):
                mask = owners == s
                if mask.any():
                    rows[s][name] = (ids[mask], vals[mask])
        return dense, rows, sq

    # ------------------------------------------------------------------ step

    def step(self, step: int, inputs: torch.Tensor, labels: torch.Tensor) -> dict:
        t0 = time.perf_counter()
        sent0, recv0 = self.traffic.snapshot()
        self.step_no, self.max_gap = step, 0
        self._pull_dense()
        loss = self._forward_backward(inputs, labels)
        dense, rows, sq = self._gradients()
        gnorm = self._push(step, dense, rows, sq)
        self.model.zero_grad(set_to_none=True)
        self._forget_rows()
        sent, recv = self.traffic.snapshot()
        rec = {"step": step, "loss": loss, "grad_norm": gnorm, "step_time": time.perf_counter() - t0,
               "bytes_sent": sent - sent0, "bytes_received": recv - recv0, "staleness": self.max_gap}
        self.records.append(rec)
        return rec

    def _clip_coef(self, norm: float) -> float:
        if self.grad_clip <= 0:
            return 1.0
        return min(self.grad_clip / (norm + 1e-6), 1.0)

    @torch.no_grad()
    def _push(self, step: int, dense: list[dict], rows: list[dict], sq: float) -> float:
        """Push to every server (each counts one push per worker per step); the gradient norm."""
        if self.mode == "async":
            coef = self._clip_coef(math.sqrt(sq))
            if coef < 1.0:
                for d in dense:
                    for g in d.values():
                        g.mul_(coef)
                rows = [{n: (ids, v * coef) for n, (ids, v) in r.items()} for r in rows]
        futs = [self.traffic.call_async(s, srv.rpc_push, self.index, step, dense[i], rows[i])
                for i, s in enumerate(self.servers)]
        for fut in futs:
            self.traffic.wait(fut)
        if self.mode == "async":
            return math.sqrt(sq)
        total = math.sqrt(sum(self.traffic.call(s, srv.rpc_norm_sq, step) for s in self.servers))
        coef = self._clip_coef(total)
        futs = [self.traffic.call_async(s, srv.rpc_apply, step, coef if coef < 1.0 else 1.0) for s in self.servers]
        for fut in futs:
            self.traffic.wait(fut)
        return total
