"""Workers forked from the launcher's preloaded forkserver (``phalanx_runtime.workers``,
``phalanx_runtime.forkserver``), with real processes: a worker finds torch and the runtime already
imported and CUDA untouched, has a session of its own and the forkserver as the parent it dies
with, and its exit code reaches the launcher unchanged (the restart-in-place code included). When
the launcher is killed outright, the forkserver and the worker die with it. What the forkserver
imports asks torch.cuda nothing (a CUDA device query before a fork leaves the children without
CUDA: checked on any machine by watching the calls). torchrun's side (the
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


# Run in a fresh interpreter: every call into torch.cuda's device queries while the forkserver's
# modules import. cudaGetDeviceCount (torch.cuda.is_available, device_count) initialises the CUDA
# driver, and a child forked after that cannot use CUDA: on a GPU node every worker would fail.
CUDA_QUERIES = """
import sys
from phalanx_runtime.config import RuntimeConfig
from phalanx_runtime.workers import FORKSERVER_SETUP_MODULE, preload_modules
cfg = RuntimeConfig.from_dict({"spec": {"procsPerNode": 2, "parallelism": {"pipeline": 2, "microbatches": 2},
                                        "model": {"preset": "debug"}, "training": {"globalBatchSize": 8}}})
modules = [m for m in preload_modules(cfg) if m != FORKSERVER_SETUP_MODULE]
QUERIES = {"_cuda_getDeviceCount", "_cuda_init", "is_available", "device_count", "_lazy_init", "init",
           "current_device", "get_device_properties", "get_device_capability"}
calls = []
def watch(frame, event, arg):
    name = getattr(arg, "__name__", "") if event == "c_call" else frame.f_code.co_name
    where = "torch._C" if event == "c_call" else frame.f_code.co_filename
    if event in ("c_call", "call") and name in QUERIES and (event == "c_call" or where.endswith("torch/cuda/__init__.py")):
        calls.append(f"{name} from {frame.f_code.co_filename}:{frame.f_lineno}")
sys.setprofile(watch)
for module in ["torch", *modules]:
    __import__(module)
sys.setprofile(None)
print(len(modules), calls)
"""


def test_the_forkserver_imports_query_no_cuda_device():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*SOURCES, os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, "-c", CUDA_QUERIES], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    count, calls = p.stdout.split(" ", 1)
    assert int(count) >= 3 and calls.strip() == "[]", p.stdout


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
