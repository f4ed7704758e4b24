"""A training worker, one per device: ``python -m phalanx_runtime.train --config …``, started by
the launcher (``phalanx_runtime.launch``) through torchrun (forked from its forkserver, which runs
this file as ``__main__``: ``phalanx_runtime.workers``), or ``train(cfg)`` in-process (tests,
``spawn.run_ranks``, benchmarks). The work itself is the :class:`~phalanx_runtime.trainer.Trainer`.

Preemption: SIGTERM only sets a flag; the ranks agree on it at the next step boundary, save a
checkpoint and exit ``EXIT_PREEMPTED`` (143, retryable). A rank that cannot get there (blocked in
a collective or the rendezvous on a rank that is hung or gone) is ended by a watchdog after
``$PHALANX_STOP_GRACE_SECONDS``, with the reason in its log (``lifetime.StopWatchdog``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import threading
import time

from phalanx_common.contract import StartupPhase
from phalanx_runtime.config import RuntimeConfig, load_config
from phalanx_runtime.env import ENV_RANK, ENV_RESULT_FILE
from phalanx_runtime.failure_report import report_exception
from phalanx_runtime.inplace import PEER_GONE_EXIT_DELAY_SECONDS, says_peer_gone
from phalanx_runtime.lifetime import (
    EXIT_PREEMPTED,
    StopWatchdog,
    die_with_parent,
    parent_pid_from_env,
    stop_grace,
)
from phalanx_runtime.startup import StartupTimeline
from phalanx_runtime.trainer import Trainer, TrainResult

_stop = threading.Event()
NO_CHECKPOINT_REASON = ("no checkpoint was saved: the ranks save one together at a step boundary, and this rank "
                        "never reached it (blocked in a collective or the rendezvous on a rank that is hung or gone)")


def _on_sigterm(signum, frame):  # noqa: ARG001
    _stop.set()


@contextlib.contextmanager
def sigterm_flag():
    """Main thread only: SIGTERM sets ``_stop``, and a watchdog bounds how long the stop may take."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _stop.clear()
    prev = signal.signal(signal.SIGTERM, _on_sigterm)
    watchdog = StopWatchdog(stop_grace(), name=f"rank {os.environ.get(ENV_RANK, 0)}", reason=NO_CHECKPOINT_REASON)
    watchdog.start()
    try:
        yield
    finally:
        watchdog.stop()
        signal.signal(signal.SIGTERM, prev)


def train(cfg: RuntimeConfig, *, progress_port: int | None = None, metrics_port: int | None = None,
          timeline: StartupTimeline | None = None) -> TrainResult:
    if cfg.spec.parallelism.parameter_server is not None:
        from phalanx_runtime.ps.run import run_parameter_server

        return run_parameter_server(cfg)
    with sigterm_flag():
        trainer = Trainer(cfg, stop_requested=_stop.is_set, progress_port=progress_port, metrics_port=metrics_port,
                          timeline=timeline)
        return trainer.run()


def write_result(result: TrainResult, path: str) -> None:
    with open(path, "w") as f:
        json.dump({**result.summary(), "losses": result.losses, "grad_norms": result.grad_norms,
                   "step_times": result.step_times, "mfu": result.mfu, "start_step": result.start_step,
                   "preempted": result.preempted, "last_checkpoint": result.last_checkpoint,
                   "checkpoint_stall_s": result.checkpoint_stall_s,
                   "checkpoint_save_s": result.checkpoint_save_s, "eval_losses": result.eval_losses}, f)


def _rank() -> int | None:
    try:
        return int(os.environ.get(ENV_RANK, ""))
    except ValueError:
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m phalanx_runtime.train")
    ap.add_argument("--config", default=None, help="runtime config JSON (default: $PHALANX_CONFIG)")
    args = ap.parse_args(argv)
    timeline = StartupTimeline.for_worker()
    timeline.mark(StartupPhase.IMPORTS)
    # A worker never outlives the launcher (or test harness) that started it: if that is killed
    # outright, nobody else would stop this process, and it would wait in a collective forever.
    # In direct mode the launcher runs this in its own process, already armed: leave it be.
    parent = parent_pid_from_env()
    if parent is not None:
        die_with_parent(signal.SIGKILL, parent)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        result = train(load_config(args.config), timeline=timeline)
    except Exception as exc:  # the pod's termination message names this rank and its error
        report_exception(exc, rank=_rank())
        if says_peer_gone(f"{type(exc).__name__}: {exc}"):
            # A peer's death broke the collective: stay a moment, so that torchrun sees the peer
            # end first (with forked workers it names only the first worker to end) and the
            # launcher reports the rank that died, not this echo of it.
            time.sleep(PEER_GONE_EXIT_DELAY_SECONDS)
        raise
    if (_rank() or 0) == 0 and os.environ.get(ENV_RESULT_FILE):
        write_result(result, os.environ[ENV_RESULT_FILE])
    return EXIT_PREEMPTED if result.preempted else 0


if __name__ == "__main__":
    raise SystemExit(main())
