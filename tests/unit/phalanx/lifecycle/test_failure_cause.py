"""Why a pod failed: the classification table, hostile termination messages, the rendered
termination message policy, the reflector's bound, and the whole path (a failed pod's termination
message → decide() → the Failed/Restarting condition, the Warning Event, status.lastFailure)."""

from __future__ import annotations

import copy
import json
import time

import pytest

from phalanx import constants
from phalanx.api.types import TrainingJobStatus
from phalanx.constants import FailureCategory
from phalanx.lifecycle.failure_cause import (
    MAX_MESSAGE_CHARS,
    MAX_TEXT,
    Cause,
    cause_of,
    classify,
    parse_report,
    precedence,
    printable,
)
from phalanx.podreflector import pod_entry
from phalanx.render import render_children
from phalanx.validate import parse_job
from tests.unit.phalanx.lifecycle.test_reconcile import Sim, cond


def failed_pod(message=None, code=1, reason="Error", memory="2Gi", rank=0):
    term = {"exitCode": code, "reason": reason}
    if message is not None:
        term["message"] = message
    return {"metadata": {"name": f"job-node-{rank}-0", "labels": {constants.LABEL_NODE_RANK: str(rank)}},
            "spec": {"containers": [{"name": constants.CONTAINER_NAME, "resources": {"limits": {"memory": memory}}}]},
            "status": {"phase": "Failed", "containerStatuses": [{"name": constants.CONTAINER_NAME, "state": {"terminated": term}}]}}


def report(**error):
    return json.dumps({"phase": "Failed", "error": error})


TRACEBACK = 'Traceback (most recent call last):\n  File "<string>", line 1, in <module>\n{}\n'
TORCHRUN_TAIL = """\
[rank1]: Traceback (most recent call last):
[rank1]:   File "/app/train.py", line 12, in <module>
[rank1]:     os.makedirs("/checkpoints/run")
[rank1]: PermissionError: [Errno 13] Permission denied: '/checkpoints'
[rank0]: RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.2]:1234
E1130 12:00:00.123000 140 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) local_rank: 1
Traceback (most recent call last):
  File "/usr/bin/torchrun", line 8, in <module>
    sys.exit(main())
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  rank      : 1 (local_rank: 1)
  exitcode  : {code} (pid: 1234)
  error_file: <N/A>
  traceback : {trace}
============================================================
"""
SIGNALLED_TAIL = TORCHRUN_TAIL.split("E1130")[1].format(code=-9, trace="Signal 9 (SIGKILL) received by PID 1234")
EXITED_TAIL = TORCHRUN_TAIL.split("E1130")[1].format(code=1, trace="To enable traceback see: https://pytorch.org/docs")

# name: (exit code, container reason, termination message, category, text the cause says, rank)
CASES = {
    "OOMKilled, no message": (137, "OOMKilled", None, FailureCategory.OUT_OF_MEMORY, "exceeded its memory limit 2Gi", None),
    "exit 137, no message": (137, "Error", None, FailureCategory.OUT_OF_MEMORY, "killed by SIGKILL (exit 137)", None),
    "CUDA OOM in a traceback": (1, "Error", TRACEBACK.format("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"),
                                FailureCategory.OUT_OF_MEMORY, "torch.OutOfMemoryError: CUDA out of memory", None),
    "report: CUDA OOM": (1, "Error", report(type="torch.OutOfMemoryError", message="CUDA out of memory. Tried to allocate 20 GiB", rank=5),
                         FailureCategory.OUT_OF_MEMORY, "CUDA out of memory", 5),
    "report: permission denied": (1, "Error", report(type="PermissionError", message="[Errno 13] Permission denied: '/checkpoints'",
                                                     frames=["x/checkpoint.py:88 in save"], rank=0, source="worker"),
                                  FailureCategory.PERMISSION_DENIED, "PermissionError: [Errno 13] Permission denied: '/checkpoints' at x/checkpoint.py:88 in save", 0),
    "report: wrapped permission error": (1, "Error", report(type="RuntimeError", message="save failed", cause="PermissionError: [Errno 13] x"),
                                         FailureCategory.PERMISSION_DENIED, "RuntimeError: save failed (from PermissionError: [Errno 13] x)", None),
    "report: a long message keeps its root cause": (1, "Error", report(type="RuntimeError", message="x" * 2000,
                                                                     cause="PermissionError: [Errno 13] Permission denied: '/ckpt'"),
                                                   FailureCategory.PERMISSION_DENIED, "(from PermissionError: [Errno 13] Permission denied: '/ckpt')", None),
    "a long exception line, classified whole": (1, "Error", TRACEBACK.format("RuntimeError: " + "y" * 600 + " CUDA out of memory"),
                                                FailureCategory.OUT_OF_MEMORY, "RuntimeError: yyy", None),
    "read-only file system": (1, "Error", TRACEBACK.format("OSError: [Errno 30] Read-only file system: '/data'"),
                              FailureCategory.PERMISSION_DENIED, "Read-only file system", None),
    "NCCL error": (1, "Error", TRACEBACK.format("torch.distributed.DistBackendError: NCCL error in: NCCLUtils.hpp:275, unhandled system error"),
                   FailureCategory.COMMUNICATION, "DistBackendError: NCCL error", None),
    "gloo peer gone": (1, "Error", TRACEBACK.format("RuntimeError: [gloo/transport/tcp/pair.cc:534] Connection closed by peer"),
                       FailureCategory.COMMUNICATION, "Connection closed by peer", None),
    "report: rendezvous timeout": (1, "Error", report(type="torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError", message="", source="launcher"),
                                   FailureCategory.COMMUNICATION, "RendezvousTimeoutError", None),
    "import error": (1, "Error", TRACEBACK.format("ModuleNotFoundError: No module named 'transformers'"),
                     FailureCategory.MISSING_FILE_OR_MODULE, "No module named 'transformers'", None),
    "missing file": (1, "Error", TRACEBACK.format("FileNotFoundError: [Errno 2] No such file or directory: '/data/tokens.bin'"),
                     FailureCategory.MISSING_FILE_OR_MODULE, "FileNotFoundError", None),
    "executable not found": (128, "StartError", 'failed to create containerd task: exec: "trian.py": executable file not found in $PATH',
                             FailureCategory.MISSING_FILE_OR_MODULE, "executable file not found", None),
    "the launcher refused its config": (2, "Error", report(type="InvalidJob", message="cannot read config /etc/phalanx/config.json: FileNotFoundError"),
                                        FailureCategory.INVALID_CONFIG, "InvalidJob: cannot read config", None),
    "user code": (1, "Error", TRACEBACK.format("RuntimeError: boom from rank"), FailureCategory.USER_CODE, "RuntimeError: boom from rank", None),
    "user code, stdout interleaved after it": (1, "Error", TRACEBACK.format("RuntimeError: boom from rank 1\nstarting"), FailureCategory.USER_CODE,
                                               "RuntimeError: boom from rank 1", None),
    "a message continued after a colon": (1, "Error", TRACEBACK.format("RuntimeError: NCCL failed:\nunhandled system error"),
                                          FailureCategory.COMMUNICATION, "RuntimeError: NCCL failed: unhandled system error", None),
    "report: user code": (1, "Error", report(type="ValueError", message="bad shape", rank=2), FailureCategory.USER_CODE, "ValueError: bad shape", 2),
    "torchrun: the worker's own error, not its peer's": (1, "Error", TORCHRUN_TAIL.format(code=1, trace="x"),
                                                         FailureCategory.PERMISSION_DENIED, "PermissionError: [Errno 13]", 1),
    "torchrun: only its summary, a worker killed": (1, "Error", SIGNALLED_TAIL, FailureCategory.OUT_OF_MEMORY,
                                                    "rank 1 exited with code -9: Signal 9 (SIGKILL) received by PID 1234", 1),
    "torchrun: only its summary": (1, "Error", EXITED_TAIL, FailureCategory.USER_CODE, "rank 1 exited with code 1", 1),
    "launcher: worker killed": (1, "Error", report(type="WorkerFailed", message="worker rank 3 (local rank 1) was killed by SIGKILL", rank=3),
                                FailureCategory.OUT_OF_MEMORY, "worker rank 3 (local rank 1) was killed by SIGKILL", 3),
    "shell: Killed": (1, "Error", "step 5\nbash: line 1:    12 Killed                  python train.py\n", FailureCategory.OUT_OF_MEMORY, "Killed", None),
    "plain log, no error": (3, "Error", "loading\nstep 1\nexiting with 3\n", FailureCategory.UNKNOWN, "loading | step 1 | exiting with 3", None),
    "rank 0's final progress": (1, "Error", '{"phase": "Running", "step": 12}', FailureCategory.UNKNOWN, "", None),
    "nothing at all": (1, "Error", None, FailureCategory.UNKNOWN, "", None),
}


@pytest.mark.parametrize("name", CASES)
def test_classification_table(name):
    code, reason, message, category, text, rank = CASES[name]
    cause = cause_of(failed_pod(message, code, reason))
    assert cause.category == category, cause
    assert text in cause.text if text else cause.text == "", cause
    assert cause.rank == rank
    assert len(cause.text) <= MAX_TEXT


def test_the_container_reason_and_exit_code_decide_before_the_text():
    assert classify(137, "OOMKilled", "RuntimeError: boom", True) == FailureCategory.OUT_OF_MEMORY
    assert classify(137, "Error", "RuntimeError: boom", True) == FailureCategory.OUT_OF_MEMORY
    assert classify(137, "Error", "PermissionError: x", True) == FailureCategory.PERMISSION_DENIED  # what it said, then the exit
    assert classify(1, "Error", "anything", False) == FailureCategory.UNKNOWN
    assert classify(1, "Error", "anything", True) == FailureCategory.USER_CODE


# --- Hostile termination messages ----------------------------------------------------------------

HOSTILE = {
    "huge": "A" * 1_000_000 + "\nRuntimeError: the tail is read",
    "binary": "\x00\x01\x02\xff\xfe" * 1000 + "\ufffd\ufffd",
    "control and escape characters": "\x1b[31mRuntimeError: \x1b]0;title\x07red\x00\x08\x7f \u202eevil\u200b\r\nmore\x1b[0m",
    "deep JSON": '{"error": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "deep JSON, just past the limit": '{"error": {"type": [[[["x"]]]]}}',
    "fake keys and wrong types": json.dumps({"error": {"type": 5, "message": ["x"], "rank": -1, "frames": "f", "cause": None,
                                                       "__proto__": "x", "extra": {"a": 1}, "source": "x" * 5000}}),
    "huge strings in a report": json.dumps({"error": {"type": "E" * 100_000, "message": "m" * 100_000, "rank": 2**80}}),
    "rank a bool or a float": json.dumps({"error": {"type": "E", "rank": True}}),
    "a report's frames too many": json.dumps({"error": {"type": "E", "frames": ["f"] * 10_000}}),
    "NaN and infinities": '{"error": {"type": "E", "message": "m", "rank": NaN}, "step": Infinity}',
    "error not an object": '{"phase": "Failed", "error": "RuntimeError: x"}',
    "a JSON list": "[1, 2, 3]",
    "unterminated JSON": '{"error": {"type": "PermissionError", "message": "',
    "many lines": "\n".join(f"ValueError: line {i}" for i in range(100_000)),
    "one long line of word characters": "a." * 200_000 + "Error",
    "torchrun block with hostile fields": "Root Cause\n  rank : " + "9" * 5000 + "\n  exitcode : \u00b2\n  traceback : " + "x" * 10_000,
}


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_messages_give_a_bounded_printable_cause(name):
    t0 = time.monotonic()
    cause = cause_of(failed_pod(HOSTILE[name]))
    assert time.monotonic() - t0 < 2.0, "linear in the message"
    assert isinstance(cause.category, FailureCategory) and len(cause.text) <= MAX_TEXT
    assert cause.text == printable(cause.text) and "\n" not in cause.text and "\x1b" not in cause.text
    assert cause.rank is None or 0 <= cause.rank < 2**31
    json.dumps(TrainingJobStatus(last_failure={"pod": "p", "reason": "exited", "category": cause.category,
                                                "message": cause.text}).model_dump(mode="json"), allow_nan=False)


def test_a_huge_message_is_read_from_its_tail_and_control_characters_go():
    assert cause_of(failed_pod(HOSTILE["huge"])).text == "RuntimeError: the tail is read"
    text = cause_of(failed_pod(HOSTILE["control and escape characters"])).text
    assert text == "RuntimeError: red evil"  # "more", the next line, is not part of its message


def test_output_interleaved_after_the_exception_is_not_its_message():
    assert cause_of(failed_pod(TRACEBACK.format("RuntimeError: boom from rank 1\nstarting"))).text == "RuntimeError: boom from rank 1"


def test_a_report_takes_only_known_valid_keys():
    assert parse_report(HOSTILE["fake keys and wrong types"]) is None  # no valid type or message left
    parsed = parse_report(json.dumps({"error": {"type": "E", "message": "m\x00\n x", "rank": 3, "evil": "x",
                                                "frames": ["a.py:1 in f"], "source": "worker"}}))
    assert parsed == {"type": "E", "message": "m x", "rank": 3, "frames": ["a.py:1 in f"], "source": "worker"}
    assert parse_report(HOSTILE["deep JSON, just past the limit"]) is None
    assert parse_report(HOSTILE["huge strings in a report"]) is None
    assert parse_report('{"step": 3}') is None and parse_report("RuntimeError: x") is None


def test_the_reflector_keeps_a_bounded_tail_of_the_message():
    raw = failed_pod("x" * 100_000 + "END")
    raw["metadata"]["namespace"] = "team"
    kept = pod_entry(raw)["status"]["containerStatuses"][0]["state"]["terminated"]
    assert len(kept["message"]) == constants.TERMINATION_MESSAGE_MAX_BYTES == MAX_MESSAGE_CHARS and kept["message"].endswith("END")
    assert kept["exitCode"] == 1 and kept["reason"] == "Error"
    raw["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = {"not": "a string"}
    assert pod_entry(raw)["status"]["containerStatuses"][0]["state"]["terminated"]["message"] is None


# --- Rendering --------------------------------------------------------------------------------


def test_every_pod_of_the_gang_falls_back_to_its_log(job_obj):
    plain = render_children(parse_job(job_obj))
    roles = copy.deepcopy(job_obj)
    roles["spec"].pop("model")
    roles["spec"].update(command=["torchrun", "train.py"], roles=[{"name": "ps", "replicas": 1, "command": ["python", "ps.py"]}])
    pods = [c for c in plain + render_children(parse_job(roles)) if c["kind"] == "Pod"]
    assert len(pods) == 5 and any(p["metadata"]["labels"].get(constants.LABEL_ROLE) == "ps" for p in pods)
    for pod in pods:
        assert [c["terminationMessagePolicy"] for c in pod["spec"]["containers"]] == ["FallbackToLogsOnError"]


# --- The whole path: pod → decide() → conditions, Event, status ----------------------------------


def _fail(sim, rank, message, code=1, reason="Error"):
    sim.set_pods("Failed", ready=False, exit_code=code, only=rank)
    for pod in sim.pods.values():
        if pod["metadata"]["labels"][constants.LABEL_NODE_RANK] == str(rank):
            term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
            term.update(reason=reason, **({"message": message} if message is not None else {}))


def test_a_failed_rank_says_why_in_the_failed_condition_an_event_and_the_status(job_obj):
    sim = Sim(job_obj)
    sim.run_until_running()
    _fail(sim, 0, report(type="PermissionError", message="[Errno 13] Permission denied: '/checkpoints'", rank=0))
    sim.step()
    failed = cond(sim.status, "Failed")
    assert sim.status["phase"] == "Failed" and failed["reason"] == "PermanentFailure"
    assert failed["message"] == ("pod job-node-0-0 (node-rank 0) exited with code 1 (permanent); cause: PermissionDenied in "
                                 "rank 0: PermissionError: [Errno 13] Permission denied: '/checkpoints'")
    assert ("Warning", "PermanentFailure", failed["message"]) in sim.events
    assert sim.status["lastFailure"] == {"pod": "job-node-0-0", "nodeRank": 0, "node": "n-0", "rank": 0, "exitCode": 1, "reason": "exited",
                                         "category": "PermissionDenied", "time": "2026-11-30T12:00:00Z",
                                         "message": "PermissionError: [Errno 13] Permission denied: '/checkpoints'"}
    TrainingJobStatus.model_validate(sim.status)  # what the CRD's schema takes


def test_a_retryable_failure_says_why_in_restarting_and_keeps_it_after_the_restart(job_obj):
    sim = Sim(job_obj)
    sim.run_until_running()
    _fail(sim, 1, None, code=137, reason="OOMKilled")
    sim.step()
    restarting = cond(sim.status, "Restarting")
    assert sim.status["phase"] == "Restarting"
    assert restarting["message"].endswith("after pod job-node-1-0 (node-rank 1) exited with code 137 (retryable); cause: "
                                          "OutOfMemory: OOMKilled: the container exceeded its memory limit")
    assert any(e[0] == "Warning" and "OutOfMemory" in e[2] for e in sim.events)
    assert sim.status["lastFailure"]["category"] == "OutOfMemory" and sim.status["lastFailure"]["nodeRank"] == 1
    sim.now = sim.now.replace(minute=5)
    sim.step()
    sim.step()
    sim.set_pods("Running")
    sim.step()
    assert sim.status["phase"] == "Running" and sim.status["lastFailure"]["category"] == "OutOfMemory"


def test_the_rank_with_the_root_cause_names_the_failure_not_the_peer_it_broke(job_obj):
    """Rank 0 fails because rank 1 is gone: both pods Failed in one observation; rank 1's own
    error is the cause."""
    sim = Sim(job_obj)
    sim.run_until_running()
    _fail(sim, 0, TRACEBACK.format("RuntimeError: [gloo/transport/tcp/pair.cc:534] Connection closed by peer"))
    _fail(sim, 1, TRACEBACK.format("ModuleNotFoundError: No module named 'mylib'"))
    sim.step()
    message = cond(sim.status, "Failed")["message"]
    assert message.startswith("pod job-node-1-0 (node-rank 1)") and "MissingFileOrModule: ModuleNotFoundError" in message


def test_an_evicted_pod_still_comes_first_and_restarts_the_gang(job_obj):
    sim = Sim(job_obj)
    sim.run_until_running()
    _fail(sim, 0, TRACEBACK.format("RuntimeError: peer vanished"))
    sim.set_pods("Failed", reason="Evicted", only=1)
    sim.step()
    assert sim.status["phase"] == "Restarting" and cond(sim.status, "Restarting")["reason"] == "Evicted"
    assert sim.status["lastFailure"]["category"] == "Infrastructure"


def test_precedence_and_describe():
    assert [precedence(c) for c in (None, Cause(FailureCategory.INFRASTRUCTURE), Cause(FailureCategory.USER_CODE), Cause(FailureCategory.OUT_OF_MEMORY),
                                    Cause(FailureCategory.COMMUNICATION), Cause(FailureCategory.UNKNOWN))] == [0, 0, 1, 1, 2, 2]
    assert Cause(FailureCategory.USER_CODE, "E: x", 3).describe() == "UserCodeError in rank 3: E: x"
    assert Cause(FailureCategory.UNKNOWN).describe() == "Unknown"


def test_a_json_log_line_is_the_error_not_rank_0s_progress():
    """Only a JSON object with a step is rank 0's final progress; a JSON logger's last line is read."""
    assert cause_of(failed_pod('{"step": 5, "loss": 1.0}')).text == ""  # the failure's own message says the rest
    cause = cause_of(failed_pod('{"level": "error", "msg": "dataset missing"}'))
    assert "dataset missing" in cause.text


def test_the_runtime_report_keeps_a_hidden_context_hidden():
    from phalanx_runtime.failure_report import summarize

    try:
        try:
            raise PermissionError("[Errno 13] secret path")
        except PermissionError:
            raise ValueError("bad config") from None
    except ValueError as exc:
        error = summarize(exc)
    assert constants.ErrorKey.CAUSE not in error and "secret" not in json.dumps(error)


def test_a_failed_preflight_names_its_rank_and_comes_before_its_peers():
    failing = cause_of(failed_pod(report(type="phalanx_runtime.preflight.PreflightError", rank=9, source="worker",
                                         message="pre-flight device check failed on node gpu-7 (rank 9): CUDA error")))
    peer = cause_of(failed_pod(report(type="phalanx_runtime.preflight.PreflightPeerError", rank=0, source="worker",
                                      message="pre-flight check failed on 1 rank(s) (rank 9 among them)")))
    assert (failing.category, failing.rank) == (FailureCategory.PREFLIGHT, 9) and "node gpu-7" in failing.text
    assert peer.category == FailureCategory.COMMUNICATION  # a peer gone: not its own node's fault
    assert precedence(failing) < precedence(peer)


def test_a_failed_preflight_is_retryable_whatever_its_exit_code():
    from phalanx.api.types import FailurePolicy
    from phalanx.lifecycle.failures import classify_pod

    bad_node = failed_pod(report(type="phalanx_runtime.preflight.PreflightError", rank=9, source="worker",
                                 message="pre-flight device check failed on node gpu-7 (rank 9)"), code=1)
    user_error = failed_pod(report(type="ValueError", rank=9, source="worker", message="bad"), code=1)
    assert classify_pod(bad_node, FailurePolicy()).retryable  # placed again, the node kept out
    assert not classify_pod(user_error, FailurePolicy()).retryable
