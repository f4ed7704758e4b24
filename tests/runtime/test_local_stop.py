"""`phalanx local` stops cleanly, with real processes: SIGTERM, SIGINT and SIGKILL of
`phalanx local` on a 2-node job (× 2 processes for SIGTERM) leave no launcher or worker within 20 s, and each leaves
a committed checkpoint at the step where the job stopped (SIGKILL too: the launchers get SIGTERM
from the kernel when their parent dies); a rank hung in a collective is ended by its watchdog
within the grace period and says why it could not checkpoint. First, each mechanism alone in tiny
processes: the parent-death signal, and the watchdog of a main thread blocked in C."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from phalanx_common.net import free_port
from phalanx_runtime import lifetime

pytestmark = pytest.mark.runtime

HERE = Path(__file__).resolve().parent
STOP_WITHIN_S = 20.0
STEPS = 5000  # never reached: every test stops the job
FAST_START = {"PHALANX_CPU_PEAK_FLOPS": "1e11"}  # skip each worker's GEMM measurement (MFU only)


def _alive(procs: set[tuple[int, int | None]]) -> set[tuple[int, int | None]]:
    return {(p, st) for p, st in procs if lifetime.alive(p) and lifetime.start_time(p) == st}


def wait_gone(procs: set[tuple[int, int | None]], within: float) -> float:
    """Seconds until none of ``procs`` is alive; fails after ``within``."""
    t0 = time.monotonic()
    while _alive(procs):
        if time.monotonic() - t0 > within:
            left = {p: lifetime.cmdline(p) for p, _ in _alive(procs)}
            lifetime.kill_pids(left)
            pytest.fail(f"still alive {within:.0f}s after the stop: {left}")
        time.sleep(0.1)
    return time.monotonic() - t0


def write_job(tmp_path: Path, *, procs: int = 2, model: dict | None = None) -> Path:
    doc = {"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "stop"},
           "spec": {"image": "x", "nodes": 2, "procsPerNode": procs, "model": model or {"preset": "debug"},
                    "data": {"source": "synthetic", "seqLen": 16},
                    "training": {"steps": STEPS, "globalBatchSize": 4, "microBatchSize": 1, "logEvery": 1,
                                 "precision": "fp32"},
                    "checkpoint": {"intervalSteps": 0}}}  # only at the end (or when stopped)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


class Local:
    """`phalanx local JOB --checkpoint-dir …` as a process, its output in a file."""

    def __init__(self, job: Path, tmp_path: Path, env: dict[str, str] | None = None):
        self.log, self.ckpt = tmp_path / "local.log", tmp_path / "ckpt"
        with self.log.open("w") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "phalanx", "local", str(job), "--checkpoint-dir",
                                          str(self.ckpt)], stdout=out, stderr=subprocess.STDOUT,
                                         env={**os.environ, **FAST_START, **(env or {})})

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, pred, what: str, timeout: float = 120.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"phalanx local exited {self.proc.returncode} while waiting for {what}:\n{self.text()[-3000:]}")
            if v := pred():
                return v
            time.sleep(0.2)
        pytest.fail(f"timed out waiting for {what}:\n{self.text()[-3000:]}")

    def processes(self) -> dict[str, set[tuple[int, int | None]]]:
        """The run's launchers, their workers' forkservers and the workers, as (pid, start time).
        A worker forked from a forkserver has the forkserver's command line: it is told apart by
        its parent."""
        out: dict[str, set] = {"launchers": set(), "forkservers": set(), "workers": set()}
        launchers = {p for p in lifetime.descendants(self.proc.pid) if "phalanx_runtime.launch" in lifetime.cmdline(p)}
        for launcher in launchers:
            out["launchers"].add(launcher)
            for child in lifetime.children(launcher):
                cmd = lifetime.cmdline(child)
                if "multiprocessing.forkserver" in cmd:
                    out["forkservers"].add(child)
                    out["workers"].update(lifetime.children(child))
                elif "phalanx_runtime.train" in cmd:
                    out["workers"].add(child)
        return {kind: {(p, lifetime.start_time(p)) for p in pids if lifetime.alive(p)} for kind, pids in out.items()}

    def cleanup(self) -> None:
        lifetime.kill_pids([self.proc.pid, *lifetime.descendants(self.proc.pid)])
        self.proc.wait(10)


def committed(d: Path) -> list[int]:
    from phalanx_runtime.components.checkpoint import committed_steps

    return committed_steps(d)


# --------------------------------------------------------------------------------------------
# The mechanisms alone


def test_children_die_with_their_parent():
    """PR_SET_PDEATHSIG, set by the process itself (workers, launchers) and by the exec trampoline
    (command jobs): SIGKILL of the parent ends both children."""
    parent_code = (
        "import os, subprocess, sys, time\n"
        "me = str(os.getpid())\n"
        "direct = ('import signal, sys, time; from phalanx_runtime.lifetime import die_with_parent; '\n"
        "          'die_with_parent(signal.SIGKILL, int(sys.argv[1])); sys.stdout.write(\"ready\\\\n\"); sys.stdout.flush(); time.sleep(60)')\n"
        "subprocess.Popen([sys.executable, '-c', direct, me])\n"
        "subprocess.Popen([sys.executable, '-m', 'phalanx_runtime.lifetime', '--parent-pid', me, '--',\n"
        "                  sys.executable, '-c', 'import sys, time; sys.stdout.write(\"ready\\\\n\"); sys.stdout.flush(); time.sleep(60)'])\n"
        "time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True)
    try:
        assert [parent.stdout.readline().strip() for _ in range(2)] == ["ready", "ready"]
        kids = {(p, lifetime.start_time(p)) for p in lifetime.children(parent.pid)}
        assert len(kids) == 2
        parent.kill()
        parent.wait(10)
        assert wait_gone(kids, 5.0) < 5.0
    finally:
        lifetime.kill_pids([parent.pid, *lifetime.descendants(parent.pid)])
        parent.wait(10)


def test_watchdog_ends_a_main_thread_blocked_in_c(tmp_path):
    """A SIGTERM handler cannot run while the main thread is inside a C call (as in a gloo/NCCL
    collective); the watchdog still notices the signal and ends the process after the grace
    period, exit 143, saying where the main thread was stuck."""
    code = (
        "import ctypes, logging, signal\n"
        "logging.basicConfig()\n"
        "from phalanx_runtime.lifetime import StopWatchdog\n"
        "signal.signal(signal.SIGTERM, lambda *a: None)\n"
        "StopWatchdog(1.0, name='test', reason='it is stuck').start()\n"
        "libc, m = ctypes.CDLL(None), ctypes.create_string_buffer(64)\n"
        "libc.pthread_mutex_lock(m)\n"
        "print('blocking', flush=True)\n"
        "libc.pthread_mutex_lock(m)  # a second lock of a default mutex: blocked for good, GIL released\n")
    script = tmp_path / "blocked.py"
    script.write_text(code)
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "blocking"
        time.sleep(0.3)
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=10)
        elapsed = time.monotonic() - t0
    finally:
        p.kill()
    assert p.returncode == 143, err
    assert 1.0 <= elapsed < 5.0
    assert "ending the process 1s after SIGTERM: it is stuck" in err and "pthread_mutex_lock" in err


def test_run_ranks_timeout_kills_its_ranks():
    """Benchmarks' in-process ranks (spawn.run_ranks): after the timeout none is left."""
    from runtime_hang_model import sleep_forever
    from runtime_parity_util import job

    from phalanx_runtime.spawn import run_ranks

    before = set(lifetime.children(os.getpid()))
    with pytest.raises(TimeoutError):
        run_ranks(job(world=2), 2, fn=sleep_forever, timeout=3)
    new = set(lifetime.children(os.getpid())) - before
    assert not [p for p in new if lifetime.alive(p) and "multiprocessing.spawn" in lifetime.cmdline(p)]


def test_launcher_stops_at_once_while_waiting_in_the_rendezvous(tmp_path):
    """Node 1's launcher waits in the rendezvous for a node 0 that never comes (blocked in C, no
    worker yet): SIGTERM ends it at once, exit 143 — not after the grace period, and in a pod
    (where it is PID 1 and unhandled signals are dropped) not at the kubelet's SIGKILL."""
    from runtime_parity_util import job

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(job(world=2, nodes=2)))
    env = {**os.environ, **FAST_START, "NNODES": "2", "NODE_RANK": "1", "NPROC_PER_NODE": "1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    with (tmp_path / "launcher.log").open("w") as out:
        p = subprocess.Popen([sys.executable, "-m", "phalanx_runtime.launch", "--config", str(cfg)], env=env,
                             stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while "launching 1 workers" not in (tmp_path / "launcher.log").read_text():
            assert p.poll() is None and time.monotonic() < deadline, (tmp_path / "launcher.log").read_text()
            time.sleep(0.1)
        time.sleep(1.0)  # inside torchrun's rendezvous now
        assert not lifetime.descendants(p.pid)
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        code = p.wait(30)
        elapsed = time.monotonic() - t0
    finally:
        p.kill()
        p.wait(10)
    log = (tmp_path / "launcher.log").read_text()
    assert code == 143 and elapsed < 5.0, (code, elapsed, log[-2000:])
    assert "no worker has started yet" in log and "TCPStore" in log  # where it was blocked


# --------------------------------------------------------------------------------------------
# phalanx local


@pytest.mark.parametrize(("sig", "procs_per_node"), [(signal.SIGTERM, 2), (signal.SIGINT, 1), (signal.SIGKILL, 1)],
                         ids=["SIGTERM", "SIGINT", "SIGKILL"])
def test_stopping_phalanx_local_leaves_no_process_and_a_checkpoint(tmp_path, sig, procs_per_node):
    run = Local(write_job(tmp_path, procs=procs_per_node), tmp_path)
    try:
        run.wait_for(lambda: re.search(r"step 3/", run.text()), "step 3")
        procs = run.processes()
        assert (len(procs["launchers"]), len(procs["workers"])) == (2, 2 * procs_per_node), procs
        run.proc.send_signal(sig)
        elapsed = wait_gone(procs["launchers"] | procs["forkservers"] | procs["workers"], STOP_WITHIN_S)
        code = run.proc.wait(STOP_WITHIN_S)
    finally:
        run.cleanup()
    text = run.text()
    assert code == (-signal.SIGKILL if sig == signal.SIGKILL else 143), text[-3000:]
    # The stop checkpoint: committed at the step every rank stopped at, not at the end.
    steps = committed(run.ckpt)
    saved = re.search(r"SIGTERM: saving a checkpoint at step (\d+)", text)
    assert saved and steps == [int(saved.group(1))], (steps, text[-3000:])
    assert 3 <= steps[0] < STEPS
    print(f"\n{sig.name}: launchers and workers gone {elapsed:.1f}s after the signal; checkpoint step {steps[0]}")


def test_rank_hung_in_a_collective_is_ended_within_the_grace_period(tmp_path):
    grace = 5
    marker = tmp_path / "hung"
    env = {"PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
           "PHALANX_STOP_GRACE_SECONDS": str(grace), "TEST_HANG_RANK": "1", "TEST_HANG_AT": "3",
           "TEST_HANG_MARKER": str(marker)}
    run = Local(write_job(tmp_path, procs=1, model={"entrypoint": "runtime_hang_model:build"}), tmp_path, env)
    try:
        run.wait_for(marker.exists, "rank 1 to block in its recv")
        time.sleep(1.0)  # rank 0 is now waiting for rank 1 in its gradient all-reduce
        procs = run.processes()
        assert (len(procs["launchers"]), len(procs["workers"])) == (2, 2), procs
        run.proc.send_signal(signal.SIGTERM)
        elapsed = wait_gone(procs["launchers"] | procs["forkservers"] | procs["workers"], lifetime.escalation(3, grace))
        code = run.proc.wait(STOP_WITHIN_S)
    finally:
        run.cleanup()
    text = run.text()
    assert code == 143, text[-3000:]
    # Each worker ended itself after the grace period (not the agent's SIGKILL, one step later),
    # and said why there is no checkpoint.
    assert text.count("no checkpoint was saved") == 2, text[-3000:]
    assert elapsed < lifetime.escalation(2, grace), elapsed
    assert committed(run.ckpt) == []
    print(f"\nhung rank: every process gone {elapsed:.1f}s after SIGTERM (grace {grace}s)")
