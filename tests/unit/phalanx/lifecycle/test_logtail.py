"""A hang's messages carry rank 0's last log lines: chosen by the decision, read by the loop,
cleaned and bounded here (the log is any program's output)."""

from __future__ import annotations

import pytest

from phalanx import constants
from phalanx.decision import LogTail, Plan
from phalanx.lifecycle.logtail import (
    HEADER,
    LOG_LINE_CHARS,
    LOG_TAIL_BYTES,
    LOG_TAIL_CHARS,
    LOG_TAIL_LINES,
    RUNTIME_LOG_ENTRY_BYTES,
    attach_log_tail,
    log_lines,
    rank0_log_tail,
)


@pytest.mark.parametrize(("raw", "lines"), [
    (None, []),
    (b"", []),
    (b"step 1\nstep 2\n", ["step 1", "step 2"]),
    ("already text\n", ["already text"]),
    (b"a\r\nb\n\n   \nc", ["a", "b", "c"]),  # empty lines dropped
    (b"train:  10%|#  | 1/10\rtrain:  20%|## | 2/10\r", ["train:  10%|#  | 1/10", "train:  20%|## | 2/10"]),
    (b"\x1b[31mred\x1b[0m \x1b]0;title\x07text", ["red text"]),  # colours and a terminal title
    (b"bell\x07 nul\x00 del\x7f esc\x1b", ["bell nul del esc"]),
    ("bidi \u202eevil\u202c zero\u200bwidth".encode(), ["bidi evil zerowidth"]),
    (b"bad \xff\xfe utf8", ["bad \ufffd\ufffd utf8"]),
    (b"tab\tseparated", ["tab separated"]),
    (b"\n".join(b"line %d" % i for i in range(30)), [f"line {i}" for i in range(20, 30)]),  # the last ones
])
def test_log_lines_are_cleaned(raw, lines):
    assert log_lines(raw) == lines


def kubelet_log(output: bytes, tail_lines: int, limit_bytes: int) -> bytes:
    """What the kubelet answers: the runtime stored ``output`` as entries of one line each (a line
    longer than RUNTIME_LOG_ENTRY_BYTES cut into several); the last ``tail_lines`` entries, of
    which the first ``limit_bytes`` bytes."""
    entries = []
    for line in output.split(b"\n"):
        entries += [line[i:i + RUNTIME_LOG_ENTRY_BYTES] for i in range(0, max(len(line), 1), RUNTIME_LOG_ENTRY_BYTES)]
    return b"".join(entries[-tail_lines:])[:limit_bytes]


def test_a_progress_bar_shows_where_it_stopped():
    """tqdm redraws on carriage returns: a bar of 2000 steps is one long line of the log; what the
    hang's message shows is where the bar stood last, not where it stood 100 KiB before."""
    bar = b"".join(b"\rtrain: %4d/2000 [00:10<00:20, 9.9it/s]" % step for step in range(1, 2001))
    lines = log_lines(kubelet_log(b"loading data\n" + bar, LOG_TAIL_LINES, LOG_TAIL_BYTES))
    assert lines[-1].startswith("train: 2000/2000")


def test_log_lines_are_bounded():
    long = log_lines(b"x" * 100_000)
    assert len(long) == 1 and len(long[0]) == LOG_LINE_CHARS and long[0].endswith("…")
    many = log_lines(b"\n".join(b"y" * 500 for _ in range(50)))
    assert 0 < len(many) <= LOG_TAIL_LINES and sum(len(line) + 1 for line in many) <= LOG_TAIL_CHARS


def _pod(name, rank):
    return {"metadata": {"name": name, "labels": {constants.LABEL_NODE_RANK: str(rank)}}}


@pytest.mark.parametrize(("pods", "pod"), [
    ([_pod("j-node-1-2", 1), _pod("j-node-0-2", 0)], "j-node-0-2"),
    ([_pod("j-node-1-2", 1)], None),  # rank 0 is gone: nothing to read
    ([], None),
])
def test_the_hang_reads_rank_0(pods, pod):
    tail = rank0_log_tail(pods, "no step progress")
    assert (tail.pod if tail else None) == pod


WHAT = "pod rank 0 (node-rank 0) Hang (retryable): no step progress for 61s (hangTimeoutSeconds 60)"


def _plan():
    return Plan(
        status={"message": f"restart 1/3 in 10s after {WHAT}",
                "conditions": [{"type": "Restarting", "message": f"restart 1/3 in 10s after {WHAT}"},
                               {"type": "Running", "message": ""}]},
        events=[("Warning", "Restarting", f"restart 1/3 in 10s after {WHAT}"), ("Normal", "Other", "unrelated")],
        log_tail=LogTail("j-node-0-1", WHAT))


def test_the_lines_follow_the_hang_in_its_event_and_condition():
    plan = _plan()
    attach_log_tail(plan, ["NCCL WARN Timeout", "waiting"])
    suffix = f"\n{HEADER}\n  NCCL WARN Timeout\n  waiting"
    assert plan.events == [("Warning", "Restarting", f"restart 1/3 in 10s after {WHAT}{suffix}"), ("Normal", "Other", "unrelated")]
    assert plan.status["conditions"][0]["message"].endswith(suffix) and plan.status["conditions"][1]["message"] == ""
    assert plan.status["message"] == f"restart 1/3 in 10s after {WHAT}"  # the phase message stays one line


@pytest.mark.parametrize("lines", [[], None])
def test_no_lines_change_nothing(lines):
    plan = _plan()
    before = (list(plan.events), [dict(c) for c in plan.status["conditions"]])
    attach_log_tail(plan, lines or [])
    assert (plan.events, plan.status["conditions"]) == before


def test_only_a_hang_asks_for_rank_0s_log(job_obj):
    from datetime import timedelta

    from tests.unit.phalanx.lifecycle.test_reconcile import Sim

    job_obj["spec"].update(command=["python", "train.py"], progress={"collector": "huggingface"},
                           failurePolicy={"hangTimeoutSeconds": 60, "maxRestarts": 1})
    del job_obj["spec"]["model"]
    sim = Sim(job_obj)
    sim.run_until_running()
    assert sim.step(progress={"step": 5}).log_tail is None
    rank0 = next(name for name, pod in sim.pods.items() if pod["metadata"]["labels"][constants.LABEL_NODE_RANK] == "0")
    sim.now += timedelta(seconds=61)
    plan = sim.step(progress={"step": 5})
    assert sim.status["phase"] == "Restarting" and plan.log_tail is not None and plan.log_tail.pod == rank0
    assert any(plan.log_tail.text in message for _, _, message in plan.events)
    assert plan.log_tail.text in next(c for c in plan.status["conditions"] if c["type"] == "Restarting")["message"]
    sim.now += timedelta(minutes=5)
    sim.run_until_running()
    sim.set_pods("Failed", ready=False, exit_code=137, only=1)
    assert sim.step().log_tail is None  # an exit explains itself: no log read
