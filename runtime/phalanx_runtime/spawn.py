"""Run a job's training as N local processes (torch.multiprocessing, spawn) and collect rank 0's
result: the parity tests and the benchmarks use it. (For the full launcher path, torchrun
included, see ``phalanx local``: phalanx.local.run.)"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time
from typing import Any

from phalanx_common.contract import ENV_MASTER_ADDR, ENV_MASTER_PORT, ENV_WORLD_SIZE
from phalanx_common.net import free_port
from phalanx_runtime.env import ENV_LOCAL_RANK, ENV_LOCAL_WORLD_SIZE, ENV_RANK
from phalanx_runtime.lifetime import die_with_parent


def _worker(local_rank: int, world: int, port: int, cfg_doc: dict, out_path: str, threads: int, fn_ref,
            parent: int) -> None:
    die_with_parent(signal.SIGKILL, parent)  # a killed test or benchmark takes its ranks with it
    os.environ.update({ENV_MASTER_ADDR: "127.0.0.1", ENV_MASTER_PORT: str(port), ENV_RANK: str(local_rank),
                       ENV_WORLD_SIZE: str(world), ENV_LOCAL_RANK: str(local_rank),
                       ENV_LOCAL_WORLD_SIZE: str(world)})
    import torch

    torch.set_num_threads(threads)
    from phalanx_runtime.config import RuntimeConfig

    cfg = RuntimeConfig.from_dict(cfg_doc)
    if fn_ref is None:
        from phalanx_runtime.train import train

        res = train(cfg)
        out = {**res.summary(), "losses": res.losses, "grad_norms": res.grad_norms, "step_times": res.step_times,
               "data_state": res.data_state, "eval_losses": res.eval_losses}
    else:
        out = fn_ref(cfg)
    if local_rank == 0:
        with open(out_path, "w") as f:
            json.dump(out, f)
    # The result is on disk: leave without interpreter teardown. After a collective that failed on
    # purpose (a timeout probe), gloo's destructors can std::terminate a rank that did its job.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_ranks(cfg_doc: dict[str, Any], world_size: int, *, threads: int = 1, fn=None,
              timeout: float | None = None) -> dict:
    """Spawn ``world_size`` ranks of ``train`` (or of ``fn(cfg)``, a picklable function) on
    this machine with gloo; returns rank 0's result dict. After ``timeout`` seconds (or any error)
    the ranks still running are killed and TimeoutError is raised."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "result.json")
        ctx = mp.start_processes(_worker, args=(world_size, free_port(), cfg_doc, out, threads, fn, os.getpid()),
                                 nprocs=world_size, start_method="spawn", join=False)
        deadline = time.monotonic() + timeout if timeout else None
        try:
            while not ctx.join(timeout=1):
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"{world_size} ranks still running after {timeout}s; killed")
        finally:
            for p in ctx.processes:
                if p.is_alive():
                    p.kill()
                p.join(10)
        with open(out) as f:
            return json.load(f)
