"""How the launcher has torchrun start its workers: forked from a preloaded forkserver (the
default), or one ``python -m phalanx_runtime.train`` process each (``$PHALANX_WORKER_START=subprocess``).

Forkserver: torchrun's first worker start (``--start-method forkserver``) starts a fresh
interpreter that imports what every worker of the job imports before its first step
(``preload_modules``) once, then forks each worker from it; the workers of a pod share those
imports instead of each importing torch again (seconds of CPU each, all of them at once on the
pod's CPU). The forkserver is exec'd, not forked from the launcher, so neither the launcher's
threads nor its CUDA check reach a worker; ``phalanx_runtime.forkserver``, the first module it
imports, keeps the workers' process semantics (their own session, death with their parent). A
worker runs ``train.py`` as ``__main__`` (torchrun's ``--run-path``): the same ``main()``, exit
codes and environment as ``python -m phalanx_runtime.train`` (torchrun sets the per-rank
variables; the rest is the launcher's, which the forkserver inherited when it started).

Torch-free.
"""

from __future__ import annotations

import importlib.util
import logging
import multiprocessing
from collections.abc import Mapping
from enum import StrEnum

from phalanx_runtime.config import RuntimeConfig
from phalanx_runtime.env import ENV_WORKER_START

log = logging.getLogger("phalanx_runtime.workers")

WORKER_MODULE = "phalanx_runtime.train"
FORKSERVER_SETUP_MODULE = "phalanx_runtime.forkserver"
TORCHRUN_MODULE = "torch.distributed.run"  # its run_script_path is what a forked worker runs
PIPELINING_MODULE = "torch.distributed.pipelining"  # imported by train.py only when a pipeline is built


class WorkerStart(StrEnum):
    FORKSERVER = "forkserver"
    SUBPROCESS = "subprocess"


def worker_start(env: Mapping[str, str]) -> WorkerStart:
    """``$PHALANX_WORKER_START``: the forkserver unless it says ``subprocess`` (an unknown value is
    logged and ignored: a typo should not stop a job)."""
    value = (env.get(ENV_WORKER_START) or WorkerStart.FORKSERVER).strip().lower()
    if value not in WorkerStart.__members__.values():
        log.warning("%s=%r is neither of %s; using %s", ENV_WORKER_START, value,
                    "/".join(WorkerStart), WorkerStart.FORKSERVER)
        return WorkerStart.FORKSERVER
    return WorkerStart(value)


def worker_script() -> str:
    """The path of ``train.py``, found without importing it (it imports torch)."""
    spec = importlib.util.find_spec(WORKER_MODULE)
    if spec is None or spec.origin is None:
        raise ImportError(f"cannot find {WORKER_MODULE}")
    return spec.origin


def worker_args(start: WorkerStart, config_path: str) -> list[str]:
    """The tail of torchrun's command line: how to start a worker and its arguments."""
    if start is WorkerStart.SUBPROCESS:
        return ["-m", WORKER_MODULE, "--config", config_path]
    return ["--start-method", "forkserver", "--run-path", worker_script(), "--config", config_path]


def preload_modules(cfg: RuntimeConfig) -> list[str]:
    """What the forkserver imports before it forks a worker: its own set-up first, then what every
    worker of this job imports before the first step."""
    modules = [FORKSERVER_SETUP_MODULE, WORKER_MODULE, TORCHRUN_MODULE]
    if cfg.layout.pp > 1:
        modules.append(PIPELINING_MODULE)
    return modules


def preload_forkserver(modules: list[str]) -> None:
    """Set the forkserver's imports; it starts, with the launcher's environment as it is then, at
    torchrun's first worker start."""
    multiprocessing.get_context(str(WorkerStart.FORKSERVER)).set_forkserver_preload(modules)
