"""kopf wiring of TrainingSweeps only: an index of trial TrainingJobs by sweep, one daemon per
sweep that runs the pure decide (sweep/decide.py) and carries out its plan. No decisions here.

Registered by importing this module next to phalanx.handlers (phalanx.main). The operator's
config and leader elector come from kopf's memo (``memo.config``, ``memo.leader``: see
phalanx.handlers.new_memo; its startup handler fills in the defaults).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import time
from datetime import UTC, datetime
from typing import Any

import kopf
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from phalanx import constants as C
from phalanx.handlers import sleep_or_wake
from phalanx.sweep.check import Expansion, check_sweep
from phalanx.sweep.decide import SweepPlan, decide, refused

log = logging.getLogger("phalanx.sweep")

RESYNC_SECONDS = 10.0
EXPECTATION_TIMEOUT = 5.0
WAKE_COALESCE_SECONDS = 0.2
ERROR_BACKOFF = (1.0, 2.0, 5.0, 10.0, 30.0)
# Sweep checks (seconds of CPU each at the limits) run one at a time on their own thread: many
# sweeps at once queue here instead of taking every core from the job loops and the Lease.
_CHECKS = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="sweep-check")


def _slim_trial(body: kopf.Body) -> dict[str, Any]:
    meta, status = body["metadata"], body.get("status") or {}
    keep = ("phase", "step", "totalSteps", "loss", "tokensPerSecond", "message", "lastCheckpoint")
    return {
        "metadata": {"name": meta["name"], "uid": meta.get("uid"), "labels": dict(meta.get("labels") or {}),
                     "ownerReferences": [{"uid": o.get("uid"), "controller": o.get("controller")}
                                         for o in meta.get("ownerReferences") or []]},
        "spec": {"suspend": bool((body.get("spec") or {}).get("suspend"))},
        "status": {**{k: status[k] for k in keep if k in status},
                   "conditions": [{"type": c.get("type"), "status": c.get("status"), "reason": c.get("reason")}
                                  for c in status.get("conditions") or []
                                  if c.get("type") in (C.COND_SCHEDULABLE, C.COND_LOSS_NOT_FINITE)]},
    }


@kopf.index(C.GROUP, C.VERSION, C.PLURAL, labels={C.LABEL_SWEEP: kopf.PRESENT})
def sweep_trials(namespace: str, labels: dict[str, str], body: kopf.Body, **_: Any) -> dict:
    return {(namespace, labels[C.LABEL_SWEEP]): _slim_trial(body)}


@kopf.on.event(C.GROUP, C.VERSION, C.PLURAL, labels={C.LABEL_SWEEP: kopf.PRESENT})
def trial_changed(namespace: str, labels: dict[str, str], memo: kopf.Memo, **_: Any) -> None:
    """Wake the sweep's loop; no entry is made for a sweep without one (trials outlive sweeps)."""
    wake = memo.sweep_wakeups.get((namespace, labels[C.LABEL_SWEEP]))
    if wake is not None:
        wake.set()


@kopf.daemon(C.GROUP, C.VERSION, C.SWEEP_PLURAL, cancellation_timeout=10.0)
async def sweep_loop(name: str, namespace: str, body: kopf.Body, stopped: kopf.DaemonStopped,
                     sweep_trials: kopf.Index, memo: kopf.Memo, **kwargs: Any) -> None:
    key = (namespace, name)
    wake = memo.sweep_wakeups.setdefault(key, asyncio.Event())
    cache: dict[Any, Expansion] = {}
    errors = 0
    try:
        while not stopped:
            if memo.leader is not None and not await memo.leader.wait_leading(stopped):
                break
            wake.clear()
            labels_index = kwargs.get("namespace_labels")
            ns_labels = next(iter(labels_index.get(namespace, [None]))) if labels_index is not None else None
            obj = {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"), "metadata": dict(body["metadata"]),
                   "spec": dict(body.get("spec") or {}), "status": dict(body.get("status") or {})}
            trials = {t["metadata"]["name"]: t for t in sweep_trials.get(key, [])}
            config = memo.config
            try:
                # Expanding and checking every trial is the costly part: once per spec and policy,
                # off the event loop (bounded by the operator's limits: policy/limits.py).
                ck = await asyncio.to_thread(_check_key, obj["spec"], ns_labels, id(config))
                if ck not in cache:
                    cache.clear()
                    cache[ck] = await asyncio.get_running_loop().run_in_executor(
                        _CHECKS, check_sweep, obj, config, ns_labels)
                plan = decide(obj, trials, datetime.now(UTC), config, ns_labels, cache[ck])
                await _execute(memo.kube.custom, namespace, name, obj, plan, body)
                errors = 0
            except Exception:  # noqa: BLE001 - API trouble or a bug: logged, retried with backoff
                errors += 1
                log.exception("reconciling sweep %s/%s failed (%d in a row)", namespace, name, errors)
                await sleep_or_wake(wake, ERROR_BACKOFF[min(errors, len(ERROR_BACKOFF)) - 1])
                continue
            await _await_trials(key, sweep_trials, plan)
            if plan.create or plan.suspend:
                continue
            await sleep_or_wake(wake, RESYNC_SECONDS, coalesce=WAKE_COALESCE_SECONDS)  # one pass per burst
    finally:
        memo.sweep_wakeups.pop(key, None)


def _check_key(spec: dict[str, Any], ns_labels: dict[str, str] | None, config_id: int) -> tuple[str, str, int]:
    try:
        return json.dumps(spec, sort_keys=True), json.dumps(ns_labels, sort_keys=True), config_id
    except (RecursionError, ValueError):  # too deep to serialise: check_sweep refuses it by name
        return repr(id(spec)), "", config_id


async def _execute(api: client.CustomObjectsApi, namespace: str, name: str, obj: dict[str, Any],
                   plan: SweepPlan, body: kopf.Body) -> None:
    """Create trials, suspend stopped ones, write the status, post the Events (with the
    operator's one API client, ``memo.kube``)."""
    status = plan.status
    for job in plan.create:
        try:
            await asyncio.to_thread(api.create_namespaced_custom_object, C.GROUP, C.VERSION, namespace, C.PLURAL, job)
        except ApiException as exc:
            if exc.status == 409:
                continue
            if exc.status in (400, 403, 422):  # invalid or forbidden: this trial cannot exist
                message = _api_message(exc)
                status = refused(status or obj.get("status"), job["metadata"]["name"], message, datetime.now(UTC))
                kopf.event(body, type="Warning", reason=C.SweepReason.CREATE_REJECTED,
                           message=f"{job['metadata']['name']}: {message}")
                continue
            raise
    for trial in plan.suspend:
        try:
            await asyncio.to_thread(api.patch_namespaced_custom_object, C.GROUP, C.VERSION, namespace, C.PLURAL,
                                    trial, {"spec": {"suspend": True}})
        except ApiException as exc:
            if exc.status != 404:
                raise
    if status is not None:
        removed = {k: None for k in (obj.get("status") or {}) if k not in status}
        await asyncio.to_thread(api.patch_namespaced_custom_object_status, C.GROUP, C.VERSION, namespace,
                                C.SWEEP_PLURAL, name, {"status": {**status, **removed}})
    for type_, reason, message in plan.events:
        kopf.event(body, type=type_, reason=reason, message=message)
    if status is not None:
        await _await_status(body, status)


async def _await_status(body: kopf.Body, written: dict[str, Any]) -> None:
    """Until the live body shows what we wrote: the next pass never decides on a stale status."""
    deadline = time.monotonic() + EXPECTATION_TIMEOUT
    want = [(t.get("name"), t.get("phase")) for t in written.get("trials", [])]
    while time.monotonic() < deadline:
        now = body.get("status") or {}
        if now.get("phase") == written.get("phase") and [(t.get("name"), t.get("phase")) for t in now.get("trials", [])] == want:
            return
        await asyncio.sleep(0.05)


async def _await_trials(key: tuple[str, str], index: kopf.Index, plan: SweepPlan) -> None:
    """Controller expectations: until the index shows the trials created and suspended."""
    created = {j["metadata"]["name"] for j in plan.create}
    suspended = set(plan.suspend)
    if not created and not suspended:
        return
    deadline = time.monotonic() + EXPECTATION_TIMEOUT
    while time.monotonic() < deadline:
        seen = {t["metadata"]["name"]: t for t in index.get(key, [])}
        if created <= set(seen) and all(seen.get(n, {}).get("spec", {}).get("suspend", True) for n in suspended):
            return
        await asyncio.sleep(0.05)




def _api_message(exc: ApiException) -> str:
    try:
        return json.loads(exc.body)["message"]
    except (TypeError, ValueError, KeyError):
        return str(exc.reason)
