"""`phalanx local SWEEP.yaml`: a sweep as local processes, for trying it out before submitting.

The same decisions as the operator's (sweep/decide.py) drive ``phalanx local TRIAL.yaml`` runs
(the TrainingJob runner, one process tree per trial, at most ``maxParallel`` at once): their
progress is read from each trial's metrics log (``<trial dir>/metrics.jsonl``, written by rank 0
every step), an early-stopped trial gets SIGTERM (it checkpoints and exits, as a suspended
trial's pods do), and a trial's final loss and tokens/s come from its ``--json`` summary.
Checkpoints and logs are under ``--checkpoint-dir`` (a rerun resumes each trial) or a
temporary directory.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import yaml

from phalanx import constants
from phalanx.api.config import OperatorConfig
from phalanx.sweep.check import check_sweep
from phalanx.sweep.decide import decide

LOCAL_UID = "local"


class LocalTrial:
    """One trial's `phalanx local` process and the TrainingJob it stands for."""

    def __init__(self, manifest: dict[str, Any], work: Path):
        self.name = manifest["metadata"]["name"]
        self.manifest = manifest
        self.dir = work / self.name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log = work / f"{self.name}.log"
        self.job: dict[str, Any] = {
            "metadata": {"name": self.name, "ownerReferences": [{"uid": LOCAL_UID, "controller": True}]},
            "spec": {"suspend": False}, "status": {"phase": "Pending"},
        }
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        path = self.dir.parent / f"{self.name}.yaml"
        path.write_text(yaml.safe_dump(self.manifest, sort_keys=False))
        argv = [sys.executable, "-m", "phalanx", "local", str(path), "--json", f"--checkpoint-dir={self.dir}"]
        with self.log.open("a") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.job["status"] = {"phase": "Running"}

    def stop(self) -> None:
        """As a suspended trial's pods: SIGTERM, a checkpoint at the next step boundary, exit."""
        self.job["spec"]["suspend"] = True
        if self.proc is not None and self.proc.poll() is None:
            _signal(self.proc, signal.SIGTERM)

    def poll(self) -> None:
        """The TrainingJob status this run would have: progress from the metrics log, the end
        from the exit code and the --json summary."""
        if self.proc is None:
            return
        status = self.job["status"]
        last = _last_record(self.dir / constants.METRICS_LOG_FILE)
        if last:
            status.update({k: v for k, v in (("step", last.get("step")), ("loss", last.get("loss")),
                                              ("tokensPerSecond", last.get("tokens_per_s"))) if v is not None})
        code = self.proc.poll()
        if code is None:
            return
        if code == 0:
            summary = _summary(self.log)
            status.update({"phase": "Succeeded", "step": summary.get("steps", status.get("step")),
                           "loss": summary.get("final_loss", status.get("loss")),
                           "tokensPerSecond": summary.get("tokens_per_s", status.get("tokensPerSecond"))})
        elif self.job["spec"]["suspend"]:
            status["phase"] = "Suspended"
        else:
            status.update({"phase": "Failed", "message": f"exited with code {code}; log: {self.log}"})
        self.proc = None


def _last_record(path: Path) -> dict[str, Any] | None:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            rec = json.loads(line)
        except ValueError:
            continue  # a torn last line
        if isinstance(rec, dict) and isinstance(rec.get("step"), int):
            return rec
    return None


def _summary(log: Path) -> dict[str, Any]:
    for line in reversed(log.read_text().splitlines()):
        try:
            out = json.loads(line)
        except ValueError:
            continue
        if isinstance(out, dict):
            return out
    return {}


def trial_line(t: dict[str, Any]) -> str:
    values = " ".join(f"{k}={v}" for k, v in t.get("parameters", {}).items())
    step = "-" if t.get("step") is None else str(t["step"])
    value = "-" if t.get("value") is None else f"{t['value']:.4f}"
    return f"{t['name']:<24} {t.get('phase', ''):<10} step {step:>6}  value {value:>9}  {values}"


def run_local_sweep(obj: dict[str, Any], *, config: OperatorConfig | None = None, checkpoint_dir: str | None = None,
                    timeout: float | None = None, json_out: bool = False, poll_seconds: float = 1.0,
                    out: TextIO | None = None) -> int:
    """Run the sweep to the end; 0 when it Succeeded, 1 when it failed or is invalid, 124 on timeout."""
    out = out or (sys.stderr if json_out else sys.stdout)
    obj = {**obj, "metadata": {"namespace": "default", **(obj.get("metadata") or {}), "uid": LOCAL_UID, "generation": 1}}
    expansion = check_sweep(obj, config)
    if not expansion.valid:
        for problem in expansion.problems:
            print(f"error: TrainingSweep {obj['metadata'].get('name')}: {problem}", file=sys.stderr)
        return 1
    work = Path(checkpoint_dir) if checkpoint_dir else Path(tempfile.mkdtemp(prefix="phalanx-sweep-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"sweep {obj['metadata']['name']}: {len(expansion.trials)} trials, at most "
          f"{expansion.sweep.spec.max_parallel} at once; logs and checkpoints in {work}", file=out, flush=True)
    trials: dict[str, LocalTrial] = {}
    deadline = None if timeout is None else time.monotonic() + timeout
    code = None
    previous = signal.signal(signal.SIGTERM, _interrupt)  # SIGTERM stops the trials as Ctrl-C does
    try:
        while code is None:
            for trial in trials.values():
                trial.poll()
            plan = decide(obj, {n: t.job for n, t in trials.items()}, datetime.now(UTC), config, expansion=expansion)
            for manifest in plan.create:
                trial = trials.setdefault(manifest["metadata"]["name"], LocalTrial(manifest, work))
                trial.start()
            for name in plan.suspend:
                trials[name].stop()
            for _, reason, message in plan.events:
                print(f"{reason}: {message}", file=out, flush=True)
            if plan.status is not None:
                obj = {**obj, "status": plan.status}
            phase = (obj.get("status") or {}).get("phase")
            if phase in ("Succeeded", "Failed"):
                code = 0 if phase == "Succeeded" else 1
            elif deadline is not None and time.monotonic() > deadline:
                print(f"timed out after {timeout}s; stopping the trials", file=out, flush=True)
                code = 124
            elif not plan.create:
                time.sleep(poll_seconds)
    except KeyboardInterrupt:
        code = 130
    finally:
        _stop_all(trials)
        signal.signal(signal.SIGTERM, previous)
    status = obj.get("status") or {}
    for t in status.get("trials", []):
        print(trial_line(t), file=out)
    best = status.get("bestTrial")
    if best:
        print(f"best: {best['name']} value {best['value']:.6g} {json.dumps(best.get('parameters', {}))}", file=out, flush=True)
    if json_out:
        print(json.dumps({"phase": status.get("phase"), "bestTrial": best,
                          "trials": [{k: t.get(k) for k in ("name", "parameters", "phase", "step", "value", "reason")}
                                     for t in status.get("trials", [])]}), flush=True)
    return code


def _interrupt(signum, frame):  # noqa: ARG001
    raise KeyboardInterrupt


def _stop_all(trials: dict[str, LocalTrial], grace: float = constants.LOCAL_STOP_GRACE_SECONDS + 2 * constants.STOP_ESCALATION_SECONDS) -> None:
    running = [t for t in trials.values() if t.proc is not None and t.proc.poll() is None]
    for t in running:
        _signal(t.proc, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for t in running:
        try:
            t.proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal(t.proc, signal.SIGKILL)


def _signal(proc: subprocess.Popen, sig: int) -> None:
    """The trial's process group (its `phalanx local` and every node under it)."""
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
