"""The collector's process on real child processes: output passed through byte for byte, the
record served over HTTP and written at exit, signals forwarded, exit codes kept."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from phalanx_common.collect import huggingface
from phalanx_common.collect.run import Feed, child_env, exit_code, final_phase
from phalanx_common.contract import (
    COLLECT_MODULE,
    ENV_NODE_RANK,
    ENV_PROGRESS_COLLECTOR,
    ENV_PROGRESS_FILE,
    ENV_PROGRESS_PATTERNS,
    ENV_PROGRESS_PORT,
    ENV_PYTHONUNBUFFERED,
    ENV_TERMINATION_LOG,
)
from phalanx_common.net import free_port
from phalanx_common.report import Reporter

COMMON = Path(__file__).resolve().parents[4] / "common"
PATTERNS = json.dumps([r"it (?P<step>\d+)/(?P<total_steps>\d+) loss (?P<loss>\S+)", r"acc (?P<eval_accuracy>\S+)"])
# What the child writes: \n and \r lines, a line far over the bound, bytes that are no UTF-8, NaN.
# The progress is on stdout, a metric on stderr: the two are read apart, in no fixed order.
OUT = (b"it 1/9 loss 2.5\rit 2/9 loss 2.25\n" + b"x" * 200_000 + b"\n\xff\xfe\x00garbage\n"
       b"{'loss': [[[[[[\nit 3/9 loss nan")
ERR = b"warning on stderr\r\x1b[33macc 0.5\x1b[0m\n\x1b[31mred\x1b[0m\n"
WRITER = "import os, sys\nos.write(1, {out!r})\nos.write(2, {err!r})\nsys.exit({code})\n"
WAITER = """import os, signal, sys, time
print("it 5/9 loss 1.25", flush=True)
print("acc 0.75", file=sys.stderr, flush=True)
{on_term}
open(sys.argv[1], "w").close()
time.sleep(60)
"""


def collect(command: list[str], tmp_path: Path, *, log: bool = True, **env: str) -> subprocess.Popen:
    termination_log = tmp_path / "termination-log"
    if log:
        termination_log.touch()
    full = {**os.environ, "PYTHONPATH": str(COMMON), ENV_TERMINATION_LOG: str(termination_log),
            ENV_PROGRESS_COLLECTOR: "regex", ENV_PROGRESS_PATTERNS: PATTERNS, ENV_NODE_RANK: "0", **env}
    return subprocess.Popen([sys.executable, "-m", COLLECT_MODULE, "--", *command], env=full,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def final(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "termination-log").read_bytes())


def script(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "child.py"
    path.write_text(text)
    return [sys.executable, str(path)]


def test_output_passes_through_unchanged_and_its_progress_is_read(tmp_path):
    child = collect(script(tmp_path, WRITER.format(out=OUT, err=ERR, code=0)), tmp_path)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0
    assert out == OUT and err == ERR
    record = final(tmp_path)
    assert record["phase"] == "Succeeded" and record["step"] == 3 and record["totalSteps"] == 9
    assert math.isnan(record["loss"]) and record["metrics"] == {"eval_accuracy": 0.5}


def test_the_exit_code_is_the_childs(tmp_path):
    child = collect(script(tmp_path, WRITER.format(out=b"it 1/2 loss 0.5\n", err=b"", code=3)), tmp_path)
    child.communicate(timeout=60)
    assert child.returncode == 3
    assert final(tmp_path)["phase"] == "Failed" and final(tmp_path)["loss"] == 0.5
    killed = collect([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"], tmp_path)
    killed.communicate(timeout=60)
    assert killed.returncode == 128 + signal.SIGKILL


def _wait_for(path: Path, child: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while not path.exists():
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)


@pytest.mark.parametrize("on_term", ["", "signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))"])
def test_the_endpoint_serves_the_record_and_sigterm_reaches_the_child(tmp_path, on_term):
    port, ready = free_port(), tmp_path / "ready"
    child = collect([*script(tmp_path, WAITER.format(on_term=on_term)), str(ready)], tmp_path,
                    **{ENV_PROGRESS_PORT: str(port)})
    _wait_for(ready, child)
    body = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/progress", timeout=10).read())
    assert body["phase"] == "Running" and body["step"] == 5 and body["totalSteps"] == 9 and body["loss"] == 1.25
    assert body["metrics"] == {"eval_accuracy": 0.75}
    child.send_signal(signal.SIGTERM)
    out, _ = child.communicate(timeout=60)
    assert child.returncode == 143 and out == b"it 5/9 loss 1.25\n"
    assert final(tmp_path)["phase"] == "Preempted" and final(tmp_path)["step"] == 5


def test_another_node_runs_the_command_itself(tmp_path):
    child = collect([sys.executable, "-c", "import os; print(os.getpid())"], tmp_path, **{ENV_NODE_RANK: "1"})
    out, _ = child.communicate(timeout=60)
    assert int(out) == child.pid  # exec'd: the same process, no wrapper left around it
    assert (tmp_path / "termination-log").read_bytes() == b""


def test_another_node_with_a_missing_command_exits_as_a_shell_does(tmp_path):
    child = collect([str(tmp_path / "absent")], tmp_path, **{ENV_NODE_RANK: "1"})
    _, err = child.communicate(timeout=60)
    assert child.returncode == 127 and b"absent" in err and b"Traceback" not in err


def test_jsonl_reads_the_file_the_script_appends_to(tmp_path):
    progress = tmp_path / "progress.jsonl"
    text = (f"import json\nwith open({str(progress)!r}, 'a') as f:\n"
            "    for step in (1, 2):\n        f.write(json.dumps({'step': step, 'loss': 3.0 / step, 'total_steps': 2,"
            " 'eval_loss': 1.0}) + '\\n')\nprint('it 9/9 loss 0.1')\n")
    child = collect(script(tmp_path, text), tmp_path, **{ENV_PROGRESS_COLLECTOR: "jsonl", ENV_PROGRESS_FILE: str(progress)})
    out, _ = child.communicate(timeout=60)
    assert child.returncode == 0 and out == b"it 9/9 loss 0.1\n"
    record = final(tmp_path)
    assert record["step"] == 2 and record["loss"] == 1.5 and record["metrics"] == {"eval_loss": 1.0}  # the output: not read


def test_an_unknown_collector_leaves_the_command_running(tmp_path):
    child = collect([sys.executable, "-c", "print('it 1/2 loss 1')"], tmp_path, **{ENV_PROGRESS_COLLECTOR: "nope"})
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0 and out == b"it 1/2 loss 1\n" and b"not one of" in err
    assert final(tmp_path)["step"] == 0


def test_patterns_that_do_not_compile_leave_the_command_running(tmp_path):
    patterns = json.dumps(["(?P<step>a{4294967296})"])  # OverflowError from re.compile
    child = collect([sys.executable, "-c", "print('it 1/2 loss 1')"], tmp_path, **{ENV_PROGRESS_PATTERNS: patterns})
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0 and out == b"it 1/2 loss 1\n" and b"not read" in err


def test_a_missing_command(tmp_path):
    child = collect([str(tmp_path / "absent")], tmp_path, log=False)
    _, err = child.communicate(timeout=60)
    assert child.returncode == 127 and b"absent" in err
    assert not (tmp_path / "termination-log").exists()  # not in a pod: nothing written


def test_pure_parts():
    assert exit_code(-15) == 143 and exit_code(0) == 0 and exit_code(2) == 2
    assert [final_phase(code) for code in (0, 143, 1)] == ["Succeeded", "Preempted", "Failed"]
    env = child_env({ENV_PROGRESS_PORT: "8080", "A": "b"})
    assert env == {"A": "b", ENV_PYTHONUNBUFFERED: "1"}


def test_a_bar_behind_the_training_leaves_its_step_and_total_alone():
    """trainer.evaluate() after training draws a top-level bar of its own batches: neither its
    count nor its total is the training's."""
    reporter = Reporter({ENV_TERMINATION_LOG: ""}, active=True)  # no final record at exit
    feed = Feed(reporter, huggingface.parse)
    for line in ("100%|##########| 1000/1000 [00:10<00:00, 99.0it/s]", "{'eval_loss': 0.5}",
                 "100%|##########| 10/10 [00:00<00:00, 50.0it/s]"):
        feed.line(line)
    record = reporter.progress.snapshot()
    assert record["step"] == 1000 and record["totalSteps"] == 1000 and record["metrics"] == {"eval_loss": 0.5}


def test_a_parser_that_returns_no_record_stops_nothing():
    """A reader that raised would stop reading the child's pipe, and the child would block on it."""
    reporter = Reporter({ENV_TERMINATION_LOG: ""}, active=True)
    feed = Feed(reporter, lambda line: ["not", "a", "record"])
    feed.line("it 1/2 loss 1")
    assert reporter.progress.snapshot()["step"] == 0
