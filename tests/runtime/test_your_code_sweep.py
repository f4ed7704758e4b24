"""A TrainingSweep over the user's own Hugging Face Trainer script (tests/runtime/user_code/hf_trainer.py,
unmodified, each step paced to 0.1 s by hf_trainer_paced.py so that a trial lasts long enough to be
stopped), with real processes: the local sweep (what `phalanx local SWEEP.yaml` runs, polling
every 0.2 s here) runs each trial as `phalanx local` of a 1-node command job under torchrun, its
learning rate from the sweep's ``env.LEARNING_RATE`` parameter (``--learning-rate $(LEARNING_RATE)``),
its progress read from Trainer's console output by the ``huggingface`` collector. The sweep picks
the learning rate by ``eval_loss`` and the median rule stops the hopeless trial at an early evaluation.

The script trains on random token ids, so nothing it learns carries over to its evaluation set:
a larger learning rate memorises more noise and its eval_loss rises, while a tiny one learns
nothing and loses nothing (lr 1e-7 ends within 0.001 of lr 0.001: no use as the hopeless value).
On this model, over four seeds of its weights and data, eval_loss after 30 steps (Trainer prints
4 significant digits) is 4.856-4.868 for lr 0.001 and 4.882-4.932 for lr 0.01, at least 0.018
higher in each seed; lr 0.03's first evaluation (step 3) is 0.044-0.089 above the median of the
other two, and it stays the highest.
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
from pathlib import Path

import pytest

from phalanx import constants
from phalanx.sweep.local import run_local_sweep
from phalanx_common.contract import Collector

pytestmark = pytest.mark.runtime

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# The trials' Python finds this checkout (phalanx local, the collector).
PYTHONPATH = os.pathsep.join(str(ROOT / p) for p in ("operator", "runtime", "common"))
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=$(PET_NPROC_PER_NODE)"]
STEPS, EVAL_STEPS = 30, 3
# Trial order: the good value second (a tie would go to the lower index), the hopeless one last
# (one trial at a time: the other two have values at every milestone when it runs).
OTHER_LR, GOOD_LR, HOPELESS_LR = 0.01, 0.001, 0.03
FINAL_EVAL = re.compile(r"final eval_loss=(\S+)")  # the script's own last line


def sweep() -> dict:
    args = [str(HERE / "user_code" / "hf_trainer_paced.py"), "--output-dir", "$(PHALANX_CHECKPOINT_DIR)/out",
            "--max-steps", str(STEPS), "--eval-steps", str(EVAL_STEPS), "--save-steps", str(10 * STEPS),
            "--learning-rate", "$(LEARNING_RATE)"]
    return {
        "apiVersion": constants.API_VERSION, "kind": constants.SWEEP_KIND, "metadata": {"name": "lr"},
        "spec": {
            "template": {"spec": {"image": "mine", "nodes": 1, "procsPerNode": 1, "command": TORCHRUN, "args": args,
                                  "progress": {"collector": str(Collector.HUGGINGFACE)}}},
            "parameters": [{"path": "env.LEARNING_RATE", "values": [OTHER_LR, GOOD_LR, HOPELESS_LR]}],
            "objective": {"metric": "eval_loss", "goal": "minimize"},
            "maxParallel": 1,
            "earlyStopping": {"rule": "median", "graceSteps": EVAL_STEPS, "intervalSteps": EVAL_STEPS, "minTrials": 2},
        },
    }


def last_reported(metrics_log: Path, name: str) -> float:
    """The last value of ``name`` in a trial's metrics.jsonl (the collector's lines, one per step)."""
    lines = [json.loads(line) for line in metrics_log.read_text().splitlines()]
    return [line[name] for line in lines if name in line][-1]


@pytest.mark.timeout(200)
def test_a_sweep_of_hf_trainer_runs_picks_the_learning_rate_by_eval_loss_and_stops_the_hopeless_one(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PYTHONPATH", PYTHONPATH)
    work = tmp_path / "work"
    out = io.StringIO()
    code = run_local_sweep(sweep(), checkpoint_dir=str(work), timeout=180, json_out=True, poll_seconds=0.2, out=out)
    text = out.getvalue()
    logs = "".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(work.glob("*.log")))
    assert code == 0, text + logs
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    trials = {t["name"]: t for t in result["trials"]}
    assert result["phase"] == "Succeeded", result

    best = result["bestTrial"]
    assert best["name"] == "lr-1" and best["parameters"] == {"env.LEARNING_RATE": GOOD_LR}, (result, text)
    for name in ("lr-0", "lr-1"):
        assert trials[name]["phase"] == "Succeeded" and trials[name]["step"] == STEPS, result
    assert trials["lr-0"]["value"] > best["value"], result
    # The winner's value is the eval_loss of its last report (Trainer's last evaluation, at step
    # STEPS), which is the script's own final evaluation of the same model.
    assert best["value"] == last_reported(work / "lr-1" / constants.METRICS_LOG_FILE, "eval_loss"), result
    final = float(FINAL_EVAL.search((work / "lr-1.log").read_text()).group(1))
    assert best["value"] == pytest.approx(final, abs=1e-3), (best, final)

    stopped = trials["lr-2"]
    assert stopped["phase"] == "Stopped" and stopped["reason"] == "EarlyStopped", (result, text)
    assert EVAL_STEPS <= stopped["step"] < STEPS, result
    assert stopped["message"].startswith("median rule, eval_loss at step "), stopped
    assert "is worse than the median" in stopped["message"], stopped
    assert "stopping lr-2: median rule, eval_loss at step " in text, text
    assert "final eval_loss=" not in (work / "lr-2.log").read_text(), logs
