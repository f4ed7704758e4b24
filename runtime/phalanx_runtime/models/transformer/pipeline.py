"""Pipeline stages of the built-in transformer: which layers this pipeline rank's parts keep.

Layers are deleted from the ``ModuleDict`` (and ``tok_embeddings``/``norm``/``output`` set to None
outside the first/last stage), so the kept parameters keep their full-model names
(``layers.5.attention.wq.weight``) and checkpoints stay interchangeable across layouts."""

from __future__ import annotations

import copy

from phalanx_runtime.distributed.pipeline import num_stages, split_layers, stage_ids_for_rank
from phalanx_runtime.models.transformer.model import Transformer


def pipeline_split(model: Transformer, *, pp_rank: int, pp: int, schedule: str, virtual_stages: int
                   ) -> tuple[list[Transformer], list[int], int]:
    """(model parts of this pipeline rank, their global stage ids, number of stages)."""
    n = num_stages(pp, schedule, virtual_stages)
    ids = stage_ids_for_rank(pp_rank, pp, schedule, virtual_stages)
    split = split_layers(model.shape.n_layers, n)
    parts = []
    for sid in ids:
        part = copy.deepcopy(model) if len(ids) > 1 else model
        keep = {str(i) for i in split[sid]}
        for name in list(part.layers.keys()):
            if name not in keep:
                del part.layers[name]
        if sid != 0:
            part.tok_embeddings = None
        if sid != n - 1:
            part.norm = None
            part.output = None
        parts.append(part)
    return parts, ids, n
