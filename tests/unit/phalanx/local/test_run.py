"""`phalanx local` with spec.roles (pure parts): when the run ends (`verdict`: the success roles'
processes all exited 0, a failure, a stop) and which processes the job's success needs
(spec.success_roles)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from phalanx.api.slots import slots, worker
from phalanx.local.env import slot_label, termination_log
from phalanx.local.run import (
    EXIT_PREEMPTED,
    _print_summary,
    _summary,
    reported_progress,
    required_processes,
    role_exit_codes,
    verdict,
)
from tests.unit.phalanx.local.test_env import TF_ROLES, cfg

# --- when the run ends ------------------------------------------------------------------------

@pytest.mark.parametrize(("codes", "required", "kw", "want"), [
    ([None, None, None], [0, 1, 2], {}, None),
    ([0, None, None], [0, 1, 2], {}, None),              # every role: the others still run
    ([0, 0, 0], [0, 1, 2], {}, "done"),
    ([None, None, 0, None], [2], {}, "done"),            # the chief alone: the servers are stopped
    ([0, 0, None, None], [2], {}, None),                  # workers done, the chief not yet
    ([None, None, 0, 3], [2], {}, "done"),               # success wins over a failure in the same poll (as the operator)
    ([None, 1, None], [0], {}, "failed"),
    ([None, EXIT_PREEMPTED, None], [0], {}, "stopped"),  # a pod stopped by SIGTERM
    ([None, None], [0], {"stopping": True}, "stopped"),
    ([0, None], [0], {"stopping": True}, "stopped"),
    ([None, None], [0], {"timed_out": True}, "timeout"),
    ([0, None], [0], {"timed_out": True}, "done"),
    ([None, None], [], {}, None),                         # nothing required: never "done" by itself
])
def test_verdict(codes, required, kw, want):
    assert verdict(codes, required, **kw) == want


def test_required_processes_follow_the_success_roles():
    tf = cfg(framework="tensorflow", roles=TF_ROLES)
    gang = slots(tf.spec)
    assert [str(s) for s in gang] == ["node-rank 0", "node-rank 1", "chief 0", "ps 0", "ps 1", "evaluator 0"]
    assert required_processes(tf, gang) == [2]  # tensorflow with a chief: the chief
    plain = cfg(roles=[{"name": "aux", "replicas": 2}])
    assert required_processes(plain, slots(plain.spec)) == [0, 1, 2, 3]  # default: every role
    policy = cfg(roles=[{"name": "aux"}], successPolicy={"roles": ["worker"]})
    assert required_processes(policy, slots(policy.spec)) == [0, 1]
    no_roles = cfg()
    assert required_processes(no_roles, slots(no_roles.spec)) == [0, 1]


def test_role_exit_codes_and_labels():
    gang = slots(cfg(framework="tensorflow", roles=TF_ROLES).spec)
    assert role_exit_codes(gang, [-15, -15, 0, -15, -15, None]) == {
        "worker": [-15, -15], "chief": [0], "ps": [-15, -15], "evaluator": [None]}
    assert [slot_label(s) for s in gang[1:4]] == ["node 1", "chief 0", "ps 0"]


# --- each process's command and env -----------------------------------------------------------









# --- a command job's summary: what rank 0 reported, from its termination log ---------------------


FINAL = {"phase": "Succeeded", "step": 80, "totalSteps": 80, "loss": 1.25, "tokensPerSecond": 10.0,
         "metrics": {"eval_loss": 1.5, "bad name": 1}, "lastCheckpoint": {"step": 80, "path": "/c/80"},
         "resumedStep": 40, "epoch": 2.0}


@pytest.mark.parametrize(("content", "reported"), [
    (None, {}),  # no file: the script did not report
    (json.dumps(FINAL), {"step": 80, "loss": 1.25, "totalSteps": 80, "metrics": {"eval_loss": 1.5},
                         "lastCheckpoint": {"step": 80, "path": "/c/80"}, "resumedStep": 40}),
    (json.dumps({"phase": "Failed", "error": {"type": "ValueError"}}), {}),  # a failure report
    ("Killed\n", {}),
    ("", {}),
    (json.dumps({"step": "80", "loss": [1]}), {}),
    ('{"step": 3, "loss": NaN}', {"step": 3, "loss": float("nan")}),
    (json.dumps({"step": 3, "pad": "x" * 70_000}), {}),  # past the parser's bound
])
def test_reported_progress_from_the_termination_log(tmp_path, content, reported):
    path = tmp_path / "termination-log.worker-0"
    if content is not None:
        path.write_text(content)
    got = reported_progress(path)
    assert json.dumps(got, sort_keys=True) == json.dumps(reported, sort_keys=True)  # NaN compares as its text


def test_a_command_jobs_summary_and_json_line_carry_what_rank_0_reported(tmp_path, capsys):
    c = cfg(progress={"collector": "huggingface"})
    gang = slots(c.spec)
    d = str(tmp_path)
    Path(termination_log(d, worker(0))).write_text(json.dumps(FINAL))
    Path(termination_log(d, worker(1))).write_text(json.dumps({"step": 999}))  # not rank 0's: ignored
    summary = _summary(c, d, [0, 0], 12.5, gang)
    assert summary["step"] == 80 and summary["totalSteps"] == 80 and summary["metrics"] == {"eval_loss": 1.5}
    _print_summary(c, summary, json=True)
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last == {"mode": "command", "world_size": 2, "nodes": 2, "exit_codes": [0, 0], "seconds": 12.5,
                    "step": 80, "loss": 1.25, "totalSteps": 80, "metrics": {"eval_loss": 1.5},
                    "lastCheckpoint": {"step": 80, "path": "/c/80"}, "resumedStep": 40}
    _print_summary(c, summary, json=False)
    assert capsys.readouterr().out.strip().endswith("in 12.5s, step 80/80, loss 1.2500")


def test_a_command_job_that_reported_nothing_keeps_its_summary(tmp_path, capsys):
    c = cfg()
    summary = _summary(c, str(tmp_path), [0, 0], 1.0, slots(c.spec))
    assert set(summary) == {"mode", "world_size", "nodes", "exit_codes", "seconds"}
    _print_summary(c, summary, json=False)
    assert capsys.readouterr().out.strip().endswith("in 1.0s")
