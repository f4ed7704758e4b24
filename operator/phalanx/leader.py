"""Leader election on a coordination.k8s.io Lease: only the holder reconciles.

Why a Lease and not kopf's peering: kopf peering pauses operators of *lower* priority, but peers
of equal priority all keep running (two chart replicas would both reconcile), and it needs a
cluster-wide peering CRD. A Lease (client-go's algorithm) gives exactly one leader:

- a standby counts the holder's lease as expired ``leaseDurationSeconds`` after it *saw the
  record change* (its own monotonic clock: no trust in other machines' wall clocks);
- the holder counts from *before* it sent its last successful renew and stops acting (the
  process exits, as controller-runtime does) once ``renew_deadline`` passed without one.
  Since renew_deadline < lease_duration, the old leader has stopped writing at least
  ``lease_duration - renew_deadline`` seconds before anyone else may take over.

The decisions are pure (tested in tests/unit/phalanx/test_leader.py); :class:`Elector` is the loop and
:class:`KubeLeases` the three API calls (get, create, update).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import Any, Protocol

from phalanx import constants
from phalanx.metrics import LEADER

log = logging.getLogger("phalanx.leader")


# --------------------------------------------------------------------------------------------
# Pure decisions


@dataclass(frozen=True)
class Timings:
    lease_duration: float = constants.LEADER_LEASE_DURATION_SECONDS
    renew_deadline: float = constants.LEADER_RENEW_DEADLINE_SECONDS
    retry_period: float = constants.LEADER_RETRY_PERIOD_SECONDS

    def check(self) -> Timings:
        """client-go's rule: lease duration > renew deadline > retry period > 0."""
        if not self.lease_duration > self.renew_deadline > self.retry_period > 0:
            raise ValueError(f"leader election needs lease duration ({self.lease_duration:g}s) > renew deadline "
                             f"({self.renew_deadline:g}s) > retry period ({self.retry_period:g}s) > 0")
        return self


@dataclass(frozen=True)
class Record:
    """A Lease's spec, as far as election is concerned."""

    holder: str = ""
    duration: float = 0.0
    acquire_time: str | None = None
    renew_time: str | None = None
    transitions: int = 0

    @classmethod
    def from_lease(cls, lease: dict[str, Any] | None) -> Record | None:
        if lease is None:
            return None
        spec = lease.get("spec") or {}
        return cls(holder=spec.get("holderIdentity") or "", duration=float(spec.get("leaseDurationSeconds") or 0),
                   acquire_time=spec.get("acquireTime"), renew_time=spec.get("renewTime"),
                   transitions=int(spec.get("leaseTransitions") or 0))

    def spec(self) -> dict[str, Any]:
        return {"holderIdentity": self.holder, "leaseDurationSeconds": int(round(self.duration)),
                "acquireTime": self.acquire_time, "renewTime": self.renew_time, "leaseTransitions": self.transitions}


@dataclass(frozen=True)
class Seen:
    """The record as this candidate last read it, and when (monotonic) it last changed."""

    record: Record | None
    at: float


def observe(previous: Seen | None, record: Record | None, now: float) -> Seen:
    """Expiry runs from the moment a *change* was seen: an unchanged record keeps its time."""
    if previous is not None and previous.record == record:
        return previous
    return Seen(record, now)


class Action(Enum):
    CREATE = "create"    # no lease yet
    ACQUIRE = "acquire"  # free (released) or expired: take it over
    RENEW = "renew"      # ours
    STANDBY = "standby"  # someone else's, still valid


def next_action(seen: Seen, me: str, now: float, timings: Timings) -> Action:
    record = seen.record
    if record is None:
        return Action.CREATE
    if record.holder == me:
        return Action.RENEW
    if not record.holder:
        return Action.ACQUIRE
    duration = record.duration if record.duration > 0 else timings.lease_duration
    return Action.ACQUIRE if now - seen.at >= duration else Action.STANDBY


def claim(record: Record | None, me: str, action: Action, wall: datetime, timings: Timings) -> Record:
    """The record to write for CREATE/ACQUIRE/RENEW: a new holder bumps leaseTransitions."""
    stamp = wall.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if action is Action.RENEW and record is not None:
        return Record(me, timings.lease_duration, record.acquire_time or stamp, stamp, record.transitions)
    transitions = (record.transitions + 1) if record is not None and record.holder else (record.transitions if record else 0)
    return Record(me, timings.lease_duration, stamp, stamp, transitions)


def released(record: Record, wall: datetime) -> Record:
    """What a leader writes on a clean shutdown: no holder, so a standby takes over at once."""
    stamp = wall.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return Record("", 1.0, record.acquire_time, stamp, record.transitions)


def holds(renewed_at: float | None, now: float, timings: Timings) -> bool:
    """Is this process the leader? Only while its last successful renew (timed from *before* the
    request went out) is younger than the renew deadline."""
    return renewed_at is not None and now - renewed_at < timings.renew_deadline


def lease_namespace(flag: str | None, env: dict[str, str], sa_namespace: str | None) -> str | None:
    """--leader-elect-namespace, else $POD_NAMESPACE (downward API), else the in-cluster service
    account's namespace; None outside a cluster without either (the caller refuses to start)."""
    return flag or env.get(constants.ENV_OPERATOR_POD_NAMESPACE) or (sa_namespace or "").strip() or None


def identity(env: dict[str, str], host: str, suffix: str) -> str:
    """pod name (or host name) + a per-process suffix: two processes never share an identity,
    and a restarted container does not resume its predecessor's lease."""
    return f"{env.get(constants.ENV_OPERATOR_POD_NAME) or host}_{suffix}"


# --------------------------------------------------------------------------------------------
# Wiring


class Conflict(Exception):
    """Someone else wrote the lease first (HTTP 409): re-read next round."""


class Leases(Protocol):
    def read(self) -> dict[str, Any] | None: ...
    def create(self, spec: dict[str, Any]) -> dict[str, Any]: ...
    def replace(self, lease: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]: ...


class KubeLeases:
    """get / create / update of one Lease (the chart's Role grants exactly these)."""

    def __init__(self, api_client: Any, namespace: str, name: str, timeout: float) -> None:
        from kubernetes import client

        self.api = client.CoordinationV1Api(api_client)
        self.namespace, self.name, self.timeout = namespace, name, timeout

    def _raw(self, fn: Callable[..., Any], *args: Any) -> dict[str, Any]:
        from kubernetes.client.exceptions import ApiException

        try:
            response = fn(*args, _preload_content=False, _request_timeout=self.timeout)
        except ApiException as exc:
            if exc.status == 409:
                raise Conflict(str(exc.reason)) from exc
            raise
        try:
            return json.loads(response.data)
        finally:
            response.release_conn()

    def read(self) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            return self._raw(self.api.read_namespaced_lease, self.name, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def create(self, spec: dict[str, Any]) -> dict[str, Any]:
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace}, "spec": spec}
        return self._raw(self.api.create_namespaced_lease, self.namespace, body)

    def replace(self, lease: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
        # resourceVersion makes this a compare-and-swap: a concurrent writer gets a 409
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": dict(lease["metadata"]), "spec": spec}
        return self._raw(self.api.replace_namespaced_lease, self.name, self.namespace, body)


def exit_process(message: str) -> None:
    """Leadership lost: end at once, without clean-up that could write (controller-runtime does
    the same). The Deployment restarts the container, which comes back as a standby."""
    log.critical("%s; exiting so that no second leader acts", message)
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stderr.flush()
    os._exit(1)


class Elector:
    """Campaign for the lease and keep it; ``leading()`` is what the reconcile loops check."""

    def __init__(self, leases: Leases, me: str, timings: Timings = Timings(),
                 on_lost: Callable[[str], None] = exit_process, where: str = "") -> None:
        self.leases, self.me, self.timings, self.on_lost = leases, me, timings.check(), on_lost
        self.where = where
        self.seen: Seen | None = None
        self.lease: dict[str, Any] | None = None
        self.renewed_at: float | None = None  # monotonic, taken before the last successful write
        self._changed = asyncio.Event()  # on the reconcile loop: the job loops wait on it
        self._loop: asyncio.AbstractEventLoop | None = None  # that loop, when run() has its own thread
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._reported: tuple[str, ...] = ()

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Campaign on a thread with its own event loop: the reconcile loop (``loop``) may be busy
        for seconds (a large sweep checked, a burst of events) and must never delay a renewal."""
        self._loop = loop
        self._thread = threading.Thread(target=lambda: asyncio.run(self.run()), name="leader-election", daemon=True)
        self._thread.start()

    def _signal(self, changed: bool) -> None:
        """Set or clear ``_changed`` on the loop that owns it, from whichever thread runs run()."""
        action = self._changed.set if changed else self._changed.clear
        if self._loop is None or self._loop.is_closed():
            action()
        else:
            self._loop.call_soon_threadsafe(action)

    def leading(self) -> bool:
        return holds(self.renewed_at, time.monotonic(), self.timings)

    async def wait_leading(self, stopped: Any = None) -> bool:
        """Until this process leads (True), or kopf's DaemonStopped ``stopped`` is set (False).
        No polling: a standby's thousand job loops sleep on one event."""
        while not self.leading():
            if stopped:
                return False
            if self._changed.is_set():  # a leader past its deadline: run() ends the process now
                await asyncio.sleep(self.timings.retry_period)
                continue
            waiters = [asyncio.ensure_future(self._changed.wait())]
            if hasattr(stopped, "wait"):
                waiters.append(asyncio.ensure_future(stopped.wait()))
            try:
                await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waiters:
                    waiter.cancel()
        return True

    async def run(self) -> None:
        """Forever: one round every retry period (standbys with jitter, as client-go)."""
        while not self._stop.is_set():
            # a holder's round may take only what is left of its deadline (a hung API call)
            left = self.renewed_at + self.timings.renew_deadline - time.monotonic() if self.leading() else None
            try:
                await asyncio.wait_for(self.round(), timeout=max(left, 0.05) if left is not None else None)
            except TimeoutError:
                pass
            lost = self._lost()
            if lost and not self._stop.is_set():
                self.renewed_at = None
                self._signal(False)
                LEADER.set(0)
                self.on_lost(lost)
                return
            jitter = 1.0 if self.leading() else 1.0 + random.random() * 0.2
            await asyncio.sleep(self.timings.retry_period * jitter)

    async def round(self) -> None:
        started = time.monotonic()
        try:
            lease = await asyncio.to_thread(self.leases.read)
            record = Record.from_lease(lease)
            self.seen = observe(self.seen, record, time.monotonic())
            action = next_action(self.seen, self.me, time.monotonic(), self.timings)
            if action is Action.STANDBY:
                assert record is not None
                return self._report("standby: lease %s is held by %s; waiting", self.where, record.holder)
            new = claim(record, self.me, action, datetime.now(UTC), self.timings)
            if lease is None:
                self.lease = await asyncio.to_thread(self.leases.create, new.spec())
            else:
                self.lease = await asyncio.to_thread(self.leases.replace, lease, new.spec())
        except Conflict:
            return self._report("lease %s changed under us; re-reading", self.where)
        except Exception as exc:  # noqa: BLE001 - the API may be briefly away; the deadline decides
            return self._report("lease %s: %s: %s", self.where, type(exc).__name__, exc)
        self.seen = Seen(new, time.monotonic())
        first = not self.leading()
        if first and not holds(started, time.monotonic(), self.timings):
            # acquired by a round slower than the deadline (an overloaded API server): the lease
            # names us, but leading now would end at once; lead after a renewal that is in time
            return self._report("lease %s acquired by a round slower than %gs; leading after the next renewal",
                                self.where, self.timings.renew_deadline)
        if self._stop.is_set():
            return  # release() runs: it writes the lease now
        self.renewed_at = started
        if first:
            self._signal(True)
            LEADER.set(1)
            self._report("acquired leadership: lease %s as %s (transition %d)", self.where, self.me, new.transitions)

    async def release(self) -> None:
        """On a clean shutdown (all reconcile loops stopped): hand the lease over at once."""
        self._stop.set()
        if self._thread is not None:  # its round in flight ends before the release is written
            await asyncio.to_thread(self._thread.join, self.timings.retry_period * 2)
        if not self.leading() or self.lease is None or self.seen is None or self.seen.record is None:
            return
        self.renewed_at = None
        LEADER.set(0)
        try:
            await asyncio.to_thread(self.leases.replace, self.lease, released(self.seen.record, datetime.now(UTC)).spec())
            log.info("released lease %s", self.where)
        except Exception as exc:  # noqa: BLE001 - it then expires on its own
            log.warning("could not release lease %s: %s", self.where, exc)

    def _lost(self) -> str | None:
        """Why a leader must stop now: its deadline passed, or the lease names someone else."""
        if self.renewed_at is None:
            return None
        if not self.leading():
            return f"could not renew lease {self.where} within {self.timings.renew_deadline:g}s"
        holder = self.seen.record.holder if self.seen is not None and self.seen.record is not None else self.me
        return f"lease {self.where} is held by {holder} now" if holder != self.me else None

    def _report(self, message: str, *args: Any) -> None:
        """Log each distinct state once, not every retry period."""
        if (message, *map(str, args)) != self._reported:
            self._reported = (message, *map(str, args))
            log.info(message, *args)


def elector_from_args(args: Any, api_client: Any) -> Elector:
    """The Elector `phalanx operator --leader-elect` runs; ValueError when misconfigured."""
    sa_file = Path(constants.SERVICE_ACCOUNT_NAMESPACE_FILE)
    namespace = lease_namespace(args.leader_elect_namespace, dict(os.environ),
                                sa_file.read_text() if sa_file.is_file() else None)
    if not namespace:
        raise ValueError(f"--leader-elect needs --leader-elect-namespace (or ${constants.ENV_OPERATOR_POD_NAMESPACE}) outside a cluster")
    timings = Timings(args.leader_elect_lease_duration, args.leader_elect_renew_deadline, args.leader_elect_retry_period).check()
    me = identity(dict(os.environ), socket.gethostname(), uuid.uuid4().hex[:8])
    # each request may take a third of the renew deadline: a loaded API server (or a busy process)
    # answering in 1 s is no reason to give up a round; run() still bounds the round by the deadline
    leases = KubeLeases(api_client, namespace, args.leader_elect_lease_name,
                        timeout=max(timings.retry_period, timings.renew_deadline / 3))
    return Elector(leases, me, timings, where=f"{namespace}/{args.leader_elect_lease_name}")

