from __future__ import annotations

import math

import pytest

from phalanx_common.collect.torchtitan import parse
from tests.unit.phalanx_common.collect.samples import lines, parsed

COLOURED = ("[titan] 2026-12-03 13:49:06,167 - root - INFO - \x1b[31mstep:  2  \x1b[32mloss: 11.74020  "
            "\x1b[38;2;180;60;0mgrad_norm:  3.5000  \x1b[38;2;54;234;195mmemory:  1.82GiB(2.30%)  "
            "\x1b[34mtps: 16,384  \x1b[36mtflops: 10.65  \x1b[35mmfu: 1.08%\x1b[39m")
METRICS = {"grad_norm": 3.5, "tps": 16384.0, "tflops": 10.65, "mfu_percent": 1.08, "memory_max_reserved_gib": 1.82}


@pytest.mark.parametrize(("line", "expected"), [
    (COLOURED, {"step": 2, "loss": 11.7402, "metrics": METRICS}),
    ("step: 7  loss:  3.00000  grad_norm:  1.0000  memory:  0.10GiB(1.00%)  tps: 0  tflops: 0.00  mfu: N/A",
     {"step": 7, "loss": 3.0, "metrics": {"grad_norm": 1.0, "tps": 0.0, "tflops": 0.0, "memory_max_reserved_gib": 0.1}}),
    ("[titan] - INFO - \x1b[33mvalidate step: 10  \x1b[32mloss:  7.9000  \x1b[34mtps: 0\x1b[39m",
     {"metrics": {"validation_metrics/loss": 7.9}}),
    ("[titan] - INFO - Training starts at step 1", {}),
    ("step: x loss: 1", {}),
])
def test_a_line(line, expected):
    assert parse(line) == expected


def test_the_captured_lines():
    assert "\x1b[31m" in lines("torchtitan.stdout")[0]  # the colour codes are in the capture
    records = parsed(parse, "torchtitan.stdout")
    assert [r.get("step") for r in records] == [1, 2, 10, None, 11]
    assert records[0] == {"step": 1, "loss": 12.2551, "metrics": METRICS}
    assert records[3] == {"metrics": {"validation_metrics/loss": 7.9}}
    assert math.isnan(records[4]["loss"]) and math.isnan(records[4]["metrics"]["grad_norm"])  # the reporter drops it
