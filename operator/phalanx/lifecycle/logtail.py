"""A hang's messages carry rank 0's last log lines (pure): a stuck collective, a deadlocked data
loader or a script waiting on input says so in its log, not in its exit (it has none yet).

The decision only names the pod (``Plan.log_tail``, set by lifecycle/restart.py); the job loop
reads its log through the API (``Kube.pod_log_tail``: the last LOG_TAIL_LINES lines, at most
LOG_TAIL_BYTES) and :func:`attach_log_tail` puts the cleaned lines into the plan's Events and
conditions. The log is the user's program's output: decoded leniently, escape sequences and
control characters removed, each line and the whole bounded (an Event message is cut at 1024
characters by kopf, so the failure's own words come first and the lines stay short).
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any

from phalanx.constants import LABEL_NODE_RANK
from phalanx.decision import LogTail, Plan

LOG_TAIL_LINES = 10
# The kubelet counts the tail's lines as the container runtime wrote them, then sends the FIRST
# limitBytes of those. A progress bar redraws itself on carriage returns, so its "line" is long,
# cut by the runtime into entries of at most RUNTIME_LOG_ENTRY_BYTES: the bound leaves room for
# every entry the tail counts, or the lines shown would be the oldest of them, not the last.
RUNTIME_LOG_ENTRY_BYTES = 16 * 1024  # containerd's and docker's split of a long line
LOG_TAIL_BYTES = LOG_TAIL_LINES * RUNTIME_LOG_ENTRY_BYTES
LOG_LINE_CHARS = 160
LOG_TAIL_CHARS = 720  # the lines together; with the failure's description, under an Event's 1024
HEADER = "rank 0's last log lines:"
_ESCAPE = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)?|[@-Z\\-_])")  # CSI, OSC, 2-byte


def rank0_log_tail(pods: list[dict[str, Any]], text: str) -> LogTail | None:
    """What to read for a hang of the gang ``pods``: node-rank 0's log (None without that pod)."""
    rank0 = next((p for p in pods if p["metadata"].get("labels", {}).get(LABEL_NODE_RANK) == "0"), None)
    return LogTail(rank0["metadata"]["name"], text) if rank0 is not None else None


def _clean(line: str) -> str:
    line = _ESCAPE.sub("", line)
    line = "".join(ch for ch in line if ch == "\t" or unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Co", "Cn"))
    line = line.replace("\t", " ").strip()
    return line if len(line) <= LOG_LINE_CHARS else line[:LOG_LINE_CHARS - 1] + "…"


def log_lines(raw: bytes | str | None) -> list[str]:
    """The last non-empty lines of ``raw`` (a log's tail), each cleaned and cut to LOG_LINE_CHARS,
    as many of the last LOG_TAIL_LINES as fit LOG_TAIL_CHARS together. A carriage return ends a
    line too: a progress bar redraws itself on one."""
    if not raw:
        return []
    text = raw.decode("utf-8", errors="replace") if isinstance(raw, bytes | bytearray) else raw
    out: list[str] = []
    used = 0
    for part in reversed(re.split(r"\r\n|\r|\n", text)):  # cleaned from the end, only what is kept
        line = _clean(part)
        if not line:
            continue
        used += len(line) + 1
        if used > LOG_TAIL_CHARS or len(out) == LOG_TAIL_LINES:
            break
        out.append(line)
    return out[::-1]


def attach_log_tail(plan: Plan, lines: list[str]) -> None:
    """``lines`` after ``plan.log_tail.text`` in each Event and condition message of the plan that
    carries it (the Restarting or Failed ones); nothing without lines."""
    tail = plan.log_tail
    if tail is None or not lines:
        return
    suffix = "\n" + "\n".join([HEADER, *(f"  {line}" for line in lines)])
    plan.events = [(kind, reason, message + suffix if tail.text in message else message)
                   for kind, reason, message in plan.events]
    for condition in (plan.status or {}).get("conditions") or []:
        if tail.text in (condition.get("message") or ""):
            condition["message"] += suffix
