"""A rank for ``spawn.run_ranks`` that probes the process-group timeout: it joins the default group
and builds the job's device mesh as the trainer does, records every group's timeout, and then
rank 0 all-reduces on its tensor-parallel group while rank 1 (its peer there) stays alive but
never joins, for ``$PROBE_PEER_SLEEP`` seconds. Rank 0 returns how long the collective took to fail."""

import os
import time

import torch
import torch.distributed as dist


def group_timeout_s(group) -> float:
    return group._get_backend(torch.device("cpu")).options._timeout.total_seconds()


def hang_in_tp_group(cfg):
    from phalanx_runtime.distributed.parallel_dims import ParallelDims
    from phalanx_runtime.distributed.process_group import init_distributed

    member = init_distributed()
    pd = ParallelDims.from_spec(cfg.spec).build_mesh("cpu")
    timeouts = {dim: group_timeout_s(pd.group(dim)) for dim in ("pp", "dp_replicate", "dp_shard", "tp", "dp")}
    timeouts["default"] = group_timeout_s(dist.group.WORLD)
    dist.barrier()
    if member.rank == 0:
        t0 = time.monotonic()
        try:
            dist.all_reduce(torch.ones(1), group=pd.group("tp"))
            error = None
        except Exception as e:  # noqa: BLE001 - the failure is the result
            error = str(e)
        return {"elapsed": time.monotonic() - t0, "error": error, "timeouts": timeouts}
    if member.rank == 1:
        time.sleep(float(os.environ["PROBE_PEER_SLEEP"]))
    return {}
