"""phalanx.shutdown: SIGTERM ends the process within the grace period even when the event loop
never gets to kopf's own signal handler (a real process, a loop stuck in CPU work)."""

import os
import signal
import subprocess
import sys
import textwrap
import time

from phalanx.shutdown import EXIT_TERMINATED

PROGRAM = textwrap.dedent("""
    import asyncio, sys, time
    from phalanx.shutdown import TerminationGuard

    guard = TerminationGuard(grace=float(sys.argv[1]))
    guard.block()

    async def main():
        stop = asyncio.Event()
        guard.start(asyncio.get_running_loop(), stop)
        sys.stdout.write("up\\n"); sys.stdout.flush()
        if sys.argv[2] == "stuck":
            while True:  # the loop never runs again: kopf's handler would never be called
                time.sleep(0.01)
        await stop.wait()
        sys.stdout.write("stopped cleanly\\n"); sys.stdout.flush()

    asyncio.run(main())
""")


def _run(grace: float, mode: str) -> tuple[int, str, float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", PROGRAM, str(grace), mode], stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout.readline() == "up\n"
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    return proc.returncode, out, time.monotonic() - t0


def test_sigterm_stops_a_running_loop_through_the_stop_flag():
    code, out, took = _run(10.0, "serving")
    assert code == 0 and "stopped cleanly" in out
    assert took < 5


def test_sigterm_ends_a_stuck_process_within_the_grace_period():
    code, out, took = _run(1.0, "stuck")
    assert code == EXIT_TERMINATED and "stopped cleanly" not in out
    assert 0.9 <= took < 10
