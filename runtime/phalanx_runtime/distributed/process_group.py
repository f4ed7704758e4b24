"""The process group: which backend, which timeout, joining it from torchrun's environment, and the
device a rank computes on.

* backend: ``cpu:gloo,cuda:nccl`` where CUDA is present (nccl for CUDA tensors, gloo for the few
  CPU-side collectives), ``gloo`` otherwise; the launcher passes its choice on as ``$PHALANX_BACKEND``.
* timeout: ``$PHALANX_PG_TIMEOUT_SECONDS`` (the operator renders the network profile's
  ``watchdog.pgTimeoutSeconds``) for the default group and every group created after it (device
  mesh dims, the checkpointer's); unset, torch's default.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Backend

from phalanx_common.contract import ENV_MASTER_ADDR, ENV_PG_TIMEOUT_SECONDS, ENV_WORLD_SIZE
from phalanx_runtime.env import ENV_BACKEND, ENV_LOCAL_RANK


def default_backend() -> str:
    return "cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo"


def pg_timeout(env=None) -> timedelta | None:
    """``$PHALANX_PG_TIMEOUT_SECONDS`` as a timedelta; None (torch's default) when unset."""
    value = (os.environ if env is None else env).get(ENV_PG_TIMEOUT_SECONDS)
    if not value:
        return None
    seconds = float(value)
    if seconds <= 0:
        raise ValueError(f"{ENV_PG_TIMEOUT_SECONDS}={value!r}: must be a positive number of seconds")
    return timedelta(seconds=seconds)


def group_options(timeout: timedelta | None):
    """Backend options carrying ``timeout`` for groups torch creates on our behalf (DeviceMesh
    passes ``options._timeout`` to ``new_group``). NCCL insists on its own options type."""
    if timeout is None:
        return None
    if torch.cuda.is_available() and dist.is_nccl_available():
        opts = dist.ProcessGroupNCCL.Options()
        opts.is_high_priority_stream = False
    else:
        opts = Backend.Options("gloo")  # gloo takes its timeout from new_group, not from here
    opts._timeout = timeout
    return opts


def new_gloo_group() -> dist.ProcessGroup:
    """A gloo group over every rank, with the configured timeout."""
    return dist.new_group(backend="gloo", timeout=pg_timeout())


@dataclass(frozen=True)
class Membership:
    rank: int
    world_size: int
    local_rank: int
    created: bool  # this call created the default group (and its owner destroys it)


def init_distributed() -> Membership:
    """Join the default group from torchrun's env; a lone process (tests, single-device runs) gets
    an in-memory store. An existing group is reused."""
    local_rank = int(os.environ.get(ENV_LOCAL_RANK, 0))
    if dist.is_initialized():
        return Membership(dist.get_rank(), dist.get_world_size(), local_rank, created=False)
    backend = os.environ.get(ENV_BACKEND) or default_backend()
    timeout = pg_timeout()
    if ENV_WORLD_SIZE not in os.environ or ENV_MASTER_ADDR not in os.environ:
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)
        return Membership(0, 1, 0, created=True)
    dist.init_process_group(backend, timeout=timeout)
    return Membership(dist.get_rank(), dist.get_world_size(), local_rank, created=True)


def device_for_rank(local_rank: int) -> torch.device:
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")
