"""How the launcher has torchrun start the workers: the choice ($PHALANX_WORKER_START), torchrun's
arguments for each, and what the forkserver imports for a job."""

from __future__ import annotations

from pathlib import Path

import pytest

import phalanx_runtime
from phalanx_runtime.config import RuntimeConfig
from phalanx_runtime.workers import (
    FORKSERVER_SETUP_MODULE,
    PIPELINING_MODULE,
    WorkerStart,
    preload_modules,
    worker_args,
    worker_start,
)

TRAIN_PY = str(Path(phalanx_runtime.__file__).with_name("train.py"))


@pytest.mark.parametrize(("env", "start"), [
    ({}, WorkerStart.FORKSERVER),
    ({"PHALANX_WORKER_START": ""}, WorkerStart.FORKSERVER),
    ({"PHALANX_WORKER_START": "forkserver"}, WorkerStart.FORKSERVER),
    ({"PHALANX_WORKER_START": "subprocess"}, WorkerStart.SUBPROCESS),
    ({"PHALANX_WORKER_START": " Subprocess "}, WorkerStart.SUBPROCESS),
    ({"PHALANX_WORKER_START": "spawn"}, WorkerStart.FORKSERVER),  # unknown: the default, logged
])
def test_worker_start_from_the_environment(env, start):
    assert worker_start(env) is start


@pytest.mark.parametrize(("start", "tail"), [
    (WorkerStart.FORKSERVER, ["--start-method", "forkserver", "--run-path", TRAIN_PY, "--config", "/c.json"]),
    (WorkerStart.SUBPROCESS, ["-m", "phalanx_runtime.train", "--config", "/c.json"]),
])
def test_torchruns_worker_arguments(start, tail):
    assert worker_args(start, "/c.json") == tail


def test_the_worker_script_is_the_worker_module():
    assert Path(TRAIN_PY).is_file()


def _config(parallelism: dict, procs: int) -> RuntimeConfig:
    return RuntimeConfig.from_dict({"spec": {"procsPerNode": procs, "parallelism": parallelism,
                                             "model": {"preset": "debug"}, "training": {"globalBatchSize": 8}}})


@pytest.mark.parametrize(("parallelism", "procs", "pipelining"), [
    ({}, 2, False),
    ({"tensor": 2}, 2, False),
    ({"pipeline": 2, "microbatches": 2}, 2, True),
])
def test_the_forkserver_imports_its_setup_first_then_what_the_job_needs(parallelism, procs, pipelining):
    modules = preload_modules(_config(parallelism, procs))
    assert modules[0] == FORKSERVER_SETUP_MODULE
    assert "phalanx_runtime.train" in modules and "torch.distributed.run" in modules
    assert (PIPELINING_MODULE in modules) is pipelining
