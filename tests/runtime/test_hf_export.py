"""Hugging Face export of checkpoints (models/huggingface/export.py, phalanx_runtime.export):

* a preset model trained by the runtime, exported, loads in transformers with the runtime's logits
  (the RoPE permutation is right);
* the in-job export of an FSDP run (2 ranks splitting the shard files) equals the offline export;
* a LoRA checkpoint: the merged export is base + scaled adapters, and the PEFT adapter on the base
  model gives the merged model's logits;
* LoRA on a pretrained model (hf_models.py), trained by the runtime with exportHuggingFace: its
  checkpoint holds the adapters only, ``final/hf`` (the base read from the pretrained directory)
  gives the runtime's final logits in transformers, ``final/adapter`` with PEFT on the pretrained
  directory the same; without that directory the merged export is refused, the adapter one works;
  2 ranks (FSDP) export what one process exports of their checkpoint;
* the pure parts: permutation, shard assignment, index, safetensors header, plans, sizes.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch

from phalanx_common.contract import ENV_CHECKPOINT_DIR, ENV_TERMINATION_LOG
from phalanx_runtime.env import ENV_EXPORT_MAX_SHARD_BYTES
from phalanx_runtime.models.huggingface import export as hf_export
from phalanx_runtime.models.huggingface.export import (
    ExportTensor,
    Param,
    assign_shards,
    index_document,
    interleaved_to_half,
    plan_adapter,
    plan_model,
    rank_files,
    shard_file_name,
    write_safetensors,
)

pytestmark = pytest.mark.runtime

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).parent))
from runtime_parity_util import job  # noqa: E402

REL_TOL = 1e-5
RUNTIME_PYTHONPATH = os.pathsep.join(str(ROOT / p) for p in ("runtime", "common"))  # for `phalanx export`'s process
TINY = {"dim": 32, "nLayers": 2, "nHeads": 4, "nKvHeads": 2, "ffnHidden": 64, "vocabSize": 128}


# ---------------------------------------------------------------- helpers


def export_job(*, world: int = 1, steps: int = 3, zero: int = 0, tie: bool = False, in_job: bool = False) -> dict:
    doc = job({"zero": zero}, world=world, steps=steps, overrides={**TINY, "tieEmbeddings": tie}, seq_len=16)
    doc["spec"]["checkpoint"] = {"intervalSteps": 0, "keepLast": 1, "async": False, "exportHuggingFace": in_job}
    return doc


def read_model(step_dir: Path) -> dict[str, torch.Tensor]:
    """The checkpoint's model tensors, full (the test's own reader: DCP with no process group)."""
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    from phalanx_runtime.components.checkpoint import SafeEmptyLoadPlanner, SafeReader

    sd: dict = {}
    _load_state_dict(sd, storage_reader=SafeReader(str(step_dir)), planner=SafeEmptyLoadPlanner(keys={"model"}),
                     no_dist=True)
    return sd["model"]


def runtime_logits(doc: dict, step_dir: Path, tokens: torch.Tensor) -> torch.Tensor:
    from phalanx_runtime.config import RuntimeConfig
    from phalanx_runtime.models.transformer import build_transformer

    model = build_transformer(RuntimeConfig.from_dict(doc).shape, seed=0)
    model.load_state_dict(read_model(step_dir), strict=False)  # tied: output.weight is the embedding
    with torch.no_grad():
        return model.eval()(tokens)


def hf_logits(model_dir: Path, tokens: torch.Tensor) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(tokens).logits


def rel_dev(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


def tokens(vocab: int, seq: int = 12) -> torch.Tensor:
    return torch.randint(0, vocab, (2, seq), generator=torch.Generator().manual_seed(3))


def safetensor_files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.glob("*.safetensors"))}


def run_export_cli(argv: list[str]) -> int:
    """``phalanx export`` (a subprocess running python -m phalanx_runtime.export)."""
    from phalanx.cli import main

    return main(["export", *argv])


# ---------------------------------------------------------------- (a) preset model → transformers


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A preset model trained 3 steps in this process, its checkpoint directory."""
    from phalanx_runtime.config import RuntimeConfig
    from phalanx_runtime.train import train

    base = tmp_path_factory.mktemp("trained")
    doc = export_job()
    with pytest.MonkeyPatch.context() as env:
        env.setenv(ENV_CHECKPOINT_DIR, str(base / "ckpt"))
        env.setenv(ENV_TERMINATION_LOG, str(base / "termination"))
        train(RuntimeConfig.from_dict(doc))
    return doc, base / "ckpt"


def test_exported_preset_model_gives_the_runtime_logits_in_transformers(trained, tmp_path, monkeypatch):
    doc, ckpt = trained
    monkeypatch.setenv("PYTHONPATH", RUNTIME_PYTHONPATH)
    out = tmp_path / "hf"
    assert run_export_cli([str(ckpt), "--out", str(out)]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == ["config.json", "model-00001-of-00001.safetensors", "model.safetensors.index.json"]
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["dtype"] == "float32"
    x = tokens(TINY["vocabSize"])
    ours = runtime_logits(doc, ckpt / "step-3", x)
    right = rel_dev(hf_logits(out, x), ours)
    assert right <= REL_TOL
    # Without the permutation the logits differ beyond the bound (a tiny model's attention is
    # nearly uniform, so by little; tests of the permutation itself are below).
    wrong = rel_dev(hf_logits_unpermuted(ckpt, tmp_path, x), ours)
    print(f"permuted {right:.2e}, unpermuted {wrong:.2e}")
    assert wrong > max(REL_TOL, 20 * right)


def hf_logits_unpermuted(ckpt: Path, tmp_path: Path, x: torch.Tensor) -> torch.Tensor:
    record_path = ckpt / "model" / "phalanx-model.json"
    copy = tmp_path / "unpermuted-model"
    copy.mkdir()
    for p in (ckpt / "model").iterdir():
        (copy / p.name).write_bytes(p.read_bytes())
    record = json.loads(record_path.read_text())
    (copy / "phalanx-model.json").write_text(json.dumps({**record, "rope_style": "half"}))
    out = hf_export.export_hf(hf_export.load_export(ckpt / "step-3", copy), tmp_path / "unpermuted")
    return hf_logits(out, x)


def test_export_refuses_a_non_empty_out_and_a_missing_step(trained, tmp_path, capsys):
    from phalanx_runtime.export import main

    _, ckpt = trained
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    assert main([str(ckpt), "--out", str(tmp_path / "full")]) == 1
    assert "not an empty directory" in capsys.readouterr().err
    assert main([str(ckpt), "--out", str(tmp_path / "o"), "--step", "2"]) == 1
    assert "step-2: not a valid committed checkpoint" in capsys.readouterr().err
    assert main([str(ckpt / "step-3"), "--out", str(tmp_path / "o2"), "--max-shard-size", "1KB"]) == 0
    index = json.loads((tmp_path / "o2" / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 3


# ---------------------------------------------------------------- (b) in-job export, 2 ranks, FSDP


def test_in_job_export_with_fsdp_equals_the_offline_export(tmp_path, monkeypatch):
    from phalanx_runtime.spawn import run_ranks

    ckpt = tmp_path / "ckpt"
    monkeypatch.setenv(ENV_CHECKPOINT_DIR, str(ckpt))
    monkeypatch.setenv(ENV_TERMINATION_LOG, str(tmp_path / "termination"))
    monkeypatch.setenv(ENV_EXPORT_MAX_SHARD_BYTES, "20000")  # several files, split over the ranks
    doc = export_job(world=2, zero=3, tie=True, in_job=True)
    run_ranks(doc, 2, timeout=240)
    in_job = ckpt / "final" / "hf"
    offline = hf_export.export_hf(hf_export.load_export(ckpt / "step-3", max_shard_bytes=20000), tmp_path / "off")
    files = safetensor_files(in_job)
    assert len(files) >= 3
    assert files == safetensor_files(offline)
    for name in ("model.safetensors.index.json", "config.json"):
        assert (in_job / name).read_text() == (offline / name).read_text()
    index = json.loads((in_job / "model.safetensors.index.json").read_text())
    assert "lm_head.weight" not in index["weight_map"]  # tied: transformers ties it back
    assert not (ckpt / "final" / "adapter").exists() and not list((ckpt / "final").glob(".tmp-*"))
    assert (ckpt / "model" / "config.json").is_file() and not list(ckpt.glob(".tmp-*"))
    x = tokens(TINY["vocabSize"])
    assert rel_dev(hf_logits(in_job, x), runtime_logits(doc, ckpt / "step-3", x)) <= REL_TOL


# ---------------------------------------------------------------- (c) LoRA: merged and PEFT


LORA_RANK, LORA_ALPHA = 4, 8.0
LORA_MODULES = ("attention.wq", "attention.wv", "feed_forward.w2")


@pytest.fixture(scope="module")
def lora_checkpoint(tmp_path_factory):
    """A checkpoint written by hand: a Hugging Face Llama (the pretrained base, RoPE in halves)
    under our names, plus adapters on three projections."""
    import torch.distributed.checkpoint as dcp
    from transformers import LlamaConfig, LlamaForCausalLM

    from phalanx_common.presets import ModelShape
    from phalanx_runtime.config import Lora
    from phalanx_runtime.models.huggingface import keys
    from phalanx_runtime.models.huggingface.provenance import write_model_dir

    base = tmp_path_factory.mktemp("lora")
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=128, max_position_embeddings=64, tie_word_embeddings=False)
    LlamaForCausalLM(cfg).save_pretrained(base / "pretrained")
    hf = LlamaForCausalLM.from_pretrained(base / "pretrained").state_dict()
    model = {keys.from_hf(k): v.clone() for k, v in hf.items()}
    for layer in range(2):
        for module in LORA_MODULES:
            out_dim, in_dim = model[f"layers.{layer}.{module}.weight"].shape
            model[f"layers.{layer}.{module}.lora_a.weight"] = torch.randn(LORA_RANK, in_dim) * 0.1
            model[f"layers.{layer}.{module}.lora_b.weight"] = torch.randn(out_dim, LORA_RANK) * 0.1
    step = base / "ckpt" / "step-5"
    dcp.save({"model": model, "trainer": {"step": 5}}, storage_writer=dcp.FileSystemWriter(str(step)), no_dist=True)
    (step / "COMMITTED").write_text(json.dumps({"step": 5, "world_size": 0}))
    shape = ModelShape(dim=32, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=128, ffn_hidden=64, max_seq_len=64,
                       rope_style="half")  # loaded from Hugging Face
    targets = tuple(keys.LAYER_MODULES[m].split(".")[-1] for m in LORA_MODULES)
    write_model_dir(base / "ckpt" / "model", shape, pretrained=str(base / "pretrained"),
                    lora=Lora(rank=LORA_RANK, alpha=LORA_ALPHA, targets=targets))
    return base, model


def test_merged_lora_export_is_base_plus_scaled_adapters(lora_checkpoint, tmp_path):
    from safetensors.torch import load_file

    base, model = lora_checkpoint
    out = hf_export.export_hf(hf_export.load_export(base / "ckpt" / "step-5"), tmp_path / "merged")
    got = load_file(out / "model-00001-of-00001.safetensors")
    pretrained = load_file(base / "pretrained" / "model.safetensors")
    # the pretrained model's files beside the weights, recorded in model/ and copied on
    generation = (base / "pretrained" / "generation_config.json").read_text()
    assert (out / "generation_config.json").read_text() == generation
    assert json.loads((out / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    assert got.keys() == pretrained.keys()
    scaling = LORA_ALPHA / LORA_RANK
    for layer in range(2):
        for module in LORA_MODULES:
            ours = f"layers.{layer}.{module}"
            want = model[f"{ours}.weight"] + scaling * model[f"{ours}.lora_b.weight"] @ model[f"{ours}.lora_a.weight"]
            name = hf_export.keys.to_hf(f"{ours}.weight")
            assert torch.allclose(got[name], want, rtol=0, atol=1e-6)
            assert not torch.equal(got[name], pretrained[name])
    untouched = hf_export.keys.to_hf("layers.0.attention.wk.weight")
    assert torch.equal(got[untouched], pretrained[untouched])


def test_peft_adapter_on_the_base_gives_the_merged_logits(lora_checkpoint, tmp_path, monkeypatch):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base, _ = lora_checkpoint
    monkeypatch.setenv("PYTHONPATH", RUNTIME_PYTHONPATH)
    assert run_export_cli([str(base / "ckpt"), "--out", str(tmp_path / "adapter"), "--adapter-only"]) == 0
    merged = hf_export.export_hf(hf_export.load_export(base / "ckpt" / "step-5"), tmp_path / "merged")
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert (config["peft_type"], config["r"], config["lora_alpha"]) == ("LORA", LORA_RANK, LORA_ALPHA)
    assert config["target_modules"] == ["down_proj", "q_proj", "v_proj"]
    assert config["base_model_name_or_path"] == str(base / "pretrained")
    with_adapter = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base / "pretrained"),
                                             tmp_path / "adapter").eval()
    x = tokens(128)
    with torch.no_grad():
        peft_logits = with_adapter(x).logits
    merged_logits = hf_logits(merged, x)
    assert rel_dev(peft_logits, merged_logits) <= REL_TOL
    assert rel_dev(hf_logits(base / "pretrained", x), merged_logits) > 1e-3  # the adapters do something


# ---------------------------------------------------------------- (d) LoRA on a pretrained model, trained


def pretrained_lora_job(path: Path, *, world: int = 1, parallelism: dict | None = None) -> dict:
    doc = job(parallelism, world=world, steps=3, training={"lr": 1e-2}, seq_len=16)
    doc["spec"]["model"] = {"pretrained": {"path": str(path)}, "lora": {"rank": LORA_RANK, "alpha": LORA_ALPHA}}
    doc["spec"]["checkpoint"] = {"intervalSteps": 0, "keepLast": 1, "async": False, "exportHuggingFace": True}
    return doc


@pytest.fixture(scope="module")
def pretrained_lora(tmp_path_factory):
    """A tiny Hugging Face Llama fine-tuned with LoRA for 3 steps in this process, exported in the
    job; (its directory, the checkpoint directory, the runtime's logits of ``tokens`` at the end)."""
    from hf_models import make_hf_model

    from phalanx_runtime.config import RuntimeConfig
    from phalanx_runtime.trainer import Trainer

    base = tmp_path_factory.mktemp("pretrained-lora")
    hf_dir = make_hf_model(base, "llama")
    with pytest.MonkeyPatch.context() as env:
        env.setenv(ENV_CHECKPOINT_DIR, str(base / "ckpt"))
        env.setenv(ENV_TERMINATION_LOG, str(base / "termination"))
        trainer = Trainer(RuntimeConfig.from_dict(pretrained_lora_job(hf_dir)))
        trainer.run()
    model = trainer.model.parts[0].eval()
    with torch.no_grad():
        logits = model(tokens(model.shape.vocab_size))
    return hf_dir, base / "ckpt", logits


def test_pretrained_lora_checkpoint_holds_the_adapters_only(pretrained_lora):
    from phalanx_runtime.models.transformer.lora import is_adapter_param

    hf_dir, ckpt, _ = pretrained_lora
    saved = read_model(ckpt / "step-3")
    assert saved and all(is_adapter_param(name) for name in saved)
    record = json.loads((ckpt / "model" / "phalanx-model.json").read_text())
    assert record["pretrained"] == str(hf_dir) and record["rope_style"] == "half"


def test_pretrained_lora_merged_export_gives_the_runtime_logits(pretrained_lora):
    hf_dir, ckpt, ours = pretrained_lora
    x = tokens(ours.shape[-1])
    merged, base = rel_dev(hf_logits(ckpt / "final" / "hf", x), ours), rel_dev(hf_logits(hf_dir, x), ours)
    print(f"merged export {merged:.2e}, base alone {base:.2e}")
    assert merged <= REL_TOL
    assert base > 1e-3  # the adapters trained
    assert (ckpt / "final" / "hf" / "tokenizer.json").read_bytes() == (hf_dir / "tokenizer.json").read_bytes()


def test_pretrained_lora_peft_adapter_gives_the_runtime_logits(pretrained_lora):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    hf_dir, ckpt, ours = pretrained_lora
    config = json.loads((ckpt / "final" / "adapter" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(hf_dir)
    with_adapter = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32),
                                             ckpt / "final" / "adapter").eval()
    with torch.no_grad():
        logits = with_adapter(tokens(ours.shape[-1])).logits
    dev = rel_dev(logits, ours)
    print(f"PEFT adapter on the base {dev:.2e}")
    assert dev <= REL_TOL


def test_merged_export_refuses_without_the_base_and_the_adapter_needs_none(pretrained_lora, tmp_path):
    _, ckpt, _ = pretrained_lora
    gone = tmp_path / "moved-away"
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    for p in (ckpt / "model").iterdir():
        (model_dir / p.name).write_bytes(p.read_bytes())
    record = json.loads((model_dir / "phalanx-model.json").read_text())
    (model_dir / "phalanx-model.json").write_text(json.dumps({**record, "pretrained": str(gone)}))
    export = hf_export.load_export(ckpt / "step-3", model_dir)
    with pytest.raises(ValueError, match=f"base model {gone} is not readable: export needs it because the "
                                         "checkpoint holds LoRA adapters only"):
        hf_export.export_hf(export, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()
    adapter = hf_export.export_adapter(export, tmp_path / "adapter")
    in_job = ckpt / "final" / "adapter" / "adapter_model.safetensors"
    assert (adapter / "adapter_model.safetensors").read_bytes() == in_job.read_bytes()


def test_pretrained_lora_in_job_export_with_fsdp_equals_the_offline_export(pretrained_lora, tmp_path, monkeypatch):
    from phalanx_runtime.spawn import run_ranks

    hf_dir, _, ours = pretrained_lora
    ckpt = tmp_path / "ckpt"
    monkeypatch.setenv(ENV_CHECKPOINT_DIR, str(ckpt))
    monkeypatch.setenv(ENV_TERMINATION_LOG, str(tmp_path / "termination"))
    monkeypatch.setenv(ENV_EXPORT_MAX_SHARD_BYTES, "100000")  # several files, split over the ranks
    run_ranks(pretrained_lora_job(hf_dir, world=2, parallelism={"zero": 3}), 2, timeout=240)
    in_job = ckpt / "final" / "hf"
    offline = hf_export.export_hf(hf_export.load_export(ckpt / "step-3", max_shard_bytes=100000), tmp_path / "off")
    files = safetensor_files(in_job)
    assert len(files) >= 3 and files == safetensor_files(offline)
    # FSDP trains like one process (within the runtime's parity bound, a little looser on logits)
    dev = rel_dev(hf_logits(in_job, tokens(ours.shape[-1])), ours)
    print(f"FSDP in-job export vs one process {dev:.2e}")
    assert dev <= 1e-4


# ---------------------------------------------------------------- (e) restarts, another base, dtype, safety


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def reported_phase(port: int) -> str:
    from urllib.request import urlopen

    with urlopen(f"http://127.0.0.1:{port}/progress", timeout=10) as response:
        return json.loads(response.read())["phase"]


def resave_with_metadata(directory: Path) -> None:
    """The same tensors in a file of another size (as another model's would be)."""
    from safetensors.torch import load_file, save_file

    file = directory / "model.safetensors"
    save_file(load_file(file), file, metadata={"format": "pt", "note": "x" * 64})


def test_a_restart_at_the_final_step_finds_the_export_done_and_reports_its_phases(pretrained_lora, tmp_path,
                                                                                   monkeypatch):
    """The progress server is up before data preparation (phase Preparing) and the export reports
    Exporting; a start at the last step finds export.json matching and rewrites nothing."""
    import shutil

    from phalanx_common.contract import ENV_PROGRESS_PORT
    from phalanx_runtime import trainer as trainer_module
    from phalanx_runtime.config import RuntimeConfig

    hf_dir, ckpt, _ = pretrained_lora
    shutil.copytree(ckpt, tmp_path / "ckpt")
    final = tmp_path / "ckpt" / "final"
    assert json.loads((final / "export.json").read_text())["step"] == 3
    before = {p.name: p.stat().st_mtime_ns for p in (final / "hf").iterdir()}
    port = free_port()
    monkeypatch.setenv(ENV_CHECKPOINT_DIR, str(tmp_path / "ckpt"))
    monkeypatch.setenv(ENV_TERMINATION_LOG, str(tmp_path / "termination"))
    monkeypatch.setenv(ENV_PROGRESS_PORT, str(port))
    seen = []
    real_export = trainer_module.export_in_job
    monkeypatch.setattr(trainer_module, "export_in_job", lambda ckpt: seen.append(reported_phase(port)) or real_export(ckpt))
    monkeypatch.setattr(trainer_module.Trainer, "_prepare_data", lambda self: seen.append(reported_phase(port)))
    doc = pretrained_lora_job(hf_dir)
    doc["spec"]["data"]["prepare"] = {"inputs": ["unused.jsonl"]}  # source stays synthetic: _prepare_data stubbed
    restarted = trainer_module.Trainer(RuntimeConfig.from_dict(doc))
    restarted.run()
    assert seen == ["Preparing", "Exporting"]
    assert {p.name: p.stat().st_mtime_ns for p in (final / "hf").iterdir()} == before
    assert restarted.progress.snapshot()["phase"] == "Succeeded"
    (final / "export.json").unlink()  # an export cut short: done again
    trainer_module.Trainer(RuntimeConfig.from_dict(pretrained_lora_job(hf_dir))).run()
    assert (final / "export.json").is_file()
    assert {p.name: p.stat().st_mtime_ns for p in (final / "hf").iterdir()} != before


def test_a_resume_onto_another_base_model_is_refused(pretrained_lora, tmp_path, monkeypatch):
    import shutil

    from phalanx_runtime.config import RuntimeConfig
    from phalanx_runtime.trainer import Trainer

    hf_dir, ckpt, _ = pretrained_lora
    shutil.copytree(ckpt, tmp_path / "ckpt")
    other = tmp_path / "other-base"
    shutil.copytree(hf_dir, other)
    resave_with_metadata(other)
    monkeypatch.setenv(ENV_CHECKPOINT_DIR, str(tmp_path / "ckpt"))
    monkeypatch.setenv(ENV_TERMINATION_LOG, str(tmp_path / "termination"))
    with pytest.raises(ValueError, match=f"(?s)model.pretrained.path: {other} is not the base model the checkpoints"
                                         ".*model.safetensors: .* bytes when the run trained"):
        Trainer(RuntimeConfig.from_dict(pretrained_lora_job(other)))


def test_export_reads_the_base_from_another_copy_and_refuses_another_model(pretrained_lora, tmp_path, monkeypatch):
    import shutil

    hf_dir, ckpt, _ = pretrained_lora
    copy = tmp_path / "copy"
    shutil.copytree(hf_dir, copy)
    monkeypatch.setenv("PYTHONPATH", RUNTIME_PYTHONPATH)
    assert run_export_cli([str(ckpt), "--out", str(tmp_path / "from-copy"), "--base", str(copy)]) == 0
    assert safetensor_files(tmp_path / "from-copy") == safetensor_files(ckpt / "final" / "hf")
    resave_with_metadata(copy)
    export = hf_export.load_export(ckpt / "step-3", base_dir=copy)
    with pytest.raises(ValueError, match=f"{copy} is not the base model this run trained"):
        hf_export.export_hf(export, tmp_path / "refused")


def test_the_base_is_exported_in_its_own_dtype(pretrained_lora, tmp_path):
    """A bf16 base with fp32 adapters exports as bf16 (the config's dtype), the untouched tensors
    bit for bit the base's; --dtype float32 asks for float32."""
    from safetensors.torch import load_file, save_file

    from phalanx_runtime.models.huggingface.provenance import base_fingerprint

    hf_dir, ckpt, _ = pretrained_lora
    bf16 = tmp_path / "bf16"
    bf16.mkdir()
    save_file({k: v.to(torch.bfloat16) for k, v in load_file(hf_dir / "model.safetensors").items()},
              bf16 / "model.safetensors", metadata={"format": "pt"})
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    config = json.loads((ckpt / "model" / "config.json").read_text())
    (model_dir / "config.json").write_text(json.dumps({**config, "dtype": "bfloat16", "torch_dtype": "bfloat16"}))
    record = json.loads((ckpt / "model" / "phalanx-model.json").read_text())
    (model_dir / "phalanx-model.json").write_text(json.dumps({**record, "base": base_fingerprint(bf16)}))
    out = hf_export.export_hf(hf_export.load_export(ckpt / "step-3", model_dir, base_dir=bf16), tmp_path / "out")
    got, base = load_file(out / "model-00001-of-00001.safetensors"), load_file(bf16 / "model.safetensors")
    assert {t.dtype for t in got.values()} == {torch.bfloat16}
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    assert torch.equal(got["model.embed_tokens.weight"], base["model.embed_tokens.weight"])
    asked = hf_export.load_export(ckpt / "step-3", model_dir, base_dir=bf16, dtype="float32")
    out32 = hf_export.export_hf(asked, tmp_path / "out32")
    assert {t.dtype for t in load_file(out32 / "model-00001-of-00001.safetensors").values()} == {torch.float32}


def test_the_runtime_clis_dtype_names_are_the_exporters():
    from phalanx_runtime.export import EXPORT_DTYPE_NAMES

    assert EXPORT_DTYPE_NAMES == tuple(hf_export.EXPORT_DTYPES)


def test_a_symlink_planted_in_the_model_record_is_refused(pretrained_lora, tmp_path):
    import shutil

    _, ckpt, _ = pretrained_lora
    model_dir = tmp_path / "model"
    shutil.copytree(ckpt / "model", model_dir)
    secret = tmp_path / "kubeconfig"
    secret.write_text("token: hunter2")
    (model_dir / "tokenizer.json").unlink()
    (model_dir / "tokenizer.json").symlink_to(secret)
    with pytest.raises(ValueError, match="tokenizer.json is a symlink"):
        hf_export.export_adapter(hf_export.load_export(ckpt / "step-3", model_dir), tmp_path / "out")
    assert not (tmp_path / "out" / "tokenizer.json").exists()


def test_a_rank_failing_its_shards_fails_the_in_job_export_and_leaves_no_marker(pretrained_lora, tmp_path, monkeypatch):
    import torch.distributed as dist

    _, ckpt, _ = pretrained_lora
    export = hf_export.load_export(ckpt / "step-3")

    def disk_full(out, rank=0, world=1):
        raise OSError("No space left on device")

    monkeypatch.setattr(export, "write_shards", disk_full)
    final = tmp_path / "final"
    created = not dist.is_initialized()  # an in-process run before may have left its group
    if created:
        dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    group = dist.new_group(ranks=[dist.get_rank()], backend="gloo")
    try:
        with pytest.raises(OSError, match="No space left"):
            hf_export._write_final(export, final, 0, 1, group)
    finally:
        if created:
            dist.destroy_process_group()
    assert not (final / "export.json").exists() and not (final / "hf").exists()


# ---------------------------------------------------------------- pure parts


def test_permutation_is_transformers_convert_llama_permute():
    n_heads, head_dim, dim = 4, 8, 12
    w = torch.randn(n_heads * head_dim, dim)

    def convert_llama_permute(w, n_heads, dim1, dim2):  # transformers' convert_llama_weights_to_hf
        return w.view(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(1, 2).reshape(dim1, dim2)

    assert torch.equal(interleaved_to_half(w, n_heads), convert_llama_permute(w, n_heads, n_heads * head_dim, dim))
    bias = torch.arange(8.0)
    assert interleaved_to_half(bias, 1).tolist() == [0, 2, 4, 6, 1, 3, 5, 7]
    with pytest.raises(ValueError):
        interleaved_to_half(torch.zeros(6, 2), 4)


def test_permuted_vectors_rotate_in_halves_as_ours_rotate_in_pairs():
    """Our RoPE on q, permuted, equals Hugging Face's rotate_half RoPE on permuted q."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    from phalanx_runtime.models.transformer.model import apply_rope, rope_cache

    heads, head_dim, seq = 2, 8, 5
    q = torch.randn(1, seq, heads, head_dim)
    cache = rope_cache(head_dim, seq, 10000.0)
    ours = apply_rope(q, cache)
    cos = torch.cat([cache[:, :, 0]] * 2, dim=-1)[None]  # frequency i at i and at i + head_dim/2
    sin = torch.cat([cache[:, :, 1]] * 2, dim=-1)[None]

    def permute(t):  # [1, seq, heads, head_dim] → [1, heads, seq, head_dim] in half order
        return interleaved_to_half(t.reshape(seq, heads * head_dim).T, heads).T.reshape(1, seq, heads, head_dim).transpose(1, 2)

    theirs, _ = apply_rotary_pos_emb(permute(q), permute(q), cos, sin)
    assert torch.allclose(theirs, permute(ours), atol=1e-6)


def test_lora_b_permuted_merges_like_the_permuted_merge():
    w, b, a = torch.randn(16, 6), torch.randn(16, 2), torch.randn(2, 6)
    assert torch.allclose(interleaved_to_half(w + b @ a, 2),
                          interleaved_to_half(w, 2) + interleaved_to_half(b, 2) @ a, atol=1e-6)


def _t(name: str, nbytes: int) -> ExportTensor:
    return ExportTensor(name, (nbytes // 4,), torch.float32, name)


def test_shards_fill_up_to_the_limit_and_every_file_has_one_writer():
    tensors = [_t("a", 400), _t("b", 400), _t("c", 1000), _t("d", 100), _t("e", 300)]
    shards = assign_shards(tensors, 800)
    assert [[t.name for t in s] for s in shards] == [["a", "b"], ["c"], ["d", "e"]]
    assert assign_shards([], 800) == []
    for world in (1, 2, 3, 5):
        written = sorted(i for r in range(world) for i in rank_files(len(shards), r, world))
        assert written == list(range(len(shards)))
    index = index_document(shards)
    assert index["metadata"]["total_size"] == 2200
    assert index["weight_map"]["c"] == shard_file_name(1, 3) == "model-00002-of-00003.safetensors"


def test_safetensors_written_by_stream_read_back(tmp_path):
    from safetensors.torch import load_file

    values = {"x": torch.randn(3, 5), "y": torch.arange(7, dtype=torch.int64),
              "z": torch.randn(2, 2).to(torch.bfloat16)}
    tensors = [ExportTensor(k, tuple(v.shape), v.dtype, k) for k, v in values.items()]
    write_safetensors(tmp_path / "f.safetensors", tensors, lambda t: values[t.name])
    got = load_file(tmp_path / "f.safetensors")
    assert got.keys() == values.keys() and all(torch.equal(got[k], v) for k, v in values.items())
    with pytest.raises(ValueError, match="planned"):
        write_safetensors(tmp_path / "g.safetensors", tensors[:1], lambda t: torch.zeros(1))


def _params(**shapes) -> dict[str, Param]:
    return {name: Param(name, shape, torch.float32) for name, shape in shapes.items()}


def test_plans_rename_drop_tied_output_merge_and_permute():
    params = _params(**{"tok_embeddings.weight": (10, 8), "output.weight": (10, 8), "norm.weight": (8,),
                        "layers.0.attention.wq.weight": (8, 8), "layers.0.attention.wk.weight": (4, 8),
                        "layers.0.attention.wv.weight": (4, 8), "layers.0.attention.q_norm.weight": (4,),
                        "layers.0.attention.wq.lora_a.weight": (2, 8), "layers.0.attention.wq.lora_b.weight": (8, 2)})
    record = {"rope_style": "interleaved", "shape": {"n_heads": 2, "n_kv_heads": 1, "tie_embeddings": True},
              "lora": {"rank": 2, "alpha": 4.0}}
    plan = {t.name: t for t in plan_model(params, record)}
    assert "lm_head.weight" not in plan and "model.embed_tokens.weight" in plan
    q = plan["model.layers.0.self_attn.q_proj.weight"]
    assert q.lora == ("layers.0.attention.wq.lora_a.weight", "layers.0.attention.wq.lora_b.weight")
    assert (q.rotary_heads, plan["model.layers.0.self_attn.k_proj.weight"].rotary_heads) == (2, 1)
    assert plan["model.layers.0.self_attn.q_norm.weight"].rotary_heads == 1
    assert plan["model.layers.0.self_attn.v_proj.weight"].rotary_heads == 0
    assert plan_model(params, record, merge_lora=False)[-1].lora is None
    half = {t.name: t for t in plan_model(params, {**record, "rope_style": "half"})}
    assert all(t.rotary_heads == 0 for t in half.values())
    adapters = {t.name: t for t in plan_adapter(params, record)}
    assert adapters["base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"].rotary_heads == 2
    assert adapters["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"].rotary_heads == 0
    assert hf_export.lora_scaling(record) == 2.0
    with pytest.raises(ValueError, match="no Hugging Face name"):
        plan_model(_params(**{"layers.0.mystery.weight": (2,)}), record)


def test_layers_sort_as_numbers():
    params = _params(**{f"layers.{i}.ffn_norm.weight": (2,) for i in (0, 2, 10, 1)})
    assert [t.name.split(".")[2] for t in plan_model(params, {"shape": {}})] == ["0", "1", "2", "10"]


@pytest.mark.parametrize(("text", "value"), [("5GB", 5 * 10**9), ("512MiB", 512 * 2**20), ("1000", 1000),
                                             ("1.5 kb", 1500)])
def test_sizes(text, value):
    from phalanx_runtime.export import parse_size

    assert parse_size(text) == value


def test_synthesized_config_loads_as_the_shape_says():
    from transformers import AutoConfig

    from phalanx_common.presets import PRESETS
    from phalanx_runtime.models.huggingface.provenance import hf_config_for_shape

    shape = PRESETS["1b"]
    doc = hf_config_for_shape(shape)
    config = AutoConfig.for_model(doc.pop("model_type"), **doc)
    assert (config.hidden_size, config.num_key_value_heads, config.head_dim) == (2048, 8, 64)
    assert config.tie_word_embeddings is True
    assert config.rope_parameters["rope_theta"] == 500000.0


@pytest.mark.parametrize(("family", "bias", "qk_norm", "rope_scaling"), [
    ("llama", True, False, (("factor", 2.0), ("rope_type", "linear"))),
    ("qwen2", True, False, ()),
    ("qwen3", False, True, ()),
])
def test_synthesized_config_builds_the_shapes_modules(family, bias, qk_norm, rope_scaling):
    """transformers builds what the shape has: q/k/v (and o) biases, q/k norms, head_dim, RoPE scaling."""
    from dataclasses import replace

    from transformers import AutoConfig, AutoModelForCausalLM

    from phalanx_common.presets import ModelShape
    from phalanx_runtime.models.huggingface.provenance import hf_config_for_shape

    shape = ModelShape(dim=32, n_layers=1, n_heads=4, n_kv_heads=2, vocab_size=64, ffn_hidden=64, max_seq_len=32,
                       family=family, qkv_bias=bias, o_bias=bias and family != "qwen2", qk_norm=qk_norm,
                       head_dim_override=16 if family == "qwen3" else None, rope_scaling=rope_scaling)
    doc = hf_config_for_shape(replace(shape, rope_style="half"))
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(doc.pop("model_type"), **doc))
    attention = model.model.layers[0].self_attn
    assert (attention.q_proj.bias is not None, attention.o_proj.bias is not None) == (shape.qkv_bias, shape.o_bias)
    assert hasattr(attention, "q_norm") is qk_norm
    assert attention.q_proj.out_features == shape.n_heads * shape.head_dim
    assert model.config.rope_parameters["rope_type"] == (dict(rope_scaling).get("rope_type") or "default")
    assert sum(p.numel() for p in model.parameters()) == shape.num_params()
