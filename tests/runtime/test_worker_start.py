"""Workers forked from the launcher's preloaded forkserver (``phalanx_runtime.workers``,
``phalanx_runtime.forkserver``), with real processes: a worker finds torch and the runtime already
imported and CUDA untouched, has a session of its own and the forkserver as the parent it dies
with, and its exit code reaches the launcher unchanged (the restart-in-place code included). When
the launcher is killed outright, the forkserver and the worker die with it. torchrun's side (the
agent, exit codes, stops) runs in test_failure_report.py, test_local_stop.py and
test_startup_timeline.py, whose launchers start their workers this way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from phalanx_common.contract import EXIT_RESTART_IN_PLACE
from phalanx_runtime import lifetime

pytestmark = pytest.mark.runtime

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SOURCES = [str(ROOT / package) for package in ("runtime", "common", "operator")]
PROBE = HERE / "forkserver_probe.py"


def _launch(mode: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*SOURCES, os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, str(PROBE), mode], env=env, stdout=subprocess.PIPE, text=True)


@pytest.mark.parametrize("code", [0, EXIT_RESTART_IN_PLACE])
def test_a_forked_worker_shares_the_imports_and_keeps_its_process_semantics(code):
    launcher = _launch(str(code))
    out, _ = launcher.communicate(timeout=120)
    seen = json.loads(out.strip().splitlines()[-1])
    assert launcher.returncode == code
    assert seen["preloaded"] == seen["preload"], seen  # imported in the forkserver, before the fork
    assert seen["ppid"] != launcher.pid and seen["parent_env"] == seen["ppid"], seen  # the forkserver
    assert seen["sid"] == seen["pid"], seen  # its own session, as torchrun's subprocess workers
    assert not seen["cuda_initialized"], seen


def test_the_forkserver_and_its_worker_die_with_the_launcher():
    launcher = _launch("sleep")
    procs: set[tuple[int, int | None]] = set()
    try:
        seen = json.loads(launcher.stdout.readline())
        procs = {(pid, lifetime.start_time(pid)) for pid in (seen["ppid"], seen["pid"])}  # forkserver, worker
        assert all(lifetime.alive(pid) for pid, _ in procs), seen
        launcher.kill()
        launcher.wait(10)
        deadline = time.monotonic() + 5.0
        while alive := [pid for pid, started in procs if lifetime.alive(pid) and lifetime.start_time(pid) == started]:
            assert time.monotonic() < deadline, [lifetime.cmdline(pid) for pid in alive]
            time.sleep(0.1)
    finally:
        launcher.kill()
        launcher.wait(10)
        lifetime.kill_pids([pid for pid, started in procs if lifetime.start_time(pid) == started])
