from __future__ import annotations

import pytest

from phalanx_common.collect.deepspeed import parse
from tests.unit.phalanx_common.collect.samples import lines, parsed


@pytest.mark.parametrize(("line", "expected"), [
    ("[2026-12-03 13:48:48,357] [INFO] [logging.py:123:log_dist] [Rank 0] step=1, skipped=0, lr=[0.1], mom=[0]",
     {"step": 1, "metrics": {"skipped_steps": 0.0, "learning_rate": 0.1}}),
    ("[Rank 0] step=40, skipped=2, lr=[9.5e-05, 9.5e-05], mom=[(0.9, 0.999), (0.9, 0.999)]",
     {"step": 40, "metrics": {"skipped_steps": 2.0, "learning_rate": 9.5e-05}}),
    ("[INFO] [timer.py:264:stop] epoch=0/micro_step=3/global_step=3, RunningAvgSamplesPerSec=3319.59, "
     "CurrSamplesPerSec=3316.83, MemAllocated=0.71GB, MaxMemAllocated=0.71GB",
     {"step": 3, "epoch": 0.0, "metrics": {"samples_per_second": 3316.83}}),
    ("steps: 2 loss: 2.0207 iter time (s): 0.001 samples/sec: 2827.780",
     {"step": 2, "loss": 2.0207, "metrics": {"iter_time_seconds": 0.001, "samples_per_second": 2827.78}}),
    ("steps: 5 loss: 0.1 aux_loss: 0.2 iter time (s): 0.5 samples/sec: 8.0",
     {"step": 5, "loss": 0.1, "metrics": {"iter_time_seconds": 0.5, "samples_per_second": 8.0}}),
    ("  loss: MSELoss", {}),
    ("[INFO] [config.py:475:__init__] Config mesh_device None world_size = 1", {}),
])
def test_a_line(line, expected):
    assert parse(line) == expected


def test_the_captured_engine():
    records = parsed(parse, "deepspeed-engine.stdout")
    assert [r["step"] for r in records] == [0, 1, 2, 3, 3]  # the start's step=0, three steps, the timer's
    assert records[-2]["metrics"]["learning_rate"] == 0.1 and "loss" not in records[-2]
    assert len(lines("deepspeed-engine.stdout")) > len(records)  # the start's other lines read nothing


def test_the_captured_pipeline():
    records = parsed(parse, "deepspeed-pipeline.stdout")
    assert [(r["step"], r["loss"]) for r in records] == [(1, 0.6343), (2, 2.0207), (3, 0.4163)]
