"""Pipeline parallelism with ``torch.distributed.pipelining``: stage placement per schedule,
layer split, PipelineStage + schedule construction, and one training step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch import nn

from phalanx_common.layout import MULTI_STAGE_SCHEDULES

if TYPE_CHECKING:
    from torch.distributed.pipelining import PipelineStage


def stage_ids_for_rank(pp_rank: int, pp: int, schedule: str, virtual_stages: int) -> list[int]:
    """Global stage indices this pipeline rank holds: one for GPipe/1F1B, ``v`` looped for
    Interleaved1F1B (rank r holds r, r+p, …), a V for ZBVZeroBubble (r and 2p−1−r)."""
    if schedule == "ZBVZeroBubble":
        return [pp_rank, 2 * pp - 1 - pp_rank]
    if schedule in MULTI_STAGE_SCHEDULES:
        return [pp_rank + i * pp for i in range(virtual_stages)]
    return [pp_rank]


def num_stages(pp: int, schedule: str, virtual_stages: int) -> int:
    if schedule == "ZBVZeroBubble":
        return 2 * pp
    if schedule in MULTI_STAGE_SCHEDULES:
        return pp * virtual_stages
    return pp


def split_layers(n_layers: int, n_stages: int) -> list[list[int]]:
    """Contiguous, as even as possible; earlier stages take the remainder (the last stage also
    runs the output projection)."""
    if n_stages > n_layers:
        raise ValueError(f"cannot split {n_layers} layers into {n_stages} pipeline stages")
    base, extra = divmod(n_layers, n_stages)
    out, start = [], 0
    for s in range(n_stages):
        k = base + (1 if s < extra else 0)
        out.append(list(range(start, start + k)))
        start += k
    return out


@dataclass
class PipelineRunner:
    schedule: object
    stages: list[PipelineStage]
    has_first: bool
    has_last: bool

    def step(self, inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor | None:
        """One forward+backward over all microbatches; returns the mean loss on ranks holding
        the last stage, None elsewhere."""
        losses: list[torch.Tensor] = []
        kwargs = {"target": labels, "losses": losses} if self.has_last else {}
        if self.has_first:
            self.schedule.step(inputs, **kwargs)
        else:
            self.schedule.step(**kwargs)
        if self.has_last:
            return torch.stack([t.detach().float() for t in losses]).mean()
        return None


def build_pipeline(parts: list[nn.Module], stage_ids: list[int], n_stages: int, *, device: torch.device,
                   group: dist.ProcessGroup, schedule: str, microbatches: int, loss_fn) -> PipelineRunner:
    # Imported here, not with this module: torch.distributed.pipelining imports torch._dynamo, near a
    # second of CPU in every worker, which only pipelined jobs need.
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import get_schedule_class
    from torch.nn.parallel import DistributedDataParallel

    for part in parts:
        if isinstance(part, DistributedDataParallel):
            # PipelineStage arms DDP's reducer itself before the last microbatch's backward; a
            # DDP forward in sync mode would arm it for every microbatch (reducer assert).
            part.require_backward_grad_sync = False
    stages = [PipelineStage(part, sid, n_stages, device, group=group) for part, sid in zip(parts, stage_ids, strict=True)]
    cls = get_schedule_class(schedule)
    if schedule in MULTI_STAGE_SCHEDULES:
        sched = cls(stages, microbatches, loss_fn=loss_fn)
    else:
        sched = cls(stages[0], microbatches, loss_fn=loss_fn)
    return PipelineRunner(sched, stages, any(s.is_first for s in stages), any(s.is_last for s in stages))
