from __future__ import annotations

import math

import pytest

from phalanx_common.collect.lightning import parse
from tests.unit.phalanx_common.collect.samples import merged, parsed


@pytest.mark.parametrize(("line", "expected"), [
    ("Epoch 0:  40%|████      | 2/5 [00:00<00:00, 468.22it/s, v_num=1, train_loss=0.492]",
     {"step": 2, "epoch": 0.4, "loss": 0.492, "metrics": {"train_loss": 0.492}}),
    ("Epoch 1:  20%|██        | 1/5 [00:00<00:00, 685.34it/s, v_num=1, train_loss=0.237, val_loss=0.438]",
     {"step": 6, "epoch": 1.2, "loss": 0.237, "metrics": {"train_loss": 0.237, "val_loss": 0.438}}),
    ("Epoch 0:   0%|          | 0/5 [00:00<?, ?it/s]", {"step": 0, "epoch": 0.0}),
    ("Epoch 3: 100%|██████████| 5/5 [00:01<00:00, 4.1it/s, loss=1.5e+00, acc=0.9]",
     {"step": 20, "epoch": 4.0, "loss": 1.5, "metrics": {"loss": 1.5, "acc": 0.9}}),
    # the rich bar: Epoch current/last, one value per continuation line
    ("Epoch 1/1  ━━━━━━━━━━━━━━━━━ 5/5 0:00:00 • 0:00:00 429.08it/s v_num: 0.000      ",
     {"step": 10, "totalSteps": 10, "epoch": 2.0}),
    # max_steps without max_epochs: Lightning prints the last epoch as -2, so there is no total
    ("Epoch 0/-2 ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━ 8/8 0:00:00 • 0:00:00 30.21it/s train_loss: 0.491 ",
     {"step": 8, "epoch": 1.0, "loss": 0.491, "metrics": {"train_loss": 0.491}}),
    ("                                                              train_loss: 0.328 ",
     {"loss": 0.328, "metrics": {"train_loss": 0.328}}),
    ("                                                              val_loss: 0.419   ", {"metrics": {"val_loss": 0.419}}),
    ("train_loss: 0.328", {}),  # not under the bar: someone else's line
    ("Validation DataLoader 0:  50%|█████     | 1/2 [00:00<00:00, 1714.76it/s]\x1b[A", {}),
    ("Sanity Checking DataLoader 0: 100%|██████████| 2/2 [00:00<00:00, 188.39it/s]", {}),
    ("Epoch 0: |          | 0/? [00:00<?, ?it/s]", {}),
])
def test_a_line(line, expected):
    assert parse(line) == expected


def test_a_nan_loss_is_kept():
    found = parse("Epoch 0:  20%|██        | 1/5 [00:00<00:00, 9.1it/s, v_num=0, train_loss=nan]")
    assert math.isnan(found["loss"]) and found["step"] == 1


def test_the_captured_tqdm_fit():
    records = parsed(parse, "lightning-tqdm.stdout")
    final = merged(records)
    assert final["step"] == 10 and final["epoch"] == 2.0 and final["loss"] == 0.328
    assert final["metrics"] == {"train_loss": 0.328, "val_loss": 0.419}
    assert max(r["step"] for r in records) == 10  # no validation bar counted as a training step


def test_the_captured_rich_fit():
    final = merged(parsed(parse, "lightning-rich.stdout"))
    assert final == {"step": 10, "totalSteps": 10, "epoch": 2.0, "loss": 0.328,
                     "metrics": {"train_loss": 0.328, "val_loss": 0.419}}
