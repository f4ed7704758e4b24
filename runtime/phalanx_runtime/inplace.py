"""Restart in place, the launcher's side (torch-free). The pod's trainer container carries a
restart rule (Kubernetes RestartAllContainers) for EXIT_RESTART_IN_PLACE: exiting with it makes
the kubelet restart every container of the pod on its node, and the new launcher rendezvouses
again at the same master address (rank 0's pod keeps its name and IP) and resumes from the last
committed checkpoint, as every start does.

* :func:`exit_code_after` — a worker failure that another try may cure (a worker killed by a
  signal of its own, a peer gone: a broken collective, store or rendezvous) ends the launcher with
  EXIT_RESTART_IN_PLACE; any other error keeps its code (a bug in user code fails the job).
* :class:`RestartRequests` — the operator asks a pod to restart (a hang, or a peer that restarted
  while this pod's workers did not notice) by setting the pod annotation
  ``phalanx.dev/restart-request`` to the container restart count the pod should reach; the
  downward-API file ``$PHALANX_RESTART_REQUEST_FILE`` shows it (the kubelet rewrites it when it
  syncs the pod, seconds after the annotation changes). The launcher counts its own starts in the
  pod (a file on the scratch emptyDir, which an in-place restart keeps), so a request it already
  honoured — the file may still show it after the restart — is not taken twice.
* :func:`wait_backoff` — the kubelet restarts at once; the launcher waits the job's backoff.
"""

from __future__ import annotations

import json
import logging
import re
import signal
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from phalanx_common.contract import (
    ENV_RESTART_BACKOFF_SECONDS,
    ENV_RESTART_BASE,
    ENV_RESTART_MAX_BACKOFF_SECONDS,
    ENV_RESTART_REQUEST_FILE,
    EXIT_RESTART_IN_PLACE,
    LAUNCH_COUNT_FILE,
    REPORT_KEY_ERROR,
    ErrorKey,
)
from phalanx_common.restarts import backoff_seconds, restart_count

log = logging.getLogger("phalanx_runtime.inplace")
POLL_SECONDS = 1.0
PEER_GONE_EXIT_DELAY_SECONDS = 2.0  # a worker whose peer is gone waits this long before it exits (train.py)
# Signals torchrun's agent sends the other workers once one failed: those deaths follow, not lead.
AGENT_STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT})
# A peer gone or the rendezvous broken (as operator/phalanx/lifecycle/failure_cause.py's
# CommunicationError): the gang restarts together, this pod with it.
PEER_GONE = re.compile(
    r"\bNCCL\b|\bnccl[A-Z]\w*|\b[Gg]loo\b|Dist(?:Network|Store|Backend)Error|Rendezvous[A-Za-z]{0,40}(?:Error|Exception)"
    r"|Connection (?:reset|refused|closed)|Broken pipe|collective operation timeout|Socket Timeout"
    r"|\bECONNRESET\b|\bECONNREFUSED\b")


def killed_by_signal(exitcodes: Iterable[int]) -> bool:
    """Whether a worker died of a signal of its own (SIGKILL, SIGSEGV; torchrun reports -N)."""
    return any(code < 0 and -code not in AGENT_STOP_SIGNALS for code in exitcodes)


def says_peer_gone(text: str) -> bool:
    """Whether an error's text is a broken collective, store or rendezvous."""
    return PEER_GONE.search(text) is not None


def report_says_peer_gone(report: dict[str, Any] | None) -> bool:
    """Whether the pod's error report (the first worker's) is a broken collective or rendezvous."""
    error = (report or {}).get(REPORT_KEY_ERROR)
    if not isinstance(error, dict):
        return False
    text = " ".join(str(error.get(key, "")) for key in (ErrorKey.TYPE, ErrorKey.MESSAGE, ErrorKey.CAUSE))
    return PEER_GONE.search(text) is not None


def exit_code_after(exitcodes: Iterable[int], report: dict[str, Any] | None, failed_code: int) -> int:
    """The launcher's exit code after its workers failed with ``exitcodes``: restart in place
    when a worker was killed or a peer is gone, else ``failed_code``."""
    codes = list(exitcodes)
    return EXIT_RESTART_IN_PLACE if killed_by_signal(codes) or report_says_peer_gone(report) else failed_code


def read_report(path: str) -> dict[str, Any] | None:
    """The termination message the pod's processes wrote, if it is a report."""
    try:
        report = json.loads(Path(path).read_text()[:8192] or "null")
    except (OSError, ValueError):
        return None
    return report if isinstance(report, dict) else None


def count_launch(directory: str | None) -> int:
    """This launch's number in the pod (0: the first), counted in ``directory`` (the scratch
    emptyDir, kept across in-place restarts); 0 when it cannot be kept."""
    if not directory:
        return 0
    path = Path(directory) / LAUNCH_COUNT_FILE
    try:
        before = int(path.read_text().strip() or 0)
    except (OSError, ValueError):
        before = 0
    try:
        path.write_text(str(before + 1))
    except OSError:
        return 0
    return before


class RestartRequests:
    """Watches the request file; ``on_request`` runs once when it asks for more restarts than
    this pod has had (``restarts``)."""

    def __init__(self, path: str, restarts: int, on_request: Callable[[int], None], poll: float = POLL_SECONDS) -> None:
        self.path, self.restarts, self.on_request, self.poll = path, restarts, on_request, poll
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="phalanx-restart-requests", daemon=True)

    def wanted(self) -> int:
        """The count asked for, if more than this pod's restarts; else 0."""
        try:
            asked = restart_count(Path(self.path).read_text().strip())
        except OSError:
            return 0
        return asked if asked > self.restarts else 0

    def _run(self) -> None:
        while not self._stop.wait(self.poll):
            asked = self.wanted()
            if asked:
                log.warning("the operator asked this pod to restart in place (restart %d; this pod has had %d)",
                            asked, self.restarts)
                self.on_request(asked)
                return

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self._stop.set()


def watch_requests(env: dict[str, str], scratch: str | None, on_request: Callable[[int], None]) -> RestartRequests | None:
    """Count this launch and watch the pod's restart requests (None: the pod has no request file,
    i.e. it does not restart in place). A pod that replaced one on a lost node counts from the
    gang's restarts when it was created (``$PHALANX_RESTART_BASE``)."""
    path = env.get(ENV_RESTART_REQUEST_FILE)
    if not path:
        return None
    watcher = RestartRequests(path, restart_count(env.get(ENV_RESTART_BASE, "")) + count_launch(scratch), on_request)
    watcher.start()
    return watcher


def backoff_before(env: dict[str, str], restarts: int) -> int:
    """Seconds to wait before training again after this pod's ``restarts``-th restart in place:
    the job's failurePolicy backoff, as the operator waits it before recreating a gang (every pod
    of the gang has restarted as often, so all wait alike)."""
    first = restart_count(env.get(ENV_RESTART_BACKOFF_SECONDS))
    return backoff_seconds(restarts, first, restart_count(env.get(ENV_RESTART_MAX_BACKOFF_SECONDS)))


def wait_backoff(env: dict[str, str], watcher: RestartRequests | None, sleep: Callable[[float], None] = time.sleep) -> int:
    """Wait out :func:`backoff_before` (nothing on a pod's first start); the seconds waited."""
    delay = backoff_before(env, watcher.restarts) if watcher is not None else 0
    if delay:
        log.warning("restarted in place (restart %d): waiting %d s (failurePolicy.backoffSeconds) before training",
                    watcher.restarts, delay)
        sleep(delay)
    return delay
