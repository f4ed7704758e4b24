"""What every log parser shares: output split into lines on ``\\n`` and ``\\r`` (a tqdm bar redraws
itself after ``\\r``), each line bounded, ANSI colour codes stripped, numbers read as a logger
prints them (``16,384``, ``1.08%``, ``nan``), and the partial record a parser returns."""

from __future__ import annotations

import re
from typing import Any

from phalanx_common.contract import ProgressKey

MAX_LINE_BYTES = 4096  # the rest of a longer line is dropped, up to its end
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
CURSOR_UP = "\x1b[A"  # tqdm draws a nested bar (an evaluation's) a line down and moves back up
# tqdm's bar: "50%|█████     | 3/6 [00:00<00:00, 149.30it/s]" → done, total
TQDM_COUNT = re.compile(r"\|\s*(\d{1,15})/(\d{1,15}) \[")

NUMBER = r"[-+]?(?:\d[\d,]*(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+|nan|inf)%?"
KEY_VALUE: dict[str, re.Pattern] = {}  # separator → compiled pattern
Parsed = dict[str, Any]  # ProgressKey → value: step, totalSteps, loss, epoch, metrics (a partial record)


class LineSplitter:
    """Bytes in, complete lines out (decoded, terminators dropped): ``\\n``, ``\\r`` and ``\\r\\n``
    end a line; a line longer than MAX_LINE_BYTES keeps its first MAX_LINE_BYTES."""

    def __init__(self, limit: int = MAX_LINE_BYTES):
        self.limit = limit
        self._buffer = bytearray()
        self._overflow = False  # the current line is past the limit: drop up to its end

    def feed(self, data: bytes) -> list[str]:
        lines = []
        start = 0
        for match in re.finditer(rb"[\r\n]", data):
            self._take(data[start:match.start()])
            lines.append(self._buffer.decode("utf-8", "replace"))
            self._buffer.clear()
            self._overflow = False
            start = match.end()
        self._take(data[start:])
        return [line for line in lines if line]

    def flush(self) -> list[str]:
        line = self._buffer.decode("utf-8", "replace")
        self._buffer.clear()
        self._overflow = False
        return [line] if line else []

    def _take(self, chunk: bytes) -> None:
        if self._overflow or not chunk:
            return
        room = self.limit - len(self._buffer)
        if len(chunk) > room:
            chunk, self._overflow = chunk[:room], True
        self._buffer += chunk


def strip_ansi(line: str) -> str:
    return ANSI.sub("", line)


def number(text: str | None) -> float | None:
    """``"16,384"`` → 16384.0, ``"1.08%"`` → 1.08, ``"nan"`` → nan; None when no number."""
    if text is None:
        return None
    text = text.strip().replace(",", "").removesuffix("%")
    if not text or len(text) > 40:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def count(text: str | None) -> int | None:
    """A non-negative integer count; None for anything else."""
    return int(text) if text is not None and text.isdigit() and len(text) <= 15 else None


def tqdm_count(line: str) -> tuple[int, int] | None:
    """(done, total) of a top-level tqdm bar; None for a nested bar (it ends by moving the cursor
    back up) or another line."""
    if CURSOR_UP in line:
        return None
    found = TQDM_COUNT.search(line)
    return (int(found.group(1)), int(found.group(2))) if found else None


def key_values(text: str, separator: str) -> dict[str, float]:
    """``"v_num=1, train_loss=0.472"`` (separator ``=``) or ``"v_num: 0.000  train_loss: 0.328"``
    (``:``) → {name: number}; whatever is not a name and a number is skipped."""
    pattern = KEY_VALUE.get(separator) or KEY_VALUE.setdefault(separator, re.compile(
        rf"(?<![\w./-])([A-Za-z_][\w./-]{{0,63}}){re.escape(separator)}\s*({NUMBER})(?![\w.])"))
    return {name: value for name, text in pattern.findall(text) if (value := number(text)) is not None}


def partial(**values: Any) -> Parsed:
    """A partial record of the values given (None left out; ``metrics`` only when not empty)."""
    keys = {"step": ProgressKey.STEP, "total_steps": ProgressKey.TOTAL_STEPS, "loss": ProgressKey.LOSS,
            "epoch": ProgressKey.EPOCH, "metrics": ProgressKey.METRICS}
    return {str(keys[name]): value for name, value in values.items() if value is not None and value != {}}
