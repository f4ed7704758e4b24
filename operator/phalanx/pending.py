"""Rendered objects waiting for the API server, kept as their JSON bytes.

A pod manifest is ~16 KiB as Python dicts and ~4 KB as JSON. Every job's first pass renders its
whole gang at once (decide is fast), while creating pods through the API takes minutes for
thousands of them: with 200 jobs starting together, all their plans are alive at the same time,
and that high-water mark is what the operator's RSS keeps. Pending pods are serialized right
after ``decide()`` (on the decide thread) and decoded one at a time just before their request."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any


class Pending(Mapping[str, Any]):
    """A read-only stand-in for a rendered object: ``kind`` and ``metadata`` stay as they were
    (names, labels, owners: what the operator looks at), the rest is decoded on demand."""

    __slots__ = ("_body", "_kind", "_metadata")

    def __init__(self, obj: Mapping[str, Any]) -> None:
        self._kind = obj["kind"]
        self._metadata = obj["metadata"]
        self._body = json.dumps(obj, separators=(",", ":")).encode()

    def decode(self) -> dict[str, Any]:
        """The object as a fresh dict (what the API client serializes)."""
        return json.loads(self._body)

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
    """Pods become ``Pending``; Services, ConfigMaps and backend objects (few, small) stay dicts."""
    return [Pending(o) if o["kind"] == "Pod" and not isinstance(o, Pending) else o for o in objs]
