"""The pre-flight check at gang start (``failurePolicy.preflight``): before the model is built,
every rank checks its device (CUDA available and a small matmul, when the job has GPUs) and then
all ranks all-reduce a small tensor on a gloo group, bounded by ``preflightTimeoutSeconds``. The
all-reduce both tests that the gang can talk and tells every rank whether any device check failed.

A rank whose device failed raises :class:`PreflightError` naming its node: its report (the
termination message) lets the operator attribute the failure to that node (category Preflight,
evidence for node health). Its peers wait a moment, so that its pod fails first, then stop with
:class:`PreflightPeerError` (a peer gone, not their node's fault). A collective that fails or
times out is a communication error of the gang, naming no node.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from datetime import timedelta

import torch
import torch.distributed as dist

from phalanx_common.contract import ENV_NODE_NAME

log = logging.getLogger("phalanx_runtime.preflight")
PEER_GRACE_SECONDS = 5.0  # the failing rank's pod fails first: the operator reads its report
MATMUL_SIZE = 256


class PreflightError(RuntimeError):
    """This rank's node failed the pre-flight device check."""


class PreflightPeerError(RuntimeError):
    """Another rank failed the pre-flight check; this one stops with the gang."""


def device_check(device: torch.device, want_gpu: bool) -> str | None:
    """What is wrong with this rank's device, in words (None: nothing)."""
    if not want_gpu:
        return None
    if device.type != "cuda" or not torch.cuda.is_available():
        return "CUDA is not available"
    try:
        a = torch.randn(MATMUL_SIZE, MATMUL_SIZE, device=device)
        product = a @ a
        torch.cuda.synchronize(device)
        if not bool(torch.isfinite(product).all()):
            return "a test matmul gave non-finite values"
    except Exception as exc:  # noqa: BLE001 - any device error is the verdict
        return f"{type(exc).__name__}: {exc}"
    return None


def node_name() -> str:
    return os.environ.get(ENV_NODE_NAME) or os.uname().nodename


def run_preflight(device: torch.device, rank: int, want_gpu: bool, timeout_seconds: float,
                  check: Callable[[torch.device, bool], str | None] = device_check) -> float:
    """The check on this rank; seconds it took. Raises PreflightError (this rank's device),
    PreflightPeerError (another's) or the collective's own error (timeout, a peer gone)."""
    started = time.monotonic()
    problem = check(device, want_gpu)
    group = dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_seconds))
    flags = torch.tensor([1.0, 0.0 if problem is None else 1.0, float(rank if problem else -1)])
    flags_max = flags.clone()
    dist.all_reduce(flags, group=group)  # how many ranks answered, how many failed
    dist.all_reduce(flags_max, op=dist.ReduceOp.MAX, group=group)  # the highest failed rank
    world = dist.get_world_size()
    if int(flags[0]) != world:
        raise RuntimeError(f"pre-flight all-reduce summed {int(flags[0])} over {world} ranks: the gang's network corrupts data")
    if problem is not None:
        raise PreflightError(f"pre-flight device check failed on node {node_name()} (rank {rank}): {problem}")
    if flags[1] > 0:
        time.sleep(PEER_GRACE_SECONDS)
        raise PreflightPeerError(f"pre-flight check failed on {int(flags[1])} rank(s) (rank {int(flags_max[2])} among "
                                 "them); this rank stops with the gang")
    elapsed = time.monotonic() - started
    if rank == 0:
        log.info("pre-flight check passed on %d ranks in %.2fs", world, elapsed)
    return elapsed
