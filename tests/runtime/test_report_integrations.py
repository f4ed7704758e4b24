"""The ready-made callbacks on the real libraries: a tiny transformers Trainer run and a tiny
Lightning fit (CPU, a few steps) with ``PhalanxCallback``, each in its own process as a user's
script runs — the final record at exit, the metrics log, the checkpoint marker, and a resumed run's
resumedStep."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from phalanx_common.contract import (
    ENV_CHECKPOINT_DIR,
    ENV_TERMINATION_LOG,
    LATEST_CHECKPOINT_FILE,
    METRICS_LOG_FILE,
)

pytestmark = pytest.mark.runtime

ROOT = Path(__file__).resolve().parents[2]

TRANSFORMERS_SCRIPT = """
import sys, torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments
from phalanx_common.integrations.transformers import PhalanxCallback
from phalanx_common.report import latest_checkpoint

torch.manual_seed(0)
config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                     num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32)

class Tokens(torch.utils.data.Dataset):
    def __init__(self, n): self.ids = torch.randint(0, 64, (n, 16))
    def __len__(self): return len(self.ids)
    def __getitem__(self, i): return {"input_ids": self.ids[i], "labels": self.ids[i]}

args = TrainingArguments(output_dir=sys.argv[1], max_steps=int(sys.argv[2]), per_device_train_batch_size=4,
                         logging_steps=1, eval_strategy="steps", eval_steps=3, save_strategy="steps", save_steps=3,
                         report_to=[], use_cpu=True, disable_tqdm=True)
trainer = Trainer(model=LlamaForCausalLM(config), args=args, train_dataset=Tokens(64), eval_dataset=Tokens(8),
                  callbacks=[PhalanxCallback()])
trainer.train(resume_from_checkpoint=latest_checkpoint())
"""

LIGHTNING_SCRIPT = """
import sys, torch
import pytorch_lightning as pl
from torch.utils.data import DataLoader, TensorDataset
from phalanx_common.integrations.lightning import PhalanxCallback

torch.manual_seed(0)

class Regression(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 1)
    def training_step(self, batch, _):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.linear(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss
    def validation_step(self, batch, _):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.linear(x), y), prog_bar=True)
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

data = TensorDataset(torch.randn(20, 4), torch.randn(20, 1))
trainer = pl.Trainer(max_epochs=2, accelerator="cpu", logger=False, log_every_n_steps=1, enable_progress_bar=False,
                     enable_model_summary=False, default_root_dir=sys.argv[1], callbacks=[PhalanxCallback()])
trainer.fit(Regression(), DataLoader(data, batch_size=4), DataLoader(data, batch_size=10))
"""


def _run(script: str, tmp_path: Path, *args: str) -> dict:
    (tmp_path / "script.py").write_text(script)
    log = tmp_path / "termination-log"
    log.write_text("")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "common"), os.environ.get("PYTHONPATH", "")]),
           ENV_CHECKPOINT_DIR: str(tmp_path / "ckpt"), ENV_TERMINATION_LOG: str(log)}
    for name in ("RANK", "LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "PHALANX_PROGRESS_PORT"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, str(tmp_path / "script.py"), *args], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(log.read_text())


def _lines(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "ckpt" / METRICS_LOG_FILE).read_text().splitlines()]


def test_transformers_trainer(tmp_path):
    out = tmp_path / "out"
    record = _run(TRANSFORMERS_SCRIPT, tmp_path, str(out), "3")
    assert record["step"] == 3 and record["totalSteps"] == 3 and isinstance(record["loss"], float)
    assert record["metrics"]["learning_rate"] > 0 and "eval_loss" in record["metrics"] and record["epoch"] > 0
    assert record["lastCheckpoint"]["path"] == str(out / "checkpoint-3") and record["lastCheckpoint"]["step"] == 3
    marker = json.loads((tmp_path / "ckpt" / LATEST_CHECKPOINT_FILE).read_text())
    assert marker["path"] == str(out / "checkpoint-3") and (out / "checkpoint-3").is_dir()
    # one line per trained step; the start at step 0 carries no value, so it has none
    assert [line["step"] for line in _lines(tmp_path)] == [1, 2, 3]
    assert "loss" in _lines(tmp_path)[0] and "eval_loss" in _lines(tmp_path)[2]

    resumed = _run(TRANSFORMERS_SCRIPT, tmp_path, str(out), "4")  # a restart: latest_checkpoint() → checkpoint-3
    assert resumed["resumedStep"] == 3 and resumed["step"] == 4 and resumed["totalSteps"] == 4


def test_lightning_fit(tmp_path):
    record = _run(LIGHTNING_SCRIPT, tmp_path, str(tmp_path / "out"))
    assert record["step"] == 10 and record["totalSteps"] == 10 and isinstance(record["loss"], float)
    assert {"train_loss", "val_loss"} <= set(record["metrics"]) and record["epoch"] >= 1
    checkpoint = record["lastCheckpoint"]
    assert checkpoint["step"] == 10 and checkpoint["path"].endswith("epoch=1-step=10.ckpt")
    marker = json.loads((tmp_path / "ckpt" / LATEST_CHECKPOINT_FILE).read_text())
    assert marker["path"] == checkpoint["path"] and Path(marker["path"]).is_file()
    steps = [line["step"] for line in _lines(tmp_path)]
    assert steps == sorted(set(steps)) and steps[-1] == 10
