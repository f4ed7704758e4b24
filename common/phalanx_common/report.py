"""Progress from the user's own training code: ``report(step, loss, ...)``, ``commit_checkpoint``
and ``latest_checkpoint``, the reporting client of a command job (docs/your-code.md). Standard
library only, so any image can ``pip install ./common`` (distribution ``phalanx-common``).

Only global rank 0 acts — ``$RANK`` (or Horovod's / MPI's rank variable) is "0", or none is set
and ``$NODE_RANK`` and ``$LOCAL_RANK`` are each "0" or unset; elsewhere every call is a cheap no-op (except
``latest_checkpoint``, which every rank may read). Rank 0, lazily on its first call:

- serves the record (phalanx_common.progress) on ``$PHALANX_PROGRESS_PORT`` when set; a port it
  cannot bind is one warning, and training goes on;
- appends one JSON line per step to ``$PHALANX_CHECKPOINT_DIR/metrics.jsonl`` (the runtime's keys
  ``time``, ``step``, ``loss``, ``tokens_per_s``, plus ``epoch`` and the step's metrics; a step's
  line is written once the next step is reported, or at exit, so it carries all of the step's
  values and ``phalanx plot`` sees one line per step);
- at exit (atexit) writes the final record to ``$PHALANX_TERMINATION_LOG`` (a failure report there
  stays).

A reporting problem (a bad value, a full disk, a port in use) never raises into the training
loop: it is logged once (logger ``phalanx``) and the call does what it still can.
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import operator
import os
import re
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from phalanx_common.contract import (
    DEFAULT_TERMINATION_LOG,
    ENV_CHECKPOINT_DIR,
    ENV_HOROVOD_RANK,
    ENV_LOCAL_RANK,
    ENV_NODE_RANK,
    ENV_PROGRESS_PORT,
    ENV_RANK,
    ENV_TERMINATION_LOG,
    ENV_WORLD_SIZE,
    LATEST_CHECKPOINT_FILE,
    MAX_REPORTED_METRICS,
    METRIC_NAME_PATTERN,
    METRICS_LOG_FILE,
    ProgressKey,
)
from phalanx_common.progress import Progress, ProgressServer, write_final

log = logging.getLogger("phalanx")

PHASE_RUNNING = "Running"
PHASE_FINISHED = "Finished"  # the client's exit: it cannot tell success from failure at atexit
MAX_PATH_CHARS = 1024  # the operator's bound on lastCheckpoint.path
MAX_MARKER_BYTES = 64 * 1024
_METRIC_NAME = re.compile(METRIC_NAME_PATTERN)


# Where launchers put a process's global rank: torchrun, Horovod (phalanx_runtime.horovod_launch,
# horovodrun), Open MPI's and MPICH/Intel MPI's mpirun. The first one set decides.
GLOBAL_RANK_ENVS = (ENV_RANK, ENV_HOROVOD_RANK, "OMPI_COMM_WORLD_RANK", "PMI_RANK")


def is_global_rank_zero(env: Mapping[str, str] | None = None) -> bool:
    """The first of GLOBAL_RANK_ENVS set is "0"; or none is set and ``$NODE_RANK`` and
    ``$LOCAL_RANK`` are each "0" or unset."""
    env = os.environ if env is None else env
    rank = next((value.strip() for name in GLOBAL_RANK_ENVS if (value := env.get(name) or "").strip()), "")
    if rank:
        return rank == "0"
    return all((env.get(name) or "0").strip() == "0" for name in (ENV_NODE_RANK, ENV_LOCAL_RANK))


def as_number(value: Any) -> float | None:
    """A number (int, float, a 0-d tensor or numpy scalar: anything with ``__float__``) as a float;
    None for anything else (bools and strings included)."""
    if value is None or isinstance(value, bool | str | bytes):
        return None
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return None


def as_count(value: Any) -> int | None:
    """A non-negative integer (an int, or an integral float); None otherwise."""
    if value is None or isinstance(value, bool):
        return None
    try:
        count = operator.index(value)
    except TypeError:
        number = as_number(value)
        if number is None or not math.isfinite(number) or not number.is_integer():
            return None
        count = int(number)
    return count if 0 <= count <= 2**53 else None


def clean_metrics(values: Mapping[str, Any] | None, limit: int = MAX_REPORTED_METRICS) -> dict[str, float]:
    """The metrics the record may carry: names matching METRIC_NAME_PATTERN, finite numbers, at
    most ``limit`` of them (the first ones); everything else is dropped."""
    out: dict[str, float] = {}
    for name, value in (values or {}).items():
        if len(out) >= limit:
            break
        number = as_number(value)
        if isinstance(name, str) and _METRIC_NAME.fullmatch(name) and number is not None and math.isfinite(number):
            out[name] = number
    return out


def _env_count(env: Mapping[str, str], name: str) -> int | None:
    text = (env.get(name) or "").strip()
    return int(text) if text.isdigit() and len(text) < 16 else None


def _utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class _StepLog:
    """``metrics.jsonl``: the current step's line is held until a later step (or the end) so that
    every value reported for a step lands on its one line. A metric named as the line's own keys
    (``step``, ``time``) stays out of it: the line's step is the step it belongs to."""

    OWN_KEYS = ("time", "step")

    def __init__(self, path: Path | None, warn):
        self.path, self._warn = path, warn
        self._file: IO[str] | None = None
        self._pending: dict[str, Any] | None = None

    def add(self, step: int | None, values: dict[str, Any]) -> None:
        if self.path is None:
            return
        if step is not None and (self._pending is None or step != self._pending["step"]):
            self.flush()
            self._pending = {"time": None, "step": step}
        if self._pending is not None:
            self._pending.update({key: value for key, value in values.items() if key not in self.OWN_KEYS})
            self._pending["time"] = round(time.time(), 3)

    def flush(self) -> None:
        line, self._pending = self._pending, None
        if line is None or self.path is None or set(line) <= {"time", "step"}:
            return  # a step with no value (a start at step 0): nothing to plot
        try:
            if self._file is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = open(self.path, "a", buffering=1)  # line-buffered, kept open
            self._file.write(json.dumps(line, allow_nan=True) + "\n")
        except (OSError, ValueError) as e:  # shared storage trouble must not stop training
            self._warn("metrics-log", f"metrics log {self.path}: {e}; no more lines are written to it")
            self.path = None


class Reporter:
    """One process's reporting state; the module's functions share one per process
    (:func:`reporter`). ``active``: whether this process reports (default: global rank 0)."""

    def __init__(self, env: Mapping[str, str] | None = None, *, active: bool | None = None):
        env = dict(os.environ if env is None else env)
        self.active = is_global_rank_zero(env) if active is None else active
        self.checkpoint_dir = env.get(ENV_CHECKPOINT_DIR) or None
        self.termination_log = env.get(ENV_TERMINATION_LOG, DEFAULT_TERMINATION_LOG)
        self.port = _env_count(env, ENV_PROGRESS_PORT)
        self.progress = Progress(None, _env_count(env, ENV_WORLD_SIZE))
        self.server: ProgressServer | None = None
        self._lock = threading.RLock()
        self._started = self._finished = False
        self._warned: set[str] = set()
        self._metrics: dict[str, float] = {}
        self._last_step: tuple[int, float] | None = None  # (step, time) for stepTimeSeconds
        log_path = Path(self.checkpoint_dir) / METRICS_LOG_FILE if self.checkpoint_dir else None
        self._steps = _StepLog(log_path, self._warn)

    def _warn(self, topic: str, message: str) -> None:
        if topic not in self._warned:
            self._warned.add(topic)
            log.warning("phalanx reporting: %s", message)

    def start(self) -> None:
        """Rank 0's endpoint and exit hook (made by the first call; the collector starts them at once)."""
        if self._started:
            return
        self._started = True
        self.progress.update(phase=PHASE_RUNNING)
        atexit.register(self.finish)
        if self.port:
            try:
                self.server = ProgressServer(self.progress, self.port)
            except OSError as e:
                self._warn("server", f"progress endpoint on port {self.port}: {e}; the job's status shows no progress")

    def report(self, step: Any = None, loss: Any = None, *, total_steps: Any = None,
               metrics: Mapping[str, Any] | None = None, tokens_per_second: Any = None,
               epoch: Any = None, checkpoint: str | os.PathLike | None = None) -> None:
        """Record what the caller knows now; anything left None keeps its last value. A NaN or
        infinite loss is kept (the operator reports the run as diverged); a non-finite metric is
        dropped. ``checkpoint``: a checkpoint of this step, now complete (:meth:`commit_checkpoint`)."""
        if not self.active:
            return
        try:
            with self._lock:
                self.start()
                self._apply(step, loss, total_steps, metrics, tokens_per_second, epoch)
                if checkpoint is not None:
                    self._commit(checkpoint, as_count(step))
        except Exception as e:  # noqa: BLE001 - reporting never breaks the training loop
            self._warn("report", f"report() failed: {type(e).__name__}: {e}")

    def _apply(self, step, loss, total_steps, metrics, tokens_per_second, epoch) -> None:
        update: dict[str, Any] = {}
        line: dict[str, Any] = {}
        step_count = as_count(step)
        if step is not None and step_count is None:
            self._warn("step", f"step {step!r} is no non-negative integer; ignored")
        if step_count is not None:
            update[ProgressKey.STEP] = step_count
            self._step_time(step_count, update)
        number = as_number(loss)
        if number is not None:
            update[ProgressKey.LOSS] = line["loss"] = number
        number = as_number(tokens_per_second)
        if number is not None and math.isfinite(number) and number >= 0:
            update[ProgressKey.TOKENS_PER_SECOND] = line["tokens_per_s"] = number
        number = as_number(epoch)
        if number is not None and math.isfinite(number) and number >= 0:
            update[ProgressKey.EPOCH] = line["epoch"] = number
        total = as_count(total_steps)
        if total:
            update[ProgressKey.TOTAL_STEPS] = total
        fresh = clean_metrics(metrics)
        if fresh:
            kept = {}
            for name, value in fresh.items():  # names already held, then new ones while there is room
                if name in self._metrics or len(self._metrics) < MAX_REPORTED_METRICS:
                    self._metrics[name] = kept[name] = value
            update[ProgressKey.METRICS] = dict(self._metrics)
            line = {**kept, **line}
        self.progress.update(**update)
        self._steps.add(step_count, line)

    def _step_time(self, step: int, update: dict[str, Any]) -> None:
        now = time.monotonic()
        if self._last_step is not None and step > self._last_step[0]:
            update[ProgressKey.STEP_TIME_SECONDS] = (now - self._last_step[1]) / (step - self._last_step[0])
        if self._last_step is None or step != self._last_step[0]:
            self._last_step = (step, now)

    def commit_checkpoint(self, path: str | os.PathLike, step: Any) -> None:
        """A checkpoint at ``path`` of step ``step`` is complete: marks it for a restart
        (LATEST_CHECKPOINT_FILE in ``$PHALANX_CHECKPOINT_DIR``, written atomically) and sets the
        record's lastCheckpoint. Call it after every rank's part is written."""
        if not self.active:
            return
        try:
            with self._lock:
                self.start()
                self._commit(path, as_count(step))
        except Exception as e:  # noqa: BLE001 - reporting never breaks the training loop
            self._warn("checkpoint", f"commit_checkpoint() failed: {type(e).__name__}: {e}")

    def _commit(self, path: str | os.PathLike, step: int | None) -> None:
        if step is None:
            step = self.progress.snapshot().get(ProgressKey.STEP) or 0
        path = os.fspath(path)[:MAX_PATH_CHARS]
        marker = {"step": step, "path": path, "time": _utc_now()}
        self.progress.update(lastCheckpoint=marker)
        if not self.checkpoint_dir:
            self._warn("checkpoint-dir", f"no ${ENV_CHECKPOINT_DIR}: checkpoint {path} is not marked for a restart")
            return
        target = Path(self.checkpoint_dir) / LATEST_CHECKPOINT_FILE
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        with open(tmp, "w") as f:
            json.dump(marker, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)  # a reader sees the old marker or the new one, never half of one

    def latest_checkpoint(self) -> str | None:
        """The path of the last committed checkpoint (any rank may ask), None when there is none;
        on rank 0 its step becomes the record's resumedStep."""
        try:
            found = read_marker(self.checkpoint_dir)
            if found is None:
                return None
            self.resumed_from(found["step"])
            return found["path"]
        except Exception as e:  # noqa: BLE001 - reporting never breaks the training loop
            self._warn("latest", f"latest_checkpoint() failed: {type(e).__name__}: {e}")
            return None

    def resumed_from(self, step: Any) -> None:
        """This attempt resumed from step ``step`` (the record's resumedStep): latest_checkpoint
        and the ready-made callbacks say so."""
        count = as_count(step)
        if not self.active or count is None:
            return
        with self._lock:
            self.start()
            self.progress.update(resumedStep=count)

    def finish(self, phase: str = PHASE_FINISHED) -> bool:
        """The last step's line and the final record (the termination message); once. True when
        the record was written."""
        if not self.active:
            return False
        with self._lock:
            if self._finished or not self._started:
                return False
            self._finished = True
            atexit.unregister(self.finish)
            self._steps.flush()
            self.progress.update(phase=phase)
            return write_final(self.progress, self.termination_log)


def read_marker(checkpoint_dir: str | os.PathLike | None) -> dict[str, Any] | None:
    """LATEST_CHECKPOINT_FILE in ``checkpoint_dir`` as {"step", "path", "time"}; None when absent
    or not such a record."""
    if not checkpoint_dir:
        return None
    try:
        with open(Path(checkpoint_dir) / LATEST_CHECKPOINT_FILE, "rb") as f:
            found = json.loads(f.read(MAX_MARKER_BYTES))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(found, dict) or not isinstance(found.get("path"), str) or as_count(found.get("step")) is None:
        return None
    return {"step": as_count(found["step"]), "path": found["path"], "time": found.get("time")}


_reporter: Reporter | None = None
_reporter_lock = threading.Lock()


def _forget_in_child() -> None:
    """A forked child (a data-loader worker) is not the process that reports: the reporter it
    inherits stops (its exit hook would write the parent's final record; its locks may be held by
    a thread that is not in the child), and a child that reports makes its own from its env."""
    global _reporter, _reporter_lock
    if _reporter is not None:
        _reporter.active = False
    _reporter, _reporter_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_forget_in_child)


def reporter() -> Reporter:
    """This process's reporter (made on first use from the environment)."""
    global _reporter
    if _reporter is None:
        with _reporter_lock:
            if _reporter is None:
                _reporter = Reporter()
    return _reporter


def report(step: Any = None, loss: Any = None, *, total_steps: Any = None, metrics: Mapping[str, Any] | None = None,
           tokens_per_second: Any = None, epoch: Any = None, checkpoint: str | os.PathLike | None = None) -> None:
    """Report progress from global rank 0 (a no-op elsewhere): see :meth:`Reporter.report`."""
    found = reporter()
    if found.active:
        found.report(step, loss, total_steps=total_steps, metrics=metrics, tokens_per_second=tokens_per_second,
                     epoch=epoch, checkpoint=checkpoint)


def commit_checkpoint(path: str | os.PathLike, step: Any) -> None:
    """Mark the checkpoint at ``path`` (step ``step``) complete: see :meth:`Reporter.commit_checkpoint`."""
    found = reporter()
    if found.active:
        found.commit_checkpoint(path, step)


def latest_checkpoint() -> str | None:
    """The last committed checkpoint's path, or None: see :meth:`Reporter.latest_checkpoint`."""
    return reporter().latest_checkpoint()
