"""The operator↔runtime config contract: the JSON the operator renders for a job (its ConfigMap's
config.json, render/configmap.py) parses into the runtime's own config type
(phalanx_runtime.config) with the values the operator's TrainingJob holds, field by field; the
runtime reads every one of its fields under a key the rendered JSON has; a spec written by hand
(tests, Slurm) gets the operator's defaults; and both sides draw the same layout and model shape
from it."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

import pytest
import yaml

from phalanx.api.types import TrainingJob
from phalanx.render.configmap import runtime_config
from phalanx_common.layout import check_layout, layout_of, model_shape
from phalanx_runtime.config import JobSpec, RuntimeConfig, dataclass_of, from_wire, wire_name
from tests.conftest import example_jobs

DEBUG = {"preset": "debug", "overrides": {"dim": 32, "nLayers": 4, "nHeads": 4, "nKvHeads": 2, "ffnHidden": 64}}
TRAINING = {"steps": 7, "globalBatchSize": 8, "microBatchSize": 2, "lr": 3e-3, "precision": "fp32", "gradClip": 0.5,
            "seed": 7, "logEvery": 2, "lrSchedule": {"warmupSteps": 2, "decay": "linear", "minLrRatio": 0.2}}

# Each layout the runtime's tests train, a command job, an entrypoint model, checkpoint settings,
# fine-tuning a pretrained model.
SPECS: dict[str, dict[str, Any]] = {
    "defaults": {"model": {"preset": "debug"}},
    "ddp": {"procsPerNode": 2, "model": DEBUG, "training": TRAINING},
    "ddp-powersgd": {"procsPerNode": 2, "model": DEBUG, "training": {**TRAINING, "gradCompression": "powersgd"}},
    "zero1": {"procsPerNode": 2, "parallelism": {"zero": 1}, "model": DEBUG, "training": TRAINING},
    "fsdp": {"nodes": 2, "procsPerNode": 1, "parallelism": {"zero": 3}, "model": DEBUG, "training": TRAINING},
    "hsdp": {"procsPerNode": 4, "parallelism": {"zero": 2, "replicate": 2}, "model": DEBUG, "training": TRAINING},
    "tp-sp": {"procsPerNode": 2, "parallelism": {"zero": 3, "tensor": 2, "sequenceParallel": True}, "model": DEBUG,
              "data": {"seqLen": 16}, "training": {**TRAINING, "activationCheckpointing": "full"}},
    "pp-gpipe": {"procsPerNode": 2, "parallelism": {"pipeline": 2, "microbatches": 4, "pipelineSchedule": "GPipe"},
                 "model": {**DEBUG, "overrides": {**DEBUG["overrides"], "tieEmbeddings": False}}, "training": TRAINING},
    "pp-interleaved": {"procsPerNode": 2, "parallelism": {"pipeline": 2, "microbatches": 4, "virtualStages": 2,
                                                         "pipelineSchedule": "Interleaved1F1B"},
                       "model": DEBUG, "training": TRAINING},
    "3d": {"nodes": 2, "procsPerNode": 4, "parallelism": {"zero": 3, "tensor": 2, "pipeline": 2, "microbatches": 2},
           "model": DEBUG, "training": TRAINING},
    "parameter-server": {"nodes": 3, "parallelism": {"parameterServer": {"servers": 1, "mode": "async", "staleness": 2}},
                         "model": DEBUG, "training": TRAINING},
    "entrypoint": {"procsPerNode": 2, "parallelism": {"zero": 3, "cpuOffload": True}, "resources": {"gpus": 2},
                   "model": {"entrypoint": "my_model:build"},
                   "data": {"source": "tokens", "path": "/data/tokens.bin", "dtype": "uint32", "seqLen": 64}},
    "checkpointed": {"model": DEBUG, "checkpoint": {"volume": {"persistentVolumeClaim": {"claimName": "ckpt"}},
                                                    "intervalSteps": 2, "keepLast": 1, "async": False, "resume": False,
                                                    "exportConsolidated": True}},
    "command": {"nodes": 2, "procsPerNode": 2, "command": ["torchrun", "train.py"], "args": ["--lr", "1e-3"]},
    # fine-tuning: a Hugging Face model directory, adapters, prepared chat data, eval, the export
    "pretrained-lora": {"nodes": 2, "procsPerNode": 2, "parallelism": {"zero": 3, "tensor": 2},
                        "model": {"pretrained": {"path": "/models/llama"},
                                  "lora": {"rank": 16, "alpha": 32.0, "dropout": 0.05, "targets": ["q_proj", "v_proj"]}},
                        "data": {"source": "prepared", "path": "/data/prepared", "seqLen": 128,
                                 "prepare": {"inputs": ["/data/chat.jsonl", "/data/more"], "format": "jsonl",
                                             "messagesField": "messages", "evalFraction": 0.1}},
                        "training": {**TRAINING, "eval": {"everySteps": 5, "batches": 2}},
                        "checkpoint": {"volume": {"persistentVolumeClaim": {"claimName": "ckpt"}},
                                       "exportHuggingFace": True}},
    "pretrained-defaults": {"model": {"pretrained": {"path": "/models/qwen"}, "lora": {}},
                            "data": {"source": "prepared", "path": "/data/p",
                                     "prepare": {"inputs": ["/data/t.txt"], "evalInputs": ["/data/eval.txt"]}},
                            "training": {"eval": {}}},
    "preset-prepared": {"model": DEBUG, "data": {"source": "prepared", "path": "/data/p", "seqLen": 32,
                                                 "prepare": {"inputs": ["/data/d.parquet"], "textField": "body",
                                                             "tokenizer": "/tokenizers/bpe"}}},
}


def _job(spec: dict[str, Any]) -> TrainingJob:
    return TrainingJob.model_validate({"metadata": {"name": "contract", "namespace": "ml"},
                                       "spec": {"image": "phalanx/runtime:test", **spec}})


def _jobs() -> list[tuple[str, TrainingJob]]:
    examples = [(path.name, TrainingJob.model_validate(doc)) for path in example_jobs()
                for doc in yaml.safe_load_all(path.read_text()) if doc and doc.get("kind") == "TrainingJob"]
    return [(name, _job(spec)) for name, spec in SPECS.items()] + examples


JOBS = _jobs()


def _mismatches(ours: Any, theirs: Any, path: str) -> list[str]:
    """Every field of the runtime's dataclass ``ours`` whose value differs from the operator's
    attribute of the same name (nested dataclasses field by field)."""
    if dataclasses.is_dataclass(ours):
        return [m for f in dataclasses.fields(ours)
                for m in _mismatches(getattr(ours, f.name), getattr(theirs, f.name), f"{path}.{f.name}")]
    if isinstance(ours, tuple):
        theirs = tuple(theirs)
    return [] if ours == theirs else [f"{path}: runtime {ours!r}, operator {theirs!r}"]


def _wire_keys(cls: type, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The key path of every leaf field the runtime reads (runtime_config's camelCase JSON)."""
    hints = typing.get_type_hints(cls)
    out: list[tuple[str, ...]] = []
    for f in dataclasses.fields(cls):
        key = (*prefix, wire_name(f))
        nested = dataclass_of(hints[f.name])
        out += _wire_keys(nested, key) if nested is not None else [key]
    return out


@pytest.mark.parametrize(("name", "job"), JOBS, ids=[n for n, _ in JOBS])
def test_rendered_config_parses_with_the_operators_values(name, job):
    cfg = RuntimeConfig.from_dict(runtime_config(job))
    assert (cfg.name, cfg.namespace) == (job.metadata.name, job.metadata.namespace)
    assert _mismatches(cfg.spec, job.spec, "spec") == []
    assert cfg.spec.data_degree == job.spec.data_degree and cfg.spec.world_size == job.spec.world_size


def _lookup(doc: Any, keys: tuple[str, ...]) -> tuple[bool, Any]:
    """(the key path exists, its value); under an absent optional object (null) it counts as there."""
    for key in keys:
        if doc is None:
            return True, None
        if key not in doc:
            return False, None
        doc = doc[key]
    return True, doc


@pytest.mark.parametrize(("name", "job"), JOBS, ids=[n for n, _ in JOBS])
def test_the_runtime_reads_keys_the_operator_writes(name, job):
    """A misspelt wire name would leave the runtime at its default whatever the job says."""
    every_field = job.spec.model_dump(by_alias=True, mode="json")  # nulls included
    rendered = runtime_config(job)["spec"]
    paths = _wire_keys(JobSpec)
    assert [".".join(k) for k in paths if not _lookup(every_field, k)[0]] == [], "not a TrainingJob field"
    assert [".".join(k) for k in paths
            if _lookup(every_field, k)[1] is not None and _lookup(rendered, k)[1] is None] == [], "not rendered"


@pytest.mark.parametrize("name", list(SPECS))
def test_a_hand_written_spec_gets_the_operators_defaults(name):
    """The runtime's defaults are the TrainingJob's: a partial spec parses as the rendered one."""
    job = _job(SPECS[name])
    raw = from_wire(JobSpec, {"image": "phalanx/runtime:test", **SPECS[name]})
    assert raw == RuntimeConfig.from_dict(runtime_config(job)).spec


@pytest.mark.parametrize(("name", "job"), JOBS, ids=[n for n, _ in JOBS])
def test_layout_and_shape_agree(name, job):
    spec = RuntimeConfig.from_dict(runtime_config(job)).spec
    assert model_shape(spec) == model_shape(job.spec)
    assert check_layout(spec, cuda_available=False) == check_layout(job.spec, cuda_available=False)
    if not job.spec.command:
        assert layout_of(spec) == layout_of(job.spec)


def test_unknown_and_null_fields_are_ignored():
    spec = from_wire(JobSpec, {"nodes": 2, "model": None, "futureField": {"x": 1},
                               "parallelism": {"parameterServer": None, "tensor": 2}})
    assert spec.nodes == 2 and spec.model is None and spec.parallelism.tensor == 2
    assert spec.parallelism.parameter_server is None


def test_a_pretrained_shape_reads_config_json_once(tmp_path, monkeypatch):
    import json

    import phalanx_runtime.config as runtime_config_module

    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "intermediate_size": 128, "vocab_size": 256}))
    reads = []
    real_read = runtime_config_module.read_hf_config
    monkeypatch.setattr(runtime_config_module, "read_hf_config", lambda path: reads.append(path) or real_read(path))
    cfg = RuntimeConfig(spec=from_wire(JobSpec, {"model": {"pretrained": {"path": str(tmp_path)}}}))
    assert cfg.shape is cfg.shape and cfg.shape.dim == 64
    assert len(reads) == 1
