"""`phalanx local SWEEP.yaml` with command-job trials, on real processes: each trial is the user's
own script (a few lines of Python written here), which gets its learning rate from the sweep's
``env.LR`` parameter and appends the reporter's lines (step, loss, eval_loss every 5 steps) to
``$PHALANX_CHECKPOINT_DIR/metrics.jsonl``. The sweep ranks the trials by eval_loss (not by the
training loss, which another trial has lowest) and the median rule stops the hopeless trial at
its first milestone."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import pytest

from phalanx import constants
from phalanx.sweep.local import run_local_sweep

pytestmark = pytest.mark.runtime

ROOT = Path(__file__).resolve().parents[2]
STEPS = 40

# Training loss falls faster with a larger lr, eval_loss gains a gap that grows with it: lr 0.3
# has the lowest loss, lr 0.1 the lowest eval_loss; lr 5 diverges.
SCRIPT = f"""
import json, os, time

lr = float(os.environ["LR"])
log = os.path.join(os.environ["{constants.ENV_CHECKPOINT_DIR}"], "{constants.METRICS_LOG_FILE}")
for step in range(1, {STEPS} + 1):
    loss = 10.0 + 0.01 * step if lr > 1 else 2.0 / (1.0 + lr * step)
    record = {{"step": step, "loss": loss, "tokens_per_s": 1000.0, "time": time.time()}}
    if step % 5 == 0:
        record["eval_loss"] = loss + 3.0 * lr
    with open(log, "a") as f:
        f.write(json.dumps(record) + "\\n")
    time.sleep(0.1)
"""


def sweep(script: Path) -> dict:
    return {
        "apiVersion": constants.API_VERSION, "kind": constants.SWEEP_KIND, "metadata": {"name": "lr"},
        "spec": {
            "template": {"spec": {"image": "mine", "command": [sys.executable, str(script)]}},
            "parameters": [{"path": "env.LR", "values": [0.3, 0.1, 5.0]}],
            "objective": {"metric": "eval_loss", "goal": "minimize"},
            # Two at once: the hopeless trial starts after both others passed its first milestone.
            "maxParallel": 2,
            "earlyStopping": {"rule": "median", "graceSteps": 5, "minTrials": 2},
        },
    }


def test_a_local_sweep_of_command_jobs_ranks_by_a_reported_metric_and_stops_the_hopeless_trial(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(str(ROOT / p) for p in ("operator", "runtime", "common")))
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    work = tmp_path / "work"
    out = io.StringIO()
    code = run_local_sweep(sweep(script), checkpoint_dir=str(work), timeout=240, json_out=True,
                           poll_seconds=0.2, out=out)
    text = out.getvalue()
    assert code == 0, text + "".join(p.read_text() for p in work.glob("*.log"))
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    trials = {t["name"]: t for t in result["trials"]}
    assert result["phase"] == "Succeeded"
    # lr 0.1: eval_loss 2/(1+4) + 0.3 = 0.7 at step 40; lr 0.3 has the lower loss (0.154) but eval_loss 1.05
    assert result["bestTrial"]["name"] == "lr-1" and result["bestTrial"]["parameters"] == {"env.LR": 0.1}
    assert result["bestTrial"]["value"] == pytest.approx(0.7)
    assert trials["lr-0"]["phase"] == "Succeeded" and trials["lr-0"]["value"] == pytest.approx(2 / 13 + 0.9)
    assert trials["lr-0"]["step"] == STEPS
    stopped = trials["lr-2"]
    assert stopped["phase"] == "Stopped" and stopped["reason"] == "EarlyStopped", text
    assert stopped["step"] < STEPS
    assert "stopping lr-2: median rule, eval_loss at step 5:" in text, text
    # the trial got its value as text in its env, as the pod would
    manifest = (work / "lr-2.yaml").read_text()
    assert "name: LR" in manifest and "value: '5.0'" in manifest
