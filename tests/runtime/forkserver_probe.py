"""A stand-in launcher for tests/runtime/test_worker_start.py: it preloads the workers' forkserver
as the launcher does (``workers.preload_forkserver``) and starts one worker through it with
multiprocessing, as torchrun's agent does. The worker prints what it sees as one JSON line, then
exits with the code ``argv[1]`` names or, given ``sleep``, sleeps."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sys
import time

PRELOAD = ["phalanx_runtime.forkserver", "phalanx_runtime.train", "torch.distributed.run", "torch.distributed.pipelining"]


def worker(mode: str) -> None:
    from phalanx_runtime.lifetime import die_with_parent, parent_pid_from_env

    parent = parent_pid_from_env()
    seen = {"pid": os.getpid(), "ppid": os.getppid(), "parent_env": parent, "sid": os.getsid(0),
            "preloaded": [m for m in PRELOAD if m in sys.modules], "preload": PRELOAD}
    import torch

    seen["cuda_initialized"] = torch.cuda.is_initialized()
    die_with_parent(signal.SIGKILL, parent)  # as train.main does
    print(json.dumps(seen), flush=True)
    if mode == "sleep":
        time.sleep(120)
    sys.exit(int(mode) if mode.isdigit() else 0)


if __name__ == "__main__":
    from phalanx_common.contract import ENV_PARENT_PID
    from phalanx_runtime.workers import preload_forkserver

    os.environ[ENV_PARENT_PID] = str(os.getpid())  # as the launcher does before torchrun
    preload_forkserver(PRELOAD)
    process = multiprocessing.get_context("forkserver").Process(target=worker, args=(sys.argv[1],))
    process.start()
    process.join()
    sys.exit(process.exitcode)
