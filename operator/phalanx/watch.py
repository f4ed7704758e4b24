"""`phalanx watch`: follow one TrainingJob's status until it finishes, a line per change."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from phalanx import constants as C

FINISHED = {"Succeeded": 0, "Failed": 1}


def progress_line(status: dict[str, Any]) -> str:
    """One human line from a TrainingJob status: phase, nodes, step, loss, tokens/s, checkpoint."""
    parts = [f"{status.get('phase') or 'Pending':<10}", f"nodes {status.get('nodes', '0/0')}"]
    if status.get("step") is not None:
        total = status.get("totalSteps")
        parts.append(f"step {status['step']}" + (f"/{total}" if total else ""))
    if status.get("loss") is not None:
        parts.append(f"loss {status['loss']:.4f}")
    if status.get("tokensPerSecond") is not None:
        parts.append(f"{status['tokensPerSecond']:.0f} tok/s")
    if status.get("restarts"):
        parts.append(f"restarts {status['restarts']}")
    ckpt = status.get("lastCheckpoint") or {}
    if ckpt.get("step") is not None:
        parts.append(f"checkpoint step-{ckpt['step']}")
    reason = _latest_reason(status)
    if reason:
        parts.append(f"({reason})")
    return "  ".join(parts)


def _latest_reason(status: dict[str, Any]) -> str | None:
    conditions = sorted(status.get("conditions") or [], key=lambda c: c.get("lastTransitionTime") or "")
    if not conditions:
        return None
    last = conditions[-1]
    return f"{last.get('type')}={last.get('status')}: {last.get('reason')}"


def watch(api: Any, name: str, namespace: str, timeout: float, out: TextIO = sys.stdout, every: float = 2.0) -> int:
    """Print a line whenever the status line changes; exit code 0 Succeeded, 1 Failed, 3 timeout."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        obj = api.get_namespaced_custom_object(C.GROUP, C.VERSION, namespace, C.PLURAL, name)
        status = obj.get("status") or {}
        line = progress_line(status)
        if line != last:
            print(f"{time.strftime('%H:%M:%S')}  {name}  {line}", file=out, flush=True)
            last = line
        if status.get("phase") in FINISHED:
            if status.get("message"):
                print(f"{name}: {status['message']}", file=out)
            return FINISHED[status["phase"]]
        time.sleep(every)
    print(f"{name}: not finished after {timeout:.0f}s", file=out)
    return 3
