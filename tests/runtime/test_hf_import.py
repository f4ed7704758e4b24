"""Hugging Face models imported into the built-in transformer (models/huggingface/load.py) compute
what transformers computes: tiny Llama (llama3 RoPE scaling), Mistral, Qwen2 (q/k/v biases, tied
embeddings) and Qwen3 (q/k norms, explicit head_dim) directories made locally (hf_models.py).

* logits of a fixed batch vs ``AutoModelForCausalLM.from_pretrained`` in fp32, within 1e-5
  relative (max abs difference / max abs reference): one process (every family), TP2 × FSDP2
  (world 4) and PP2 (world 2), the sharded layouts loading only their slices;
* 5 fine-tuning steps of the runtime (one process) vs transformers + plain torch (AdamW with the
  runtime's betas/eps/weight decay, the same schedule, clipping and batches): every loss within
  the runtime's parity bound (rtol 1e-5); the same steps on TP2 × FSDP2 match the one-process run.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F
from hf_import_probe import fixed_batch, logits_and_training
from hf_models import make_hf_model
from runtime_parity_util import max_rel

pytestmark = pytest.mark.runtime

LOGITS_RTOL = 1e-5
LOSS_RTOL = 1e-5
GNORM1_RTOL = 1e-5
STEPS = 5
TRAINING = {"steps": STEPS, "globalBatchSize": 8, "microBatchSize": 2, "lr": 1e-3, "weightDecay": 0.1,
            "precision": "fp32", "gradClip": 1.0, "seed": 7, "lrSchedule": {"warmupSteps": 2, "decay": "cosine"}}
SEQ_LEN = 16
VARIANTS = {  # beyond each family's own model: Llama's attention_bias (q/k/v/o) and linear RoPE
    "llama_bias_linear": ("llama", {"attention_bias": True,
                                    "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}}),
}
TP_FSDP = (4, {"zero": 3, "tensor": 2})
PP = (2, {"pipeline": 2, "pipelineSchedule": "1F1B", "microbatches": 2})


def hf_job(path, parallelism: dict | None = None, world: int = 1) -> dict:
    return {"apiVersion": "phalanx.dev/v1alpha1", "metadata": {"name": "hf-import", "namespace": "default"},
            "spec": {"image": "phalanx:test", "nodes": 1, "procsPerNode": world, "parallelism": parallelism or {},
                     "model": {"pretrained": {"path": str(path)}},
                     "data": {"source": "synthetic", "seqLen": SEQ_LEN}, "training": dict(TRAINING)}}


def rel_diff(ours, ref: torch.Tensor) -> float:
    return float((torch.as_tensor(ours) - ref).abs().max() / ref.abs().max())


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("hf")
    dirs = {family: make_hf_model(root, family) for family in ("llama", "mistral", "qwen2", "qwen3")}
    for name, (family, overrides) in VARIANTS.items():
        dirs[name] = make_hf_model(root / name, family, **overrides)
    return dirs


@pytest.fixture(scope="module")
def reference(models) -> dict:
    """transformers' logits of the fixed batch and parameter count, per model."""
    from transformers import AutoModelForCausalLM

    logits, params = {}, {}
    for name, path in models.items():
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        with torch.no_grad():
            logits[name] = model(fixed_batch(model.config.vocab_size)).logits
        params[name] = sum(p.numel() for p in model.parameters())
    return {"logits": logits, "params": params}


@pytest.fixture(scope="module")
def reference_logits(reference) -> dict:
    return reference["logits"]


def spawn_probe(layout: tuple[int, dict], dirs: list, train: tuple = ()) -> dict:
    from phalanx_runtime.spawn import run_ranks

    world, parallelism = layout
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_PROBE_DIRS", os.pathsep.join(str(d) for d in dirs))
        mp.setenv("HF_PROBE_TRAIN", os.pathsep.join(str(d) for d in train))
        return run_ranks(hf_job(dirs[0], parallelism, world), world, fn=logits_and_training, timeout=300)


@pytest.fixture(scope="module")
def tp_fsdp_run(models) -> dict:
    return spawn_probe(TP_FSDP, [models["llama"], models["qwen2"], models["qwen3"]],
                       train=(models["llama"], models["qwen2"]))


@pytest.fixture(scope="module")
def pp_run(models) -> dict:
    return spawn_probe(PP, [models["llama"], models["qwen2"]])


@pytest.mark.parametrize("name", ["llama", "mistral", "qwen2", "qwen3", *VARIANTS])
def test_one_process_logits_equal_transformers(name, models, reference):
    from phalanx_runtime.models.huggingface.load import from_pretrained

    model = from_pretrained(models[name]).eval()
    assert sum(p.numel() for p in model.parameters()) == model.shape.num_params() == reference["params"][name]
    with torch.no_grad():
        ours = model(fixed_batch(model.shape.vocab_size))
    dev = rel_diff(ours, reference["logits"][name])
    print(f"\nHF LOGITS {name} (1 process): rel {dev:.2e}")
    assert dev <= LOGITS_RTOL


@pytest.mark.parametrize("name", ["llama", "qwen2", "qwen3"])
def test_tp_fsdp_logits_equal_transformers(name, models, reference_logits, tp_fsdp_run):
    dev = rel_diff(tp_fsdp_run["logits"][str(models[name])], reference_logits[name])
    print(f"\nHF LOGITS {name} (TP2 x FSDP2): rel {dev:.2e}")
    assert dev <= LOGITS_RTOL


@pytest.mark.parametrize("layout", ["tp_fsdp", "pp"])
def test_each_rank_reads_only_the_slices_it_holds(layout, models, tp_fsdp_run, pp_run):
    from phalanx_common.hf_config import read_hf_config, shape_from_hf_config

    run = tp_fsdp_run if layout == "tp_fsdp" else pp_run
    world = (TP_FSDP if layout == "tp_fsdp" else PP)[0]
    for path, reads in run["reads"].items():
        shape = shape_from_hf_config(read_hf_config(path))
        total = shape.num_params()
        # a tied table is read by the first stage (embeddings) and the last (output layer)
        twice = shape.vocab_size * shape.dim if shape.tie_embeddings and layout == "pp" else 0
        print(f"\nHF READS {layout} {os.path.basename(path)}: [read, held] per rank {reads}, model {total}")
        assert len(reads) == world
        assert all(read == held for read, held in reads)
        # every tensor read somewhere; only the few replicated ones (norms) more than once
        assert total <= sum(read for read, _ in reads) < 1.1 * (total + twice)
        assert max(read for read, _ in reads) < 0.6 * (total + twice)


@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_pp_logits_equal_transformers(name, models, reference_logits, pp_run):
    dev = rel_diff(pp_run["logits"][str(models[name])], reference_logits[name])
    print(f"\nHF LOGITS {name} (PP2): rel {dev:.2e}")
    assert dev <= LOGITS_RTOL


def transformers_training(path) -> list[float]:
    """The reference: transformers' model, plain torch AdamW / LambdaLR / clipping, the runtime's batches."""
    from torch.optim.lr_scheduler import LambdaLR
    from transformers import AutoModelForCausalLM

    from phalanx_runtime.components.data import DataLoader, make_source
    from phalanx_runtime.components.optimizer import lr_lambda

    tr, schedule = TRAINING, TRAINING["lrSchedule"]
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).train()
    params = list(model.parameters())
    groups = [{"params": [p for p in params if p.ndim >= 2], "weight_decay": tr["weightDecay"]},
              {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=tr["lr"], betas=(0.9, 0.95), eps=1e-8, foreach=True)
    scheduler = LambdaLR(optimizer, lambda step: lr_lambda(step, total_steps=STEPS, warmup_steps=schedule["warmupSteps"],
                                                           decay=schedule["decay"], min_lr_ratio=0.1))
    source = make_source("synthetic", seq_len=SEQ_LEN, vocab_size=model.config.vocab_size, seed=tr["seed"],
                         path=None, dtype="uint16")
    loader = DataLoader(source, global_batch=tr["globalBatchSize"], dp_rank=0, dp_size=1, seed=tr["seed"])
    accum = tr["globalBatchSize"] // tr["microBatchSize"]
    losses = []
    for _ in range(STEPS):
        inputs, labels = loader.next_batch()
        total = torch.zeros(())
        for x, y in zip(inputs.chunk(accum), labels.chunk(accum), strict=True):
            loss = F.cross_entropy(model(x).logits.flatten(0, 1).float(), y.flatten()) / accum
            loss.backward()
            total += loss.detach()
        torch.nn.utils.clip_grad_norm_(params, tr["gradClip"])
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(total))
    return losses


@pytest.fixture(scope="module")
def one_process_training(models) -> dict:
    from phalanx_runtime.config import RuntimeConfig
    from phalanx_runtime.train import train

    out = {}
    for name in ("llama", "qwen2"):
        res = train(RuntimeConfig.from_dict(hf_job(models[name])))
        out[name] = {"losses": res.losses, "grad_norms": res.grad_norms}
    return out


@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_fine_tuning_matches_transformers(name, models, one_process_training):
    ours = one_process_training[name]["losses"]
    ref = transformers_training(models[name])
    dev = max_rel(ours, ref)
    print(f"\nHF FINE-TUNE {name}: runtime {ours} transformers {ref} max rel {dev:.2e}")
    assert dev < LOSS_RTOL, (ours, ref)
    assert one_process_training[name]["grad_norms"][0] > TRAINING["gradClip"]  # clipping is part of it


@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_tp_fsdp_fine_tuning_matches_one_process(name, models, one_process_training, tp_fsdp_run):
    ref, run = one_process_training[name], tp_fsdp_run["training"][str(models[name])]
    dev = max_rel(run["losses"], ref["losses"])
    g1 = abs(run["grad_norms"][0] - ref["grad_norms"][0]) / ref["grad_norms"][0]
    print(f"\nHF FINE-TUNE {name} TP2 x FSDP2: loss max rel {dev:.2e} gnorm@1 rel {g1:.2e}")
    assert len(run["losses"]) == STEPS
    assert dev < LOSS_RTOL, (run["losses"], ref["losses"])
    assert g1 < GNORM1_RTOL
