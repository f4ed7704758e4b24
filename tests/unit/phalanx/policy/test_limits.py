"""policy/limits.py: bounded work per object, refused by name before it is checked further."""

import json

import pytest

from phalanx import safejson
from phalanx.api.config import Limits
from phalanx.policy.limits import MAX_SPEC_DEPTH, spec_size_problems, sweep_check_problems

LIMITS = Limits()


def deep(n):
    value = {}
    for _ in range(n):
        value = {"a": value}
    return value


@pytest.mark.parametrize("spec, field, words", [
    ({"nodes": 1}, None, None),
    ({"volumes": [{"name": "v", "emptyDir": deep(MAX_SPEC_DEPTH + 5)}]}, "spec.volumes[0].emptyDir.a", "nested deeper"),
    ({"volumes": [{"name": "v", "emptyDir": {"a": safejson.TOO_DEEP}}]}, "spec.volumes[0].emptyDir.a", "nested deeper"),
    ({"env": [{"name": f"E{i}", "value": "x" * 1000} for i in range(200)]}, "spec", "maxSpecBytes"),
])
def test_spec_size_and_depth(spec, field, words):
    problems = spec_size_problems({"spec": spec}, LIMITS)
    if field is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problems[0].field.startswith(field) and words in problems[0].message
        assert len(problems[0].field) < 100


def test_a_spec_decoded_deeper_than_recursion_is_refused_without_recursing():
    obj = safejson.loads('{"spec":{"volumes":[{"name":"v","emptyDir":' + '{"a":' * 5000 + "{}" + "}" * 5000 + "}]}}")
    (problem,) = spec_size_problems(obj, LIMITS)
    assert problem.field.startswith("spec.volumes[0].emptyDir.a")


@pytest.mark.parametrize("trials, template_bytes, refused", [(256, 8_000, False), (256, 9_000, True), (64, 32_000, False), (8, 190_000, False)])
def test_sweep_check_is_bounded_by_trials_times_template_bytes(trials, template_bytes, refused):
    template = {"spec": {"command": ["x" * template_bytes]}}
    problems = sweep_check_problems(trials, template, LIMITS)
    assert bool(problems) == refused
    if refused:
        assert problems[0].field == "spec.maxTrials" and "maxSweepCheckBytes" in problems[0].message
        most = int(problems[0].message.rsplit("at most ", 1)[1].split()[0])
        assert most * len(json.dumps(template, separators=(",", ":"))) <= LIMITS.max_sweep_check_bytes
