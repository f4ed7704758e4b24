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
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from phalanx import constants as C
from phalanx.api.config import OperatorConfig
from phalanx.api.sweep import SweepPhase, TrainingSweep, TrialStatus
from phalanx.constants import SweepReason as R
from phalanx.render.names import spec_hash
from phalanx.sweep import earlystop
from phalanx.sweep import status as S
from phalanx.sweep.check import Expansion, check_sweep, trial_object
from phalanx.sweep.params import Trial


@dataclass
class SweepPlan:
    create: list[dict[str, Any]] = field(default_factory=list)  # trial TrainingJobs
    suspend: list[str] = field(default_factory=list)  # trials to stop (spec.suspend: true)
    status: dict[str, Any] | None = None  # the full new status when it changed
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)


def owner_reference(sweep: TrainingSweep) -> dict[str, Any]:
    return {"apiVersion": C.API_VERSION, "kind": C.SWEEP_KIND, "name": sweep.metadata.name,
            "uid": sweep.metadata.uid or "", "controller": True, "blockOwnerDeletion": True}


def trial_manifest(sweep: TrainingSweep, trial: Trial) -> dict[str, Any]:
    """The trial's TrainingJob, owned by the sweep (deleting the sweep deletes its trials)."""
    obj = trial_object(sweep, trial)
    obj["metadata"]["annotations"] = {C.ANNOTATION_TRIAL_PARAMETERS: json.dumps(trial.parameters, sort_keys=True)}
    obj["metadata"]["ownerReferences"] = [owner_reference(sweep)]
    return obj


def _ours(job: dict[str, Any], uid: str | None) -> bool:
    owners = [o for o in (job.get("metadata") or {}).get("ownerReferences") or [] if o.get("controller")]
    return bool(uid) and any(o.get("uid") == uid for o in owners)


def decide(obj: dict[str, Any], trials: dict[str, dict[str, Any]], now: datetime,
           config: OperatorConfig | None = None, namespace_labels: dict[str, str] | None = None,
           expansion: Expansion | None = None) -> SweepPlan:
    """``trials``: the TrainingJobs labelled with this sweep's name, by name (metadata with
    ownerReferences, spec.suspend, status)."""
    meta = obj.get("metadata") or {}
    st = S.SweepStatusView(obj.get("status"), meta.get("generation"), now)
    plan = SweepPlan()

    def done() -> SweepPlan:
        plan.status = st.dump()
        plan.events = st.events
        return plan

    def refuse(message: str) -> SweepPlan:
        if st.s.phase != SweepPhase.FAILED or st.s.message != message:
            st.cond(C.COND_VALID, False, R.INVALID_SPEC, message)
            st.cond(C.COND_FAILED, True, R.INVALID_SPEC, message)
            st.cond(C.COND_RUNNING, False, R.INVALID_SPEC, "")
            st.event(R.INVALID_SPEC, message, warning=True)
            st.s.phase = SweepPhase.FAILED
            st.s.message = message
            st.s.completion_time = st.s.completion_time or st.now
        return done()

    if expansion is None:
        expansion = check_sweep(obj, config, namespace_labels)
    if not expansion.valid:
        return refuse("; ".join(str(p) for p in expansion.problems))
    sweep = expansion.sweep
    assert sweep is not None
    spec = sweep.spec
    # The trials come from the spec the sweep started with: only maxParallel may change (the CRD
    # refuses other edits, but for the free-form trials list, which CEL cannot compare).
    digest = spec_hash(spec.model_dump(by_alias=True, mode="json", exclude={"max_parallel"}))
    if st.s.spec_hash is not None and st.s.spec_hash != digest:
        return refuse("the spec changed after the sweep started; only maxParallel may change "
                      "(create a new sweep to try other parameters or trials)")
    st.s.spec_hash = digest
    st.cond(C.COND_VALID, True, R.VALIDATED, f"{len(expansion.trials)} trials")
    metric, goal, rule = spec.objective.metric, spec.objective.goal, spec.early_stopping

    # 1. One record per trial, in order; what the status says so far is kept.
    known = {r.name: r for r in st.s.trials}
    records: list[TrialStatus] = []
    for trial in expansion.trials:
        rec = known.get(trial.name) or TrialStatus(name=trial.name, index=trial.index, parameters=trial.parameters)
        records.append(rec)
    st.s.trials = records
    by_name = {t.name: t for t in expansion.trials}
    if st.s.phase in (SweepPhase.SUCCEEDED, SweepPhase.FAILED) and st.s.finished_trials == st.s.total_trials == len(records):
        return done()  # finished: nothing more to create or stop

    # 2. Observe each trial's TrainingJob: phase, progress, milestones.
    reached: dict[str, list[int]] = {}
    recreate: list[TrialStatus] = []
    for rec in records:
        job = trials.get(rec.name)
        if rec.phase in S.FINISHED:
            # Final. A stopped trial resumed by hand (spec.suspend: false) runs on its own.
            if job is not None and rec.phase == S.STOPPED and _ours(job, sweep.metadata.uid):
                S.record_progress(rec, job.get("status") or {}, metric, [])  # the step it saved at
            continue
        if job is None:
            if rec.phase != S.WAITING:
                recreate.append(rec)  # created before, gone now (or not yet in our view)
            continue
        if not _ours(job, sweep.metadata.uid):
            rec.phase, rec.reason = S.CONFLICT, R.TRIAL_NAME_TAKEN
            rec.message = f"a TrainingJob named {rec.name} exists that this sweep does not own; it is left alone"
            st.event(R.TRIAL_NAME_TAKEN, rec.message, warning=True)
            continue
        before = rec.phase
        status = job.get("status") or {}
        steps = earlystop.milestones(rule, by_name[rec.name].spec.get("training", {}).get("steps", 0))
        reached[rec.name] = S.record_progress(rec, status, metric, steps)
        rec.phase = S.trial_phase(rec, job)
        if rec.phase == S.SUCCEEDED and before != S.SUCCEEDED:
            value = "no value reported" if rec.value is None else f"{metric} {rec.value:.6g}"
            st.event(R.TRIAL_SUCCEEDED, f"{rec.name} succeeded: {value}")
        elif rec.phase == S.FAILED and before != S.FAILED:
            rec.reason, rec.message = R.TRIAL_FAILED, status.get("message")
            st.event(R.TRIAL_FAILED, f"{rec.name} failed: {status.get('message') or 'see the TrainingJob'}", warning=True)
        elif rec.phase == S.STOPPED and before != S.STOPPED:
            st.event(rec.reason or R.EARLY_STOPPED, f"{rec.name} stopped; checkpoint kept (step {rec.step})")

    # 3. Early stopping: judged when a running trial first reaches a milestone; a trial whose
    # loss is NaN or infinite is stopped at once.
    values = {r.name: {m.step: m.value for m in r.milestones} for r in records}
    for rec in records:
        job = trials.get(rec.name)
        if job is None or rec.phase != "Running" or rec.reason in S.STOP_REASONS:
            continue
        if S.condition_status(job, C.COND_LOSS_NOT_FINITE) == "True":
            rec.reason, rec.message = R.TRIAL_DIVERGED, "the trial reported a NaN or infinite loss"
        else:
            why = earlystop.verdict(rule, goal, rec.name, reached.get(rec.name, []), values)
            if why is None:
                continue
            rec.reason, rec.message = R.EARLY_STOPPED, f"{rule.rule} rule, {metric} {why}"
        rec.phase = S.STOPPING
        st.event(rec.reason, f"stopping {rec.name}: {rec.message}")
    plan.suspend = [r.name for r in records if r.reason in S.STOP_REASONS and r.phase == S.STOPPING
                    and not ((trials.get(r.name) or {}).get("spec") or {}).get("suspend")]

    # 4. Launch: at most maxParallel unfinished trials, none while a gang waits for capacity.
    active = [r for r in records if r.phase not in S.FINISHED and r.phase != S.WAITING]
    blocked = next((f"{r.name} is placed (Schedulable=False: waiting for capacity)" for r in active
                    if r.name in trials and S.condition_status(trials[r.name], C.COND_SCHEDULABLE) == "False"), None)
    for rec in recreate:
        plan.create.append(trial_manifest(sweep, by_name[rec.name]))
    free = spec.max_parallel - len(active)
    if blocked is None and free > 0:
        for rec in [r for r in records if r.phase == S.WAITING][:free]:
            rec.phase = "Pending"
            plan.create.append(trial_manifest(sweep, by_name[rec.name]))
            values_text = ", ".join(f"{k}={v}" for k, v in rec.parameters.items())
            st.event(R.TRIAL_CREATED, f"created {rec.name}" + (f" ({values_text})" if values_text else ""))
            active.append(rec)

    # 5. Counts, best trial, phase, conditions.
    S.summarize(st, metric, goal, len(active), blocked)
    return done()


def refused(status: dict[str, Any] | None, name: str, message: str, now: datetime) -> dict[str, Any]:
    """The status after the API server refused to create trial ``name`` for good (invalid or
    forbidden by admission): the trial is Failed with the server's words; the sweep goes on."""
    st = S.SweepStatusView(status, None, now)
    for rec in st.s.trials:
        if rec.name == name:
            rec.phase, rec.reason, rec.message = S.FAILED, R.CREATE_REJECTED, message
    st.s.failed_trials = sum(r.phase in (S.FAILED, S.CONFLICT) for r in st.s.trials)
    st.s.finished_trials = sum(r.phase in S.FINISHED for r in st.s.trials)
    st.s.progress = f"{st.s.finished_trials}/{st.s.total_trials}"
    st.s.observed_generation = (status or {}).get("observedGeneration")
    return st.s.model_dump(by_alias=True, mode="json", exclude_none=True)
