"""Rank 0's progress record, its endpoint and its final write, for the trainer: the one
implementation is the shared package's (phalanx_common.progress), which the reporting client and
the log collectors serve too. :func:`reporting_phase` reports a phase that makes no steps (data
preparation, the in-job export) with a heartbeat."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from phalanx_common.contract import ProgressKey
from phalanx_common.progress import Progress, ProgressServer, write_final

__all__ = ["HEARTBEAT_SECONDS", "Progress", "ProgressServer", "reporting_phase", "write_final"]

HEARTBEAT_SECONDS = 30.0


@contextmanager
def reporting_phase(progress: Progress, phase: str, *, every: float = HEARTBEAT_SECONDS) -> Iterator[None]:
    """The record says ``phase`` while the block runs, its ``updatedAt`` refreshed every ``every``
    seconds (a heartbeat: the process is alive though no step moves); the phase it said before
    comes back after."""
    before = progress.snapshot()[ProgressKey.PHASE]
    progress.update(**{ProgressKey.PHASE: phase})
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every):
            progress.update()

    heartbeat = threading.Thread(target=beat, name=f"phalanx-{phase.lower()}-heartbeat", daemon=True)
    heartbeat.start()
    try:
        yield
    finally:
        stop.set()
        heartbeat.join()
        progress.update(**{ProgressKey.PHASE: before})
