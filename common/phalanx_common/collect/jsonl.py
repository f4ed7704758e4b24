"""A JSON-lines metrics file the script appends to (``$PHALANX_PROGRESS_FILE``): each line an
object whose ``step``, ``loss``, ``total_steps`` and ``epoch`` go into the record and whose other
numeric values are metrics. A torn or foreign line is skipped. :class:`Tail` reads what was
appended since its last read (from the start again when the file was replaced or truncated)."""

from __future__ import annotations

import json
import os

from phalanx_common.collect.lines import MAX_LINE_BYTES, LineSplitter, Parsed, partial

RECORD_KEYS = ("step", "total_steps", "loss", "epoch")
MAX_READ_BYTES = 1 << 20  # per poll; the rest is read at the next


def parse(line: str) -> Parsed:
    if len(line) > MAX_LINE_BYTES:
        return {}
    try:
        found = json.loads(line)
    except (ValueError, RecursionError):
        return {}
    if not isinstance(found, dict):
        return {}
    numbers = {name: float(value) for name, value in found.items()
               if isinstance(name, str) and type(value) in (int, float)}
    metrics = {name: value for name, value in numbers.items() if name not in RECORD_KEYS}
    return partial(step=_count(found.get("step")), total_steps=_count(found.get("total_steps")) or None,
                   loss=numbers.get("loss"), epoch=numbers.get("epoch"), metrics=metrics)


def _count(value) -> int | None:
    return value if type(value) is int and 0 <= value <= 2**53 else None


class Tail:
    """The lines appended to ``path`` since the last :meth:`read`."""

    def __init__(self, path: str):
        self.path = path
        self._offset = 0
        self._inode: int | None = None
        self._lines = LineSplitter()

    def read(self) -> list[str]:
        try:
            with open(self.path, "rb") as f:
                stat = os.fstat(f.fileno())
                if stat.st_ino != self._inode or stat.st_size < self._offset:
                    self._inode, self._offset, self._lines = stat.st_ino, 0, LineSplitter()
                f.seek(self._offset)
                data = f.read(MAX_READ_BYTES)
        except OSError:
            return []
        self._offset += len(data)
        return self._lines.feed(data)
