"""Pure (torch-free) checks: layout validation, mesh coordinates, launcher env resolution."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from phalanx.api.types import TrainingJobSpec
from phalanx_common.layout import Layout, check_layout, layout_of


def spec(**kw) -> TrainingJobSpec:
    base = {"image": "x", "model": {"preset": "debug"}, "training": {"globalBatchSize": 8}}
    for k, v in kw.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            base[k] = {**base[k], **v}
        else:
            base[k] = v
    return TrainingJobSpec.model_validate(base)


def assert_error(errors, field, *words):
    hits = [e for e in errors if e.startswith(field + ":")]
    assert hits, f"no error for {field}: {errors}"
    assert any(all(w in e for w in words) for e in hits), hits


def test_config_module_is_torch_free():
    code = "import sys, phalanx_runtime.config as c; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("kw", [
    {},
    {"procsPerNode": 2, "parallelism": {"zero": 0}},
    {"nodes": 2, "procsPerNode": 4, "parallelism": {"pipeline": 2, "zero": 3, "tensor": 2, "sequenceParallel": True,
                                                   "microbatches": 2}},
    {"procsPerNode": 4, "parallelism": {"zero": 3, "replicate": 2}},
    {"procsPerNode": 2, "parallelism": {"pipeline": 2, "pipelineSchedule": "ZBVZeroBubble", "virtualStages": 2,
                                        "microbatches": 4}},
])
def test_valid_layouts(kw):
    assert check_layout(spec(**kw), cuda_available=False, checkpointing=False) == []


def test_virtual_stages_refused_when_checkpointing():
    zbv = spec(procsPerNode=2, parallelism={"pipeline": 2, "pipelineSchedule": "ZBVZeroBubble", "virtualStages": 2,
                                            "microbatches": 4})
    assert_error(check_layout(zbv, cuda_available=False), "parallelism.virtualStages", "not supported yet")


def test_world_cannot_hold_layout():
    errs = check_layout(spec(procsPerNode=4, parallelism={"data": 4, "tensor": 2}))
    assert_error(errs, "parallelism.data", "world size is 4")
    errs = check_layout(spec(procsPerNode=3, parallelism={"tensor": 2}))
    assert_error(errs, "parallelism", "not divisible by tensor × pipeline")


def test_tensor_must_divide_heads_and_kv_heads():
    errs = check_layout(spec(procsPerNode=4, parallelism={"tensor": 4, "zero": 3},
                             model={"preset": "debug", "overrides": {"nKvHeads": 2}}))
    assert_error(errs, "parallelism.tensor", "nKvHeads 2")
    errs = check_layout(spec(procsPerNode=8, parallelism={"tensor": 8}))
    assert_error(errs, "parallelism.tensor", "nHeads 4")


def test_tensor_must_fit_in_node():
    errs = check_layout(spec(nodes=2, procsPerNode=1, parallelism={"tensor": 2}))
    assert_error(errs, "parallelism.tensor", "inside one node")


def test_model_cannot_split_into_stages():
    errs = check_layout(spec(procsPerNode=8, parallelism={"pipeline": 8, "microbatches": 8}))
    assert_error(errs, "parallelism.pipeline", "4 layers", "8 pipeline stages")
    errs = check_layout(spec(procsPerNode=4, parallelism={"pipeline": 4, "pipelineSchedule": "Interleaved1F1B",
                                                          "virtualStages": 2, "microbatches": 8}))
    assert_error(errs, "parallelism.pipeline", "cannot split into 8")


def test_cpu_offload_without_gpu():
    s = spec(procsPerNode=2, parallelism={"zero": 3, "cpuOffload": True})
    assert_error(check_layout(s), "parallelism.cpuOffload", "needs GPUs")
    assert_error(check_layout(s, cuda_available=False), "parallelism.cpuOffload", "needs GPUs")
    assert check_layout(s, cuda_available=True) == []
    s = spec(procsPerNode=2, resources={"gpus": 2}, parallelism={"zero": 3, "cpuOffload": True})
    assert check_layout(s) == []


def test_batch_arithmetic():
    errs = check_layout(spec(procsPerNode=3, training={"globalBatchSize": 8}))
    assert_error(errs, "training.globalBatchSize", "not divisible", "3")
    errs = check_layout(spec(procsPerNode=2, training={"globalBatchSize": 8, "microBatchSize": 3}))
    assert_error(errs, "training.microBatchSize", "local batch 4")
    errs = check_layout(spec(procsPerNode=2, parallelism={"pipeline": 2, "microbatches": 3}))
    assert_error(errs, "parallelism.microbatches", "not divisible by microbatches 3")


def test_misc_refusals():
    assert_error(check_layout(spec(procsPerNode=2, parallelism={"replicate": 2})), "parallelism.replicate", "zero 2 or 3")
    assert_error(check_layout(spec(procsPerNode=4, parallelism={"zero": 0, "tensor": 2})), "parallelism.zero", "zero 2 or 3")
    assert_error(check_layout(spec(procsPerNode=2, parallelism={"zero": 3}, training={"gradCompression": "powersgd"})),
                 "training.gradCompression", "zero 0")
    assert_error(check_layout(spec(procsPerNode=2, parallelism={"pipeline": 2, "microbatches": 2},
                                   model={"preset": "debug", "overrides": {"tieEmbeddings": True}})),
                 "model.overrides", "tieEmbeddings")
    assert_error(check_layout(spec(data={"seqLen": 1024})), "data.seqLen", "maxSeqLen 256")
    with pytest.raises(ValidationError, match="bogus"):  # typed overrides: refused as the spec is read
        spec(model={"preset": "debug", "overrides": {"bogus": 1}})
    assert_error(check_layout(spec(procsPerNode=4, resources={"gpus": 2})), "procsPerNode", "resources.gpus 2")


def test_layout_and_mesh_coordinates():
    s = spec(nodes=2, procsPerNode=4, parallelism={"pipeline": 2, "zero": 3, "tensor": 2, "microbatches": 2})
    lay = layout_of(s)
    assert lay == Layout(pp=2, dp_replicate=1, dp_shard=2, tp=2)
    # tp innermost: consecutive ranks form a TP group (inside a node); pp outermost.
    assert [lay.coords(r)["tp"] for r in range(8)] == [0, 1] * 4
    assert [lay.coords(r)["pp"] for r in range(8)] == [0] * 4 + [1] * 4
    assert [lay.coords(r)["dp"] for r in range(8)] == [0, 0, 1, 1] * 2
    hsdp = layout_of(spec(procsPerNode=8, parallelism={"zero": 2, "replicate": 2}))
    assert hsdp.shape == (1, 2, 4, 1) and hsdp.dp == 8
    ddp = layout_of(spec(procsPerNode=4, parallelism={"zero": 1}))
    assert ddp.shape == (1, 4, 1, 1)


def test_launcher_env_resolution():
    from phalanx_runtime.launch import expand_slurm_nodelist, resolve_env, torchrun_args
    from phalanx_runtime.workers import WorkerStart

    s = spec(nodes=2, procsPerNode=4)
    le = resolve_env(s, {"PET_NNODES": "2", "PET_NODE_RANK": "1", "PET_NPROC_PER_NODE": "4",
                         "PET_MASTER_ADDR": "job-node-0-0.job", "PET_MASTER_PORT": "29500"}, "job")
    assert (le.nnodes, le.node_rank, le.nproc_per_node, le.master_addr, le.master_port) == (2, 1, 4, "job-node-0-0.job", 29500)
    args = torchrun_args(le, "/etc/phalanx/config.json")
    # Fixed size: static rendezvous, so global ranks follow NODE_RANK (the planned placement).
    assert args[args.index("--rdzv-backend") + 1] == "static"
    assert args[args.index("--master-addr") + 1] == "job-node-0-0.job"
    assert args[args.index("--master-port") + 1] == "29500"
    assert args[args.index("--node-rank") + 1] == "1"
    # The workers: forked from a preloaded forkserver, train.py run as __main__; or one process each.
    script = str(Path(__import__("phalanx_runtime").__file__).with_name("train.py"))
    assert args[-6:] == ["--start-method", "forkserver", "--run-path", script, "--config", "/etc/phalanx/config.json"]
    args = torchrun_args(le, "/etc/phalanx/config.json", WorkerStart.SUBPROCESS)
    assert args[-4:] == ["-m", "phalanx_runtime.train", "--config", "/etc/phalanx/config.json"]
    # Slurm: one task per node.
    le = resolve_env(s, {"SLURM_NTASKS": "2", "SLURM_NNODES": "2", "SLURM_NODEID": "1", "SLURM_PROCID": "1",
                         "SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_JOB_ID": "42"}, "job")
    assert (le.direct, le.nnodes, le.node_rank, le.master_addr) == (False, 2, 1, "gpu07")
    # Slurm: one task per rank → run the worker directly.
    le = resolve_env(s, {"SLURM_NTASKS": "8", "SLURM_NNODES": "2", "SLURM_NODEID": "1", "SLURM_PROCID": "5",
                         "SLURM_LOCALID": "1", "SLURM_JOB_NODELIST": "n1,n2"}, "job")
    assert (le.direct, le.rank, le.world_size, le.local_rank, le.master_addr) == (True, 5, 8, 1, "n1")
    assert expand_slurm_nodelist("a[01-03,10],b5") == ["a01", "a02", "a03", "a10", "b5"]
