"""Every pod in the cluster, for the gang planner in namespaced mode.

With ``-n a -n b`` kopf watches pods only in a and b, but capacity is cluster-wide: a pod of
namespace c holding 8 GPUs on a node makes that node full. kopf scopes all its watches alike, so
namespaced mode runs this reflector instead: list (paged) + watch from the list's
resourceVersion, with bookmarks; on 410 Gone (the version expired) it lists again. It needs only
``list``/``watch`` on pods cluster-wide (the chart's ClusterRole, read-only); every write still
goes through the Roles in the listed namespaces.

The entries are :func:`usage_entry` — the same slim pods kopf's ``cluster_pods`` index holds in
cluster-wide mode — and :meth:`PodReflector.get` reads like that index (``get(None, [])``).
The watch runs in a thread; events are applied on the event loop, so readers never see a store
that changes under them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from phalanx import constants as C

log = logging.getLogger("phalanx.podreflector")

TERMINAL = ("Succeeded", "Failed")
Key = tuple[str, str]


# --------------------------------------------------------------------------------------------
# Pure


def usage_entry(body: Mapping[str, Any]) -> dict[str, Any]:
    """A pod's requests, binding and pins: what the gang planner must respect (kopf body or raw dict)."""
    meta, spec = body["metadata"], body.get("spec") or {}
    return {"metadata": {"name": meta["name"], "namespace": meta.get("namespace"), "labels": dict(meta.get("labels") or {})},
            "spec": {"nodeName": spec.get("nodeName"), "nodeSelector": dict(spec.get("nodeSelector") or {}),
                     "affinity": dict(spec.get("affinity") or {}),
                     "containers": [{"resources": dict(c.get("resources") or {})} for c in spec.get("containers") or []],
                     "initContainers": [{"resources": dict(c.get("resources") or {})} for c in spec.get("initContainers") or []],
                     "overhead": spec.get("overhead")},
            "status": {"phase": (body.get("status") or {}).get("phase")}}


def key_of(entry: Mapping[str, Any]) -> Key:
    return entry["metadata"].get("namespace") or "", entry["metadata"]["name"]


def holds_capacity(entry: Mapping[str, Any] | None) -> bool:
    return entry is not None and bool(entry["spec"].get("nodeName")) and entry["status"].get("phase") not in TERMINAL


def apply_event(store: dict[Key, dict[str, Any]], type_: str, entry: dict[str, Any]) -> bool:
    """Apply one watch event to ``store``; True when it may have freed capacity (a bound pod
    went away or ended), so waiting gangs should re-plan."""
    key = key_of(entry)
    before = store.get(key)
    if type_ == "DELETED":
        store.pop(key, None)
        return holds_capacity(before)
    store[key] = entry
    return holds_capacity(before) and not holds_capacity(entry)


class Expired(Exception):
    """The watch's resourceVersion is too old (410 Gone): list again."""


def watch_event(line: str) -> tuple[str, dict[str, Any]]:
    """One line of a watch stream → (type, raw object); raises Expired on a 410 ERROR."""
    event = json.loads(line)
    type_, obj = event.get("type"), event.get("object") or {}
    if type_ == "ERROR":
        if obj.get("code") == 410:
            raise Expired(obj.get("message", "Gone"))
        raise RuntimeError(f"watch error: {obj.get('message', obj)}")
    return type_, obj


# --------------------------------------------------------------------------------------------
# Wiring


class PodReflector:
    """Cluster-wide pod usage, kept by list + watch in a background thread."""

    def __init__(self, api_client: Any, on_freed: Callable[[], None] | None = None) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.on_freed = on_freed
        self.store: dict[Key, dict[str, Any]] = {}
        self.synced = asyncio.Event()
        self.loop: asyncio.AbstractEventLoop | None = None

    # kopf.Index look-alike: handlers read ``cluster_pods.get(None, [])``
    def get(self, key: Any, default: Any = None) -> Any:
        return self.store.values() if key is None else default  # the caller copies it once

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        threading.Thread(target=self._run, name="pod-reflector", daemon=True).start()

    def _run(self) -> None:
        version, failures = None, 0
        while True:
            try:
                if version is None:
                    version = self._relist()
                version = self._watch(version)
                failures = 0
            except Expired as exc:
                log.info("pod watch expired (%s); listing again", exc)
                version = None
            except Exception as exc:  # noqa: BLE001 - the API may be briefly away; keep trying
                failures += 1
                if getattr(exc, "status", None) == 410:
                    version = None
                log.warning("pod reflector: %s: %s (retry %d)", type(exc).__name__, exc, failures)
                time.sleep(min(2 ** failures, 30))

    def _relist(self) -> str:
        items, token = [], None
        while True:
            page = self._call(self.core.list_pod_for_all_namespaces, limit=C.POD_REFLECTOR_PAGE_SIZE,
                              **({"_continue": token} if token else {}))
            items += [usage_entry(p) for p in page.get("items") or []]
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
            timeout_seconds=C.POD_REFLECTOR_WATCH_SECONDS, _preload_content=False,
            _request_timeout=(10, C.POD_REFLECTOR_WATCH_SECONDS + 30))
        try:
            for line in iter_resp_lines(response):
                if not line.strip():
                    continue
                type_, obj = watch_event(line)
                version = (obj.get("metadata") or {}).get("resourceVersion") or version
                if type_ in ("ADDED", "MODIFIED", "DELETED"):
                    self._post(self._apply, type_, usage_entry(obj))
        finally:
            response.release_conn()
        return version

    def _call(self, fn: Callable[..., Any], **kwargs: Any) -> dict[str, Any]:
        response = fn(_preload_content=False, _request_timeout=60, **kwargs)
        try:
            return json.loads(response.data)
        finally:
            response.release_conn()

    def _post(self, fn: Callable[..., None], *args: Any) -> None:
        assert self.loop is not None
        if not self.loop.is_closed():  # the operator is exiting: nothing left to feed
            self.loop.call_soon_threadsafe(fn, *args)

    def _replace(self, store: dict[Key, dict[str, Any]]) -> None:
        freed = any(holds_capacity(e) and not holds_capacity(store.get(k)) for k, e in self.store.items())
        self.store = store
        if not self.synced.is_set():
            log.info("pod reflector synced: %d pods cluster-wide", len(store))
        self.synced.set()
        if freed and self.on_freed:
            self.on_freed()

    def _apply(self, type_: str, entry: dict[str, Any]) -> None:
        if apply_event(self.store, type_, entry) and self.on_freed:
            self.on_freed()
