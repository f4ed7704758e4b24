"""The container's termination message (``$PHALANX_TERMINATION_LOG``, ``/dev/termination-log`` in
a pod; the kubelet keeps 4 KiB of it in the pod status): written under a lock, as every process of
the pod may write it, and only where the file exists (in a pod), so a run elsewhere writes
nothing. A failing process's error report there (``{"phase": "Failed", "error": {...}}``,
phalanx_runtime.failure_report) may be kept by the writer's rule: rank 0's final progress
(phalanx_common.progress) never replaces one.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from typing import Any

from phalanx_common.contract import REPORT_KEY_ERROR, ErrorKey

READ_BACK_BYTES = 8192  # of a report already there


def _existing(data: bytes) -> tuple[bool, Any]:
    """Whether ``data`` is a report already, and the rank it names."""
    try:
        found = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):
        return False, None
    if not isinstance(found, dict) or not isinstance(found.get(REPORT_KEY_ERROR), dict):
        return False, None
    return True, found[REPORT_KEY_ERROR].get(ErrorKey.RANK)


def write_message(data: bytes, path: str, keep: Callable[[bool, Any], bool]) -> bool:
    """Write ``data`` as the termination message at ``path`` (an existing file: in a pod) unless
    ``keep(is a report, its rank)`` says the message there stays; under a lock, as every process
    of the pod may write it. False when nothing was written; never raises."""
    if not os.path.exists(path):
        return False
    try:
        with open(path, "r+b") as f, _locked(f):
            if keep(*_existing(f.read(READ_BACK_BYTES))):
                return False
            f.seek(0)
            f.truncate()
            f.write(data)
            f.flush()  # inside the lock: the next writer must read these bytes, not an empty file
    except PermissionError:  # writable, not readable: no first-report rule, but a report
        return _overwrite(path, data)
    except OSError:
        return False
    return True


def _overwrite(path: str, data: bytes) -> bool:
    try:
        with open(path, "wb") as f:
            f.write(data)
    except OSError:
        return False
    return True


@contextlib.contextmanager
def _locked(f):
    try:
        import fcntl
    except ImportError:  # not POSIX: no other process of a pod to race with here
        yield
        return
    fcntl.flock(f.fileno(), fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(f.fileno(), fcntl.LOCK_UN)
