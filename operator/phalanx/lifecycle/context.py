"""One reconcile pass: its inputs, the status being decided and the plan being built.

``decide`` (lifecycle.reconcile) runs its phases over a ``Pass``; a phase that has the final word
returns ``ctx.done()``, which applies rank 0's progress last (so user code can change nothing but
the progress fields) and hands back the ``Plan``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from phalanx.api.config import OperatorConfig
from phalanx.api.types import TrainingJob, TrainingJobSpec
from phalanx.decision import FindSpare, Fits, GangStep, Observed, Plan
from phalanx.lifecycle.progress import apply_progress
from phalanx.lifecycle.status import StatusView
from phalanx.problems import Problem


@dataclass
class Pass:
    obj: dict[str, Any]
    observed: Observed
    now: datetime
    config: OperatorConfig
    gang: GangStep
    fits: Fits | None
    view: StatusView
    job: TrainingJob | None  # parsed and checked; at its current (elastic) size once accepted
    problems: list[Problem]
    plan: Plan = field(default_factory=Plan)
    requested: TrainingJob | None = None  # the job at the size its spec asks for
    active: int = 0  # the current gang size
    predecessors: list[dict[str, Any]] = field(default_factory=list)  # pods of an earlier job of this name
    reports: list[dict[str, Any] | None] = field(default_factory=list)  # rank 0's progress, applied in done()
    current: list[dict[str, Any]] = field(default_factory=list)  # pods of the current attempt
    stale: list[dict[str, Any]] = field(default_factory=list)  # pods of earlier attempts
    spare: FindSpare | None = None  # a spare node for one lost node-rank (None: the gang is not the operator's to place)

    @property
    def meta(self) -> dict[str, Any]:
        return self.obj.get("metadata", {})

    @property
    def spec(self) -> TrainingJobSpec:
        assert self.job is not None
        return self.job.spec

    @property
    def attempt(self) -> int:
        return self.view.status.restart_attempt

    def done(self) -> Plan:
        # a command job's total is its script's (the report's totalSteps), not training.steps
        total = (self.view.status.total_steps or 0) if self.job is None or self.job.spec.uses_runtime else None
        for report in self.reports:
            apply_progress(self.view, report, total, self.meta.get("uid"))
        self.plan.status = self.view.dump()
        self.plan.events = self.view.events
        return self.plan
