"""A sweep's status, pure: each trial's record (phase, step, objective value, milestones) from
its TrainingJob, the counts, the best trial, the phase and conditions.

A built-in objective metric (finalLoss, bestLoss, tokensPerSecond) reads the status's loss and
tokensPerSecond; any other names a metric the trial reports, read from the status's ``metrics``
(``loss``: the training loss when not among them). The sweep samples each trial's status, so a
reported metric's ``best`` is over the values it saw (and the final one), and a milestone gets
the metric's latest value when the trial is first seen at or past it, or, when the trial has not
reported the metric by then, at the first sample after that has one."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from phalanx import constants
from phalanx.api.sweep import (
    BestTrial,
    Metric,
    Milestone,
    Objective,
    SweepPhase,
    TrainingSweepStatus,
    TrialStatus,
)
from phalanx.constants import SweepReason
from phalanx.lifecycle.conditions import set_condition
from phalanx.lifecycle.status import iso
from phalanx.sweep.earlystop import better

WAITING = "Waiting"  # not created yet
STOPPING = "Stopping"  # the early-stopping rule suspended it; its pods are saving a checkpoint
STOPPED = "Stopped"  # early-stopped: suspended, checkpoint kept
CONFLICT = "Conflict"  # a TrainingJob of its name exists that the sweep does not own
SUCCEEDED, FAILED, SUSPENDED = "Succeeded", "Failed", "Suspended"
FINISHED = frozenset({SUCCEEDED, FAILED, STOPPED, CONFLICT})
STOP_REASONS = frozenset({SweepReason.EARLY_STOPPED, SweepReason.TRIAL_DIVERGED})


class SweepStatusView:
    """Mutable status with helpers that record transitions (conditions, Events)."""

    def __init__(self, raw: dict[str, Any] | None, generation: int | None, now: datetime):
        try:
            self.s = TrainingSweepStatus.model_validate(raw or {})
        except ValueError:  # a status this version cannot read: start over from the trials
            self.s = TrainingSweepStatus()
        self.before = self.s.model_dump(by_alias=True, mode="json", exclude_none=True)
        self.generation = generation
        self.now = iso(now)
        self.events: list[tuple[str, str, str]] = []

    def cond(self, type_: str, status: bool | str, reason: str, message: str = "") -> None:
        self.s.conditions = set_condition(self.s.conditions, type_, status, reason, message, self.now, self.generation)

    def event(self, reason: str, message: str, warning: bool = False) -> None:
        self.events.append(("Warning" if warning else "Normal", reason, message))

    def dump(self) -> dict[str, Any] | None:
        self.s.observed_generation = self.generation
        after = self.s.model_dump(by_alias=True, mode="json", exclude_none=True)
        return after if after != self.before else None


def _finite(v: Any) -> float | None:
    return float(v) if type(v) in (int, float) and math.isfinite(v) else None


def metric_value(metric: str, status: dict[str, Any], best_loss: float | None) -> tuple[float | None, float | None]:
    """(objective value, best loss so far) from a trial's TrainingJob status."""
    loss = _finite(status.get("loss"))
    if loss is not None and (best_loss is None or loss < best_loss):
        best_loss = loss
    if metric == Metric.BEST_LOSS:
        return best_loss, best_loss
    if metric == Metric.TOKENS_PER_SECOND:
        return _finite(status.get("tokensPerSecond")), best_loss
    return loss, best_loss


def reported_value(name: str, status: dict[str, Any]) -> float | None:
    """The last value of metric ``name`` a trial's TrainingJob status carries (None: not reported,
    or not a finite number)."""
    metrics = status.get("metrics")
    value = _finite(metrics.get(name)) if isinstance(metrics, dict) else None
    if value is None and name == "loss":
        value = _finite(status.get("loss"))
    return value


def aggregate(objective: Objective, kept: float | None, latest: float | None) -> float | None:
    """The trial's value from the one kept so far and the latest sample (reported metrics)."""
    if latest is None:
        return kept
    if objective.keeps_best and kept is not None and not better(objective.goal, latest, kept):
        return kept
    return latest


def new_milestones(steps: list[int], recorded: set[int], step: int | None, value: float | None) -> list[int]:
    """The milestones a trial at ``step`` with ``value`` (None: nothing to record yet) records now."""
    if value is None or step is None:
        return []
    return [m for m in steps if m not in recorded and step >= m]


def record_progress(rec: TrialStatus, status: dict[str, Any], objective: Objective, steps: list[int]) -> list[int]:
    """Bring ``rec`` up to the trial's status; returns the milestones first reached now."""
    step = status.get("step")
    if type(step) is int:
        rec.step = step
    if objective.reported:
        at_milestone = reported_value(objective.metric, status)  # its latest value; None: not reported yet
        _, rec.best_loss = metric_value(Metric.FINAL_LOSS, status, rec.best_loss)
        rec.value = aggregate(objective, rec.value, at_milestone)
    else:
        value, rec.best_loss = metric_value(objective.metric, status, rec.best_loss)
        if value is not None:
            rec.value = value
        at_milestone = rec.value  # the trial's value (bestLoss: the best so far)
    new = new_milestones(steps, {m.step for m in rec.milestones}, rec.step, at_milestone)
    for m in new:
        rec.milestones.append(Milestone(step=m, value=at_milestone, at=rec.step))
    return new


def source(objective: Objective) -> str:
    """What a trial reports that the objective reads, for messages."""
    if objective.reported:
        return objective.metric
    return "tokensPerSecond" if objective.metric == Metric.TOKENS_PER_SECOND else "a loss"


def trial_phase(rec: TrialStatus, job: dict[str, Any]) -> str:
    """The record's phase from its TrainingJob: the job's phase, or Stopping/Stopped for a trial
    the sweep stopped (until the job itself ended otherwise)."""
    phase = (job.get("status") or {}).get("phase") or "Pending"
    if rec.reason in STOP_REASONS and phase not in (SUCCEEDED, FAILED):
        return STOPPED if phase == SUSPENDED else STOPPING
    return phase


def condition_status(job: dict[str, Any], type_: str) -> str | None:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return cond.get("status")
    return None


def best_trial(records: list[TrialStatus], goal: str) -> BestTrial | None:
    """The best value among finished (Succeeded) trials; the lowest index wins a tie."""
    best: TrialStatus | None = None
    for rec in records:
        if rec.phase != SUCCEEDED or rec.value is None:
            continue
        if best is None or better(goal, rec.value, best.value):  # type: ignore[arg-type]
            best = rec
    if best is None or best.value is None:
        return None
    return BestTrial(name=best.name, index=best.index, value=best.value, parameters=dict(best.parameters))


def describe(best: BestTrial, metric: str) -> str:
    values = ", ".join(f"{k}={v}" for k, v in best.parameters.items())
    return f"{best.name}: {metric} {best.value:.6g}" + (f" ({values})" if values else "")


def summarize(st: SweepStatusView, objective: Objective, active: int, blocked: str | None) -> None:
    """Counts, best trial, phase and conditions from the trial records."""
    metric, goal = objective.label(), objective.goal
    s = st.s
    recs = s.trials
    s.total_trials = len(recs)
    s.succeeded_trials = sum(r.phase == SUCCEEDED for r in recs)
    s.failed_trials = sum(r.phase in (FAILED, CONFLICT) for r in recs)
    s.stopped_trials = sum(r.phase == STOPPED for r in recs)
    s.finished_trials = sum(r.phase in FINISHED for r in recs)
    s.running_trials = active
    s.progress = f"{s.finished_trials}/{s.total_trials}"
    best = best_trial(recs, goal)
    if best is not None and (s.best_trial is None or s.best_trial.name != best.name):
        st.event(SweepReason.NEW_BEST, f"best trial so far {describe(best, metric)}")
    s.best_trial = best
    if s.finished_trials == s.total_trials:
        ok = best is not None
        reason = SweepReason.SWEEP_COMPLETE if ok else SweepReason.NO_TRIAL_SUCCEEDED
        counts = f"{s.succeeded_trials} succeeded, {s.stopped_trials} stopped early, {s.failed_trials} failed"
        failed = f"no trial that succeeded reported {source(objective)}" if s.succeeded_trials else "no trial succeeded"
        message = f"{counts}; best {describe(best, metric)}" if best else f"{failed} ({counts})"
        phase = SweepPhase.SUCCEEDED if ok else SweepPhase.FAILED
        if s.phase != phase:
            st.event(reason, message, warning=not ok)
        s.phase = phase
        s.message = message
        s.completion_time = s.completion_time or st.now
        st.cond(constants.COND_RUNNING, False, reason, "")
        st.cond(constants.COND_SUCCEEDED, ok, reason, message)
        st.cond(constants.COND_FAILED, not ok, reason, message)
        return
    started = any(r.phase != WAITING for r in recs)
    s.phase = SweepPhase.RUNNING if started else SweepPhase.PENDING
    s.start_time = s.start_time or (st.now if started else None)
    waiting = sum(r.phase == WAITING for r in recs)
    message = f"{active} trials running, {waiting} waiting, {s.finished_trials}/{s.total_trials} finished"
    if blocked:
        message += f"; no new trial until {blocked}"
    s.message = message
    st.cond(constants.COND_RUNNING, started, SweepReason.WAITING_FOR_CAPACITY if blocked else SweepReason.TRIALS_RUNNING, message)
