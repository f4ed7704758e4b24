"""Run in spawned ranks by test_lora.py: build the model parts the way a model too large to build
whole is built (on meta, each shard initialised in place) and compare every adapter, gathered,
with its initial value."""

from __future__ import annotations


def meta_built_adapters(cfg) -> dict:
    import torch
    from torch.distributed.tensor import DTensor

    from phalanx_runtime.distributed.parallel_dims import ParallelDims
    from phalanx_runtime.distributed.process_group import device_for_rank, init_distributed
    from phalanx_runtime.models import build
    from phalanx_runtime.models.entrypoint import ModelContext
    from phalanx_runtime.models.transformer.lora import adapted_linears, initial_lora_a

    build.META_INIT_PARAMS = 0  # this process only: every model counts as large
    member = init_distributed()
    device = device_for_rank(member.local_rank)
    mesh = ParallelDims.from_spec(cfg.spec).build_mesh(device.type)
    ctx = ModelContext(config=cfg, mesh=mesh, device=device, rank=member.rank, world_size=member.world_size,
                       local_rank=member.local_rank, seq_len=cfg.spec.data.seq_len, seed=cfg.spec.training.seed)
    parts = build.build_model_parts(ctx)
    rank = cfg.spec.model.lora.rank
    checked, wrong = 0, []
    for linear in adapted_linears(parts.parts[0]):
        layer, module = linear.lora_id
        a, b = (w.full_tensor() if isinstance(w, DTensor) else w for w in (linear.lora_a.weight, linear.lora_b.weight))
        expected = initial_lora_a(cfg.spec.training.seed, layer, module, rank, a.shape[1])
        if not torch.equal(a.cpu(), expected) or torch.count_nonzero(b):
            wrong.append(f"layers.{layer}.{module}")
        checked += 1
    return {"checked": checked, "wrong": wrong}
