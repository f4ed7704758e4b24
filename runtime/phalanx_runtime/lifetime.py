"""Process lifetime (Linux): nothing the runtime starts outlives the process that started it, and a
stop that cannot finish cleanly still ends within a bounded time. Torch-free.

* :func:`die_with_parent` — ``prctl(PR_SET_PDEATHSIG)``: the kernel signals a child when its
  parent dies, even by SIGKILL, which no handler in the parent could act on.
* :class:`StopWatchdog` — after SIGTERM, the main thread gets a grace period to reach a step
  boundary (checkpoint, exit); then the process ends anyway. Python runs signal handlers only in
  the main thread between bytecodes, so a main thread blocked in C (a gloo/NCCL collective, a
  TCPStore rendezvous) never runs them; the C-level handler still writes the signal number to the
  wakeup fd (``signal.set_wakeup_fd``), and the watchdog thread reads it.
* :func:`descendants`, :func:`kill_pids` — the process tree from ``/proc``, to kill what is left.
* ``python -m phalanx_runtime.lifetime [--parent-pid P] [--signal TERM] -- CMD ARGS…`` execs
  CMD with the parent-death signal set (it survives ``execve``): ``phalanx local`` runs a command
  job's processes this way.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path

from phalanx_common.contract import (  # noqa: F401 - EXIT_PREEMPTED, stop_grace, escalation: re-exported
    ENV_PARENT_PID,
    EXIT_PREEMPTED,
    escalation,
    stop_grace,
)
from phalanx_common.proc import (  # noqa: F401 - the process helpers, re-exported
    LINUX,
    alive,
    children,
    cmdline,
    descendants,
    die_with_parent,
    kill_pids,
    reap,
    set_subreaper,
    start_time,
)

log = logging.getLogger("phalanx_runtime.lifetime")


def parent_pid_from_env() -> int | None:
    """``$PHALANX_PARENT_PID``, removed from our environment: it is meant for this process only,
    and a stale value inherited further down would make a grandchild kill itself."""
    value = os.environ.pop(ENV_PARENT_PID, None)
    return int(value) if value and value.isdigit() else None


# --------------------------------------------------------------------------------------------
# Stop watchdog


def main_thread_location(depth: int = 3) -> str:
    """Where the main thread is now, innermost first (``file:line function: source``)."""
    frame = sys._current_frames().get(threading.main_thread().ident)  # noqa: SLF001
    if frame is None:
        return "unknown"
    stack = traceback.extract_stack(frame)[-depth:]
    return " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}: {(f.line or '').strip()}"
                       for f in reversed(stack))


class StopWatchdog:
    """Once one of ``signals`` arrives, wait ``grace`` seconds for :meth:`stop` (the main thread
    finished); otherwise log why (``reason``), call ``on_expire`` and ``os._exit(exit_code)``.
    ``plan``, if given, decides (grace, reason) when the signal arrives instead."""

    def __init__(self, grace: float, *, name: str, signals: Iterable[int] = (signal.SIGTERM,),
                 exit_code: int = EXIT_PREEMPTED, on_expire: Callable[[], None] | None = None,
                 reason: str = "it could not finish in time", plan: Callable[[], tuple[float, str]] | None = None):
        self.grace, self.name, self.exit_code = grace, name, exit_code
        self.signals = {int(s) for s in signals}
        self.on_expire, self.reason, self.plan = on_expire, reason, plan
        self.signalled_at: float | None = None
        self._done = threading.Event()
        self._fds: tuple[int, int] | None = None
        self._prev_fd = -1
        self._thread: threading.Thread | None = None

    def start(self) -> bool:
        """Install the wakeup fd (main thread only); False where that is impossible."""
        if threading.current_thread() is not threading.main_thread():
            return False
        r, w = os.pipe()
        os.set_blocking(w, False)
        self._prev_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        self._fds = (r, w)
        self._thread = threading.Thread(target=self._run, name=f"phalanx-stop-{self.name}", daemon=True)
        self._thread.start()
        return True

    def _run(self) -> None:
        r = self._fds[0]
        while True:
            try:
                data = os.read(r, 64)
            except OSError:
                return
            if not data or self._done.is_set():
                return
            if self.signals & set(data):
                break
        self.signalled_at = time.monotonic()
        grace, reason = self.plan() if self.plan is not None else (self.grace, self.reason)
        if self._done.wait(grace):
            return
        log.error("%s: ending the process %.0fs after SIGTERM: %s; main thread at: %s. Exit %d.",
                  self.name, grace, reason, main_thread_location(), self.exit_code)
        for h in logging.getLogger().handlers + log.handlers:
            h.flush()
        if self.on_expire is not None:
            self.on_expire()
        sys.stderr.flush()
        os._exit(self.exit_code)

    def stop(self) -> None:
        self._done.set()
        if self._fds is None:
            return
        r, w = self._fds
        self._fds = None
        if threading.current_thread() is threading.main_thread():
            signal.set_wakeup_fd(self._prev_fd)
        os.close(w)  # the reader sees EOF
        if self._thread is not None:
            self._thread.join(timeout=5)
        os.close(r)


# --------------------------------------------------------------------------------------------
# Trampoline: exec a command that dies with its parent


def trampoline(cmd: list[str], parent_pid: int | None = None) -> list[str]:
    """``cmd`` run through :func:`main`: it gets SIGTERM when its parent (``parent_pid``, else
    ``$PHALANX_PARENT_PID``) dies."""
    pid = ["--parent-pid", str(parent_pid)] if parent_pid is not None else []
    return [sys.executable, "-m", "phalanx_runtime.lifetime", *pid, "--", *cmd]


def exit_preempted(signum, frame):  # noqa: ARG001 - a signal handler: SIGTERM/SIGINT end as a preemption
    raise SystemExit(EXIT_PREEMPTED)


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m phalanx_runtime.lifetime",
                                 description="exec CMD with a parent-death signal (PR_SET_PDEATHSIG)")
    ap.add_argument("--parent-pid", type=int, default=None, help=f"expected parent (default ${ENV_PARENT_PID})")
    ap.add_argument("--signal", default="TERM", help="signal sent when the parent dies (default TERM)")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        ap.error("no command")
    sig = getattr(signal, "SIG" + args.signal.upper().removeprefix("SIG"))
    from_env = parent_pid_from_env()  # removed from the command's environment either way
    die_with_parent(sig, args.parent_pid if args.parent_pid is not None else from_env)
    try:
        os.execvp(cmd[0], cmd)
    except OSError as e:
        print(f"phalanx: cannot run {cmd[0]!r}: {e}", file=sys.stderr)
        return 127
    return 0  # pragma: no cover - execvp does not return


if __name__ == "__main__":
    raise SystemExit(main())
