"""The user's own code gets Phalanx's progress: real third-party trainers (tests/runtime/user_code/,
scripts with nothing of Phalanx in them) run as 2-node × 1-process command jobs under
``phalanx local --json``, each with the ``spec.progress`` collector that reads its logs — or, for the
"code" way in, with Phalanx's callback added (``collector: client``). The last ``--json`` line
carries rank 0's last step, loss and metrics: the step is the script's last, the loss a finite
number. Every script trains for real (gloo on CPU); each run takes 10-50 s on 2 cores.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from phalanx_common.contract import LATEST_CHECKPOINT_FILE, METRICS_LOG_FILE, Collector, ProgressKey

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
USER_CODE = HERE / "user_code"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=$(PET_NPROC_PER_NODE)"]
# The nodes' Python finds this checkout (the client variants import phalanx_common).
PYTHONPATH = os.pathsep.join(str(ROOT / p) for p in ("operator", "runtime", "common", "."))
# torch_ddp.py's step and eval lines ("step 3/8 loss=0.6512 lr=0.0100", "eval step 4 val_loss=0.5123")
DDP_PATTERNS = [r"^step (?P<step>\d+)/(?P<total_steps>\d+) loss=(?P<loss>\S+) lr=(?P<learning_rate>\S+)",
                r"^eval step \d+ val_loss=(?P<val_loss>\S+)"]

pytestmark = [
    pytest.mark.runtime,
]


def command_job(tmp_path: Path, script: str, args: list[str], progress: dict | None) -> Path:
    """A 2-node × 1-process command job running ``torchrun <script> <args>``."""
    spec = {"image": "x", "nodes": 2, "procsPerNode": 1, "command": TORCHRUN,
            "args": [str(USER_CODE / script), *args]}
    if progress:
        spec["progress"] = {key: str(value) if isinstance(value, Collector) else value for key, value in progress.items()}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob",
                                    "metadata": {"name": "yours"}, "spec": spec}))
    return path


def run_local(tmp_path: Path, job: Path, *extra: str, timeout: float = 150) -> tuple[dict, str]:
    """``phalanx local JOB --json`` in ``tmp_path``: the summary (its last stdout line) and the
    nodes' output (stderr with --json; rank 0's lines pass through the collector unchanged)."""
    p = subprocess.run([sys.executable, "-m", "phalanx", "local", str(job), "--json", *extra], cwd=tmp_path,
                       capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, "PYTHONPATH": PYTHONPATH})
    assert p.returncode == 0, p.stderr[-4000:]
    summary = json.loads(p.stdout.strip().splitlines()[-1])
    assert summary["mode"] == "command" and summary["exit_codes"] == [0, 0], summary
    return summary, p.stderr


def assert_progress(summary: dict, steps: int) -> None:
    assert summary.get(ProgressKey.STEP) == steps, summary
    loss = summary.get(ProgressKey.LOSS)
    assert isinstance(loss, float) and math.isfinite(loss), summary


@pytest.mark.timeout(150)
def test_hf_trainer_with_the_huggingface_collector(tmp_path):
    job = command_job(tmp_path, "hf_trainer.py", ["--output-dir", str(tmp_path / "out"), "--max-steps", "6"],
                      {"collector": Collector.HUGGINGFACE})
    summary, output = run_local(tmp_path, job)
    assert_progress(summary, 6)
    # Trainer logs {'loss': '4.846', 'grad_norm': ..., 'learning_rate': ..., 'epoch': ...} and, every
    # 3 steps, {'eval_loss': ...}: numbers as strings; the step is only in the tqdm bar (6/6).
    assert "{'loss': " in output and "{'eval_loss': " in output, output[-3000:]
    metrics = summary.get(ProgressKey.METRICS, {})
    assert math.isfinite(metrics["eval_loss"]) and math.isfinite(metrics["learning_rate"]), summary


@pytest.mark.timeout(150)
def test_hf_trainer_with_the_phalanx_callback(tmp_path):
    """collector client: the script reports (PhalanxCallback), commits Trainer's checkpoints and
    appends one metrics line per step in the checkpoint dir."""
    checkpoints = tmp_path / "checkpoints"
    job = command_job(tmp_path, "hf_trainer_client.py",
                      ["--output-dir", "$(PHALANX_CHECKPOINT_DIR)", "--max-steps", "6", "--save-steps", "3"],
                      {"collector": Collector.CLIENT})
    summary, _ = run_local(tmp_path, job, "--checkpoint-dir", str(checkpoints))
    assert_progress(summary, 6)
    assert summary[ProgressKey.TOTAL_STEPS] == 6, summary
    assert math.isfinite(summary[ProgressKey.METRICS]["eval_loss"]), summary
    latest = json.loads((checkpoints / LATEST_CHECKPOINT_FILE).read_text())
    assert latest["step"] == 6 and Path(latest["path"]) == checkpoints / "checkpoint-6", latest
    lines = [json.loads(line) for line in (checkpoints / METRICS_LOG_FILE).read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2, 3, 4, 5, 6], lines


@pytest.mark.timeout(150)
@pytest.mark.parametrize("bar", ["default", "tqdm"])
def test_lightning_with_the_lightning_collector(tmp_path, bar):
    """``default`` is Rich's bar where rich is installed (transformers brings it): with no terminal it
    prints only its final state; tqdm's prints every step, \\r-separated."""
    job = command_job(tmp_path, "lightning_script.py",
                      ["--nodes", "2", "--max-steps", "8", "--progress-bar", bar, "--output-dir", str(tmp_path / "out")],
                      {"collector": Collector.LIGHTNING})
    summary, output = run_local(tmp_path, job)
    assert_progress(summary, 8)
    assert "final train_loss=" in output, output[-3000:]
    if bar == "tqdm":  # "Epoch 0: 100%|██████████| 8/8 [00:00<00:00, 51.79it/s, train_loss=0.491, val_loss=0.471]"
        assert math.isfinite(summary[ProgressKey.METRICS]["val_loss"]), summary


@pytest.mark.timeout(150)
def test_lightning_with_the_phalanx_callback(tmp_path):
    job = command_job(tmp_path, "lightning_client.py",
                      ["--nodes", "2", "--max-steps", "8", "--output-dir", str(tmp_path / "out")],
                      {"collector": Collector.CLIENT})
    summary, _ = run_local(tmp_path, job)
    assert_progress(summary, 8)
    assert math.isfinite(summary[ProgressKey.METRICS]["val_loss"]), summary


@pytest.mark.timeout(240)
def test_torchtitan_with_the_torchtitan_collector(tmp_path):
    """torchtitan's own trainer and step log ("step:  4  loss:  6.95140  grad_norm: ..." in ANSI
    colours); data parallel by replication (gloo has no PREMUL_SUM for FSDP)."""
    job = command_job(tmp_path, "torchtitan_cpu.py",
                      ["--module", "llama3", "--config", "llama3_debugmodel", "--training.steps", "4",
                       "--training.seq_len", "256", "--training.local_batch_size", "2",
                       "--parallelism.data_parallel_replicate_degree", "2",
                       "--parallelism.data_parallel_shard_degree", "1", "--dump_folder", str(tmp_path / "out")],
                      {"collector": Collector.TORCHTITAN})
    summary, output = run_local(tmp_path, job, timeout=240)
    assert_progress(summary, 4)
    assert "Training completed" in output, output[-3000:]


@pytest.mark.timeout(120)
def test_plain_torch_with_the_regex_collector(tmp_path):
    job = command_job(tmp_path, "torch_ddp.py", ["--steps", "8", "--eval-every", "4"],
                      {"collector": Collector.REGEX, "patterns": DDP_PATTERNS})
    summary, output = run_local(tmp_path, job)
    assert_progress(summary, 8)
    assert summary[ProgressKey.TOTAL_STEPS] == 8, summary
    assert summary[ProgressKey.METRICS]["learning_rate"] == pytest.approx(0.01), summary
    assert math.isfinite(summary[ProgressKey.METRICS]["val_loss"]), summary
    assert "step 8/8 loss=" in output


@pytest.mark.timeout(120)
def test_plain_torch_with_the_jsonl_collector(tmp_path):
    metrics_file = tmp_path / "metrics.jsonl"
    job = command_job(tmp_path, "torch_ddp.py", ["--steps", "8", "--metrics-file", str(metrics_file)],
                      {"collector": Collector.JSONL, "file": str(metrics_file)})
    summary, _ = run_local(tmp_path, job)
    assert_progress(summary, 8)
    last = json.loads(metrics_file.read_text().splitlines()[-1])
    assert summary[ProgressKey.LOSS] == pytest.approx(last["loss"]), (summary, last)
    assert summary[ProgressKey.METRICS]["lr"] == pytest.approx(0.01), summary
