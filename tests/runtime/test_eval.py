"""Held-out evaluation (``training.eval``) on real processes: every layout's eval_loss is the
single-process value at each evaluation (rtol 1e-5: only reduction order differs), evaluating
leaves the training losses as they are, the values reach the progress record, metrics.jsonl and
the rank-0 log, and a local sweep of the built-in runtime ranks its trials by eval_loss.

Tiny model (runtime_parity_util), 4 steps, an evaluation of 2 global batches after steps 2 and 4.
"""

from __future__ import annotations

import io
import json
import logging
import math
import os
from pathlib import Path

import pytest
import yaml
from runtime_parity_util import TINY_OVERRIDES, job, max_rel

from phalanx_common.contract import ENV_CHECKPOINT_DIR, ENV_TERMINATION_LOG, METRICS_LOG_FILE

pytestmark = pytest.mark.runtime

ROOT = Path(__file__).resolve().parents[2]
STEPS = 4
EVAL = {"eval": {"everySteps": 2, "batches": 2}}
EVAL_STEPS = [2, 4]
RTOL = 1e-5

LAYOUTS = {
    # id: (world, parallelism)
    "fsdp": (2, {"zero": 3}),
    "tp_sp": (2, {"tensor": 2, "sequenceParallel": True}),
    "pp_1f1b": (2, {"pipeline": 2, "pipelineSchedule": "1F1B", "microbatches": 4}),
    # adjacent stages on one rank: evaluated stage by stage, not by the schedule (evaluation.py)
    "pp_zbv": (2, {"pipeline": 2, "pipelineSchedule": "ZBVZeroBubble", "virtualStages": 2, "microbatches": 4}),
}


def run_inproc(doc):
    from phalanx_runtime.config import RuntimeConfig
    from phalanx_runtime.train import train

    return train(RuntimeConfig.from_dict(doc))


@pytest.fixture(scope="module")
def reference():
    """The single-process run with evaluation, and without."""
    with_eval = run_inproc(job(steps=STEPS, training=EVAL))
    without = run_inproc(job(steps=STEPS))
    return with_eval, without


def test_evaluating_leaves_the_training_losses_as_they_are(reference):
    with_eval, without = reference
    assert [step for step, _ in with_eval.eval_losses] == EVAL_STEPS
    assert with_eval.losses == without.losses
    assert with_eval.grad_norms == without.grad_norms
    assert without.eval_losses == []
    # the model learns: the second evaluation is lower
    assert with_eval.eval_losses[1][1] < with_eval.eval_losses[0][1]


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_eval_loss_of_every_layout_is_the_single_process_value(name, reference):
    from phalanx_runtime.spawn import run_ranks

    with_eval, without = reference
    world, par = LAYOUTS[name]
    out = run_ranks(job(par, world=world, steps=STEPS, training=EVAL), world, timeout=300)
    assert [step for step, _ in out["eval_losses"]] == EVAL_STEPS
    dev = max_rel([loss for _, loss in out["eval_losses"]], [loss for _, loss in with_eval.eval_losses])
    print(f"\nEVAL {name}: eval_loss max rel {dev:.2e}")
    assert dev < RTOL, (out["eval_losses"], with_eval.eval_losses)
    assert max_rel(out["losses"], without.losses) < RTOL  # training as without evaluation


def test_eval_metrics_reach_the_progress_record_the_metrics_log_and_the_log(tmp_path, monkeypatch, caplog):
    from phalanx_runtime.config import RuntimeConfig
    from phalanx_runtime.trainer import Trainer

    monkeypatch.setenv(ENV_CHECKPOINT_DIR, str(tmp_path / "ckpt"))
    (tmp_path / "termination-log").touch()  # as the kubelet makes it: only an existing file is written
    monkeypatch.setenv(ENV_TERMINATION_LOG, str(tmp_path / "termination-log"))
    caplog.set_level(logging.INFO, logger="phalanx_runtime")
    trainer = Trainer(RuntimeConfig.from_dict(job(steps=5, training={"eval": {"everySteps": 2, "batches": 1}})))
    result = trainer.run()
    evals = dict(result.eval_losses)
    assert list(evals) == [2, 4, 5]  # every 2 steps, and after the last

    lines = [json.loads(line) for line in (tmp_path / "ckpt" / METRICS_LOG_FILE).read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2, 3, 4, 5]  # one line per step, evaluations on theirs
    for line in lines:
        if line["step"] in evals:
            assert line["eval_loss"] == evals[line["step"]]
            assert line["perplexity"] == pytest.approx(math.exp(evals[line["step"]]))
        else:
            assert "eval_loss" not in line and "perplexity" not in line

    metrics = trainer.progress.snapshot()["metrics"]
    assert metrics["eval_loss"] == evals[5] and metrics["perplexity"] == pytest.approx(math.exp(evals[5]))
    assert {"learning_rate", "grad_norm"} <= set(metrics)
    final = json.loads((tmp_path / "termination-log").read_text())
    assert final["metrics"]["eval_loss"] == evals[5]
    assert any(r.getMessage().startswith("step 4 eval_loss ") for r in caplog.records)


def test_the_latest_eval_metrics_stay_in_the_record_between_evaluations(monkeypatch, tmp_path):
    from phalanx_runtime.config import RuntimeConfig
    from phalanx_runtime.trainer import Trainer

    monkeypatch.setenv(ENV_TERMINATION_LOG, str(tmp_path / "termination-log"))
    trainer = Trainer(RuntimeConfig.from_dict(job(steps=4, training={"eval": {"everySteps": 2, "batches": 1}})))
    records = {}
    for step in range(1, 5):
        trainer.step(step)
        records[step] = trainer.progress.snapshot()["metrics"]
    evals = dict(trainer.close().eval_losses)
    assert "eval_loss" not in records[1] and "perplexity" not in records[1]
    assert records[2]["eval_loss"] == records[3]["eval_loss"] == evals[2]
    assert records[3]["perplexity"] == records[2]["perplexity"]
    assert records[4]["eval_loss"] == evals[4] != evals[2]
    assert records[3]["learning_rate"] != records[2]["learning_rate"]  # the step's own values move on


# ---------------------------------------------------------------- a sweep by eval_loss

def _operator_has_training_eval() -> bool:
    from phalanx.api.types import TrainingSpec

    return "eval" in TrainingSpec.model_fields


GOOD_LR, POOR_LR = 3e-3, 1e-5  # 6 steps: lr 3e-3 learns the synthetic sequences, 1e-5 barely moves


def builtin_sweep() -> dict:
    from phalanx import constants

    template = {
        "image": "mine", "nodes": 1, "procsPerNode": 1,
        "model": {"preset": "debug", "overrides": TINY_OVERRIDES},
        "data": {"source": "synthetic", "seqLen": 16},
        "training": {"steps": 6, "globalBatchSize": 8, "microBatchSize": 4, "precision": "fp32", "seed": 7,
                     "eval": {"everySteps": 3, "batches": 2}},
    }
    return {
        "apiVersion": constants.API_VERSION, "kind": constants.SWEEP_KIND, "metadata": {"name": "evlr"},
        # the good value second: a tie would go to the lower index
        "spec": {"template": {"spec": template}, "parameters": [{"path": "training.lr", "values": [POOR_LR, GOOD_LR]}],
                 "objective": {"metric": "eval_loss", "goal": "minimize"}, "maxParallel": 1},
    }


@pytest.mark.skipif(not _operator_has_training_eval(), reason="the operator's TrainingJob has no training.eval yet")
def test_a_local_sweep_of_the_builtin_runtime_picks_the_trial_with_the_lowest_eval_loss(tmp_path, monkeypatch, capsys):
    from phalanx.sweep.local import run_local_sweep

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(str(ROOT / p) for p in ("operator", "runtime", "common")))
    work = tmp_path / "work"
    out = io.StringIO()
    code = run_local_sweep(builtin_sweep(), checkpoint_dir=str(work), timeout=300, json_out=True, poll_seconds=0.2,
                           out=out)
    assert code == 0, out.getvalue() + "".join(p.read_text() for p in work.glob("*.log"))
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    final_eval = {}
    for trial in result["trials"]:
        lines = [json.loads(line) for line in (work / trial["name"] / METRICS_LOG_FILE).read_text().splitlines()]
        evals = [line["eval_loss"] for line in lines if "eval_loss" in line]
        assert len(evals) == 2, lines  # after steps 3 and 6
        final_eval[trial["name"]] = evals[-1]
        assert trial["value"] == pytest.approx(evals[-1])
    print(f"\nSWEEP final eval_loss by trial: {final_eval}")
    best = min(final_eval, key=final_eval.get)
    assert result["bestTrial"]["name"] == best == "evlr-1"
    assert result["bestTrial"]["parameters"] == {"training.lr": GOOD_LR}
    assert result["bestTrial"]["value"] == pytest.approx(final_eval[best])
    manifest = yaml.safe_load((work / "evlr-1.yaml").read_text())
    assert manifest["spec"]["training"]["eval"] == {"everySteps": 3, "batches": 2}


def test_a_run_resumed_at_its_last_step_evaluates_once_for_the_final_record(tmp_path, monkeypatch):
    """Nothing is left to step, but the final record still carries the final evaluation's metrics."""
    monkeypatch.setenv(ENV_CHECKPOINT_DIR, str(tmp_path / "ckpt"))
    (tmp_path / "termination").touch()  # as the kubelet makes it: only an existing file is written
    monkeypatch.setenv(ENV_TERMINATION_LOG, str(tmp_path / "termination"))
    doc = job(steps=STEPS, training=EVAL)
    first = run_inproc(doc)
    resumed = run_inproc(doc)
    assert resumed.start_step == STEPS and resumed.losses == []
    assert [step for step, _ in resumed.eval_losses] == [STEPS]
    assert resumed.eval_losses[0][1] == pytest.approx(first.eval_losses[-1][1], rel=RTOL)
    final = json.loads((tmp_path / "termination").read_text())
    assert final["metrics"]["eval_loss"] == pytest.approx(first.eval_losses[-1][1], rel=RTOL)
