"""`phalanx local SWEEP.yaml`: a sweep as local processes, for trying it out before submitting.

The same decisions as the operator's (sweep/decide.py) drive ``phalanx local TRIAL.yaml`` runs
(the TrainingJob runner, one process tree per trial, at most ``maxParallel`` at once): their
progress is read from each trial's metrics log (``<trial dir>/metrics.jsonl``, which rank 0 of
the built-in runtime, or a command job's script through the reporting client, appends to: step,
loss, tokens/s and every reported metric, e.g. eval_loss), an early-stopped trial gets SIGTERM (it
checkpoints and exits, as a suspended trial's pods do), and a trial's final step, loss, tokens/s
and metrics come from its ``--json`` summary.
Checkpoints and logs are under ``--checkpoint-dir`` (a rerun resumes each trial) or a
temporary directory.
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
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
# A metrics.jsonl record's own keys (the reporter writes the epoch as one, not as a metric); every
# other finite number in it is a reported metric.
RECORD_KEYS = frozenset({"step", "loss", "tokens_per_s", "time", "epoch"})
MAX_READ_BYTES = 1 << 20  # of the metrics log per poll; the rest at the next polls


def _number(value: Any) -> bool:
    return type(value) in (int, float)


def _add_metrics(metrics: dict[str, float], record: dict[str, Any]) -> None:
    """Each reported metric of ``record`` into ``metrics``: finite numbers under names the operator
    would accept, at most MAX_REPORTED_METRICS names."""
    for name, value in record.items():
        if (name in RECORD_KEYS or not _number(value) or not math.isfinite(value)
                or not re.fullmatch(constants.METRIC_NAME_PATTERN, name)):
            continue
        if name in metrics or len(metrics) < constants.MAX_REPORTED_METRICS:
            metrics[name] = float(value)


def apply_record(progress: dict[str, Any], record: Any) -> None:
    """One metrics.jsonl record onto ``progress`` (TrainingJob status keys): its step, loss and
    tokens/s, and each reported metric's latest value. A record without an integer step is skipped."""
    if not isinstance(record, dict) or type(record.get("step")) is not int:
        return
    progress["step"] = record["step"]
    for key, status_key in (("loss", "loss"), ("tokens_per_s", "tokensPerSecond")):
        if _number(record.get(key)):
            progress[status_key] = record[key]
    metrics = progress.get("metrics", {})
    _add_metrics(metrics, record)
    if metrics:
        progress["metrics"] = metrics


class MetricsLog:
    """A trial's metrics log, read as it grows: each poll reads the lines added since the last."""

    def __init__(self, path: Path):
        self.path = path
        self.offset = 0
        self.progress: dict[str, Any] = {}

    def read(self, final: bool = False) -> dict[str, Any]:
        """The progress so far (TrainingJob status keys). A last line without its newline is read
        only when ``final`` (the writer has exited): until then it may still be being written."""
        try:
            with self.path.open("rb") as log:
                log.seek(self.offset)
                data = log.read(MAX_READ_BYTES)
        except OSError:
            return self.progress
        end = len(data) if final else data.rfind(b"\n") + 1
        if end == 0 and len(data) == MAX_READ_BYTES:
            end = len(data)  # one line longer than a read: not a record
        for line in data[:end].splitlines():
            try:
                apply_record(self.progress, json.loads(line))
            except ValueError:
                continue  # a torn or foreign line
        self.offset += end
        return self.progress


def final_progress(summary: dict[str, Any]) -> dict[str, Any]:
    """TrainingJob status keys from a `phalanx local --json` summary: the built-in runtime's
    (steps, final_loss, tokens_per_s) or a command job's (step, loss, metrics)."""
    out: dict[str, Any] = {}
    step = summary.get("steps", summary.get("step"))
    if type(step) is int:
        out["step"] = step
    for keys, status_key in ((("final_loss", "loss"), "loss"), (("tokens_per_s",), "tokensPerSecond")):
        value = next((summary[k] for k in keys if _number(summary.get(k))), None)
        if value is not None:
            out[status_key] = value
    metrics: dict[str, float] = {}
    if isinstance(summary.get("metrics"), dict):
        _add_metrics(metrics, summary["metrics"])
    if metrics:
        out["metrics"] = metrics
    return out


class LocalTrial:
    """One trial's `phalanx local` process and the TrainingJob it stands for."""

    def __init__(self, manifest: dict[str, Any], work: Path):
        self.name = manifest["metadata"]["name"]
        self.manifest = manifest
        self.dir = work / self.name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.log = work / f"{self.name}.log"
        self.metrics = MetricsLog(self.dir / constants.METRICS_LOG_FILE)
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
        code = self.proc.poll()
        status.update(copy.deepcopy(self.metrics.read(final=code is not None)))
        if code is None:
            return
        if code == 0:
            final = final_progress(_summary(self.log))
            if "metrics" in final:  # the summary's values over the log's (the last word)
                final["metrics"] = {**status.get("metrics", {}), **final["metrics"]}
            status.update(final, phase="Succeeded")
        elif self.job["spec"]["suspend"]:
            status["phase"] = "Suspended"
        else:
            status.update({"phase": "Failed", "message": f"exited with code {code}; log: {self.log}"})
        self.proc = None


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
                          "trials": [{k: t.get(k) for k in ("name", "parameters", "phase", "step", "value", "reason", "message")}
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
