"""The captured library output under logs/ (logs/README.md says how each was made), as the
collector reads it: split into lines on \\n and \\r, each parsed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from phalanx_common.collect.lines import LineSplitter, Parsed

LOGS = Path(__file__).resolve().parent / "logs"


def lines(name: str) -> list[str]:
    splitter = LineSplitter()
    return splitter.feed((LOGS / name).read_bytes()) + splitter.flush()


def parsed(parse: Callable[[str], Parsed], *names: str) -> list[Parsed]:
    """What ``parse`` reads from each line of the samples, lines it reads nothing from left out."""
    return [found for name in names for line in lines(name) if (found := parse(line))]


def merged(records: list[Parsed]) -> Parsed:
    """The records applied in order, metrics merged: what the reporter ends with."""
    out: Parsed = {}
    for record in records:
        metrics = {**out.get("metrics", {}), **record.get("metrics", {})}
        out.update(record)
        if metrics:
            out["metrics"] = metrics
    return out
