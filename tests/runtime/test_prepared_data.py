"""Prepared data in real training: ``data.prepare`` as the init step, a run stopped after K steps
(checkpoint) and resumed gives the uninterrupted run's losses exactly (and is refused when an input
changed in between), and masked chat data gives the single-process losses under data parallelism
and a pipeline (the loss normalised by the global count of answer tokens)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from runtime_parity_util import job, max_rel

from tests.tiny_tokenizer import VOCAB, make_tokenizer_dir

pytestmark = pytest.mark.runtime

STEPS, STOP_AT = 6, 3
LOSS_RTOL = 1e-5


def conversations(n: int):
    for i in range(n):
        yield {"messages": [{"role": "system", "content": "answer briefly."},
                            {"role": "user", "content": f"what is {i} plus {i}?"},
                            {"role": "assistant", "content": f"{i} plus {i} is {2 * i}."},
                            {"role": "user", "content": "and the quick brown fox?"},
                            {"role": "assistant", "content": "it jumps over the lazy dog " * (1 + i % 3)}]}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    base = tmp_path_factory.mktemp("prepared")
    tokenizer = make_tokenizer_dir(base / "tokenizer")
    chat = base / "chat.jsonl"
    chat.write_text("".join(json.dumps(c) + "\n" for c in conversations(120)))
    return {"base": base, "tokenizer": tokenizer, "chat": chat}


def chat_job(path, *, world: int = 1, parallelism: dict | None = None, prepare: dict | None = None,
             micro_batch: int = 2) -> dict:
    doc = job(parallelism, world=world, steps=STEPS, overrides={"vocabSize": VOCAB},
              training={"microBatchSize": micro_batch})
    doc["spec"]["data"] = {"source": "prepared", "path": str(path), "seqLen": 16}
    if prepare:
        doc["spec"]["data"]["prepare"] = prepare
    return doc


def run_trainer(doc: dict, ckpt_dir, monkeypatch, stop_at: int | None = None):
    from phalanx_runtime.config import RuntimeConfig
    from phalanx_runtime.trainer import Trainer

    monkeypatch.setenv("PHALANX_CHECKPOINT_DIR", str(ckpt_dir))
    calls = []

    def stop_requested() -> bool:  # asked once per step: stop (with a checkpoint) after step stop_at
        calls.append(1)
        return stop_at is not None and len(calls) >= stop_at

    return Trainer(RuntimeConfig.from_dict(doc), stop_requested=stop_requested).run()


@pytest.fixture(scope="module")
def prepared(files):
    from phalanx_runtime.data.options import PrepareOptions
    from phalanx_runtime.data.prepare import prepare

    out = files["base"] / "chat-data"
    prepare(PrepareOptions(inputs=(str(files["chat"]),), out=str(out), tokenizer=str(files["tokenizer"]),
                           messages_field="messages"))
    return out


@pytest.fixture(scope="module")
def reference(prepared):
    from phalanx_runtime.config import RuntimeConfig
    from phalanx_runtime.train import train

    # The whole global batch in one microbatch: the plain mean over its answer tokens.
    return train(RuntimeConfig.from_dict(chat_job(prepared, micro_batch=8))).losses


def test_prepare_step_then_stop_and_resume_exactly(files, tmp_path, monkeypatch):
    """data.prepare prepares data.path before training; stopped after step 3 with a checkpoint,
    the resumed run's losses are the uninterrupted run's, bit for bit."""
    prepare = {"inputs": [str(files["chat"])], "tokenizer": str(files["tokenizer"]), "messagesField": "messages",
               "evalFraction": 0.1}
    doc = chat_job(tmp_path / "data", prepare=prepare)
    full = run_trainer(doc, tmp_path / "ckpt-full", monkeypatch)
    meta = json.loads((tmp_path / "data" / "meta.json").read_text())
    assert meta["splits"]["train"]["masked"] and meta["splits"]["eval"]["documents"] > 0
    stopped = run_trainer(doc, tmp_path / "ckpt", monkeypatch, stop_at=STOP_AT)
    assert stopped.preempted and stopped.losses == full.losses[:STOP_AT]
    resumed = run_trainer(doc, tmp_path / "ckpt", monkeypatch)
    assert resumed.start_step == STOP_AT
    assert resumed.losses == full.losses[STOP_AT:]
    assert full.losses[-1] < full.losses[0]


def test_resume_over_changed_inputs_is_refused(files, tmp_path, monkeypatch):
    """An input changed between restarts: rank 0 prepares data.path again, and the checkpoint's
    loader position (a step of the old data) is refused instead of read in the new data."""
    chat = tmp_path / "chat.jsonl"
    chat.write_bytes(files["chat"].read_bytes())
    prepare = {"inputs": [str(chat)], "tokenizer": str(files["tokenizer"]), "messagesField": "messages"}
    doc = chat_job(tmp_path / "data", prepare=prepare)
    assert run_trainer(doc, tmp_path / "ckpt", monkeypatch, stop_at=2).preempted
    with open(chat, "a") as f:
        f.write(json.dumps(next(conversations(1))) + "\n")
    with pytest.raises(ValueError, match="data.prepare.inputs / data.path: the prepared data is not the data"):
        run_trainer(doc, tmp_path / "ckpt", monkeypatch)


@pytest.mark.parametrize("name,world,parallelism", [
    ("dp2", 2, {"zero": 0}),
    ("pp2", 2, {"pipeline": 2, "pipelineSchedule": "1F1B", "microbatches": 4}),
])
def test_masked_loss_equals_single_process(name, world, parallelism, prepared, reference):
    """Answer-only labels: the loss divides by the global batch's count of answer tokens, so data
    parallelism and microbatches (each with its own count: a mean of their means would differ)
    give the losses of one process computing the global batch at once."""
    from phalanx_runtime.spawn import run_ranks

    out = run_ranks(chat_job(prepared, world=world, parallelism=parallelism), world)
    dev = max_rel(out["losses"], reference)
    print(f"\nPREPARED {name}: loss max rel {dev:.2e}")
    assert dev < LOSS_RTOL, (out["losses"], reference)


def test_phalanx_data_prepare_command(files, tmp_path, monkeypatch):
    """The operator's CLI runs the runtime's module: a prepared directory, then nothing to do."""
    from phalanx.cli import main

    root = Path(__file__).resolve().parents[2]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(str(root / d) for d in ("runtime", "common")))
    args = ["data", "prepare", "--input", str(files["chat"]), "--out", str(tmp_path / "out"), "--tokenizer",
            str(files["tokenizer"]), "--messages-field", "messages", "--eval-fraction", "0.1"]
    assert main(args) == 0
    meta = json.loads((tmp_path / "out" / "meta.json").read_text())
    assert meta["splits"]["train"]["masked"] and meta["key"]["eval_fraction"] == 0.1
    stamp = (tmp_path / "out" / "meta.json").stat().st_mtime_ns
    assert main(args) == 0 and (tmp_path / "out" / "meta.json").stat().st_mtime_ns == stamp
    assert main(args[:-2] + ["--eval-fraction", "-1"]) == 1
