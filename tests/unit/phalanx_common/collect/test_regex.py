from __future__ import annotations

import json

import pytest

from phalanx_common.collect.regex import MAX_PATTERNS, PatternError, compile_patterns, parse

PATTERNS = compile_patterns(json.dumps([
    r"iter (?P<step>\d+)/(?P<total_steps>\d+) loss=(?P<loss>\S+)",
    r"epoch (?P<epoch>[\d.]+)",
    r"eval acc (?P<eval_accuracy>\S+)",
]))


@pytest.mark.parametrize(("line", "expected"), [
    ("iter 12/100 loss=2.5", {"step": 12, "totalSteps": 100, "loss": 2.5}),
    ("iter 12/100 loss=2.5 epoch 0.25 eval acc 0.91",
     {"step": 12, "totalSteps": 100, "loss": 2.5, "epoch": 0.25, "metrics": {"eval_accuracy": 0.91}}),
    ("eval acc oops", {}),  # matched, but no number
    ("\x1b[32miter 3/9 loss=nan\x1b[0m", {"step": 3, "totalSteps": 9, "loss": pytest.approx(float("nan"), nan_ok=True)}),
    ("nothing here", {}),
])
def test_a_line(line, expected):
    assert parse(line, PATTERNS) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("not json", "not JSON"),
    ('"step (?P<step>\\\\d+)"', "not a list"),
    ("[]", "not a list"),
    (json.dumps(["(?P<step>\\d+)"] * (MAX_PATTERNS + 1)), "not a list"),
    ('["(unclosed"]', "missing"),
    ('["step \\\\d+"]', "no named group"),
    ("[3]", "not a string"),
    (json.dumps(["x" * 1001]), "not a string"),
    (json.dumps(["(?P<step>a{4294967296})"]), "too large"),  # OverflowError, not re.error
    (json.dumps(["(" * 490 + "(?P<step>a)" + ")" * 490]), "recursion"),  # RecursionError
])
def test_invalid_patterns_are_refused(text, message):
    with pytest.raises(PatternError, match=message):
        compile_patterns(text)
