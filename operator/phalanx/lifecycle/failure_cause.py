"""Why a pod failed, in a line (pure): a category and the error's last line(s), from the trainer
container's exit code, its reason (OOMKilled) and its termination message, which is either the
runtime's error report (runtime/phalanx_runtime/failure_report.py) or, for any other program, the
last lines of its log (terminationMessagePolicy FallbackToLogsOnError).

The message is the pod's output, i.e. user code's. Only its last MAX_MESSAGE_CHARS are read; a
report is decoded as progress reports are (size and depth first), and only its known keys with
valid values are taken; every string is stripped of control and format characters (terminal
escapes, bidi overrides, NULs) and bounded before it reaches a condition, an Event or the status.
Every pattern here is linear in its input.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from phalanx.constants import (
    CONTAINER_NAME,
    REPORT_KEY_ERROR,
    REPORT_TYPE_INVALID_JOB,
    TERMINATION_MESSAGE_MAX_BYTES,
    ErrorKey,
    FailureCategory,
)
from phalanx.lifecycle.progress import decode

MAX_MESSAGE_CHARS = TERMINATION_MESSAGE_MAX_BYTES  # the kubelet keeps no more; of a longer one, the tail
MAX_TEXT = 300  # the cause's text in a condition message, an Event, status.lastFailure.message
MAX_LINES = 3  # of an exception's message in a log, or of a log's last lines
MAX_RANK = 2**31 - 1
# The runtime's error report: each string key and the longest value taken.
REPORT_STRINGS = {ErrorKey.TYPE: 256, ErrorKey.MESSAGE: 2048, ErrorKey.CAUSE: 1024, ErrorKey.SOURCE: 32}
MAX_FRAMES, MAX_FRAME_CHARS = 16, 512
SIGKILL_EXIT = 137

# Text → category, first match wins: the specific kinds before the catch-all of any exception.
RULES: tuple[tuple[FailureCategory, re.Pattern[str]], ...] = (
    # the runtime's pre-flight check (phalanx_runtime/preflight.py): the failing rank names its node;
    # its peers stop with the gang, as after any peer gone
    (FailureCategory.PREFLIGHT, re.compile(r"\bPreflightError\b")),
    (FailureCategory.COMMUNICATION, re.compile(r"\bPreflightPeerError\b")),
    (FailureCategory.OUT_OF_MEMORY, re.compile(
        r"(?i:out.of.memory)|OutOfMemoryError|\bMemoryError\b|std::bad_alloc|Cannot allocate memory|\[Errno 12\]"
        r"|CUBLAS_STATUS_ALLOC_FAILED|\bOOMKilled\b|\bSIGKILL\b|(?:^|\s)Killed(?:\s|$)")),
    (FailureCategory.PERMISSION_DENIED, re.compile(
        r"PermissionError|(?i:permission denied)|\[Errno 13\]|Operation not permitted|\[Errno 1\]\s|\bEACCES\b"
        r"|\bEPERM\b|Read-only file system|\[Errno 30\]")),
    (FailureCategory.COMMUNICATION, re.compile(
        r"\bNCCL\b|\bnccl[A-Z]\w*|\b[Gg]loo\b|Dist(?:Network|Store|Backend)Error|Rendezvous[A-Za-z]{0,40}(?:Error|Exception)"
        r"|Connection (?:reset|refused|closed)|Broken pipe|collective operation timeout|Socket Timeout"
        r"|\bECONNRESET\b|\bECONNREFUSED\b")),
    (FailureCategory.MISSING_FILE_OR_MODULE, re.compile(
        r"ModuleNotFoundError|ImportError|No module named|FileNotFoundError|No such file or directory|\[Errno 2\]"
        r"|executable file not found|command not found")),
)
# Categories that explain a gang's failure; the others (a peer gone, nothing known) may just
# follow from it: failures.first_failure names a pod with a root cause before those.
ROOT_CAUSES = frozenset({FailureCategory.PREFLIGHT, FailureCategory.OUT_OF_MEMORY, FailureCategory.PERMISSION_DENIED,
                         FailureCategory.MISSING_FILE_OR_MODULE, FailureCategory.INVALID_CONFIG,
                         FailureCategory.USER_CODE})

# A Python exception's last line ("pkg.mod.SomeError: message"), after any "[rank3]:" prefix.
_EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit|Failure|Timeout)(?::.*)?$")
_RANK_PREFIX = re.compile(r"^\[(?:rank|default)([0-9]{1,9})\]:\s?")
_WRAPPERS = ("ChildFailedError",)  # torchrun's own summary of a worker's failure: the worker's line says more
_ROOT_FIELD = re.compile(r"^(rank|exitcode|traceback)\s*:\s*(.*)$")  # torchrun's "Root Cause" block
_TORCHRUN_BOILERPLATE = "To enable traceback"
# What ends an exception's message in a log: a log record, a traceback, a rank's next output.
_NOT_MESSAGE = re.compile(r"^(?:[IWEF]\d{4}\s|\d{4}-\d\d-\d\d|\[|\s|Traceback|During handling|The above exception)")
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*\x07?|\x1b.?")
_SEPARATOR = re.compile(r"^[\W_]*$")


@dataclass(frozen=True)
class Cause:
    category: FailureCategory
    text: str = ""  # the error's last line(s), clean and bounded
    rank: int | None = None  # the global rank of the process that failed, when the pod named it

    def describe(self) -> str:
        where = f" in rank {self.rank}" if self.rank is not None else ""
        return f"{self.category}{where}: {self.text}" if self.text else f"{self.category}{where}"


# --- Untrusted text ----------------------------------------------------------------------------


def printable(text: str) -> str:
    """``text`` without terminal escapes or control and format characters (line breaks become
    newlines; other whitespace controls, spaces)."""
    text = _ANSI.sub("", text.replace("\r\n", "\n"))
    out = []
    for ch in text:
        if ch == "\n" or ch == "\r":
            out.append("\n")
        elif ch == "\t":
            out.append(" ")
        elif unicodedata.category(ch)[0] != "C":
            out.append(ch)
    return "".join(out)


def one_line(text: str, limit: int = MAX_TEXT) -> str:
    text = " ".join(printable(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in printable(text).split("\n") if line.strip()]


# --- The runtime's report ------------------------------------------------------------------------


def parse_report(message: str) -> dict[str, Any] | None:
    """The runtime's ``error`` object, its known keys with valid values only (strings cleaned),
    or None when ``message`` is no such report."""
    if not message.lstrip().startswith("{"):
        return None
    obj = decode(message)
    error = (obj or {}).get(REPORT_KEY_ERROR)
    if not isinstance(error, dict):
        return None
    out: dict[str, Any] = {}
    for key, limit in REPORT_STRINGS.items():
        value = error.get(key)
        if isinstance(value, str) and len(value) <= limit:
            out[key] = one_line(value, limit)
    rank = error.get(ErrorKey.RANK)
    if type(rank) is int and 0 <= rank <= MAX_RANK:
        out[ErrorKey.RANK] = rank
    frames = error.get(ErrorKey.FRAMES)
    if isinstance(frames, list) and len(frames) <= MAX_FRAMES and all(isinstance(frame, str) and len(frame) <= MAX_FRAME_CHARS for frame in frames):
        out[ErrorKey.FRAMES] = [one_line(frame, MAX_FRAME_CHARS) for frame in frames]
    return out if out.get(ErrorKey.TYPE) or out.get(ErrorKey.MESSAGE) else None


def report_text(report: dict[str, Any], limit: int = MAX_TEXT, where: bool = True) -> str:
    """``Type: message (from Cause: message) at file.py:12 in fn`` in ``limit`` characters: the
    message is shortened first, so that the type and the root cause stay; the innermost frame
    (``where``) only when it fits."""
    kind, message, root = (report.get(key, "") for key in (ErrorKey.TYPE, ErrorKey.MESSAGE, ErrorKey.CAUSE))
    tail = f" (from {one_line(root, max(limit // 3, 16))})" if root else ""
    message = one_line(message, max(limit - len(kind) - len(tail) - 2, 16))
    text = (f"{kind}: {message}" if kind and message else kind or message) + tail
    frames = report.get(ErrorKey.FRAMES)
    if where and frames and len(text) + len(frames[-1]) + 4 <= limit:
        text += f" at {frames[-1]}"
    return one_line(text, limit)


# --- A log's last lines ------------------------------------------------------------------------


def _unprefixed(line: str) -> tuple[str, int | None]:
    prefix = _RANK_PREFIX.match(line)
    return (line[prefix.end():], int(prefix.group(1))) if prefix else (line, None)


def _torchrun_root(lines: list[str]) -> dict[str, str]:
    """rank, exitcode and traceback of torchrun's "Root Cause (first observed failure)" block."""
    at = next((index for index in range(len(lines) - 1, -1, -1) if lines[index].lstrip().startswith("Root Cause")), None)
    fields: dict[str, str] = {}
    for line in lines[at + 1:] if at is not None else []:
        field = _ROOT_FIELD.match(line.strip())
        if field and field.group(1) not in fields:
            fields[field.group(1)] = field.group(2)
    return fields


def _exception_lines(lines: list[str]) -> tuple[list[str], int | None]:
    """The exception a log ends with (not torchrun's wrapper) with the rest of its message, and
    the rank whose output it is. Where ranks share a log, a peer's communication error printed
    after another rank's own error gives way to it. A message continues on the next lines only
    when its first line ends with ":" — stdout and stderr interleave in a container's log, so a
    line after the exception is as likely the script's own output."""
    plain = [_unprefixed(line) for line in lines]
    found: list[tuple[list[str], int | None]] = []
    for index, (line, rank) in enumerate(plain):
        if _EXCEPTION.match(line.strip()) and not any(wrapper in line for wrapper in _WRAPPERS):
            more = []
            continued = plain[index + 1:index + MAX_LINES] if line.rstrip().endswith(":") else []
            for following, whose in continued:
                if (whose != rank or _SEPARATOR.match(following) or _NOT_MESSAGE.match(following)
                        or _EXCEPTION.match(following)):
                    break
                more.append(following)
            found.append(([line.strip(), *more], rank))
    for text, rank in reversed(found):
        if _category(" ".join(text)) != FailureCategory.COMMUNICATION:
            return text, rank
    return found[-1] if found else ([], None)


def _first_word(text: str) -> str:
    return (text.split() or ["?"])[0][:32]


def log_cause(message: str) -> tuple[str, int | None, bool]:
    """(text, rank, whether it is an exception) from a log's last lines; the text unshortened
    (within MAX_MESSAGE_CHARS), to be classified whole."""
    lines = _lines(message)
    found, rank = _exception_lines(lines)
    root = _torchrun_root(lines)
    root_rank = _first_word(root.get("rank", ""))
    if rank is None and re.fullmatch(r"[0-9]{1,9}", root_rank):
        rank = int(root_rank)
    if found:
        return one_line(" ".join(found), MAX_MESSAGE_CHARS), rank, True
    if root:
        text = f"rank {root_rank} exited with code {_first_word(root.get('exitcode', ''))}"
        trace = root.get("traceback", "")
        if trace and _TORCHRUN_BOILERPLATE not in trace:
            text += f": {trace}"
        return one_line(text, MAX_MESSAGE_CHARS), rank, True
    last = [line for line in lines if not _SEPARATOR.match(line)][-MAX_LINES:]
    return one_line(" | ".join(last), MAX_MESSAGE_CHARS), rank, any(line.startswith("Traceback") for line in lines)


# --- The classification --------------------------------------------------------------------------


def _category(text: str) -> FailureCategory | None:
    return next((category for category, pattern in RULES if pattern.search(text)), None)


def classify(exit_code: int | None, reason: str | None, text: str, exception: bool) -> FailureCategory:
    """The category of a failed container: its reason, its text (RULES), its exit code, then
    whether it raised at all."""
    if re.match(REPORT_TYPE_INVALID_JOB + r"\b", text):
        return FailureCategory.INVALID_CONFIG
    if reason == "OOMKilled":
        return FailureCategory.OUT_OF_MEMORY
    category = _category(text)
    if category is not None:
        return category
    if exit_code == SIGKILL_EXIT:
        return FailureCategory.OUT_OF_MEMORY
    return FailureCategory.USER_CODE if exception else FailureCategory.UNKNOWN


def _signal_text(exit_code: int | None, reason: str | None, memory_limit: str | None) -> str:
    """What the exit alone says, for a container that left no message."""
    if reason == "OOMKilled":
        return "OOMKilled: the container exceeded its memory limit" + (f" {memory_limit}" if memory_limit else "")
    if exit_code == SIGKILL_EXIT:
        return "killed by SIGKILL (exit 137), most often the kernel's out-of-memory killer"
    return ""


def terminated(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The trainer container's terminated state (this run's, else the last)."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") != CONTAINER_NAME:
            continue
        term = (status.get("state") or {}).get("terminated") or (status.get("lastState") or {}).get("terminated")
        if term:
            return term
    return None


def _memory_limit(pod: dict[str, Any]) -> str | None:
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("name") == CONTAINER_NAME:
            limit = ((container.get("resources") or {}).get("limits") or {}).get("memory")
            return one_line(limit, 32) if isinstance(limit, str) else None
    return None


def cause_of(pod: dict[str, Any]) -> Cause:
    """Why the pod's trainer container failed."""
    term = terminated(pod) or {}
    code = term.get("exitCode") if type(term.get("exitCode")) is int else None
    reason = term.get("reason") if isinstance(term.get("reason"), str) else None
    message = term.get("message") if isinstance(term.get("message"), str) else ""
    message = message[-MAX_MESSAGE_CHARS:]
    report = parse_report(message)
    if report is not None:
        text, rank = report_text(report), report.get(ErrorKey.RANK)
        category = classify(code, reason, report_text(report, MAX_MESSAGE_CHARS, where=False), True)
    elif message.lstrip().startswith("{") and isinstance(obj := decode(message), dict) and "step" in obj:
        text, rank = "", None  # rank 0's final progress: no error in it
        category = classify(code, reason, "", False)
    else:
        text, rank, exception = log_cause(message)
        category = classify(code, reason, text, exception)
    return Cause(category, one_line(text) or _signal_text(code, reason, _memory_limit(pod)), rank)


def precedence(cause: Cause | None) -> int:
    """Which failed pod names the gang's failure: a pod the infrastructure ended (its peers' errors
    follow from it) first, then one with a root cause, then the rest (lower first)."""
    if cause is None or cause.category == FailureCategory.INFRASTRUCTURE:
        return 0
    return 1 if cause.category in ROOT_CAUSES else 2
