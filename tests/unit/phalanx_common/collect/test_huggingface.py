from __future__ import annotations

import pytest

from phalanx_common.collect.huggingface import parse
from tests.unit.phalanx_common.collect.samples import lines, merged, parsed


@pytest.mark.parametrize(("line", "expected"), [
    (" 50%|█████     | 3/6 [00:00<00:00, 184.78it/s]", {"step": 3, "totalSteps": 6}),
    ("  0%|          | 0/6 [00:00<?, ?it/s]", {"step": 0, "totalSteps": 6}),
    # an evaluation's nested bar moves the cursor back up: not the training's steps
    ("100%|██████████| 1/1 [00:00<00:00, 2649.59it/s]\x1b[A", {}),
    ("{'loss': '4.143', 'grad_norm': '0.7775', 'learning_rate': '5e-05', 'epoch': '0.0625'}",
     {"loss": 4.143, "epoch": 0.0625, "metrics": {"grad_norm": 0.7775, "learning_rate": 5e-05}}),
    # transformers 4 printed numbers, not strings
    ("{'loss': 2.5, 'learning_rate': 1e-05, 'epoch': 1.0}",
     {"loss": 2.5, "epoch": 1.0, "metrics": {"learning_rate": 1e-05}}),
    ("{'eval_loss': '4.155', 'eval_runtime': '0.003', 'epoch': '0.1875'}",
     {"epoch": 0.1875, "metrics": {"eval_loss": 4.155, "eval_runtime": 0.003}}),
    ("{'loss': 'nan', 'epoch': 1}", {"loss": pytest.approx(float("nan"), nan_ok=True), "epoch": 1.0}),
    ("{'loss': __import__('os').system('true')}", {}),  # a literal only: never code
    ("{'loss': [1, 2], 'note': 'text', 'ok': True}", {}),
    ("{'loss': ", {}),
    ("{" + "[" * 3000 + "}", {}),
    ("plain text", {}),
])
def test_a_line(line, expected):
    assert parse(line) == expected


def test_the_captured_run():
    records = parsed(parse, "huggingface.stdout", "huggingface.stderr")
    steps = [r["step"] for r in records if "step" in r]
    assert steps == sorted(steps) and steps[-1] == 6 and {r.get("totalSteps") for r in records} <= {6, None}
    final = merged(records)
    assert final["step"] == 6 and final["totalSteps"] == 6 and final["loss"] == 4.15 and final["epoch"] == 0.375
    assert final["metrics"]["eval_loss"] == 4.155 and final["metrics"]["learning_rate"] == 8.333e-06
    assert final["metrics"]["grad_norm"] == 0.7493
    losses = [r["loss"] for r in records if "loss" in r]
    assert losses == [4.143, 4.17, 4.158, 4.164, 4.156, 4.15]


def test_the_eval_bar_is_in_the_capture():
    """The capture has the nested bar the parser must skip (1/1), so the test above means something."""
    assert any("1/1 [" in line and "\x1b[A" in line for line in lines("huggingface.stderr"))
