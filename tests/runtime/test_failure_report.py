"""A failing runtime process says why in the pod's termination message: the failing rank's
exception (type, message, innermost frames, bounded well under the kubelet's 4 KiB), first report
wins; the launcher's when a worker died without one. Real processes: a worker that cannot read its
config, and the launcher with two workers of which rank 1 raises, or is SIGKILLed; what they write
is what the operator classifies (lifecycle/failure_cause.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from phalanx import constants
from phalanx.constants import EXIT_RESTART_IN_PLACE, FailureCategory
from phalanx.lifecycle.failure_cause import cause_of
from phalanx_common.net import free_port
from phalanx_runtime import failure_report

pytestmark = pytest.mark.runtime

HERE = Path(__file__).resolve().parent
FAST_START = {"PHALANX_CPU_PEAK_FLOPS": "1e11"}  # skip each worker's GEMM measurement


def read(path: Path) -> dict:
    return json.loads(path.read_text())


def as_pod(message: str, code: int = 1) -> dict:
    return {"metadata": {"name": "p", "labels": {}}, "spec": {},
            "status": {"phase": "Failed", "containerStatuses": [
                {"name": constants.CONTAINER_NAME, "state": {"terminated": {"exitCode": code, "reason": "Error", "message": message}}}]}}


@pytest.fixture
def log(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "termination-log"
    path.write_text("")  # the kubelet creates it empty
    monkeypatch.setenv(constants.ENV_TERMINATION_LOG, str(path))
    return path


def _raise_wrapped():
    try:
        open("/nonexistent/dir/file")
    except OSError as exc:
        raise RuntimeError("could not save") from exc


def test_an_exception_is_summarized_with_its_root_cause_and_frames(log):
    try:
        _raise_wrapped()
    except RuntimeError as exc:
        assert failure_report.report_exception(exc, rank=3) is True
    doc = read(log)
    error = doc["error"]
    assert doc["phase"] == "Failed" and error["type"] == "RuntimeError" and error["message"] == "could not save"
    assert error["cause"].startswith("FileNotFoundError: [Errno 2]") and error["rank"] == 3 and error["source"] == "worker"
    assert error["frames"][-1].endswith("in _raise_wrapped") and "test_failure_report.py:" in error["frames"][-1]
    cause = cause_of(as_pod(log.read_text()))
    assert (cause.category, cause.rank) == (FailureCategory.MISSING_FILE_OR_MODULE, 3)


def test_the_report_stays_well_under_the_kubelets_limit(log):
    deep = RuntimeError("x" * 100_000)
    deep.__cause__ = ValueError("y" * 100_000)
    try:
        raise deep
    except RuntimeError as exc:
        failure_report.report_exception(exc, rank=0)
    assert len(log.read_bytes()) <= failure_report.MAX_REPORT_BYTES < constants.TERMINATION_MESSAGE_MAX_BYTES
    error = read(log)["error"]
    assert error["type"] == "RuntimeError" and error["message"].startswith("xxx")
    huge = {"type": "E" * 10_000, "message": "\u2603" * 10_000, "cause": "c" * 10_000, "frames": ["f" * 10_000] * 50}
    assert len(failure_report.encode(huge)) <= failure_report.MAX_REPORT_BYTES


def test_the_first_report_wins_and_a_killed_worker_replaces_a_peers(log):
    assert failure_report.write_report({"type": "PermissionError", "message": "first", "rank": 1})
    assert not failure_report.write_report({"type": "RuntimeError", "message": "Connection closed by peer", "rank": 0})
    assert read(log)["error"]["message"] == "first"
    killed = failure_report.child_failure({0: SimpleNamespace(exitcode=1, local_rank=0, timestamp=5),
                              2: SimpleNamespace(exitcode=-9, local_rank=0, timestamp=9)})
    assert killed is not None and killed[1] is True
    assert failure_report.write_report(killed[0], replace=killed[1])
    assert read(log)["error"]["message"] == "worker rank 2 (local rank 0) was killed by SIGKILL (most often the kernel's out-of-memory killer)"
    # A rank's own report (it raised, then was killed) is kept.
    log.write_text("")
    assert failure_report.write_report({"type": "ValueError", "message": "own words", "rank": 2})
    assert not failure_report.write_report(killed[0], replace=True) and read(log)["error"]["message"] == "own words"
    # Workers the agent stopped (SIGTERM) after another failed come last.
    exited = failure_report.child_failure({0: SimpleNamespace(exitcode=-15, local_rank=0, timestamp=0),
                              4: SimpleNamespace(exitcode=1, local_rank=0, timestamp=2),
                              1: SimpleNamespace(exitcode=1, local_rank=1, timestamp=1)})
    assert exited == (failure_report.worker_death(1, 1, 1), False)
    assert failure_report.child_failure({0: SimpleNamespace(exitcode=-15, local_rank=0, timestamp=0)})[1] is False


def test_rank0s_progress_gives_way_to_an_error(log):
    log.write_text('{"phase": "Succeeded", "step": 30}')
    assert failure_report.write_report({"type": "E", "message": "m"})
    assert read(log)["error"]["type"] == "E"


def test_rank0s_final_progress_leaves_a_peers_report(log):
    """Rank 0 finishes while another rank of its pod failed: the pod's message stays that error."""
    from phalanx_runtime.components.progress import Progress, write_final

    assert failure_report.write_report({"type": "RuntimeError", "message": "export failed", "rank": 1})
    progress = Progress(total_steps=10, world_size=2)
    progress.update(step=10, phase="Succeeded")
    assert write_final(progress, str(log)) is False
    assert read(log)["error"]["message"] == "export failed"


def test_no_report_outside_a_pod_nor_for_a_chosen_exit(tmp_path, log):
    assert not failure_report.write_report({"type": "E"}, str(tmp_path / "absent"))
    assert not (tmp_path / "absent").exists()
    assert not failure_report.report_exception(SystemExit(143)) and not failure_report.report_exception(KeyboardInterrupt())
    assert log.read_text() == ""


def _run(args: list[str], log: Path, tmp_path: Path, env: dict[str, str] | None = None, timeout: float = 180):
    full = {**os.environ, **FAST_START, constants.ENV_TERMINATION_LOG: str(log),
            "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]), **(env or {})}
    return subprocess.run([sys.executable, *args], env=full, capture_output=True, text=True, timeout=timeout)


def test_a_worker_process_that_fails_writes_its_report(tmp_path, log):
    p = _run(["-m", "phalanx_runtime.train", "--config", str(tmp_path / "missing.json")], log, tmp_path, {"RANK": "7"})
    assert p.returncode == 1 and "Traceback" in p.stderr
    error = read(log)["error"]
    assert error["rank"] == 7 and error["type"] == "FileNotFoundError" and error["source"] == "worker", error
    cause = cause_of(as_pod(log.read_text()))
    assert cause.category == FailureCategory.MISSING_FILE_OR_MODULE and cause.rank == 7
    assert cause.text.startswith("FileNotFoundError: ") and "missing.json" in cause.text


FAILING_MODEL = """\
import os, signal
from runtime_user_model import build as real_build

def build(ctx):
    if ctx.rank == 1:
        if os.environ.get("HOW") == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise PermissionError(13, "Permission denied", "/checkpoints")
    return real_build(ctx)
"""


def _launch_failing(tmp_path: Path, log: Path, how: str):
    sys.path.insert(0, str(HERE))
    from runtime_parity_util import job

    sys.path.remove(str(HERE))
    (tmp_path / "failing_model.py").write_text(FAILING_MODEL)
    doc = job(world=2)
    doc["spec"]["model"] = {"entrypoint": "failing_model:build"}
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(doc))
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path), str(HERE), os.environ.get("PYTHONPATH", "")]),
           "NNODES": "1", "NODE_RANK": "0", "NPROC_PER_NODE": "2", "HOW": how}
    return _run(["-m", "phalanx_runtime.launch", "--config", str(cfg)], log, tmp_path, env)


@pytest.mark.parametrize(("how", "code", "category", "says"), [
    ("raise", 1, FailureCategory.PERMISSION_DENIED, "PermissionError: [Errno 13] Permission denied: '/checkpoints'"),
    ("kill", EXIT_RESTART_IN_PLACE, FailureCategory.OUT_OF_MEMORY,
     "WorkerFailed: worker rank 1 (local rank 1) was killed by SIGKILL"),
])
def test_the_launcher_leaves_the_failing_ranks_cause(tmp_path, log, how, code, category, says):
    """torchrun with two workers; rank 1 fails in its model build (raises, or dies by SIGKILL as the
    OOM killer would end it). The pod's termination message names rank 1 and why, not rank 0,
    which fails after it (its peer gone) or is stopped by torchrun. A worker killed by a signal
    ends the launcher with the restart-in-place code; an exception with 1."""
    p = _launch_failing(tmp_path, log, how)
    assert p.returncode == code, p.stderr[-3000:]
    error = read(log)["error"]
    assert error["rank"] == 1, (error, p.stderr[-3000:])
    assert len(log.read_bytes()) <= failure_report.MAX_REPORT_BYTES
    cause = cause_of(as_pod(log.read_text()))
    assert cause.category == category and cause.rank == 1 and cause.text.startswith(says), cause


def test_two_nodes_a_killed_rank_restarts_both_pods_in_place(tmp_path):
    """Two launchers (two pods of one node-rank each, one worker each); rank 1's worker dies by
    SIGKILL. Both launchers exit with the restart-in-place code: the killed rank's, and its peer's,
    whose collective broke (its report says the peer is gone)."""
    sys.path.insert(0, str(HERE))
    from runtime_parity_util import job

    sys.path.remove(str(HERE))
    (tmp_path / "failing_model.py").write_text(FAILING_MODEL)
    doc = job(world=2, nodes=2)
    doc["spec"]["model"] = {"entrypoint": "failing_model:build"}
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(doc))
    port = str(free_port())
    procs = []
    for node_rank in (0, 1):
        log = tmp_path / f"termination-log-{node_rank}"
        log.write_text("")
        env = {**os.environ, **FAST_START, constants.ENV_TERMINATION_LOG: str(log), "HOW": "kill",
               "PYTHONPATH": os.pathsep.join([str(tmp_path), str(HERE), os.environ.get("PYTHONPATH", "")]),
               "NNODES": "2", "NODE_RANK": str(node_rank), "NPROC_PER_NODE": "1", "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": port}
        procs.append(subprocess.Popen([sys.executable, "-m", "phalanx_runtime.launch", "--config", str(cfg)], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    outcomes = [(p.wait(timeout=240), p.stderr.read()[-2000:]) for p in procs]
    assert [code for code, _ in outcomes] == [EXIT_RESTART_IN_PLACE, EXIT_RESTART_IN_PLACE], outcomes
