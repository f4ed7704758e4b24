"""Rendered objects waiting for the API server, kept as their JSON bytes.

A pod manifest is ~16 KiB as Python dicts and ~4 KB as JSON. Every job's first pass renders its
whole gang at once (decide is fast), while creating pods through the API takes minutes for
thousands of them: with 200 jobs starting together, all their plans are alive at the same time,
and that high-water mark is what the operator's RSS keeps. Pending pods are serialized right
after ``decide()`` (on the decide thread) and decoded one at a time just before their request.

A gang's pods differ in a few names and ranks: the bytes are deflated with the plan's first pod
as zlib's preset dictionary (shared, one copy a plan), ~120 bytes a pod instead of ~3.5 KB.
(zlib's dictionary does exactly this; a hand-made diff against the first pod would not be smaller.)"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator, Mapping
from typing import Any


class Pending(Mapping[str, Any]):
    """A read-only stand-in for a rendered object: ``kind`` and ``metadata`` stay as they were
    (names, labels, owners: what the operator looks at), the rest is decoded on demand.
    ``zdict``: JSON of a similar object (zlib's preset dictionary), shared by a plan's pods."""

    __slots__ = ("_body", "_kind", "_metadata", "_zdict")

    def __init__(self, obj: Mapping[str, Any], zdict: bytes = b"") -> None:
        self._kind = obj["kind"]
        self._metadata = obj["metadata"]
        self._zdict = zdict
        deflate = zlib.compressobj(level=1, zdict=zdict)  # an empty dictionary: deflated alone
        self._body = deflate.compress(_json(obj)) + deflate.flush()

    def decode(self) -> dict[str, Any]:
        """The object as a fresh dict (what the API client serializes)."""
        inflate = zlib.decompressobj(zdict=self._zdict)
        return json.loads(inflate.decompress(self._body) + inflate.flush())

    def __getitem__(self, key: str) -> Any:
        if key == "kind":
            return self._kind
        if key == "metadata":
            return self._metadata
        return self.decode()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.decode())

    def __len__(self) -> int:
        return len(self.decode())

    def __repr__(self) -> str:
        return f"Pending({self._kind} {self._metadata.get('name')!r}, {len(self._body)} bytes)"


def as_sendable(arg: Any) -> Any:
    """What the API client gets: a ``Pending`` decoded now, anything else as it is."""
    return arg.decode() if isinstance(arg, Pending) else arg


def compact_pods(objs: list[Any]) -> list[Any]:
    """Pods become ``Pending`` (the first pod's JSON their shared dictionary); Services,
    ConfigMaps and backend objects (few, small) stay dicts."""
    first = next((o for o in objs if o["kind"] == "Pod" and not isinstance(o, Pending)), None)
    zdict = _json(first) if first is not None else b""
    return [Pending(o, zdict) if o["kind"] == "Pod" and not isinstance(o, Pending) else o for o in objs]


def _json(obj: Mapping[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()
