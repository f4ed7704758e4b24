"""SIGTERM always ends the operator within its grace period.

kopf stops on SIGTERM through a handler on its event loop: a loop that is busy (a long decode, a
stuck handler) or a shutdown that waits on a thread never gets there, and the kubelet's SIGKILL
comes only after the pod's whole grace period — while the old leader still holds its Lease. Here
SIGTERM is taken by a thread of its own (``sigwait``: the signal is blocked everywhere else, so it
is delivered to this thread whatever the loop is doing): it asks kopf to stop (its stop flag, a
clean hand-over of the Lease) and, if the process is still there after ``grace`` seconds,
ends it. A second SIGTERM ends it at once.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable

log = logging.getLogger("phalanx.shutdown")

EXIT_TERMINATED = 128 + signal.SIGTERM  # what a shell reports for a process ended by SIGTERM


def _exit_now(code: int, why: str) -> None:
    log.critical("%s; exiting now", why)
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stderr.flush()
    os._exit(code)


class TerminationGuard:
    """Call :meth:`block` first thing in the main thread (threads started later inherit the
    mask), then :meth:`start` once the loop and the stop flag exist."""

    def __init__(self, grace: float, exit_now: Callable[[int, str], None] = _exit_now) -> None:
        self.grace, self.exit_now = grace, exit_now
        self.terminating = threading.Event()

    @staticmethod
    def block() -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})

    def start(self, loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
        def wait_for_sigterm() -> None:
            signal.sigwait({signal.SIGTERM})
            log.info("SIGTERM: stopping (at most %gs)", self.grace)
            self.terminating.set()
            if not loop.is_closed():
                loop.call_soon_threadsafe(stop.set)
            threading.Thread(target=self._second_sigterm, name="sigterm-again", daemon=True).start()
            self.exit_within(self.grace, "not stopped within the grace period after SIGTERM", EXIT_TERMINATED)

        threading.Thread(target=wait_for_sigterm, name="sigterm", daemon=True).start()

    def _second_sigterm(self) -> None:
        signal.sigwait({signal.SIGTERM})
        self.exit_now(EXIT_TERMINATED, "a second SIGTERM")

    def exit_within(self, seconds: float, why: str, code: int = 1) -> None:
        """Ends the process after ``seconds`` unless it ended before (a daemon timer)."""
        timer = threading.Timer(seconds, self.exit_now, (code, why))
        timer.daemon = True
        timer.start()
