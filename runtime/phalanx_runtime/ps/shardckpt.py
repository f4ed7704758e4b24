"""A server's shard on disk: ``<checkpoint dir>/ps/step-<8 digits>/server-<i>-of-<n>.pt``, one
``torch.save`` per server (parameters, optimizer state, step, worker clocks), written to a
temporary name and renamed. A step is complete when every server's file is there; resume takes
the newest complete step. Not DCP: each server owns its shard whole, nothing is resharded."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch


@dataclass(frozen=True)
class ShardCheckpoint:
    root: Path  # <checkpoint dir>/ps
    index: int
    servers: int
    interval: int  # every N steps (0: only at the end)
    keep_last: int
    total_steps: int

    def due(self, step: int) -> bool:
        return step == self.total_steps or (self.interval > 0 and step % self.interval == 0)

    def path(self, step: int) -> Path:
        return self.root / f"step-{step:08d}" / f"server-{self.index}-of-{self.servers}.pt"

    def save(self, step: int, state: dict) -> None:
        path = self.path(step)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        torch.save({**state, "step": step}, tmp)
        os.replace(tmp, path)
        self._prune()

    def steps(self) -> list[int]:
        """Complete steps, oldest first."""
        if not self.root.is_dir():
            return []
        out = []
        for d in self.root.glob("step-*"):
            if all((d / f"server-{i}-of-{self.servers}.pt").exists() for i in range(self.servers)):
                out.append(int(d.name.split("-")[1]))
        return sorted(out)

    def load_latest(self) -> dict | None:
        steps = self.steps()
        # weights_only: tensors, numbers, lists and dicts — the shared checkpoint volume is
        # writable by every pod of the namespace, and a pickle would run their code here
        return torch.load(self.path(steps[-1]), weights_only=True) if steps else None

    def _prune(self) -> None:
        """Server 0 drops complete steps beyond ``keep_last`` (the others never delete)."""
        if self.index != 0:
            return
        for step in self.steps()[:-self.keep_last]:
            shutil.rmtree(self.root / f"step-{step:08d}", ignore_errors=True)
