"""The start-up timeline: the origin is the container's (the launcher process's) start, the launcher's
marks reach the workers through the environment, and the phases come out in order, never decreasing."""

from __future__ import annotations

import json
import os
import time

import pytest

from bench.startup import parse_timeline
from phalanx_common.contract import ENV_START_TIME, ENV_STARTUP_MARKS, StartupPhase
from phalanx_runtime.startup import StartupTimeline, process_start_time


def test_this_process_started_before_now_and_after_the_machine():
    started = process_start_time()
    assert started is not None
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    assert time.time() - uptime - 1 <= started <= time.time()


def test_a_process_start_is_exact_to_a_clock_tick():
    """A child's start time is when it was forked (within the kernel's clock tick and some
    scheduling), not up to a second early: the boot time is not /proc/stat's whole seconds."""
    read, write = os.pipe()
    before = time.time()
    pid = os.fork()
    if pid == 0:
        os.write(write, b"x")
        os._exit(0)
    os.read(read, 1)
    started = process_start_time(pid)
    os.waitpid(pid, 0)
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert before - 2 * tick <= started <= time.time() + tick, (before, started)


def test_an_unreadable_process_has_no_start_time():
    assert process_start_time(2**31 - 1) is None


def test_a_worker_goes_on_from_the_launchers_origin_and_marks():
    launcher = StartupTimeline(origin=1000.0)
    launcher.mark(StartupPhase.LAUNCHER, at=1000.5)
    launcher.mark(StartupPhase.AGENT, at=1003.0)
    worker = StartupTimeline.for_worker(launcher.to_env())
    assert worker.origin == 1000.0
    seconds = worker.seconds()
    assert seconds[StartupPhase.LAUNCHER] == 0.5 and seconds[StartupPhase.AGENT] == 3.0
    # the worker's own process start, measured from the launcher's
    assert seconds[StartupPhase.WORKER] == round(process_start_time() - 1000.0, 2)


def test_a_worker_without_a_launcher_measures_from_its_own_start():
    worker = StartupTimeline.for_worker({})
    assert worker.origin == pytest.approx(process_start_time())
    assert StartupPhase.WORKER not in worker.seconds()


@pytest.mark.parametrize("marks", ["not json", "[1, 2]", json.dumps({"agent": "soon", "bogus": 1.0})])
def test_marks_that_make_no_sense_are_left_out(marks):
    worker = StartupTimeline.for_worker({ENV_START_TIME: "1000", ENV_STARTUP_MARKS: marks})
    assert set(worker.seconds()) == {StartupPhase.WORKER}


def test_phases_come_in_order_and_never_decrease():
    timeline = StartupTimeline(origin=100.0)
    timeline.mark(StartupPhase.MODEL, at=110.0)
    timeline.mark(StartupPhase.IMPORTS, at=105.0)
    timeline.mark(StartupPhase.PROCESS_GROUP, at=104.0)  # another process's clock, a little behind
    timeline.mark(StartupPhase.IMPORTS, at=200.0)  # marked again: the first end stays
    assert list(timeline.seconds().items()) == [("imports", 5.0), ("processGroup", 5.0), ("model", 10.0)]


def test_the_log_line_names_each_phase_and_the_bench_reads_it_back():
    timeline = StartupTimeline(origin=0.0)
    for i, phase in enumerate(StartupPhase):
        timeline.mark(phase, at=1.5 * (i + 1))
    line = timeline.describe()
    assert "imports 6.00s (+1.50)" in line
    assert parse_timeline("noise\n" + line + "\nmore noise") == timeline.seconds()


def test_the_launcher_starts_at_its_process_start_unless_told_earlier(monkeypatch):
    monkeypatch.delenv(ENV_START_TIME, raising=False)
    assert StartupTimeline.for_launcher().origin == pytest.approx(process_start_time())
    monkeypatch.setenv(ENV_START_TIME, "12.5")
    assert StartupTimeline.for_launcher().origin == 12.5
