"""LoRA fine-tuning of the built-in transformer (``models/transformer/lora.py``).

* adapters: which modules the PEFT names map to, which parameters train, PEFT's initialisation;
* one process: the base stays bit-identical, the optimizer holds the adapters only, and the losses
  equal a plain-torch reference (merged weights ``W + s·B·A``, ``torch.func.functional_call``)
  and PEFT's on a transformers Llama with the same weights;
* layouts: DDP, FSDP2, TP (+SP) and PP give the one-process losses (rtol 1e-5, like
  test_runtime_parity.py); a model built on meta (FSDP2 × TP2) gets the same initial adapters;
* checkpoints: a LoRA run on a preset saves the whole model (its base is random from the seed) and
  the adapters' optimizer state; one on a pretrained model (hf_models.py) the adapters and their
  optimizer state only (the base is the Hugging Face directory, read at every start); a run resumed
  from either (the preset's saved under TP, resumed on one process) continues the uninterrupted
  losses.
"""

from __future__ import annotations

import math
import shutil

import pytest
import torch
import torch.nn.functional as F
from runtime_parity_util import job, max_rel

pytestmark = pytest.mark.runtime

STEPS, RESUME_AT = 6, 3
LOSS_RTOL = 1e-5
LORA = {"rank": 4, "alpha": 8.0}
ALL_MODULES = ("attention.wq", "attention.wk", "attention.wv", "attention.wo",
               "feed_forward.w1", "feed_forward.w2", "feed_forward.w3")

LAYOUTS = {
    # id: (world, parallelism)
    "ddp": (2, {"zero": 0}),
    "fsdp": (2, {"zero": 3}),
    "tp": (2, {"tensor": 2}),
    "tp_sp": (2, {"tensor": 2, "sequenceParallel": True}),
    "pp": (2, {"pipeline": 2, "pipelineSchedule": "1F1B", "microbatches": 4}),
}


def lora_job(parallelism: dict | None = None, *, world: int = 1, lora: dict | None = None,
             checkpoint: dict | None = None) -> dict:
    # lr 1e-2: the adapters (B starts at zero) move the loss visibly within a few steps.
    doc = job(parallelism, world=world, steps=STEPS, training={"lr": 1e-2})
    doc["spec"]["model"]["lora"] = dict(lora or LORA)
    if checkpoint is not None:
        doc["spec"]["checkpoint"] = checkpoint
    return doc


def config(doc: dict):
    from phalanx_runtime.config import RuntimeConfig

    return RuntimeConfig.from_dict(doc)


# ---------------------------------------------------------------- adapters (in-process, no training)


def test_targets_map_peft_names_to_layer_modules():
    from phalanx_runtime.config import LORA_TARGETS
    from phalanx_runtime.models.transformer.lora import target_modules

    assert target_modules(LORA_TARGETS) == ["attention.wq", "attention.wk", "attention.wv", "attention.wo",
                                            "feed_forward.w1", "feed_forward.w3", "feed_forward.w2"]
    assert target_modules(["down_proj", "q_proj", "q_proj"]) == ["feed_forward.w2", "attention.wq"]
    with pytest.raises(ValueError, match=r"model\.lora\.targets: unknown module\(s\) lm_head"):
        target_modules(["q_proj", "lm_head"])
    with pytest.raises(ValueError, match=r"model\.lora\.targets"):
        target_modules([])


@pytest.mark.parametrize("name, adapter", [
    ("layers.0.attention.wq.lora_a.weight", True),
    ("module.layers.3.feed_forward.w2.lora_b.weight", True),
    ("layers.0.attention.wq.weight", False),
    ("tok_embeddings.weight", False),
])
def test_is_adapter_param(name, adapter):
    from phalanx_runtime.models.transformer.lora import is_adapter_param

    assert is_adapter_param(name) is adapter


def test_only_adapters_train_and_start_like_peft():
    """Adapters on the targeted modules only, everything else frozen; B zero, A kaiming-uniform
    (a = sqrt(5): bound 1/sqrt(in)), the same for the same seed and different per module."""
    from phalanx_runtime.config import Lora
    from phalanx_runtime.models.transformer import build_transformer
    from phalanx_runtime.models.transformer.lora import apply_lora, initial_lora_a, is_adapter_param

    shape = config(lora_job()).shape
    model = build_transformer(shape, seed=7)
    apply_lora(model, Lora(rank=4, alpha=8.0, targets=("q_proj", "down_proj")), seed=7)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    expected = {f"layers.{i}.{m}.lora_{ab}.weight" for i in range(shape.n_layers)
                for m in ("attention.wq", "feed_forward.w2") for ab in "ab"}
    assert trainable == expected
    assert all(not p.requires_grad for n, p in model.named_parameters() if not is_adapter_param(n))
    wq, w2 = model.layers["1"].attention.wq, model.layers["1"].feed_forward.w2
    assert wq.lora_a.weight.shape == (4, shape.dim) and wq.lora_b.weight.shape == (shape.n_heads * shape.head_dim, 4)
    assert w2.lora_a.weight.shape == (4, shape.ffn_hidden) and w2.lora_b.weight.shape == (shape.dim, 4)
    assert not hasattr(model.layers["1"].attention.wk, "lora_a")
    assert torch.count_nonzero(wq.lora_b.weight) == 0
    bound = 1 / math.sqrt(shape.dim)
    assert wq.lora_a.weight.abs().max() <= bound and wq.lora_a.weight.abs().max() > 0.9 * bound
    assert torch.equal(wq.lora_a.weight, initial_lora_a(7, 1, "attention.wq", 4, shape.dim))
    assert not torch.equal(initial_lora_a(7, 1, "attention.wq", 4, shape.dim),
                           initial_lora_a(7, 2, "attention.wq", 4, shape.dim))
    assert not torch.equal(initial_lora_a(7, 1, "attention.wq", 4, shape.dim),
                           initial_lora_a(8, 1, "attention.wq", 4, shape.dim))


def test_adapter_adds_scaled_low_rank_update():
    from phalanx_runtime.config import Lora
    from phalanx_runtime.models.transformer import build_transformer
    from phalanx_runtime.models.transformer.lora import apply_lora

    model = build_transformer(config(lora_job()).shape, seed=7)
    apply_lora(model, Lora(rank=4, alpha=8.0, targets=("v_proj",)), seed=7)
    wv = model.layers["0"].attention.wv
    with torch.no_grad():
        wv.lora_b.weight.normal_()
    x = torch.randn(2, 5, wv.in_features)
    expected = x @ (wv.weight + 2.0 * wv.lora_b.weight @ wv.lora_a.weight).T
    torch.testing.assert_close(wv(x), expected, rtol=1e-5, atol=1e-5)
    assert isinstance(wv.lora_dropout, torch.nn.Identity)


def test_dropout_applies_to_the_adapter_input_only():
    from phalanx_runtime.config import Lora
    from phalanx_runtime.models.transformer import build_transformer
    from phalanx_runtime.models.transformer.lora import apply_lora

    model = build_transformer(config(lora_job()).shape, seed=7)
    apply_lora(model, Lora(rank=4, alpha=8.0, dropout=0.5, targets=("v_proj",)), seed=7)
    wv = model.layers["0"].attention.wv
    x = torch.randn(2, 5, wv.in_features)
    base = x @ wv.weight.T
    torch.testing.assert_close(wv(x), base)  # B is zero: dropout cannot reach the base path
    with torch.no_grad():
        wv.lora_b.weight.normal_()
    merged = x @ (wv.weight + 2.0 * wv.lora_b.weight @ wv.lora_a.weight).T
    assert not torch.allclose(wv(x), merged)  # training mode: the adapter sees a dropped-out input
    model.eval()
    torch.testing.assert_close(wv(x), merged, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- one process


def run_with_snapshots(doc: dict) -> dict:
    """Train in-process; the parameters before and after, and what the optimizer holds."""
    from phalanx_runtime.trainer import Trainer

    trainer = Trainer(config(doc))
    model = trainer.model.parts[0]
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    in_optimizer = {id(p) for group in trainer.optimizer.param_groups for p in group["params"]}
    optimized = {n for n, p in model.named_parameters() if id(p) in in_optimizer}
    result = trainer.run()
    after = {n: p.detach().clone() for n, p in model.named_parameters()}
    return {"losses": result.losses, "grad_norms": result.grad_norms, "before": before, "after": after,
            "optimized": optimized}


@pytest.fixture(scope="module")
def single():
    return run_with_snapshots(lora_job())


def test_only_adapters_change(single):
    from phalanx_runtime.models.transformer.lora import is_adapter_param

    adapters = {n for n in single["before"] if is_adapter_param(n)}
    assert len(adapters) == 4 * len(ALL_MODULES) * 2
    assert single["optimized"] == adapters
    for name, before in single["before"].items():
        if is_adapter_param(name):
            assert not torch.equal(before, single["after"][name]), f"{name} did not train"
        else:
            assert torch.equal(before, single["after"][name]), f"frozen {name} changed"
    assert single["losses"][-1] < single["losses"][0]


def reference_training(forward, params: list[torch.Tensor], doc: dict) -> list[float]:
    """Plain torch: AdamW (betas 0.9/0.95, decoupled weight decay), the job's LR schedule and
    gradient clipping, on the runtime loader's batches (the whole global batch at once)."""
    from phalanx_runtime.components.data import DataLoader, make_source
    from phalanx_runtime.components.optimizer import lr_lambda

    cfg = config(doc)
    tr, data = cfg.spec.training, cfg.spec.data
    optimizer = torch.optim.AdamW(params, lr=tr.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=tr.weight_decay)
    schedule = tr.lr_schedule
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_lambda(
        step, total_steps=tr.steps, warmup_steps=schedule.warmup_steps, decay=schedule.decay,
        min_lr_ratio=schedule.min_lr_ratio))
    source = make_source(data.source, seq_len=data.seq_len, vocab_size=cfg.shape.vocab_size, seed=tr.seed,
                         path=data.path, dtype=data.dtype)
    loader = DataLoader(source, global_batch=tr.global_batch_size, dp_rank=0, dp_size=1, seed=tr.seed)
    losses = []
    for _ in range(tr.steps):
        inputs, labels = loader.next_batch()
        loss = F.cross_entropy(forward(inputs).flatten(0, 1).float(), labels.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, tr.grad_clip)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


def test_losses_equal_merged_weight_reference(single):
    """The same fine-tuning written as merged weights ``W + (alpha/rank)·B·A``."""
    from torch.func import functional_call

    from phalanx_runtime.models.transformer import build_transformer
    from phalanx_runtime.models.transformer.lora import initial_lora_a

    doc = lora_job()
    shape, rank, scale = config(doc).shape, LORA["rank"], LORA["alpha"] / LORA["rank"]
    model = build_transformer(shape, seed=7).requires_grad_(False)
    adapters = {}
    for i in range(shape.n_layers):
        for module in ALL_MODULES:
            base = model.get_submodule(f"layers.{i}.{module}")
            a = initial_lora_a(7, i, module, rank, base.in_features).requires_grad_()
            b = torch.zeros(base.out_features, rank, requires_grad=True)
            adapters[f"layers.{i}.{module}.weight"] = (base.weight, a, b)

    def forward(inputs):
        merged = {name: w + scale * b @ a for name, (w, a, b) in adapters.items()}
        return functional_call(model, merged, (inputs,))

    losses = reference_training(forward, [t for _, a, b in adapters.values() for t in (a, b)], doc)
    assert max_rel(single["losses"], losses) < LOSS_RTOL, (single["losses"], losses)


def hf_llama_like(model, shape):
    """A transformers LlamaForCausalLM with our weights: names by ``keys.to_hf``, and wq/wk rows
    reordered per head from our interleaved RoPE pairs to Hugging Face's rotated halves."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from phalanx_runtime.models.huggingface.keys import to_hf

    hf_config = LlamaConfig(vocab_size=shape.vocab_size, hidden_size=shape.dim, intermediate_size=shape.ffn_hidden,
                            num_hidden_layers=shape.n_layers, num_attention_heads=shape.n_heads,
                            num_key_value_heads=shape.n_kv_heads, head_dim=shape.head_dim,
                            max_position_embeddings=shape.max_seq_len, rms_norm_eps=shape.norm_eps,
                            rope_parameters={"rope_type": "default", "rope_theta": shape.rope_theta},
                            tie_word_embeddings=shape.tie_embeddings, attention_bias=False, mlp_bias=False)

    def to_half_order(weight, heads):
        return weight.view(heads, shape.head_dim // 2, 2, -1).transpose(1, 2).reshape(weight.shape)

    state = {}
    for name, tensor in model.state_dict().items():
        if name.endswith("attention.wq.weight"):
            tensor = to_half_order(tensor, shape.n_heads)
        elif name.endswith("attention.wk.weight"):
            tensor = to_half_order(tensor, shape.n_kv_heads)
        state[to_hf(name)] = tensor
    hf = LlamaForCausalLM(hf_config)
    hf.load_state_dict(state, strict=True)
    return hf


def test_losses_equal_peft(single):
    """PEFT's LoRA on the same model (A set to ours; B starts at zero on both sides, and the RoPE
    row order of q/k is a permutation Adam and clipping do not see)."""
    peft = pytest.importorskip("peft")
    from phalanx_runtime.config import LORA_TARGETS
    from phalanx_runtime.models.huggingface.keys import to_peft
    from phalanx_runtime.models.transformer import build_transformer
    from phalanx_runtime.models.transformer.lora import initial_lora_a

    doc = lora_job()
    shape = config(doc).shape
    hf = hf_llama_like(build_transformer(shape, seed=7), shape)
    wrapped = peft.get_peft_model(hf, peft.LoraConfig(r=LORA["rank"], lora_alpha=LORA["alpha"],
                                                      target_modules=list(LORA_TARGETS), lora_dropout=0.0))
    live = dict(wrapped.named_parameters())
    with torch.no_grad():
        for i in range(shape.n_layers):
            for module in ALL_MODULES:
                peft_name = to_peft(f"layers.{i}.{module}.lora_a.weight").replace(".lora_A.", ".lora_A.default.")
                live[peft_name].copy_(initial_lora_a(7, i, module, LORA["rank"], live[peft_name].shape[1]))
                b_name = peft_name.replace(".lora_A.", ".lora_B.")
                assert torch.count_nonzero(live[b_name]) == 0
    trainable = [p for p in wrapped.parameters() if p.requires_grad]
    assert len(trainable) == shape.n_layers * len(ALL_MODULES) * 2
    losses = reference_training(lambda inputs: wrapped(input_ids=inputs).logits, trainable, doc)
    assert max_rel(single["losses"], losses) < LOSS_RTOL, (single["losses"], losses)


@pytest.mark.parametrize("mode", ["selective", "full"])
def test_activation_checkpointing_keeps_the_losses(mode, single):
    from phalanx_runtime.train import train

    doc = lora_job()
    doc["spec"]["training"]["activationCheckpointing"] = mode
    assert max_rel(train(config(doc)).losses, single["losses"]) < LOSS_RTOL


# ---------------------------------------------------------------- layouts


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_layout_parity(name, single):
    from phalanx_runtime.spawn import run_ranks

    world, par = LAYOUTS[name]
    out = run_ranks(lora_job(par, world=world), world)
    loss_dev = max_rel(out["losses"], single["losses"])
    gnorm_dev = max_rel(out["grad_norms"], single["grad_norms"])
    print(f"\nLORA PARITY {name}: loss max rel {loss_dev:.2e} gnorm max rel {gnorm_dev:.2e}")
    assert loss_dev < LOSS_RTOL, (out["losses"], single["losses"])
    assert gnorm_dev < 1e-4, (out["grad_norms"], single["grad_norms"])


# ---------------------------------------------------------------- checkpoints


def read_checkpoint(path) -> dict:
    """A committed checkpoint as one flat dict (no process group)."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint._nested_dict import flatten_state_dict
    from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    sd: dict = {}
    _load_state_dict(sd, storage_reader=FileSystemReader(str(path)), planner=_EmptyStateDictLoadPlanner(),
                     no_dist=True)
    return flatten_state_dict(sd)[0]


def optimizer_holds_adapters_only(saved: dict) -> bool:
    from phalanx_runtime.models.transformer.lora import is_adapter_param

    optim_keys = [k for k in saved if k.startswith("optim.state.")]
    return bool(optim_keys) and all(is_adapter_param(k.removeprefix("optim.state.").rsplit(".", 1)[0])
                                    for k in optim_keys)


def keep_steps_up_to(directory, last: int) -> None:
    from phalanx_runtime.components.checkpoint import committed_steps

    for step in committed_steps(directory):
        if step > last:
            shutil.rmtree(directory / f"step-{step}")


def test_preset_checkpoint_holds_the_whole_model_and_resumes(single, tmp_path, monkeypatch):
    """Saved under TP2 at every step; the steps after RESUME_AT removed; one process resumes."""
    from phalanx_common.contract import ENV_CHECKPOINT_DIR
    from phalanx_runtime.spawn import run_ranks
    from phalanx_runtime.train import train

    monkeypatch.setenv(ENV_CHECKPOINT_DIR, str(tmp_path))
    ckpt = {"intervalSteps": 1, "keepLast": STEPS, "async": False}
    first = run_ranks(lora_job({"tensor": 2}, world=2, checkpoint=ckpt), 2)
    assert max_rel(first["losses"], single["losses"]) < LOSS_RTOL

    saved = read_checkpoint(tmp_path / f"step-{RESUME_AT}")
    model_keys = {k.removeprefix("model.") for k in saved if k.startswith("model.")}
    assert model_keys == set(single["before"])  # the base and the adapters
    assert optimizer_holds_adapters_only(saved)

    keep_steps_up_to(tmp_path, RESUME_AT)
    resumed = train(config(lora_job(checkpoint=ckpt)))
    assert resumed.start_step == RESUME_AT
    assert max_rel(resumed.losses, single["losses"][RESUME_AT:]) < LOSS_RTOL, (resumed.losses, single["losses"])


def pretrained_lora_job(path, checkpoint: dict) -> dict:
    doc = lora_job(checkpoint=checkpoint)
    doc["spec"]["model"] = {"pretrained": {"path": str(path)}, "lora": dict(LORA)}
    return doc


def test_pretrained_checkpoint_holds_adapters_only_and_resumes(tmp_path, monkeypatch):
    """A tiny pretrained Llama: every checkpoint holds the adapters and their optimizer state only;
    the steps after RESUME_AT removed, a run resumes over the base read again from the directory."""
    from hf_models import make_hf_model

    from phalanx_common.contract import ENV_CHECKPOINT_DIR
    from phalanx_runtime.models.transformer.lora import is_adapter_param
    from phalanx_runtime.train import train

    ckpt_dir = tmp_path / "ckpt"
    monkeypatch.setenv(ENV_CHECKPOINT_DIR, str(ckpt_dir))
    ckpt = {"intervalSteps": 1, "keepLast": STEPS, "async": False}
    doc = pretrained_lora_job(make_hf_model(tmp_path, "llama", tokenizer=False), ckpt)
    first = train(config(doc))

    saved = read_checkpoint(ckpt_dir / f"step-{RESUME_AT}")
    model_keys = {k.removeprefix("model.") for k in saved if k.startswith("model.")}
    assert model_keys and all(is_adapter_param(k) for k in model_keys)
    assert len(model_keys) == 2 * len(ALL_MODULES) * 2  # 2 layers, A and B
    assert optimizer_holds_adapters_only(saved)

    keep_steps_up_to(ckpt_dir, RESUME_AT)
    resumed = train(config(doc))
    assert resumed.start_step == RESUME_AT
    assert max_rel(resumed.losses, first.losses[RESUME_AT:]) < LOSS_RTOL, (resumed.losses, first.losses)


def test_meta_built_model_gets_the_same_adapters():
    """A model built on meta (above build.META_INIT_PARAMS) gets its adapters once its shards have
    storage: FSDP2 × TP2 holds the single process's initial adapters."""
    from runtime_lora_probe import meta_built_adapters

    from phalanx_runtime.spawn import run_ranks

    out = run_ranks(lora_job({"zero": 3, "tensor": 2}, world=4), 4, fn=meta_built_adapters, timeout=300)
    assert out == {"checked": 4 * len(ALL_MODULES), "wrong": []}
