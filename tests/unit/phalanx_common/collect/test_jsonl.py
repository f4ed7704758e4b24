from __future__ import annotations

import os

import pytest

from phalanx_common.collect.jsonl import Tail, parse


@pytest.mark.parametrize(("line", "expected"), [
    ('{"step": 4, "loss": 1.25, "total_steps": 10, "epoch": 0.5, "eval_loss": 1.5, "note": "x"}',
     {"step": 4, "totalSteps": 10, "loss": 1.25, "epoch": 0.5, "metrics": {"eval_loss": 1.5}}),
    ('{"step": 4.5, "loss": NaN}', {"loss": pytest.approx(float("nan"), nan_ok=True)}),
    ('{"step": -1, "ok": true}', {}),  # no count, and a bool is no metric
    ('{"step": 3', {}),
    ("[1, 2]", {}),
    ("[" * 5000, {}),
])
def test_a_line(line, expected):
    assert parse(line) == expected


def test_tail_reads_what_was_appended_and_starts_again_on_a_new_file(tmp_path):
    path = tmp_path / "progress.jsonl"
    tail = Tail(str(path))
    assert tail.read() == []  # no file yet
    path.write_text('{"step": 1}\n{"step": 2')
    assert tail.read() == ['{"step": 1}']
    with open(path, "a") as f:
        f.write('}\n')
    assert tail.read() == ['{"step": 2}']
    replaced = tmp_path / "new"
    replaced.write_text('{"step": 1}\n')
    os.replace(replaced, path)
    assert tail.read() == ['{"step": 1}']
