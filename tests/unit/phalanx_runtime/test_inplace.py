"""phalanx_runtime/inplace.py: which worker failures restart the pod in place, and the operator's requests."""

from __future__ import annotations

import json
import threading

import pytest

from phalanx_common.contract import (
    ENV_RESTART_BASE,
    ENV_RESTART_REQUEST_FILE,
    EXIT_RESTART_IN_PLACE,
    LAUNCH_COUNT_FILE,
)
from phalanx_runtime import inplace


def report(type_: str, message: str) -> dict:
    return {"phase": "Failed", "error": {"type": type_, "message": message}}


@pytest.mark.parametrize(("codes", "written", "code"), [
    pytest.param([-9], None, EXIT_RESTART_IN_PLACE, id="a-worker-killed"),
    pytest.param([-11, -15], None, EXIT_RESTART_IN_PLACE, id="a-segfault-and-a-stopped-peer"),
    pytest.param([-15], None, 1, id="only-stopped-by-the-agent"),
    pytest.param([1], report("RuntimeError", "[gloo/transport/tcp/pair.cc:534] Connection closed by peer"),
                 EXIT_RESTART_IN_PLACE, id="a-peer-gone-gloo"),
    pytest.param([1], report("torch.distributed.DistBackendError", "NCCL error in: ..."), EXIT_RESTART_IN_PLACE,
                 id="a-peer-gone-nccl"),
    pytest.param([1], report("ValueError", "bad shape"), 1, id="a-bug-fails"),
    pytest.param([1], None, 1, id="no-report"),
    pytest.param([1], {"step": 3}, 1, id="a-progress-record"),
])
def test_exit_code_after(codes, written, code):
    assert inplace.exit_code_after(codes, written, 1) == code


def test_read_report(tmp_path):
    path = tmp_path / "termination-log"
    assert inplace.read_report(str(path)) is None
    path.write_text(json.dumps(report("ValueError", "x")))
    assert inplace.read_report(str(path))["error"]["type"] == "ValueError"
    path.write_text("not json")
    assert inplace.read_report(str(path)) is None


def test_launches_are_counted_in_the_scratch_dir(tmp_path):
    assert [inplace.count_launch(str(tmp_path)) for _ in range(3)] == [0, 1, 2]
    assert (tmp_path / LAUNCH_COUNT_FILE).read_text() == "3"
    assert inplace.count_launch(None) == 0


@pytest.mark.parametrize(("text", "restarts", "wanted"), [
    pytest.param("", 0, 0, id="no-request"),
    pytest.param("1", 0, 1, id="asked-once"),
    pytest.param("1", 1, 0, id="already-restarted-that-far"),
    pytest.param("2\n", 1, 2, id="asked-again"),
    pytest.param("garbage", 0, 0, id="unreadable"),
])
def test_requests(tmp_path, text, restarts, wanted):
    path = tmp_path / "restart-request"
    path.write_text(text)
    assert inplace.RestartRequests(str(path), restarts, lambda _: None).wanted() == wanted


def test_a_new_request_is_acted_on_once(tmp_path):
    path, scratch = tmp_path / "restart-request", tmp_path / "scratch"
    scratch.mkdir()
    path.write_text("")
    seen, done = [], threading.Event()

    def on_request(asked: int) -> None:
        seen.append(asked)
        done.set()

    watcher = inplace.watch_requests({ENV_RESTART_REQUEST_FILE: str(path)}, str(scratch), on_request)
    assert watcher is not None
    watcher.poll = 0.01
    path.write_text("1")
    assert done.wait(5) and seen == [1]
    watcher.stop()


def test_no_request_file_no_watcher(tmp_path):
    assert inplace.watch_requests({}, str(tmp_path), lambda _: None) is None


def test_a_replacement_pod_counts_from_the_gangs_restarts(tmp_path):
    """A pod created on a spare node (ENV_RESTART_BASE 2) does not take the gang's request 2 as
    its own; it takes 3."""
    path, scratch = tmp_path / "restart-request", tmp_path / "scratch"
    scratch.mkdir()
    path.write_text("2")
    watcher = inplace.watch_requests({ENV_RESTART_REQUEST_FILE: str(path), ENV_RESTART_BASE: "2"}, str(scratch),
                                     lambda _: None)
    assert watcher is not None
    watcher.stop()
    assert watcher.restarts == 2 and watcher.wanted() == 0
    path.write_text("3")
    assert watcher.wanted() == 3


@pytest.mark.parametrize(("env", "restarts", "delay"), [
    pytest.param({"PHALANX_RESTART_BACKOFF_SECONDS": "10", "PHALANX_RESTART_MAX_BACKOFF_SECONDS": "300"}, 0, 0,
                 id="first-start-no-wait"),
    pytest.param({"PHALANX_RESTART_BACKOFF_SECONDS": "10", "PHALANX_RESTART_MAX_BACKOFF_SECONDS": "300"}, 1, 10,
                 id="first-restart-waits-the-backoff"),
    pytest.param({"PHALANX_RESTART_BACKOFF_SECONDS": "10", "PHALANX_RESTART_MAX_BACKOFF_SECONDS": "25"}, 3, 25,
                 id="doubled-and-capped"),
    pytest.param({"PHALANX_RESTART_BACKOFF_SECONDS": "0", "PHALANX_RESTART_MAX_BACKOFF_SECONDS": "300"}, 2, 0,
                 id="backoff-zero"),
    pytest.param({"PHALANX_RESTART_BACKOFF_SECONDS": "1e9", "PHALANX_RESTART_MAX_BACKOFF_SECONDS": "300"}, 2, 0,
                 id="malformed-means-none"),
    pytest.param({}, 2, 0, id="a-pod-from-before-the-backoff-env"),
])
def test_a_pod_restarted_in_place_waits_the_jobs_backoff(tmp_path, env, restarts, delay):
    slept = []
    watcher = inplace.RestartRequests(str(tmp_path / "restart-request"), restarts, lambda _: None)
    assert inplace.wait_backoff(env, watcher, sleep=slept.append) == delay
    assert slept == ([delay] if delay else [])
    assert inplace.wait_backoff(env, None, sleep=slept.append) == 0  # a pod that does not restart in place
