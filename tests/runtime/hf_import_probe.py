"""A rank for ``spawn.run_ranks`` (test_hf_import.py): loads each Hugging Face directory named in
``$HF_PROBE_DIRS`` (os.pathsep-separated) into the model parts of the config's layout, computes the
logits of ``fixed_batch`` (rank 0 gets them: from the last pipeline stage when pipelined) and what
each rank read from the files against what it holds; then trains each directory named in
``$HF_PROBE_TRAIN`` with the config's training section."""

from __future__ import annotations

import dataclasses
import os

import torch
import torch.distributed as dist

BATCH, SEQ = 2, 16


def fixed_batch(vocab_size: int) -> torch.Tensor:
    return torch.randint(0, vocab_size, (BATCH, SEQ), generator=torch.Generator().manual_seed(0))


def with_model(cfg, path: str):
    from phalanx_runtime.config import Pretrained

    model = dataclasses.replace(cfg.spec.model, pretrained=Pretrained(path=path))
    return dataclasses.replace(cfg, spec=dataclasses.replace(cfg.spec, model=model))


@torch.no_grad()
def pipelined_logits(parts, pd, x: torch.Tensor, dim: int) -> torch.Tensor | None:
    """Pipeline ranks only (world = pipeline): stage s runs on rank s, hidden states passed on."""
    stage, last = pd.pp_rank, pd.layout.pp - 1
    h = x if stage == 0 else torch.empty(BATCH, SEQ, dim)
    if stage > 0:
        dist.recv(h, src=stage - 1)
    h = parts[0](h)
    if stage < last:
        dist.send(h, dst=stage + 1)
        return torch.empty(BATCH, SEQ, parts[0].shape.vocab_size) if stage == 0 else None
    return h


def logits_of(cfg) -> tuple[list, list]:
    """(logits on rank 0, [elements read, elements held] per rank)."""
    from phalanx_runtime.distributed.parallel_dims import ParallelDims
    from phalanx_runtime.distributed.process_group import init_distributed
    from phalanx_runtime.models.build import build_model_parts
    from phalanx_runtime.models.entrypoint import ModelContext
    from phalanx_runtime.models.huggingface.load import load_hf_weights

    member = init_distributed()
    pd = ParallelDims.from_spec(cfg.spec).build_mesh("cpu")
    ctx = ModelContext(config=cfg, mesh=pd, device=torch.device("cpu"), rank=member.rank,
                       world_size=member.world_size, local_rank=member.local_rank, seq_len=SEQ, seed=0)
    model = build_model_parts(ctx)
    shape = model.shape
    stats = load_hf_weights(model.parts, cfg.spec.model.pretrained.path, shape)  # again, counted
    reads: list = [None] * member.world_size
    dist.all_gather_object(reads, [stats.elements_read, stats.elements_local])
    x = fixed_batch(shape.vocab_size)
    if not pd.pp_enabled:
        with torch.no_grad():
            return model.parts[0](x).tolist(), reads
    out = pipelined_logits(model.parts, pd, x, shape.dim)
    last = pd.layout.pp - 1
    if member.rank == last and last != 0:
        dist.send(out.contiguous(), dst=0)
    elif member.rank == 0:
        dist.recv(out, src=last)
    return (out.tolist() if out is not None else []), reads


def logits_and_training(cfg) -> dict:
    from phalanx_runtime.train import train

    out: dict = {"logits": {}, "reads": {}, "training": {}}
    for path in os.environ["HF_PROBE_DIRS"].split(os.pathsep):
        out["logits"][path], out["reads"][path] = logits_of(with_model(cfg, path))
    for path in filter(None, os.environ.get("HF_PROBE_TRAIN", "").split(os.pathsep)):
        res = train(with_model(cfg, path))
        out["training"][path] = {"losses": res.losses, "grad_norms": res.grad_norms}
    return out
