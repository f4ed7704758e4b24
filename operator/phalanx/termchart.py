"""Curves in a terminal: a one-line sparkline and a small line chart, plain text (no curses)."""

from __future__ import annotations

import math
from collections.abc import Sequence

BLOCKS = "▁▂▃▄▅▆▇█"
NOT_FINITE = "×"
DOT = "•"


def _finite(values: Sequence[float]) -> list[float]:
    return [v for v in values if math.isfinite(v)]


def _level(v: float, lo: float, hi: float, levels: int) -> int:
    """0 … levels-1; a flat series sits in the middle."""
    if hi <= lo:
        return levels // 2
    return max(0, min(levels - 1, int((v - lo) / (hi - lo) * levels)))


def sparkline(values: Sequence[float], width: int = 24) -> str:
    """The last ``width`` values as block characters, low to high; NaN/Inf as ×."""
    tail = list(values)[-width:]
    finite = _finite(tail)
    if not finite:
        return NOT_FINITE * len(tail)
    lo, hi = min(finite), max(finite)
    return "".join(BLOCKS[_level(v, lo, hi, len(BLOCKS))] if math.isfinite(v) else NOT_FINITE for v in tail)


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def chart(xs: Sequence[float], ys: Sequence[float], *, title: str, width: int = 60, height: int = 8) -> list[str]:
    """A dot chart of y over x: ``height`` rows of ``width`` columns (each column the mean of the
    points that fall in it), the y range on the left, the x range below. [] without two finite points."""
    points = [(x, y) for x, y in zip(xs, ys, strict=True) if math.isfinite(y)]
    if len(points) < 2:
        return []
    x0, x1 = min(x for x, _ in points), max(x for x, _ in points)  # a resumed gang repeats steps
    lo, hi = min(y for _, y in points), max(y for _, y in points)
    columns: list[list[float]] = [[] for _ in range(width)]
    for x, y in points:
        columns[_level(x, x0, x1, width) if x1 > x0 else 0].append(y)
    grid = [[" "] * width for _ in range(height)]
    for col, ys_in in enumerate(columns):
        if ys_in:
            grid[height - 1 - _level(sum(ys_in) / len(ys_in), lo, hi, height)][col] = DOT
    label = max(len(_fmt(lo)), len(_fmt(hi)))
    rows = [f"{title}"]
    for i, row in enumerate(grid):
        tick = _fmt(hi) if i == 0 else _fmt(lo) if i == height - 1 else ""
        rows.append(f"{tick:>{label}} │{''.join(row)}")
    axis_left, axis_right = f"step {_fmt(x0)}", _fmt(x1)
    rows.append(" " * label + " └" + "─" * width)
    rows.append(" " * (label + 2) + axis_left + " " * max(1, width - len(axis_left) - len(axis_right)) + axis_right)
    return rows
