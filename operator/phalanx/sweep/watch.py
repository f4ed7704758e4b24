"""`phalanx watch tsw/NAME`: follow a TrainingSweep until it finishes — a summary line whenever it
changes and a line per trial whose phase, step or value changed."""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from phalanx import constants
from phalanx.sweep.local import trial_line

FINISHED = {"Succeeded": 0, "Failed": 1}


def sweep_line(status: dict[str, Any]) -> str:
    parts = [f"{status.get('phase') or 'Pending':<10}", f"done {status.get('progress', '0/0')}",
             f"running {status.get('runningTrials', 0)}"]
    if status.get("stoppedTrials"):
        parts.append(f"stopped {status['stoppedTrials']}")
    if status.get("failedTrials"):
        parts.append(f"failed {status['failedTrials']}")
    best = status.get("bestTrial")
    if best:
        parts.append(f"best {best['name']} {best['value']:.4f}")
    return "  ".join(parts)


def watch_sweep(api: Any, name: str, namespace: str, timeout: float, out: TextIO = sys.stdout, every: float = 2.0) -> int:
    """Exit code 0 Succeeded, 1 Failed, 3 timeout."""
    deadline = time.monotonic() + timeout
    last_line, last_trials = None, {}
    while time.monotonic() < deadline:
        obj = api.get_namespaced_custom_object(constants.GROUP, constants.VERSION, namespace, constants.SWEEP_PLURAL, name)
        status = obj.get("status") or {}
        stamp = time.strftime("%H:%M:%S")
        line = sweep_line(status)
        if line != last_line:
            print(f"{stamp}  {name}  {line}", file=out, flush=True)
            last_line = line
        for t in status.get("trials", []):
            text = trial_line(t)
            if t.get("phase") != "Waiting" and last_trials.get(t["name"]) != text:
                print(f"{stamp}    {text}", file=out, flush=True)
                last_trials[t["name"]] = text
        if status.get("phase") in FINISHED:
            if status.get("message"):
                print(f"{name}: {status['message']}", file=out, flush=True)
            return FINISHED[status["phase"]]
        time.sleep(every)
    print(f"{name}: not finished after {timeout:.0f}s", file=out)
    return 3
