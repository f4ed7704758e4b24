"""What a failing runtime process leaves for the operator: a short report of its error as the
container's termination message (``$PHALANX_TERMINATION_LOG``, ``/dev/termination-log`` in a pod;
the kubelet keeps 4 KiB of it in the pod status), which the operator classifies and shows in the
job's Failed or Restarting condition (``phalanx/lifecycle/failure_cause.py`` parses it):

    {"phase": "Failed", "error": {"type": "PermissionError", "message": "[Errno 13] ...",
     "cause": "...", "frames": ["checkpoint.py:88 in save", ...], "rank": 3, "source": "worker"}}

Every process of the pod shares the file, so the first report stays (under a lock): the process
that failed first names the cause, not the peers that failed because it was gone. One exception:
the launcher's report of a worker killed by a signal (the OOM killer's SIGKILL) replaces a peer's
report, since that worker could write none and its death is what the peers report.

Nothing is written outside a pod (no such file), as for rank 0's final progress
(phalanx_common.termination writes both).
"""

from __future__ import annotations

import json
import os
import signal
import traceback
from collections.abc import Iterable, Mapping
from typing import Any

from phalanx_common.contract import (
    DEFAULT_TERMINATION_LOG,
    ENV_TERMINATION_LOG,
    REPORT_KEY_ERROR,
    REPORT_PHASE_FAILED,
    REPORT_TYPE_INVALID_JOB,
    REPORT_TYPE_WORKER_FAILED,
    ErrorKey,
    ErrorSource,
)
from phalanx_common.termination import write_message

MAX_REPORT_BYTES = 3072  # well under the kubelet's 4096
MAX_FRAMES = 4
MAX_MESSAGE_CHARS = 1000
MAX_CAUSE_CHARS = 300
MAX_FRAME_CHARS = 160
MAX_TYPE_CHARS = 120


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _type_name(exc: BaseException) -> str:
    cls = type(exc)
    name = cls.__qualname__ if cls.__module__ in ("builtins", "__main__") else f"{cls.__module__}.{cls.__qualname__}"
    return _clip(name, MAX_TYPE_CHARS)


def _frame(f: traceback.FrameSummary) -> str:
    path = "/".join(f.filename.replace("\\", "/").split("/")[-2:])  # enough to find it, a path costs bytes
    return _clip(f"{path}:{f.lineno} in {f.name}", MAX_FRAME_CHARS)


def _root_cause(exc: BaseException) -> BaseException | None:
    """The innermost exception ``exc`` was raised from or while handling (a PermissionError under
    the RuntimeError a library wrapped it in), if any."""
    seen, inner = {id(exc)}, _inner(exc)
    root = None
    while inner is not None and id(inner) not in seen:
        seen.add(id(inner))
        root, inner = inner, _inner(inner)
    return root


def _inner(exc: BaseException) -> BaseException | None:
    """What ``exc`` was raised from, or while handling unless ``raise ... from None`` hid it."""
    return exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)


def summarize(exc: BaseException, *, rank: int | None = None, source: str = ErrorSource.WORKER) -> dict[str, Any]:
    """The ``error`` object for ``exc``: type, message, root cause, the innermost frames."""
    error: dict[str, Any] = {ErrorKey.TYPE: _type_name(exc), ErrorKey.MESSAGE: _clip(str(exc), MAX_MESSAGE_CHARS)}
    root = _root_cause(exc)
    if root is not None:
        error[ErrorKey.CAUSE] = _clip(f"{_type_name(root)}: {root}", MAX_CAUSE_CHARS)
    frames = traceback.extract_tb(exc.__traceback__)[-MAX_FRAMES:]
    if frames:
        error[ErrorKey.FRAMES] = [_frame(f) for f in frames]
    if rank is not None:
        error[ErrorKey.RANK] = rank
    error[ErrorKey.SOURCE] = str(source)
    return error


def signal_name(exitcode: int) -> str | None:
    """``-9`` (a process killed by SIGKILL, as multiprocessing and torchrun report it) → SIGKILL."""
    if exitcode >= 0:
        return None
    try:
        return signal.Signals(-exitcode).name
    except ValueError:
        return f"signal {-exitcode}"


def worker_death(rank: int, local_rank: int | None, exitcode: int) -> dict[str, Any]:
    """The launcher's report of a worker process that ended with ``exitcode``."""
    sig = signal_name(exitcode)
    how = f"was killed by {sig}" if sig else f"exited with code {exitcode}"
    if sig == "SIGKILL":
        how += " (most often the kernel's out-of-memory killer)"
    where = f"worker rank {rank}" + (f" (local rank {local_rank})" if local_rank is not None else "")
    return {ErrorKey.TYPE: REPORT_TYPE_WORKER_FAILED, ErrorKey.MESSAGE: f"{where} {how}", ErrorKey.RANK: rank,
            ErrorKey.SOURCE: str(ErrorSource.LAUNCHER)}


# Signals torchrun's agent sends the other workers once one has failed: their deaths follow.
STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT})


def _precedence(exitcode: int) -> int:
    """A worker killed by a signal of its own (the OOM killer's SIGKILL, a SIGSEGV) first, then one
    that exited with a code, then one the agent stopped after another failed."""
    if exitcode >= 0:
        return 1
    return 2 if -exitcode in STOP_SIGNALS else 0


def child_failure(failures: Mapping[int, Any]) -> tuple[dict[str, Any], bool] | None:
    """From torchrun's ``ChildFailedError.failures`` (global rank → ProcessFailure): the report of
    the worker to name, and whether it may replace a report already written. A worker killed by a
    signal of its own wrote none and is named first (its peers' errors follow from its death);
    else the earliest failure, whose own report is normally there already (then this one is
    dropped)."""
    if not failures:
        return None
    rank, failure = min(failures.items(), key=lambda rf: (_precedence(int(rf[1].exitcode)),
                                                          getattr(rf[1], "timestamp", 0), rf[0]))
    code = int(failure.exitcode)
    return worker_death(rank, getattr(failure, "local_rank", None), code), _precedence(code) == 0


def invalid_job(lines: Iterable[str]) -> dict[str, Any]:
    """The launcher refused its config or layout before starting any worker."""
    return {ErrorKey.TYPE: REPORT_TYPE_INVALID_JOB, ErrorKey.MESSAGE: _clip("; ".join(lines), MAX_MESSAGE_CHARS),
            ErrorKey.SOURCE: str(ErrorSource.LAUNCHER)}


def encode(error: Mapping[str, Any]) -> bytes:
    """The report as at most MAX_REPORT_BYTES of JSON (ASCII): frames go first, then the message
    is halved, until it fits."""
    error = {str(k): v for k, v in error.items()}
    while True:
        data = json.dumps({"phase": REPORT_PHASE_FAILED, REPORT_KEY_ERROR: error}, ensure_ascii=True).encode()
        if len(data) <= MAX_REPORT_BYTES:
            return data
        frames = error.get(ErrorKey.FRAMES)
        if frames:
            error[ErrorKey.FRAMES] = frames[1:]
        elif len(error.get(ErrorKey.MESSAGE, "")) > 16:
            error[ErrorKey.MESSAGE] = _clip(error[ErrorKey.MESSAGE], len(error[ErrorKey.MESSAGE]) // 2)
        elif len(error.get(ErrorKey.CAUSE, "")) > 16:
            error[ErrorKey.CAUSE] = _clip(error[ErrorKey.CAUSE], len(error[ErrorKey.CAUSE]) // 2)
        else:
            error = {ErrorKey.TYPE: _clip(str(error.get(ErrorKey.TYPE, "")), 64)}


def termination_log() -> str:
    return os.environ.get(ENV_TERMINATION_LOG, DEFAULT_TERMINATION_LOG)


def write_report(error: Mapping[str, Any], path: str | None = None, *, replace: bool = False) -> bool:
    """Write ``error`` as the termination message unless a report is there already (``replace``:
    unless it is this same rank's). False when nothing was written; never raises."""
    rank = error.get(ErrorKey.RANK)
    return write_message(encode(error), path or termination_log(),
                         keep=lambda there, by: there and not (replace and by != rank))


def report_exception(exc: BaseException, *, rank: int | None = None, source: str = ErrorSource.WORKER,
                     path: str | None = None) -> bool:
    """:func:`summarize` ``exc`` into the termination message. Only errors: a SystemExit (a chosen
    exit code: preemption is 143) or a KeyboardInterrupt is no failure to explain. Never raises."""
    if not isinstance(exc, Exception):
        return False
    try:
        return write_report(summarize(exc, rank=rank, source=source), path)
    except Exception:  # noqa: BLE001 - the report must never hide the error it reports
        return False
