"""A parameter server: its shard of the parameters and the optimizer over them, the per-step
barrier (sync) or the staleness bound (async), and the RPC entry points (module functions that
reach this process's server).

sync: step ``t``'s pushes are summed; when every worker has pushed, the sum is averaged and its
squared norm is ready (``norm_sq``); the workers combine the servers' norms into the global
gradient norm and send the clipping factor (``apply``; the first call of a step applies, the
others find it done). Pulls for step ``t`` wait until step ``t - 1`` was applied.

async: a push is applied at once (the worker clipped its own gradient). A worker's clock is the
last step it pushed; a pull for step ``t`` waits while ``t - 1 - min(clocks) > staleness``, and
the gap it saw is returned, so the workers can record the staleness they ran at."""

from __future__ import annotations

import threading

import torch

from phalanx_runtime.ps.optim import OptimConfig, apply_step, build_server_optimizer
from phalanx_runtime.ps.shardckpt import ShardCheckpoint
from phalanx_runtime.ps.sharding import Plan

_SERVER: ShardServer | None = None


class ShardServer:
    def __init__(self, index: int, plan: Plan, model: torch.nn.Module, optim: OptimConfig, *, workers: int,
                 mode: str, staleness: int, ckpt: ShardCheckpoint | None = None, resume: bool = True):
        self.index, self.plan, self.optim_cfg = index, plan, optim
        self.workers, self.mode, self.staleness, self.ckpt = workers, mode, staleness, ckpt
        named = dict(model.named_parameters())
        self.params: dict[str, torch.Tensor] = {n: named[n].detach().clone() for n in plan.dense_of(index)}
        for name, rows in plan.row_sharded.items():
            self.params[name] = named[name].detach()[plan.rows_of(index, rows)].clone()
        self.opt = build_server_optimizer(list(self.params.values()), optim)
        self.cond = threading.Condition()
        self.version = 0  # sync: last applied step
        self.reduced = 0  # sync: last step whose pushes are all in
        self.pushed = 0
        self.sumsq = 0.0
        self.clock = [0] * workers  # async: last step each worker pushed
        self.saved = 0
        self.reports: dict[int, list[dict]] = {}  # worker → its per-step records (server 0)
        self.progress = None  # server 0: components.progress.Progress, updated by worker 0
        self.start_step = self._resume() if (ckpt is not None and resume) else 0

    # ------------------------------------------------------------------ state

    def _resume(self) -> int:
        state = self.ckpt.load_latest()
        if state is None:
            return 0
        for name, t in state["params"].items():
            self.params[name].copy_(t)
        self.opt.load_state_dict(state["optim"])
        self.clock = list(state.get("clock", [state["step"]] * self.workers))
        self.version = self.reduced = self.saved = state["step"]
        return state["step"]

    def _maybe_save(self, step: int) -> None:
        if self.ckpt is not None and step > self.saved and self.ckpt.due(step):
            self.ckpt.save(step, {"params": self.params, "optim": self.opt.state_dict(), "clock": self.clock})
            self.saved = step

    # ------------------------------------------------------------------ pulls

    def _wait_for(self, step: int) -> int:
        """Block until step ``step`` may read; returns how many steps it is ahead of the slowest worker."""
        if self.mode == "sync":
            self.cond.wait_for(lambda: self.version >= step - 1)
            return step - 1 - self.version
        self.cond.wait_for(lambda: step - 1 - min(self.clock) <= self.staleness)
        return step - 1 - min(self.clock)

    def pull_dense(self, step: int) -> tuple[dict[str, torch.Tensor], int]:
        with self.cond:
            gap = self._wait_for(step)
            return {n: self.params[n].clone() for n in self.plan.dense_of(self.index)}, gap

    def pull_rows(self, name: str, ids: torch.Tensor, step: int) -> torch.Tensor:
        with self.cond:
            self._wait_for(step)
            return self.params[name][self.plan.local(ids)]

    # ------------------------------------------------------------------ pushes

    def _accumulate(self, dense: dict[str, torch.Tensor], rows: dict[str, tuple[torch.Tensor, torch.Tensor]]) -> None:
        for name, g in dense.items():
            p = self.params[name]
            p.grad = g.clone() if p.grad is None else p.grad.add_(g)
        for name, (ids, vals) in rows.items():
            p = self.params[name]
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            p.grad.index_add_(0, self.plan.local(ids), vals)

    def _fill_missing_grads(self) -> None:
        """A row shard nobody touched still steps (zero gradient), as a dense table would."""
        for p in self.params.values():
            if p.grad is None:
                p.grad = torch.zeros_like(p)

    def push(self, worker: int, step: int, dense, rows) -> None:
        with self.cond:
            if self.mode == "async":
                self._accumulate(dense, rows)
                self._fill_missing_grads()
                apply_step(self.opt, self.optim_cfg, step)
                self.clock[worker] = step
                self._maybe_save(min(self.clock))
            else:
                self.cond.wait_for(lambda: self.version >= step - 1)
                self._accumulate(dense, rows)
                self.pushed += 1
                if self.pushed == self.workers:
                    self._reduce(step)
            self.cond.notify_all()

    @torch.no_grad()
    def _reduce(self, step: int) -> None:
        self._fill_missing_grads()
        sq = 0.0
        for p in self.params.values():
            p.grad.div_(self.workers)
            sq += float(p.grad.float().pow(2).sum())
        self.sumsq, self.reduced, self.pushed = sq, step, 0

    def norm_sq(self, step: int) -> float:
        with self.cond:
            self.cond.wait_for(lambda: self.reduced >= step)
            return self.sumsq

    def apply(self, step: int, scale: float) -> None:
        with self.cond:
            self.cond.wait_for(lambda: self.reduced >= step)
            if self.version < step:
                apply_step(self.opt, self.optim_cfg, step, scale=scale)
                self.version = step
                self._maybe_save(step)
                self.cond.notify_all()

    def report(self, worker: int, records: list[dict]) -> None:
        with self.cond:
            self.reports[worker] = records


def install(server: ShardServer | None) -> None:
    global _SERVER
    _SERVER = server


# RPC entry points (run on the server, called by the workers).

def rpc_start_step() -> int:
    return _SERVER.start_step


def rpc_pull_dense(step: int):
    return _SERVER.pull_dense(step)


def rpc_pull_rows(name: str, ids: torch.Tensor, step: int) -> torch.Tensor:
    return _SERVER.pull_rows(name, ids, step)


def rpc_push(worker: int, step: int, dense, rows) -> None:
    _SERVER.push(worker, step, dense, rows)


def rpc_norm_sq(step: int) -> float:
    return _SERVER.norm_sq(step)


def rpc_apply(step: int, scale: float) -> None:
    _SERVER.apply(step, scale)


def rpc_report(worker: int, records: list[dict]) -> None:
    _SERVER.report(worker, records)


def rpc_progress(step: int, loss: float, step_time: float) -> None:
    if _SERVER.progress is not None:
        _SERVER.progress.update(phase="Running", step=step, loss=loss, stepTimeSeconds=step_time)
