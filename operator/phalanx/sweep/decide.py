"""The sweep's reconcile, as a pure function: (sweep, its trials, now) → what to do.

Level-based like the TrainingJob's: trial names are deterministic (``<sweep>-<index>``), a
trial that should exist and does not is (re)created (409 on replay is fine), a trial to stop is
suspended until its spec says so. The kopf handler (sweep/handlers.py) and `phalanx local`
(sweep/local.py) both carry out the returned plan.

Never more than ``maxParallel`` unfinished trials exist: queued trials are not created ahead of
time, and while a trial's gang waits for capacity (``Schedulable=False``) no further trial is
created either, so trials never pile up behind each other (the gang itself holds no node until
all of it is placed).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any

from phalanx import constants
from phalanx.api.config import OperatorConfig
from phalanx.api.sweep import SweepPhase, TrainingSweep, TrainingSweepSpec, TrialStatus
from phalanx.constants import SweepReason
from phalanx.lifecycle.resume import keeps_checkpoints
from phalanx.render.names import spec_hash
from phalanx.sweep import earlystop
from phalanx.sweep import status as sweep_status
from phalanx.sweep.check import Expansion, check_sweep, trial_object
from phalanx.sweep.params import Trial


@dataclass
class SweepPlan:
    create: list[dict[str, Any]] = field(default_factory=list)  # trial TrainingJobs
    suspend: list[str] = field(default_factory=list)  # trials to stop (spec.suspend: true)
    status: dict[str, Any] | None = None  # the full new status when it changed
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)


def owner_reference(sweep: TrainingSweep) -> dict[str, Any]:
    return {"apiVersion": constants.API_VERSION, "kind": constants.SWEEP_KIND, "name": sweep.metadata.name,
            "uid": sweep.metadata.uid or "", "controller": True, "blockOwnerDeletion": True}


def trial_manifest(sweep: TrainingSweep, trial: Trial) -> dict[str, Any]:
    """The trial's TrainingJob, owned by the sweep (deleting the sweep deletes its trials)."""
    obj = trial_object(sweep, trial)
    obj["metadata"]["annotations"] = {constants.ANNOTATION_TRIAL_PARAMETERS: json.dumps(trial.parameters, sort_keys=True)}
    obj["metadata"]["ownerReferences"] = [owner_reference(sweep)]
    return obj


def _ours(job: dict[str, Any], uid: str | None) -> bool:
    owners = [o for o in (job.get("metadata") or {}).get("ownerReferences") or [] if o.get("controller")]
    return bool(uid) and any(o.get("uid") == uid for o in owners)


@dataclass
class SweepPass:
    """One reconcile pass of a sweep: its inputs, the status being decided, the plan being built."""

    trials: dict[str, dict[str, Any]]  # its TrainingJobs, by name
    st: sweep_status.SweepStatusView
    expansion: Expansion
    plan: SweepPlan = field(default_factory=SweepPlan)
    records: list[TrialStatus] = field(default_factory=list)  # one a trial, in order
    reached: dict[str, list[int]] = field(default_factory=dict)  # milestones first reached now, by trial
    recreate: list[TrialStatus] = field(default_factory=list)  # created before, gone now
    active: list[TrialStatus] = field(default_factory=list)  # created and not finished
    blocked: str | None = None  # why no further trial is created (a gang waits for capacity)

    @property
    def sweep(self) -> TrainingSweep:
        assert self.expansion.sweep is not None
        return self.expansion.sweep

    @property
    def spec(self) -> TrainingSweepSpec:
        return self.sweep.spec

    @cached_property
    def by_name(self) -> dict[str, Trial]:
        return {t.name: t for t in self.expansion.trials}

    def ours(self, job: dict[str, Any]) -> bool:
        return _ours(job, self.sweep.metadata.uid)

    def done(self) -> SweepPlan:
        self.plan.status = self.st.dump()
        self.plan.events = self.st.events
        return self.plan

    def refuse(self, message: str) -> SweepPlan:
        """Bad input: the sweep fails with exactly what is wrong; nothing is created or stopped."""
        st = self.st
        if st.s.phase != SweepPhase.FAILED or st.s.message != message:
            st.cond(constants.COND_VALID, False, SweepReason.INVALID_SPEC, message)
            st.cond(constants.COND_FAILED, True, SweepReason.INVALID_SPEC, message)
            st.cond(constants.COND_RUNNING, False, SweepReason.INVALID_SPEC, "")
            st.event(SweepReason.INVALID_SPEC, message, warning=True)
            st.s.phase = SweepPhase.FAILED
            st.s.message = message
            st.s.completion_time = st.s.completion_time or st.now
        return self.done()


def decide(obj: dict[str, Any], trials: dict[str, dict[str, Any]], now: datetime,
           config: OperatorConfig | None = None, namespace_labels: dict[str, str] | None = None,
           expansion: Expansion | None = None) -> SweepPlan:
    """``trials``: the TrainingJobs labelled with this sweep's name, by name (metadata with
    ownerReferences, spec.suspend, status). ``expansion``: the checked spec, when the caller
    keeps it from an earlier pass (else it is checked here).

    Runs ``PHASES`` in order over one ``SweepPass``: each phase either has the final word (it
    returns the plan, from ``ctx.done()``) or updates the pass and returns None to hand on."""
    meta = obj.get("metadata") or {}
    st = sweep_status.SweepStatusView(obj.get("status"), meta.get("generation"), now)
    if expansion is None:
        expansion = check_sweep(obj, config, namespace_labels)
    ctx = SweepPass(trials=trials, st=st, expansion=expansion)
    for phase in PHASES:
        plan = phase(ctx)
        if plan is not None:
            return plan
    return ctx.done()


# --- The phases, in order ------------------------------------------------------------------------


def refuse_invalid(ctx: SweepPass) -> SweepPlan | None:
    if ctx.expansion.valid:
        return None
    return ctx.refuse("; ".join(str(p) for p in ctx.expansion.problems))


# Optional spec fields added after v1alpha1 shipped (their wire paths in the sweep's spec) and the
# value they have when unset (None; a boolean's default): left out of the digest at that value, so
# a sweep started by an operator without them keeps its digest across an upgrade (test_decide pins
# a digest: a new optional TrainingJob field belongs here).
_TEMPLATE = ("template", "spec")
ADDED_OPTIONAL_FIELDS: tuple[tuple[tuple[str, ...], Any], ...] = (
    (("objective", "aggregate"), None),
    ((*_TEMPLATE, "progress"), None),
    ((*_TEMPLATE, "model", "pretrained"), None),
    ((*_TEMPLATE, "model", "lora"), None),
    ((*_TEMPLATE, "data", "prepare"), None),
    ((*_TEMPLATE, "training", "eval"), None),
    ((*_TEMPLATE, "checkpoint", "exportHuggingFace"), False),
    ((*_TEMPLATE, "checkpoint", "storage"), None),
    ((*_TEMPLATE, "failurePolicy", "preflight"), False),
    ((*_TEMPLATE, "failurePolicy", "preflightTimeoutSeconds"), 60),  # a small int: `is` holds (CPython caches them)
)


def hashed_spec(spec: TrainingSweepSpec) -> dict[str, Any]:
    """What the sweep's spec digest covers: all but maxParallel (and ADDED_OPTIONAL_FIELDS when unset)."""
    out = spec.model_dump(by_alias=True, mode="json", exclude={"max_parallel"})
    for (*parents, key), unset in ADDED_OPTIONAL_FIELDS:
        node = out
        for parent in parents:
            node = node.get(parent) if isinstance(node, dict) else None
        if isinstance(node, dict) and key in node and node[key] is unset:
            del node[key]
    return out


def refuse_changed_spec(ctx: SweepPass) -> SweepPlan | None:
    """The trials come from the spec the sweep started with: only maxParallel may change (the CRD
    refuses other edits, but for the free-form trials list, which CEL cannot compare)."""
    st = ctx.st
    digest = spec_hash(hashed_spec(ctx.spec))
    if st.s.spec_hash is not None and st.s.spec_hash != digest:
        return ctx.refuse("the spec changed after the sweep started; only maxParallel may change "
                          "(create a new sweep to try other parameters or trials)")
    st.s.spec_hash = digest
    st.cond(constants.COND_VALID, True, SweepReason.VALIDATED, f"{len(ctx.expansion.trials)} trials")
    return None


def list_trials(ctx: SweepPass) -> SweepPlan | None:
    """One record per trial, in order; what the status says so far is kept. A finished sweep has
    nothing more to create or stop."""
    s = ctx.st.s
    known = {r.name: r for r in s.trials}
    ctx.records = [known.get(t.name) or TrialStatus(name=t.name, index=t.index, parameters=t.parameters)
                   for t in ctx.expansion.trials]
    s.trials = ctx.records
    if s.phase in (SweepPhase.SUCCEEDED, SweepPhase.FAILED) and s.finished_trials == s.total_trials == len(ctx.records):
        return ctx.done()
    return None


def observe_trials(ctx: SweepPass) -> None:
    """Each trial's TrainingJob: phase, progress, milestones."""
    for rec in ctx.records:
        job = ctx.trials.get(rec.name)
        if rec.phase in sweep_status.FINISHED:
            # Final. A stopped trial resumed by hand (spec.suspend: false) runs on its own.
            if job is not None and rec.phase == sweep_status.STOPPED and ctx.ours(job):
                sweep_status.record_progress(rec, job.get("status") or {}, ctx.spec.objective, [])  # the step it saved at
        elif job is None:
            if rec.phase != sweep_status.WAITING:
                ctx.recreate.append(rec)  # created before, gone now (or not yet in our view)
        elif not ctx.ours(job):
            rec.phase, rec.reason = sweep_status.CONFLICT, SweepReason.TRIAL_NAME_TAKEN
            rec.message = f"a TrainingJob named {rec.name} exists that this sweep does not own; it is left alone"
            ctx.st.event(SweepReason.TRIAL_NAME_TAKEN, rec.message, warning=True)
        else:
            _observe(ctx, rec, job)


# The steps of a command job that has not reported its totalSteps: its milestones are bounded by
# MAX_MILESTONES alone.
UNKNOWN_STEPS = 1 << 62


def trial_steps(spec: dict[str, Any], status: dict[str, Any]) -> int:
    """The steps a trial runs, which bound its milestones: the built-in runtime's training.steps;
    a command job's totalSteps as it reports them (unbounded until then: MAX_MILESTONES caps)."""
    if spec.get("model") is not None:
        return spec.get("training", {}).get("steps", 0)
    total = status.get("totalSteps")
    return total if type(total) is int and total > 0 else UNKNOWN_STEPS


def _observe(ctx: SweepPass, rec: TrialStatus, job: dict[str, Any]) -> None:
    """An unfinished trial from its own TrainingJob; an Event when it has just finished."""
    objective, st = ctx.spec.objective, ctx.st
    before = rec.phase
    status = job.get("status") or {}
    steps = earlystop.milestones(ctx.spec.early_stopping, trial_steps(ctx.by_name[rec.name].spec, status))
    ctx.reached[rec.name] = sweep_status.record_progress(rec, status, objective, steps)
    rec.phase = sweep_status.trial_phase(rec, job)
    if rec.phase == before:
        return
    if rec.phase == sweep_status.SUCCEEDED:
        if rec.value is None:
            rec.message = value = f"never reported {sweep_status.source(objective)}"
        else:
            value = f"{objective.label()} {rec.value:.6g}"
        st.event(SweepReason.TRIAL_SUCCEEDED, f"{rec.name} succeeded: {value}")
    elif rec.phase == sweep_status.FAILED:
        rec.reason, rec.message = SweepReason.TRIAL_FAILED, status.get("message")
        st.event(SweepReason.TRIAL_FAILED, f"{rec.name} failed: {status.get('message') or 'see the TrainingJob'}", warning=True)
    elif rec.phase == sweep_status.STOPPED:
        kept = "checkpoint kept" if keeps_checkpoints(ctx.by_name[rec.name].spec) else "no checkpoint volume"
        st.event(rec.reason or SweepReason.EARLY_STOPPED, f"{rec.name} stopped at step {rec.step}; {kept}")


def stop_early(ctx: SweepPass) -> None:
    """Early stopping: judged when a running trial first reaches a milestone; a trial whose loss
    is NaN or infinite is stopped at once. Stopping trials are suspended until their spec says so."""
    rule, metric = ctx.spec.early_stopping, ctx.spec.objective.metric
    values = {r.name: {m.step: m.value for m in r.milestones} for r in ctx.records}
    for rec in ctx.records:
        job = ctx.trials.get(rec.name)
        if job is None or rec.phase != "Running" or rec.reason in sweep_status.STOP_REASONS:
            continue
        if sweep_status.condition_status(job, constants.COND_LOSS_NOT_FINITE) == "True":
            rec.reason, rec.message = SweepReason.TRIAL_DIVERGED, "the trial reported a NaN or infinite loss"
        else:
            why = earlystop.verdict(rule, ctx.spec.objective.goal, rec.name, ctx.reached.get(rec.name, []), values)
            if why is None:
                continue
            rec.reason, rec.message = SweepReason.EARLY_STOPPED, f"{rule.rule} rule, {metric} {why}"
        rec.phase = sweep_status.STOPPING
        ctx.st.event(rec.reason, f"stopping {rec.name}: {rec.message}")
    ctx.plan.suspend = [r.name for r in ctx.records if r.reason in sweep_status.STOP_REASONS and r.phase == sweep_status.STOPPING
                        and not ((ctx.trials.get(r.name) or {}).get("spec") or {}).get("suspend")]


def launch(ctx: SweepPass) -> None:
    """Trials gone are created again; new ones up to maxParallel unfinished trials, none while a
    trial's gang waits for capacity."""
    trials, by_name = ctx.trials, ctx.by_name
    ctx.active = [r for r in ctx.records if r.phase not in sweep_status.FINISHED and r.phase != sweep_status.WAITING]
    ctx.blocked = next((f"{r.name} is placed (Schedulable=False: waiting for capacity)" for r in ctx.active
                        if r.name in trials and sweep_status.condition_status(trials[r.name], constants.COND_SCHEDULABLE) == "False"), None)
    for rec in ctx.recreate:
        ctx.plan.create.append(trial_manifest(ctx.sweep, by_name[rec.name]))
    free = ctx.spec.max_parallel - len(ctx.active)
    if ctx.blocked is not None or free <= 0:
        return
    for rec in [r for r in ctx.records if r.phase == sweep_status.WAITING][:free]:
        rec.phase = "Pending"
        ctx.plan.create.append(trial_manifest(ctx.sweep, by_name[rec.name]))
        values_text = ", ".join(f"{k}={v}" for k, v in rec.parameters.items())
        ctx.st.event(SweepReason.TRIAL_CREATED, f"created {rec.name}" + (f" ({values_text})" if values_text else ""))
        ctx.active.append(rec)


def summarize(ctx: SweepPass) -> SweepPlan:
    """Counts, best trial, phase, conditions."""
    sweep_status.summarize(ctx.st, ctx.spec.objective, len(ctx.active), ctx.blocked)
    return ctx.done()


SweepPhaseStep = Callable[[SweepPass], SweepPlan | None]
PHASES: tuple[SweepPhaseStep, ...] = (
    refuse_invalid,
    refuse_changed_spec,
    list_trials,
    observe_trials,
    stop_early,
    launch,
    summarize,
)


def refused(status: dict[str, Any] | None, name: str, message: str, now: datetime) -> dict[str, Any]:
    """The status after the API server refused to create trial ``name`` for good (invalid or
    forbidden by admission): the trial is Failed with the server's words; the sweep goes on."""
    st = sweep_status.SweepStatusView(status, None, now)
    for rec in st.s.trials:
        if rec.name == name:
            rec.phase, rec.reason, rec.message = sweep_status.FAILED, SweepReason.CREATE_REJECTED, message
    st.s.failed_trials = sum(r.phase in (sweep_status.FAILED, sweep_status.CONFLICT) for r in st.s.trials)
    st.s.finished_trials = sum(r.phase in sweep_status.FINISHED for r in st.s.trials)
    st.s.progress = f"{st.s.finished_trials}/{st.s.total_trials}"
    st.s.observed_generation = (status or {}).get("observedGeneration")
    return st.s.model_dump(by_alias=True, mode="json", exclude_none=True)
