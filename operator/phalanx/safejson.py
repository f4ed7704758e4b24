"""JSON from the API server, decoded so that no single object can stop a reader.

The API server stores JSON nested up to 10,000 levels (its own decoder's limit) wherever a
schema leaves room: a CRD's free-form field, any object's ``managedFields``. Python's
``json.loads`` recurses once per level and raises ``RecursionError`` near 1,000: in kopf's list
or watch that kills the watcher of the whole resource, in the pod reflector it stops the
inventory — for every tenant. Here such a body is decoded in a thread with a stack deep enough
for the API server's limit, and every value nested deeper than :data:`MAX_DEPTH` is replaced by
:data:`TOO_DEEP` (a string, so that the object's schema refuses it by name: spec checks then
say which field). Text that is not JSON at all becomes :data:`UNDECODABLE` for a watch event.

Only the rare body that ``json.loads`` cannot take pays for the thread; the common path is
``json.loads`` itself. :func:`install_in_kopf` points kopf's decoding here (kopf has no hook for
it: its ``api.stream`` calls ``json.loads`` per line, ``api.get/post/patch/delete`` call
aiohttp's ``response.json()``); ``tests/unit/phalanx/test_safejson.py`` fails if kopf's code moves.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from typing import Any

from prometheus_client import Counter

log = logging.getLogger("phalanx.safejson")

# Deeper than anything the operator reads needs (a pod is under 15 levels; a TrainingJob's
# schema under 20), far below what Python's recursion (kopf, pydantic, copy) survives.
MAX_DEPTH = 64
# The API server's JSON depth limit is 10,000: decode up to that with room to spare.
DEEP_RECURSION_LIMIT = 12_000
DEEP_STACK_BYTES = 256 << 20  # reserved, not committed: the C decoder's frames for 12k levels
TOO_DEEP = f"<nested deeper than {MAX_DEPTH} levels: not decoded>"
UNDECODABLE = "PHALANX_UNDECODABLE"  # a watch event type kopf logs and skips

UNDECODABLE_OBJECTS = Counter(
    "phalanx_undecodable_objects_total",
    "API objects the operator could not decode as sent (nested too deep, not JSON); isolated, not fatal",
    ["kind", "problem"])
for _problem in ("too_deep", "not_json"):
    UNDECODABLE_OBJECTS.labels("unknown", _problem)

_deep_lock = threading.Lock()  # one deep decode at a time: the recursion limit is process-wide


def loads(data: bytes | bytearray | str) -> Any:
    """``json.loads``, except that a body nested beyond Python's recursion is decoded anyway
    with its deep values cut at :data:`MAX_DEPTH` (see the module doc)."""
    try:
        value = json.loads(data)
    except RecursionError:
        value = _loads_deep(data)
    else:  # decoded, but deeper than kopf's deepcopy or pydantic survive: cut it all the same
        if not _deeper_than(value, MAX_DEPTH):
            return value
    where = prune(value)
    _report_pruned(value, where)
    return value


def _loads_deep(data: bytes | bytearray | str) -> Any:
    out: dict[str, Any] = {}

    def decode() -> None:
        try:
            out["value"] = json.loads(data)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            out["error"] = exc

    with _deep_lock:
        old_limit, old_stack = sys.getrecursionlimit(), threading.stack_size()
        sys.setrecursionlimit(max(old_limit, DEEP_RECURSION_LIMIT))
        try:
            threading.stack_size(DEEP_STACK_BYTES)
            worker = threading.Thread(target=decode, name="deep-json", daemon=True)
            worker.start()
        finally:
            threading.stack_size(old_stack)
        worker.join()
        sys.setrecursionlimit(old_limit)
    if "error" in out:
        raise out["error"]
    return out["value"]


def _walk(value: Any, max_depth: int) -> Any:
    """Every (parent, key, child, depth, path) of ``value`` down to ``max_depth``, iteratively;
    ``depth`` is the parent's. Children deeper than ``max_depth`` are yielded, not entered."""
    stack: list[tuple[Any, int, str]] = [(value, 1, "")]
    while stack:
        node, depth, path = stack.pop()
        children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, child in list(children):
            child_path = f"{path}[{key}]" if isinstance(node, list) else f"{path}.{key}" if path else str(key)
            yield node, key, child, depth, child_path
            if isinstance(child, dict | list) and depth < max_depth:
                stack.append((child, depth + 1, child_path))


def prune(value: Any, max_depth: int = MAX_DEPTH) -> list[str]:
    """Replace, in place, every dict/list nested deeper than ``max_depth`` by :data:`TOO_DEEP`.
    Iterative (no recursion); returns the paths cut, e.g. ``spec.volumes[0].emptyDir.a``."""
    cut: list[str] = []
    for node, key, child, depth, path in _walk(value, max_depth):
        if isinstance(child, dict | list) and depth >= max_depth:
            node[key] = TOO_DEEP
            cut.append(path)
    return cut


def depth_exceeds(value: Any, max_depth: int = MAX_DEPTH) -> str | None:
    """The first path nested deeper than ``max_depth`` (iterative), or None. Paths are built
    only when the depth is exceeded: the common answer costs one walk of the containers."""
    if not _deeper_than(value, max_depth):
        return None
    return next((path for _, _, child, depth, path in _walk(value, max_depth)
                 if isinstance(child, dict | list) and depth >= max_depth), None)


def cut_path(value: Any) -> str | None:
    """The path of the first value :func:`prune` cut (:data:`TOO_DEEP`), or None."""
    return next((path for _, _, child, _, path in _walk(value, MAX_DEPTH + 1) if child == TOO_DEEP), None)


def _deeper_than(value: Any, max_depth: int) -> bool:
    if not isinstance(value, dict | list):
        return False
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node
        for child in children:
            if isinstance(child, dict | list):
                if depth >= max_depth:
                    return True
                stack.append((child, depth + 1))
    return False


def identify(value: Any) -> tuple[str, str]:
    """(kind, namespace/name) of an object, a watch event's object or a list's first cut item,
    for the log line; the kind is also the metric's label."""
    obj = value.get("object", value) if isinstance(value, dict) else {}
    obj = obj if isinstance(obj, dict) else {}
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    kind = obj.get("kind") if isinstance(obj.get("kind"), str) else "unknown"
    name = "/".join(str(meta[k]) for k in ("namespace", "name") if isinstance(meta.get(k), str))
    return kind[:63], name or "?"


def _report_pruned(value: Any, where: list[str]) -> None:
    items = value.get("items") if isinstance(value, dict) and isinstance(value.get("items"), list) else None
    if items is None:
        kind, name = identify(value)
        log.warning("%s %s is nested deeper than %d levels at %s: those values are not decoded",
                    kind, name, MAX_DEPTH, ", ".join(w[:120] for w in where[:3]))
        UNDECODABLE_OBJECTS.labels(kind, "too_deep").inc()
        return
    for item in items:  # a list: name each object that was cut
        if isinstance(item, dict) and cut_path(item) is not None:
            kind, name = identify(item)
            log.warning("%s %s (in a list) is nested deeper than %d levels: those values are not decoded",
                        kind if kind != "unknown" else "object", name, MAX_DEPTH)
            UNDECODABLE_OBJECTS.labels(kind, "too_deep").inc()


def watch_line(line: bytes | str) -> dict[str, Any]:
    """One line of a watch stream as an event; a line that is not JSON becomes an event of type
    :data:`UNDECODABLE` (kopf logs and skips unknown types) instead of an exception."""
    try:
        event = loads(line)
    except ValueError as exc:
        text = line.decode("utf-8", "replace") if isinstance(line, bytes | bytearray) else line
        log.warning("a watch event that is not JSON (%s): %.200s", exc, text)
        UNDECODABLE_OBJECTS.labels("unknown", "not_json").inc()
        return {"type": UNDECODABLE, "object": {}}
    return event if isinstance(event, dict) else {"type": UNDECODABLE, "object": {}}


class _KopfJson:
    """What kopf's api module sees as ``json``: only ``loads`` differs (its stream decodes each
    watch line with it)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(json, name)

    @staticmethod
    def loads(data: bytes | str, **_: Any) -> Any:
        return watch_line(data)


def install_in_kopf() -> None:
    """Route kopf's watch, list, patch, post and delete decoding through this module: a patch of
    a poisoned object (kopf's finalizer) answers with the whole object too. Idempotent."""
    from kopf._cogs.clients import api

    if getattr(api, "_phalanx_safejson", False):
        return
    for method in KOPF_DECODERS:
        setattr(api, method, _decoding(api, method))
    api.json = _KopfJson()  # type: ignore[attr-defined]
    api._phalanx_safejson = True  # type: ignore[attr-defined]


# kopf's api functions that end in ``response.json()`` (aiohttp's, bound to json.loads).
KOPF_DECODERS = ("get", "post", "patch", "delete")


def _decoding(api: Any, method: str) -> Any:
    original = getattr(api, method)

    async def call(url: str, **kwargs: Any) -> Any:
        response = await api.request(method=method, url=url, **kwargs)
        async with response:
            return loads(await response.read())

    call.__wrapped__ = original  # type: ignore[attr-defined]
    call.__name__ = method
    return call
