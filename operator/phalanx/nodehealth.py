"""Node health's I/O: what ``gang.nodehealth`` decides from, kept from kopf's watches (each node's
signal, each job's evidence, the NodeQuarantines), and a task that carries out its decisions:
create, renew and delete NodeQuarantines, post an Event on the Node (and on the job whose failure
tipped it), keep the metrics.

The evidence window lives in memory: on a restart the operator lists every job again, and each
job's status.lastFailure (with its time) is evidence again, so the window rebuilds itself from the
jobs; the NodeQuarantine objects are the durable record. The task wakes for a change (a node's
signal, new evidence, a quarantine created or deleted), at the first expiry, and every
``health.resyncSeconds``; only the leader writes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import kopf

from phalanx.api.config import HealthConfig
from phalanx.constants import Reason
from phalanx.gang.nodehealth import (
    Evidence,
    HealthActions,
    Quarantine,
    Quarantined,
    failure_evidence,
    next_expiry,
    node_signal,
    plan_health,
    quarantine_object,
    recent,
)
from phalanx.metrics import NODE_QUARANTINED, QUARANTINES

log = logging.getLogger("phalanx.nodehealth")
DELETED = "DELETED"
MAX_TRACKED = 20_000  # failures kept in memory (a few MiB); a quarantine needs only a handful


class NodeHealth:
    """The operator's view of node health (``memo.node_health``); the handlers feed it, ``run``
    acts. ``changed`` is called when the set of quarantined nodes changes (the scheduler plans
    again)."""

    def __init__(self, changed: Callable[[], None] = lambda: None) -> None:
        self.changed = changed
        self.signals: dict[str, str | None] = {}  # each existing node → what makes it unhealthy (None: nothing)
        self.node_uids: dict[str, str] = {}
        self.quarantines: dict[str, Quarantine] = {}
        self.evidence: dict[tuple[Any, ...], Evidence] = {}  # in the window, not yet spent on a quarantine
        self.seen: dict[tuple[Any, ...], datetime] = {}  # every failure counted (a job's status repeats it)
        self.jobs: dict[str, dict[str, Any]] = {}  # "ns/name" → its reference, for Events
        # The task running ``run``. Kept here, not in the memo: kopf gives each object's handlers a
        # copy of the memo, so a task stored there by one node's handler is invisible to the next
        # node's and to shutdown (each node would start one, none cancelled).
        self.task: asyncio.Task | None = None
        self.stopped = False  # the operator is shutting down: no task starts any more
        self.leader: Any = None  # None: this replica always leads
        self._due: asyncio.Event | None = None

    def start(self, kube: Any, config: HealthConfig, leader: Any = None) -> None:
        """Start ``run`` once (kopf waits 5 s at exit for any task it did not see cancelled)."""
        self.leader = leader
        if self.task is None and not self.stopped:
            self.task = asyncio.create_task(self.run(kube, config, leader), name="phalanx-node-health")

    def stop(self) -> None:
        self.stopped = True
        if self.task is not None:
            self.task.cancel()

    # --- fed by the watches (on the event loop)

    def _wake(self) -> None:
        if self._due is None:
            self._due = asyncio.Event()
        self._due.set()

    def node_event(self, type_: str | None, name: str, body: dict[str, Any], config: HealthConfig) -> None:
        if type_ == DELETED:
            self.signals.pop(name, None)
            self.node_uids.pop(name, None)
            return
        self.node_uids[name] = (body.get("metadata") or {}).get("uid", "")
        signal = node_signal(body, config)
        before, self.signals[name] = self.signals.get(name), signal
        if signal and signal != before:
            self._wake()

    def job_event(self, type_: str | None, body: dict[str, Any]) -> None:
        meta = body.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        if type_ == DELETED:
            self.jobs.pop(key, None)
            return
        self.jobs[key] = {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"),
                          "metadata": {"namespace": meta.get("namespace"), "name": meta.get("name"), "uid": meta.get("uid")}}
        found = failure_evidence(body)
        if found is not None and found.key not in self.seen:
            self.seen[found.key] = found.time
            if self._spent(found):
                return
            self.evidence[found.key] = found
            self._bound()
            log.info("node %s implicated by %s: %s", found.node, found.job, found.category)
            self._wake()

    def _bound(self) -> None:
        """Keep the newest MAX_TRACKED failures: the window bounds them in time, this in number
        (many jobs failing fast between two passes, or a replica that never leads)."""
        for table in (self.evidence, self.seen):
            if len(table) > MAX_TRACKED:
                def when(item: Any) -> datetime:
                    return item.time if isinstance(item, Evidence) else item
                for key in sorted(table, key=lambda k: when(table[k]))[:len(table) - MAX_TRACKED]:
                    del table[key]

    def quarantine_event(self, type_: str | None, name: str, body: dict[str, Any]) -> None:
        before = self.quarantines.get(name)
        if type_ == DELETED:
            self.quarantines.pop(name, None)
            if before is not None:
                NODE_QUARANTINED.remove(before.node, before.reason)
                self._released(before.node, "its NodeQuarantine was deleted")
        else:
            held = self.quarantines[name] = Quarantine.from_object(body)
            if before is not None and before.reason != held.reason:
                NODE_QUARANTINED.remove(before.node, before.reason)
            NODE_QUARANTINED.labels(held.node, held.reason).set(1)
            if before is None:  # every replica spends what it held: a new leader does not quarantine again from it
                self._spend(held.node, held.created_at)
        if before is None or type_ == DELETED:
            self.changed()
        self._wake()

    def quarantined(self) -> frozenset[str]:
        """Nodes no new gang may use now (expired ones too, until deleted: the task deletes them
        within a resync; an admin's stays)."""
        now = datetime.now(UTC)
        return frozenset(q.node for q in self.quarantines.values() if q.active(now))

    # --- the task

    async def run(self, kube: Any, config: HealthConfig, leader: Any = None) -> None:
        """Forever: wait for a change, the first expiry or the resync period; decide; act."""
        if self._due is None:
            self._due = asyncio.Event()
        while True:
            wait = config.resync_seconds
            expiry = next_expiry(self.quarantines.values(), datetime.now(UTC))
            if expiry is not None:
                wait = min(wait, expiry + 0.5)
            try:
                await asyncio.wait_for(self._due.wait(), timeout=wait)
            except TimeoutError:
                pass
            self._due.clear()
            self.prune(config)  # every replica: a standby's memory is bounded by the window too
            if leader is not None and not leader.leading():
                continue
            try:
                await self.act(kube, self.decide(config), config)
            except Exception:  # noqa: BLE001 - a failed write is retried on the next pass
                log.exception("node health pass failed")
                await asyncio.sleep(1.0)

    def prune(self, config: HealthConfig, now: datetime | None = None) -> None:
        now = now or datetime.now(UTC)
        current = {e.key for e in recent(self.evidence.values(), now, config)}
        self.evidence = {k: e for k, e in self.evidence.items() if k in current}
        since = now - timedelta(seconds=config.evidence_window_seconds)
        self.seen = {k: t for k, t in self.seen.items() if t >= since}  # older failures would not count

    def decide(self, config: HealthConfig, now: datetime | None = None) -> HealthActions:
        now = now or datetime.now(UTC)
        self.prune(config, now)
        return plan_health(self.signals, self.quarantines, self.evidence.values(), now, config)

    async def act(self, kube: Any, actions: HealthActions, config: HealthConfig) -> None:
        for new in actions.create:
            if await kube.create_quarantine(quarantine_object(new)):
                self._quarantined(new)
        for node, expires in actions.renew.items():
            await kube.renew_quarantine(node, expires.isoformat().replace("+00:00", "Z"))
        for node in actions.release:
            held = self.quarantines.get(node)  # as the watch has it now: the writes above awaited
            if held is None or held.active(datetime.now(UTC)):
                continue  # cleared, or an admin extended it since the decision
            if await kube.delete_quarantine(node, held.resource_version):
                log.info("node %s: quarantine expired, released", node)

    def _quarantined(self, new: Quarantined) -> None:
        QUARANTINES.labels(str(new.reason)).inc()
        self._spend(new.node)
        message = f"node {new.node} quarantined until {new.expires_at:%Y-%m-%dT%H:%M:%SZ} ({new.reason}): {new.message}"
        log.warning("%s", message)
        _event(self._node_ref(new.node), "Warning", Reason.NODE_QUARANTINED, message)
        job = self.jobs.get(new.tipping_job or "")
        if job is not None:
            _event(job, "Warning", Reason.NODE_QUARANTINED, message)

    def _spend(self, node: str, until: datetime | None = None) -> None:
        """The node's evidence (up to ``until``, the quarantine's creation) is spent: after its
        quarantine, the node starts with a clean slate."""
        for key in [k for k, e in self.evidence.items() if e.node == node and (until is None or e.time <= until)]:
            del self.evidence[key]

    def _spent(self, found: Evidence) -> bool:
        """Whether a quarantine of the node, created after the failure, took it already (a replica
        that starts may see the quarantine before the job statuses behind it)."""
        return any(q.node == found.node and q.created_at is not None and found.time <= q.created_at
                   for q in self.quarantines.values())

    def _released(self, node: str, why: str) -> None:
        if self.leader is not None and not self.leader.leading():
            return  # every replica sees the delete; the leader says so once
        _event(self._node_ref(node), "Normal", Reason.NODE_QUARANTINE_RELEASED, f"node {node}: {why}; new gangs may use it")

    def _node_ref(self, node: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "uid": self.node_uids.get(node, node)}}


def _event(ref: dict[str, Any], type_: str, reason: str, message: str) -> None:
    try:
        kopf.event(ref, type=type_, reason=reason, message=message)
    except Exception:  # noqa: BLE001 - an Event is best effort
        log.warning("could not post the %s Event on %s", reason, ref["metadata"].get("name"), exc_info=True)
