"""One TrainingSweep's loop: check its spec (cached, on its own thread), decide (sweep/decide.py),
carry out the plan through ``Kube``, wait until the trials' index shows it, then for a reason.
It runs on the job loop's machinery (``phalanx.controlloop``): the same wake-ups, backoff, resync
and status wait; ``phalanx.sweep.handlers`` starts one per sweep."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
from datetime import UTC, datetime
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from phalanx import constants
from phalanx.controlloop import await_status, await_until, back_off, resync, run_while_leading
from phalanx.kube import Kube, api_message
from phalanx.sweep.check import Expansion, check_sweep
from phalanx.sweep.decide import SweepPlan, decide, refused

log = logging.getLogger("phalanx.sweep")
# A sweep's loop is woken by its trials' events only, which stop while the API server is away:
# after a failure it retries at least this often (a job's loop backs off further: its pods wake it).
ERROR_BACKOFF_LIMIT_SECONDS = 30.0

REJECTED_STATUSES = (400, 403, 422)  # a trial's create refused as invalid or forbidden: it cannot exist
# Sweep checks (seconds of CPU each at the limits) run one at a time on their own thread: many
# sweeps at once queue here instead of taking every core from the job loops and the Lease.
_CHECKS = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="sweep-check")


def sweep_status_view(status: dict[str, Any]) -> tuple[Any, list[tuple[Any, Any]]]:
    """What of a sweep's status the next pass decides on: its phase and each trial's."""
    return status.get("phase"), [(t.get("name"), t.get("phase")) for t in status.get("trials", [])]


def trials_show(seen: list[dict[str, Any]], plan: SweepPlan) -> bool:
    """Controller expectations: the trials' index shows the plan's trials created and suspended."""
    by_name = {t["metadata"]["name"]: t for t in seen}
    return {j["metadata"]["name"] for j in plan.create} <= set(by_name) and all(
        by_name.get(n, {}).get("spec", {}).get("suspend", True) for n in plan.suspend)


async def run_sweep(memo: kopf.Memo, namespace: str, name: str, body: kopf.Body, stopped: kopf.DaemonStopped,
                    trials: kopf.Index, namespace_labels: kopf.Index | None) -> None:
    """The sweep's passes until it is deleted; then its wake-up goes."""
    loop = SweepLoop(memo, namespace, name, body, trials, namespace_labels)
    try:
        await run_while_leading(loop.reconcile, stopped, memo.leader)
    finally:
        memo.sweep_wakeups.forget(loop.key)


class SweepLoop:
    """One sweep's reconcile passes: check → decide → execute → await the index → wait for a reason."""

    def __init__(self, memo: kopf.Memo, namespace: str, name: str, body: kopf.Body, trials: kopf.Index,
                 namespace_labels: kopf.Index | None):
        self.memo, self.namespace, self.name, self.body = memo, namespace, name, body
        self.trials, self.namespace_labels = trials, namespace_labels
        self.key = (namespace, name)
        self.wake = memo.sweep_wakeups.wakeup(self.key)
        self.checked: dict[Any, Expansion] = {}  # the last spec's check, by _check_key
        self.errors = 0

    async def reconcile(self) -> bool:
        """One pass (True: the loop goes on; a sweep's loop ends only when kopf stops it)."""
        self.wake.clear()
        try:
            obj, plan = await self.decide()
            await execute(self.memo.kube, self.namespace, self.name, obj, plan, self.body)
            self.errors = 0
        except Exception:  # noqa: BLE001 - API trouble or a bug: logged, retried with backoff
            self.errors += 1
            log.exception("reconciling sweep %s/%s failed (%d in a row)", self.namespace, self.name, self.errors)
            await back_off(self.wake, self.errors, limit=ERROR_BACKOFF_LIMIT_SECONDS)
            return True
        await await_until(lambda: trials_show(list(self.trials.get(self.key, [])), plan))
        if not (plan.create or plan.suspend):
            await resync(self.wake)  # one pass per burst of trial events
        return True

    async def decide(self) -> tuple[dict[str, Any], SweepPlan]:
        """The sweep as the body shows it, and the plan for it."""
        body, config = self.body, self.memo.config
        labels_index = self.namespace_labels
        ns_labels = next(iter(labels_index.get(self.namespace, [None]))) if labels_index is not None else None
        obj = {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"), "metadata": dict(body["metadata"]),
               "spec": dict(body.get("spec") or {}), "status": dict(body.get("status") or {})}
        trials = {t["metadata"]["name"]: t for t in self.trials.get(self.key, [])}
        # Expanding and checking every trial is the costly part: once per spec and policy,
        # off the event loop (bounded by the operator's limits: policy/limits.py).
        check_key = await asyncio.to_thread(_check_key, obj["spec"], ns_labels, id(config))
        if check_key not in self.checked:
            self.checked.clear()
            self.checked[check_key] = await asyncio.get_running_loop().run_in_executor(
                _CHECKS, check_sweep, obj, config, ns_labels)
        return obj, decide(obj, trials, datetime.now(UTC), config, ns_labels, self.checked[check_key])


def _check_key(spec: dict[str, Any], ns_labels: dict[str, str] | None, config_id: int) -> tuple[str, str, int]:
    try:
        return json.dumps(spec, sort_keys=True), json.dumps(ns_labels, sort_keys=True), config_id
    except (RecursionError, ValueError):  # too deep to serialise: check_sweep refuses it by name
        return repr(id(spec)), "", config_id


async def execute(kube: Kube, namespace: str, name: str, obj: dict[str, Any], plan: SweepPlan,
                  body: kopf.Body) -> None:
    """Create trials, suspend stopped ones, write the status, post the Events (with the
    operator's one API client, ``memo.kube``)."""
    status = plan.status
    for job in plan.create:
        try:
            await kube.create_job(namespace, job)  # one of its name exists: the trials' index tells whose
        except ApiException as exc:
            if exc.status not in REJECTED_STATUSES:
                raise
            message = api_message(exc)
            status = refused(status or obj.get("status"), job["metadata"]["name"], message, datetime.now(UTC))
            kopf.event(body, type="Warning", reason=constants.SweepReason.CREATE_REJECTED,
                       message=f"{job['metadata']['name']}: {message}")
    for trial in plan.suspend:
        await kube.suspend_job(namespace, trial)
    if status is not None:
        await kube.patch_status(namespace, name, status, obj.get("status"), plural=constants.SWEEP_PLURAL)
    for type_, reason, message in plan.events:
        kopf.event(body, type=type_, reason=reason, message=message)
    if status is not None:
        await await_status(body, status, sweep_status_view)
