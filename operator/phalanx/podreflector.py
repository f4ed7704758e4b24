"""Every pod in the cluster: capacity for the gang planner, each job's pods for its loop.

One list (paged) + watch of all pods, from the list's resourceVersion, with bookmarks; on 410
Gone (the version expired) it lists again. It needs only ``list``/``watch`` on pods cluster-wide
(the chart's ClusterRole, read-only); every write goes through the operator's other clients.

Why not kopf's pod watch: kopf builds handler kwargs, keeps per-object state and
runs its index machinery for every event of every pod — 16 % of the operator's CPU while a
512-pod gang starts, and a few KiB per pod held — and it scopes all its watches alike, so in
namespaced mode it could not see the other namespaces' pods that fill nodes. Here each pod is
one slim :func:`pod_entry`, decoded in this thread, kept once for both readers:

* :meth:`PodReflector.get` reads like a kopf index of all pods (``get(None, [])``): capacity;
* :attr:`PodReflector.job_pods` reads like a kopf index by ``(namespace, job)``: a job's pods
  (pods with the job label, in the namespaces the operator serves).

The watch runs in a thread; events are applied on the event loop, so readers never see a store
that changes under them. A burst of events crosses to the loop as one batch: one wake-up of the
loop (a self-pipe write) per batch, not per event.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from phalanx import constants, safejson

log = logging.getLogger("phalanx.podreflector")

TERMINAL = ("Succeeded", "Failed")
Key = tuple[str, str]
JobKey = tuple[str, str]
# A job's pods: namespace, job → pod name → entry
JobIndex = dict[JobKey, dict[str, dict[str, Any]]]


# --------------------------------------------------------------------------------------------
# Pure


def _s(value: Any) -> Any:
    """Intern a short string: label keys and values, condition types and reasons repeat in every
    pod; one copy each instead of one per pod."""
    return sys.intern(value) if isinstance(value, str) and len(value) <= 64 else value


def _labels(labels: Mapping[str, str] | None) -> dict[str, str]:
    return {_s(k): _s(v) for k, v in (labels or {}).items()}


def _condition(c: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": _s(c.get("type")), "status": _s(c.get("status")), "reason": _s(c.get("reason")),
            "message": c.get("message")}


def _terminated(state: Mapping[str, Any] | None) -> dict[str, Any]:
    term = (state or {}).get("terminated")
    if not term:
        return {}
    # The termination message (the pod's own words: read by lifecycle/progress and failure_cause)
    # is kept to what a kubelet writes, its tail: that is where a log's error is.
    message = term.get("message")
    message = message[-constants.TERMINATION_MESSAGE_MAX_BYTES:] if isinstance(message, str) else None
    return {"terminated": {"exitCode": term.get("exitCode"), "reason": _s(term.get("reason")), "message": message}}


def _state(state: Mapping[str, Any] | None) -> dict[str, Any]:
    """A container's state: its termination, or that it runs (a restart in place has caught up
    once every trainer runs again: lifecycle/inplace.py)."""
    running = (state or {}).get("running")
    return {"running": {"startedAt": running.get("startedAt")}} if isinstance(running, Mapping) else _terminated(state)


def _container_status(cs: Mapping[str, Any]) -> dict[str, Any]:
    """What the failure, progress and restart-in-place readers use: restart count, exit code,
    reason and termination message, whether it runs."""
    return {"name": _s(cs.get("name")), "ready": cs.get("ready"), "restartCount": cs.get("restartCount"),
            "state": _state(cs.get("state")), "lastState": _terminated(cs.get("lastState"))}


def _container(c: Mapping[str, Any]) -> dict[str, Any]:
    # the declared progress port (hostNetwork jobs have their own): see lifecycle.progress.progress_port
    entry = {"name": _s(c.get("name")), "resources": dict(c.get("resources") or {}),
             "ports": [dict(p) for p in c.get("ports") or [] if p.get("name") == constants.PORT_NAME_PROGRESS]}
    # restarts in place (lifecycle/inplace.py): the rules, and a replacement pod's restart base
    if c.get("restartPolicyRules"):
        entry["restartPolicyRules"] = [dict(rule) for rule in c["restartPolicyRules"]]
    base = [dict(e) for e in c.get("env") or [] if e.get("name") == constants.ENV_RESTART_BASE]
    if base:
        entry["env"] = base
    return entry



def _metadata(meta: Mapping[str, Any]) -> dict[str, Any]:
    entry = {"name": meta["name"], "namespace": _s(meta.get("namespace")), "labels": _labels(meta.get("labels")),
             "creationTimestamp": meta.get("creationTimestamp"), "deletionTimestamp": meta.get("deletionTimestamp"),
             "ownerReferences": [{"uid": o.get("uid"), "controller": o.get("controller")}
                                 for o in meta.get("ownerReferences") or []]}
    request = (meta.get("annotations") or {}).get(constants.ANNOTATION_RESTART_REQUEST)
    if request is not None:  # the restart count the operator asked the pod to reach (lifecycle/inplace.py)
        entry["annotations"] = {constants.ANNOTATION_RESTART_REQUEST: request}
    return entry


def pod_entry(body: Mapping[str, Any]) -> dict[str, Any]:
    """A pod as the operator keeps it: requests, binding and pins (the planner), and labels,
    gates, phase, readiness and exit codes (the job loops). A kopf body or a raw dict."""
    meta, spec, status = body["metadata"], body.get("spec") or {}, body.get("status") or {}
    return {
        "metadata": _metadata(meta),
        "spec": {"nodeName": _s(spec.get("nodeName")), "nodeSelector": _labels(spec.get("nodeSelector")),
                 "affinity": dict(spec.get("affinity") or {}),
                 "schedulingGates": [{"name": _s(g.get("name"))} for g in spec.get("schedulingGates") or []],
                 "containers": [_container(c) for c in spec.get("containers") or []],
                 "initContainers": [{"resources": dict(c.get("resources") or {})} for c in spec.get("initContainers") or []],
                 "overhead": spec.get("overhead")},
        "status": {"phase": _s(status.get("phase")), "reason": _s(status.get("reason")), "message": status.get("message"),
                   "podIP": status.get("podIP"), "conditions": [_condition(c) for c in status.get("conditions") or []],
                   "containerStatuses": [_container_status(cs) for cs in status.get("containerStatuses") or []]},
    }


def key_of(entry: Mapping[str, Any]) -> Key:
    return entry["metadata"].get("namespace") or "", entry["metadata"]["name"]


def job_of(entry: Mapping[str, Any] | None, namespaces: Collection[str] | None) -> JobKey | None:
    """The (namespace, job) whose pod this is, if it has the job label and the operator serves
    its namespace (``namespaces`` None: all)."""
    if entry is None:
        return None
    job = entry["metadata"]["labels"].get(constants.LABEL_JOB_NAME)
    namespace = entry["metadata"].get("namespace") or ""
    if not job or (namespaces is not None and namespace not in namespaces):
        return None
    return namespace, job


def holds_capacity(entry: Mapping[str, Any] | None) -> bool:
    return entry is not None and bool(entry["spec"].get("nodeName")) and entry["status"].get("phase") not in TERMINAL


def apply_event(store: dict[Key, dict[str, Any]], jobs: JobIndex, type_: str, entry: dict[str, Any],
                namespaces: Collection[str] | None = None) -> tuple[JobKey | None, bool]:
    """Apply one watch event to ``store`` and ``jobs``. Returns the job whose pod it is (its loop
    should look again) and whether it may have freed capacity (a bound pod went away or ended:
    waiting gangs should re-plan)."""
    key = key_of(entry)
    before = store.get(key)
    old_job, job = job_of(before, namespaces), job_of(entry, namespaces)
    if old_job is not None and old_job != job or type_ == "DELETED":
        _unindex(jobs, old_job, key[1])
    if type_ == "DELETED":
        store.pop(key, None)
        return old_job or job, holds_capacity(before)
    store[key] = entry
    if job is not None:
        jobs.setdefault(job, {})[key[1]] = entry
    return job, holds_capacity(before) and not holds_capacity(entry)


def _unindex(jobs: JobIndex, job: JobKey | None, name: str) -> None:
    pods = jobs.get(job) if job is not None else None
    if pods is not None:
        pods.pop(name, None)
        if not pods:
            del jobs[job]


def index_jobs(store: Mapping[Key, dict[str, Any]], namespaces: Collection[str] | None) -> JobIndex:
    jobs: JobIndex = {}
    for key, entry in store.items():
        job = job_of(entry, namespaces)
        if job is not None:
            jobs.setdefault(job, {})[key[1]] = entry
    return jobs


class Expired(Exception):
    """The watch's resourceVersion is too old (410 Gone): list again."""


def watch_event(line: str) -> tuple[str, dict[str, Any]]:
    """One line of a watch stream → (type, raw object); raises Expired on a 410 ERROR. A line
    that is not JSON is skipped (type PHALANX_UNDECODABLE), one nested too deep is cut
    (phalanx.safejson): no pod can stop the inventory."""
    event = safejson.watch_line(line)
    type_, obj = event.get("type"), event.get("object") or {}
    if type_ == "ERROR":
        if obj.get("code") == 410:
            raise Expired(obj.get("message", "Gone"))
        raise RuntimeError(f"watch error: {obj.get('message', obj)}")
    return type_, obj


class JobPods:
    """A kopf.Index look-alike over the reflector's job index: ``get((namespace, job), [])``."""

    def __init__(self, jobs: Callable[[], JobIndex]) -> None:
        self._jobs = jobs

    def get(self, key: JobKey, default: Any = None) -> Iterable[dict[str, Any]] | Any:
        pods = self._jobs().get(key)
        return pods.values() if pods is not None else default  # the caller copies it once

    def __contains__(self, key: object) -> bool:
        return key in self._jobs()


# --------------------------------------------------------------------------------------------
# Wiring


class PodReflector:
    """Every pod of the cluster, kept by list + watch in a background thread."""

    def __init__(self, api_client: Any, namespaces: Collection[str] | None = None,
                 on_job: Callable[[str, str], None] | None = None, on_freed: Callable[[], None] | None = None) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.namespaces = frozenset(namespaces) if namespaces is not None else None
        self.on_job, self.on_freed = on_job, on_freed
        self.store: dict[Key, dict[str, Any]] = {}
        self.jobs: JobIndex = {}
        self.job_pods = JobPods(lambda: self.jobs)
        self.synced = asyncio.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self._inbox: list[tuple[Callable[..., None], tuple[Any, ...]]] = []  # for the loop, in order
        self._inbox_lock = threading.Lock()
        self.thread: threading.Thread | None = None
        self.failing_since: float | None = None  # monotonic; None while lists and watches succeed

    # kopf.Index look-alike: handlers read ``cluster_pods.get(None, [])``
    def get(self, key: Any, default: Any = None) -> Any:
        return self.store.values() if key is None else default  # the caller copies it once

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.thread = threading.Thread(target=self._run, name="pod-reflector", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        version, failures = None, 0
        while True:
            try:
                if version is None:
                    version = self._relist()
                version = self._watch(version)
                failures, self.failing_since = 0, None
            except Expired as exc:
                log.info("pod watch expired (%s); listing again", exc)
                version = None
            except Exception as exc:  # noqa: BLE001 - the API may be briefly away; keep trying
                failures += 1
                self.failing_since = self.failing_since or time.monotonic()
                if getattr(exc, "status", None) == 410:
                    version = None
                log.warning("pod reflector: %s: %s (retry %d)", type(exc).__name__, exc, failures)
                time.sleep(min(2 ** failures, 30))

    def _relist(self) -> str:
        items, token = [], None
        while True:
            page = self._call(self.core.list_pod_for_all_namespaces, limit=constants.POD_REFLECTOR_PAGE_SIZE,
                              **({"_continue": token} if token else {}))
            items += [pod_entry(p) for p in page.get("items") or []]
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                break
        store = {key_of(e): e for e in items}
        self._post(self._replace, store)
        return page["metadata"]["resourceVersion"]

    def _watch(self, version: str) -> str:
        """Follow the watch until the server ends it; the newest resourceVersion seen."""
        from kubernetes.watch.watch import iter_resp_lines

        response = self.core.list_pod_for_all_namespaces(
            watch=True, resource_version=version, allow_watch_bookmarks=True,
            timeout_seconds=constants.POD_REFLECTOR_WATCH_SECONDS, _preload_content=False,
            _request_timeout=(10, constants.POD_REFLECTOR_WATCH_SECONDS + 30))
        try:
            for line in iter_resp_lines(response):
                if not line.strip():
                    continue
                type_, obj = watch_event(line)
                version = (obj.get("metadata") or {}).get("resourceVersion") or version
                if type_ in ("ADDED", "MODIFIED", "DELETED"):
                    self._post(self._apply, type_, pod_entry(obj))
        finally:
            response.release_conn()
        return version

    def _call(self, fn: Callable[..., Any], **kwargs: Any) -> dict[str, Any]:
        response = fn(_preload_content=False, _request_timeout=60, **kwargs)
        try:
            return safejson.loads(response.data)
        finally:
            response.release_conn()

    def _post(self, fn: Callable[..., None], *args: Any) -> None:
        """Queue ``fn(*args)`` for the loop; only the first of a batch wakes it."""
        assert self.loop is not None
        with self._inbox_lock:
            self._inbox.append((fn, args))
            if len(self._inbox) > 1:
                return  # a drain is scheduled already and takes this one too
        if not self.loop.is_closed():  # the operator is exiting: nothing left to feed
            self.loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._inbox_lock:
            batch, self._inbox = self._inbox, []
        for fn, args in batch:
            fn(*args)

    def _replace(self, store: dict[Key, dict[str, Any]]) -> None:
        freed = any(holds_capacity(e) and not holds_capacity(store.get(k)) for k, e in self.store.items())
        touched = set(self.jobs)
        self.store, self.jobs = store, index_jobs(store, self.namespaces)
        if not self.synced.is_set():
            log.info("pod reflector synced: %d pods cluster-wide", len(store))
        self.synced.set()
        for namespace, job in touched | set(self.jobs):  # a relist: every job may have changed
            self._job(namespace, job)
        if freed and self.on_freed:
            self.on_freed()

    def _apply(self, type_: str, entry: dict[str, Any]) -> None:
        job, freed = apply_event(self.store, self.jobs, type_, entry, self.namespaces)
        if job is not None:
            self._job(*job)
        if freed and self.on_freed:
            self.on_freed()

    def _job(self, namespace: str, job: str) -> None:
        if self.on_job:
            self.on_job(namespace, job)
