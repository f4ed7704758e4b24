"""spec.progress: its rules (each naming its field, the same verdict offline and in the operator),
the patterns' compile check CEL cannot make, and what a collector does to the workers' command."""

from __future__ import annotations

import copy
import time

import pytest

from phalanx import constants
from phalanx.api.base import all_rules
from phalanx.api.progress import (
    MAX_PATTERN_LENGTH,
    MAX_PATTERNS,
    ProgressSpec,
    collected,
    pattern_problem,
    wraps_command,
)
from phalanx.validate import validate_job
from tests.conftest import MINIMAL

COMMAND = {"model": None, "command": ["python", "train.py"]}


def problems(**spec):
    obj = copy.deepcopy(MINIMAL)
    obj["spec"].update(spec)
    obj["spec"] = {k: v for k, v in obj["spec"].items() if v is not None}
    _, found = validate_job(obj)
    return [(p.field, p.message) for p in found]


def fields(**spec):
    return [field for field, _ in problems(**spec)]


@pytest.mark.parametrize(("progress", "broken"), [
    ({"collector": "client"}, []),
    ({"collector": "huggingface"}, []),
    ({"collector": "lightning"}, []),
    ({"collector": "torchtitan"}, []),
    ({"collector": "deepspeed"}, []),
    ({"collector": "regex", "patterns": ["step (?P<step>\\d+) loss (?P<loss>[0-9.]+)"]}, []),
    ({"collector": "regex", "patterns": ["(?P<eval_accuracy>[0-9.]+)", "epoch (?P<epoch>\\S+) of (?P<total_steps>\\d+)"]}, []),
    ({"collector": "jsonl", "file": "/scratch/metrics.jsonl"}, []),
    ({"collector": "regex"}, ["spec.progress.patterns"]),  # required with regex
    ({"collector": "client", "patterns": ["(?P<step>\\d+)"]}, ["spec.progress.patterns"]),  # regex only
    ({"collector": "jsonl"}, ["spec.progress.file"]),
    ({"collector": "huggingface", "file": "/m.jsonl"}, ["spec.progress.file"]),
    ({"collector": "jsonl", "file": "metrics.jsonl"}, ["spec.progress.file"]),  # not absolute
    ({"collector": "jsonl", "file": "/a/../etc/passwd"}, ["spec.progress.file"]),
    ({"collector": "regex", "patterns": []}, ["spec.progress.patterns"]),
    ({"collector": "regex", "patterns": ["(?P<step>\\d+)"] * (MAX_PATTERNS + 1)}, ["spec.progress.patterns"]),
    ({"collector": "regex", "patterns": ["(?P<step>\\d+)" + "x" * MAX_PATTERN_LENGTH]}, ["spec.progress.patterns[0]"]),
    ({"collector": "regex", "patterns": ["(?P<step>\\d+"]}, ["spec.progress.patterns"]),  # does not compile
    ({"collector": "regex", "patterns": ["step \\d+"]}, ["spec.progress.patterns"]),  # no named group
    ({"collector": "regex", "patterns": ["(?P<step>\\d+)", "(\\d+)"]}, ["spec.progress.patterns"]),  # the second
    ({"collector": "regex", "patterns": ["(?P<\u00e9>\\d+)"]}, ["spec.progress.patterns"]),  # not a metric name
    ({"collector": "prometheus"}, ["spec.progress.collector"]),
    ({}, ["spec.progress.collector"]),
    ({"collector": "client", "extra": 1}, ["spec.progress.extra"]),
])
def test_progress_rules_name_the_field(progress, broken):
    assert fields(**COMMAND, progress=progress) == broken


def test_progress_is_for_command_jobs():
    assert fields(progress={"collector": "client"}) == ["spec.progress"]  # MINIMAL trains the built-in model
    assert fields(command=["phalanx-runtime"], progress={"collector": "client"}) == ["spec.progress"]


@pytest.mark.parametrize(("spec", "broken"), [
    ({"failurePolicy": {"hangTimeoutSeconds": 60}}, []),  # the built-in runtime reports progress
    ({**COMMAND, "failurePolicy": {"hangTimeoutSeconds": 60}}, ["spec.failurePolicy.hangTimeoutSeconds"]),
    ({**COMMAND, "failurePolicy": {"hangTimeoutSeconds": 60}, "progress": {"collector": "client"}}, []),
    ({**COMMAND, "failurePolicy": {"hangTimeoutSeconds": 60}, "progress": {"collector": "deepspeed"}}, []),
    ({**COMMAND, "failurePolicy": {"hangTimeoutSeconds": 0}}, []),
])
def test_hang_timeout_needs_progress(spec, broken):
    found = problems(**spec)
    assert [field for field, _ in found] == broken
    assert all("spec.progress" in message for _, message in found)


@pytest.mark.parametrize(("pattern", "words"), [
    ("step (?P<step>\\d+)", None),
    ("(?P<loss>\\S+) (?P<lr>\\S+)", None),
    ("(?P<step>\\d+", "does not compile"),
    ("(?P<1a>x)", "does not compile"),
    ("a{99999999999999999999}", "does not compile"),
    ("(" * 200 + "(?P<step>x)" + ")" * 200, None),  # deep, yet it compiles
    ("plain", "no named group"),
    ("(?P<" + "a" * 65 + ">x)", "is not a metric name"),
    ("(?P<loss>[\\x00-\\x7f\u4e00-\u9fff]+)", None),  # CJK: a wide class, yet one
    ("(?i)(?P<step>[\\x00-\\uffff])", "too wide"),  # 65536 case-folded code points
    ("(?P<step>" + "[\\x01-\\uffff]" * 40 + ")", "too wide"),  # ~0.1 s to compile
    ("(?P<step>" + "[\u0100\u0300]" * 120 + ")", "too wide"),  # 120 classes past Latin-1
])
def test_pattern_problem(pattern, words):
    problem = pattern_problem(pattern)
    assert problem is None if words is None else words in problem


def test_patterns_slow_to_compile_are_refused_before_compiling():
    """The operator compiles the patterns of every job: 512 characters of case-folded full-range
    classes took over a second each; the check refuses them before compiling."""
    pattern = "(?i)(?P<step>" + "[\x01-\uffff]" * 97 + ")"
    pattern_problem.cache_clear()
    started = time.perf_counter()
    assert "too wide" in pattern_problem(pattern)
    assert time.perf_counter() - started < 0.1


def test_the_compile_check_is_an_operator_rule():
    operator_only = [r for r in all_rules() if r.cel is None and r.field == ".patterns"]
    assert len(operator_only) == 1 and "compile" in operator_only[0].message


@pytest.mark.parametrize(("collector", "wraps"), [(c, c != constants.Collector.CLIENT) for c in constants.Collector])
def test_every_collector_but_client_wraps_the_command(collector, wraps):
    extra = {"patterns": ["(?P<step>\\d+)"]} if collector == "regex" else {"file": "/f"} if collector == "jsonl" else {}
    assert wraps_command(ProgressSpec(collector=collector, **extra)) is wraps
    assert wraps_command(None) is False


def test_collected_runs_the_command_under_the_collector():
    assert collected(["torchrun", "t.py"]) == ["python3", "-m", "phalanx_common.collect", "--", "torchrun", "t.py"]
    assert collected(["t"], python="/venv/bin/python")[0] == "/venv/bin/python"
