from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest

from phalanx_common import report as reporting
from phalanx_common.contract import (
    ENV_CHECKPOINT_DIR,
    ENV_LOCAL_RANK,
    ENV_NODE_RANK,
    ENV_PROGRESS_PORT,
    ENV_RANK,
    ENV_TERMINATION_LOG,
    ENV_WORLD_SIZE,
    LATEST_CHECKPOINT_FILE,
    MAX_REPORTED_METRICS,
    METRICS_LOG_FILE,
)
from phalanx_common.net import free_port
from phalanx_common.report import (
    Reporter,
    as_count,
    clean_metrics,
    is_global_rank_zero,
    read_marker,
)

COMMON = Path(__file__).resolve().parents[3] / "common"


@pytest.mark.parametrize(("env", "zero"), [
    ({}, True),
    ({ENV_RANK: "0"}, True),
    ({ENV_RANK: "3"}, False),
    ({ENV_RANK: "0", ENV_NODE_RANK: "1"}, True),  # RANK is the global rank: it decides
    ({ENV_NODE_RANK: "0", ENV_LOCAL_RANK: "0"}, True),
    ({ENV_NODE_RANK: "1"}, False),
    ({ENV_LOCAL_RANK: "2"}, False),
    ({ENV_RANK: ""}, True),
    ({"HOROVOD_RANK": "2", ENV_NODE_RANK: "0", ENV_LOCAL_RANK: "0"}, False),  # Horovod / mpirun set no RANK
    ({"OMPI_COMM_WORLD_RANK": "1"}, False),
    ({"PMI_RANK": "0", ENV_LOCAL_RANK: "0"}, True),
    ({ENV_RANK: "1", "PMI_RANK": "0"}, False),  # RANK first
])
def test_is_global_rank_zero(env, zero):
    assert is_global_rank_zero(env) is zero


def test_clean_metrics():
    assert clean_metrics({"eval_loss": 1, "lr": 1e-4, "bad name": 1.0, "nan": math.nan, "inf": math.inf,
                          "flag": True, "text": "1.0", 3: 1.0, "x" * 65: 1.0,
                          "acc\n": 1.0}) == {"eval_loss": 1.0, "lr": 1e-4}  # "$" would let a trailing newline by
    many = {f"m{i}": float(i) for i in range(MAX_REPORTED_METRICS + 5)}
    assert list(clean_metrics(many)) == list(many)[:MAX_REPORTED_METRICS]


@pytest.mark.parametrize(("value", "count"), [(3, 3), (3.0, 3), (3.5, None), (-1, None), (True, None), ("3", None),
                                               (math.nan, None), (2**60, None)])
def test_as_count(value, count):
    assert as_count(value) == count


@pytest.fixture
def env(tmp_path):
    (tmp_path / "termination-log").touch()
    return {ENV_CHECKPOINT_DIR: str(tmp_path / "ckpt"), ENV_TERMINATION_LOG: str(tmp_path / "termination-log"),
            ENV_WORLD_SIZE: "4"}


def lines(env) -> list[dict]:
    return [json.loads(line) for line in (Path(env[ENV_CHECKPOINT_DIR]) / METRICS_LOG_FILE).read_text().splitlines()]


def test_the_record_and_one_metrics_line_per_step(env):
    reporter = Reporter(env)
    reporter.report(1, 3.0, total_steps=10, metrics={"learning_rate": 1e-3}, tokens_per_second=100.0, epoch=0.1)
    reporter.report(2, 2.5, metrics={"learning_rate": 9e-4, "grad_norm": math.inf})
    reporter.report(metrics={"eval_loss": 2.75})  # no step: still step 2's
    record = reporter.progress.snapshot()
    assert record["phase"] == "Running" and record["step"] == 2 and record["totalSteps"] == 10
    assert record["loss"] == 2.5 and record["tokensPerSecond"] == 100.0 and record["epoch"] == 0.1
    assert record["worldSize"] == 4 and record["stepTimeSeconds"] >= 0
    assert record["metrics"] == {"learning_rate": 9e-4, "eval_loss": 2.75}
    assert [line["step"] for line in lines(env)] == [1]  # step 2's line waits for the step to end
    assert reporter.finish() is True
    step1, step2 = lines(env)
    assert step1["loss"] == 3.0 and step1["tokens_per_s"] == 100.0 and step1["learning_rate"] == 1e-3
    assert step2 == {"time": step2["time"], "step": 2, "loss": 2.5, "learning_rate": 9e-4, "eval_loss": 2.75}
    final = json.loads(Path(env[ENV_TERMINATION_LOG]).read_text())
    assert final["phase"] == "Finished" and final["step"] == 2 and final["metrics"]["eval_loss"] == 2.75
    assert reporter.finish() is False  # once


def test_a_metric_named_step_keeps_the_line_on_its_step(env):
    reporter = Reporter(env)
    reporter.report(3, 1.0, metrics={"step": 99.0, "time": 5.0})
    reporter.report(4, 0.5)
    reporter.finish()
    assert [line["step"] for line in lines(env)] == [3, 4]
    assert reporter.progress.snapshot()["metrics"] == {"step": 99.0, "time": 5.0}  # the record keeps them


def test_a_nan_loss_is_kept_and_the_metrics_stay_bounded(env):
    reporter = Reporter(env)
    reporter.report(1, math.nan, metrics={f"m{i}": i for i in range(MAX_REPORTED_METRICS - 1)})
    reporter.report(2, metrics={"m0": -1.0, "late1": 1.0, "late2": 2.0})
    record = reporter.progress.snapshot()
    assert math.isnan(record["loss"])
    assert len(record["metrics"]) == MAX_REPORTED_METRICS and record["metrics"]["m0"] == -1.0
    assert "late1" in record["metrics"] and "late2" not in record["metrics"]
    reporter.finish()
    assert math.isnan(lines(env)[0]["loss"])
    assert "NaN" in Path(env[ENV_TERMINATION_LOG]).read_text()


def test_reporting_problems_never_raise_and_warn_once(env, caplog):
    reporter = Reporter(env)
    with caplog.at_level(logging.WARNING, logger="phalanx"):
        reporter.report("three", object(), total_steps=-5, epoch=math.nan, metrics={"x": object()})
        reporter.report(-1)
        reporter.report(metrics=42)  # not a mapping
        reporter.report(metrics=42)
    assert reporter.progress.snapshot()["step"] == 0
    assert [r.getMessage() for r in caplog.records if "step" in r.getMessage()] == \
        ["phalanx reporting: step 'three' is no non-negative integer; ignored"]
    assert sum("report() failed" in r.getMessage() for r in caplog.records) == 1


def test_commit_and_latest_checkpoint(env, tmp_path):
    reporter = Reporter(env)
    reporter.report(5, 1.0, checkpoint=tmp_path / "ckpt" / "step-5")
    marker = json.loads((Path(env[ENV_CHECKPOINT_DIR]) / LATEST_CHECKPOINT_FILE).read_text())
    assert marker["step"] == 5 and marker["path"] == str(tmp_path / "ckpt" / "step-5") and marker["time"].endswith("Z")
    reporter.commit_checkpoint("/shared/step-8", 8)
    assert reporter.progress.snapshot()["lastCheckpoint"]["path"] == "/shared/step-8"
    assert sorted(os.listdir(env[ENV_CHECKPOINT_DIR])) == [LATEST_CHECKPOINT_FILE]  # no temp file left
    restarted = Reporter(env)
    assert restarted.latest_checkpoint() == "/shared/step-8"
    assert restarted.progress.snapshot()["resumedStep"] == 8
    other_rank = Reporter({**env, ENV_RANK: "1"})
    assert other_rank.latest_checkpoint() == "/shared/step-8" and "resumedStep" not in other_rank.progress.snapshot()


@pytest.mark.parametrize("content", [None, "", "{", '{"path": 3, "step": 1}', '{"path": "/c", "step": -1}', "[]"])
def test_no_checkpoint_marker(tmp_path, content):
    if content is not None:
        (tmp_path / LATEST_CHECKPOINT_FILE).write_text(content)
    assert read_marker(tmp_path) is None
    assert Reporter({ENV_CHECKPOINT_DIR: str(tmp_path)}).latest_checkpoint() is None
    assert read_marker(None) is None


def test_a_checkpoint_without_a_checkpoint_dir_is_recorded_not_marked(tmp_path, caplog):
    reporter = Reporter({ENV_TERMINATION_LOG: str(tmp_path / "absent")})
    with caplog.at_level(logging.WARNING, logger="phalanx"):
        reporter.commit_checkpoint("/c/1", 1)
        reporter.commit_checkpoint("/c/2", 2)
    assert reporter.progress.snapshot()["lastCheckpoint"]["step"] == 2
    assert len(caplog.records) == 1 and "not marked" in caplog.records[0].getMessage()
    assert reporter.finish() is False and not (tmp_path / "absent").exists()  # not in a pod


def test_off_rank_zero_nothing_happens(env, tmp_path):
    reporter = Reporter({**env, ENV_RANK: "1", ENV_PROGRESS_PORT: str(free_port())})
    reporter.report(1, 2.0, checkpoint="/c/1")
    reporter.commit_checkpoint("/c/1", 1)
    assert reporter.finish() is False and reporter.server is None
    assert not Path(env[ENV_CHECKPOINT_DIR]).exists() and Path(env[ENV_TERMINATION_LOG]).read_text() == ""
    assert reporter.progress.snapshot()["step"] == 0


def test_the_endpoint_and_a_port_in_use(env, caplog):
    port = free_port()
    reporter = Reporter({**env, ENV_PROGRESS_PORT: str(port)})
    try:
        reporter.report(7, 0.5, metrics={"eval_loss": 0.75})
        body = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/progress", timeout=10).read())
        assert body["step"] == 7 and body["loss"] == 0.5 and body["metrics"] == {"eval_loss": 0.75}
        second = Reporter({**env, ENV_PROGRESS_PORT: str(port)})
        with caplog.at_level(logging.WARNING, logger="phalanx"):
            second.report(1, 1.0)
        assert second.server is None and second.progress.snapshot()["step"] == 1
        assert "progress endpoint on port" in caplog.records[0].getMessage()
    finally:
        reporter.server.close()


def test_threads_report_at_once(env):
    reporter = Reporter(env)

    def work(offset: int):
        for step in range(offset, 400, 4):
            reporter.report(step, 1.0 / (step + 1), metrics={f"t{offset}": step})

    threads = [threading.Thread(target=work, args=(offset,)) for offset in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    reporter.finish()
    assert reporter.progress.snapshot()["metrics"].keys() == {"t0", "t1", "t2", "t3"}
    assert all(isinstance(line["step"], int) for line in lines(env))  # whole lines only


def _run(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(COMMON), **env},
                          capture_output=True, text=True, timeout=60)


def test_the_final_record_is_written_at_exit(env):
    code = ("from phalanx_common.report import report, commit_checkpoint\n"
            "report(3, 1.5, total_steps=10, metrics={'eval_loss': 2.0})\ncommit_checkpoint('/c/3', 3)\n")
    done = _run(code, env)
    assert done.returncode == 0, done.stderr
    final = json.loads(Path(env[ENV_TERMINATION_LOG]).read_text())
    assert final["step"] == 3 and final["totalSteps"] == 10 and final["lastCheckpoint"]["path"] == "/c/3"
    assert lines(env) == [{"time": lines(env)[0]["time"], "step": 3, "loss": 1.5, "eval_loss": 2.0}]


def test_a_failure_report_stays_at_exit(env):
    Path(env[ENV_TERMINATION_LOG]).write_text('{"phase": "Failed", "error": {"type": "E", "message": "m"}}')
    assert _run("from phalanx_common.report import report\nreport(1, 1.0)\n", env).returncode == 0
    assert json.loads(Path(env[ENV_TERMINATION_LOG]).read_text())["error"]["type"] == "E"


def test_another_rank_writes_nothing_at_exit(env):
    done = _run("from phalanx_common.report import report, latest_checkpoint\nreport(1, 1.0)\n"
                "print(latest_checkpoint())\n", {**env, ENV_RANK: "2"})
    assert done.returncode == 0 and done.stdout == "None\n"
    assert Path(env[ENV_TERMINATION_LOG]).read_text() == ""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX fork")
def test_a_forked_child_leaves_the_parents_reporter_alone(env, monkeypatch):
    monkeypatch.setattr(reporting, "_reporter", Reporter(env))
    reporting.report(1, 1.0)
    inherited = reporting.reporter()
    pid = os.fork()
    if pid == 0:  # the child: its inherited exit hook must write nothing; reporting anew is its own
        ok = inherited.finish() is False and reporting._reporter is None
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert Path(env[ENV_TERMINATION_LOG]).read_text() == ""  # the parent's final record is the parent's to write
    assert reporting.reporter() is inherited and inherited.active


def test_module_functions_share_one_reporter(monkeypatch):
    monkeypatch.setattr(reporting, "_reporter", None)
    assert reporting.reporter() is reporting.reporter()
    monkeypatch.setattr(reporting, "_reporter", Reporter({ENV_RANK: "1"}))
    reporting.report(1, 1.0)
    reporting.commit_checkpoint("/c", 1)
    assert reporting.latest_checkpoint() is None and reporting.reporter().progress.snapshot()["step"] == 0
