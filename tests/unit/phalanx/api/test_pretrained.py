"""Fine-tuning fields (api/pretrained.py): model.pretrained, model.lora, data.source prepared with
data.prepare, training.eval, checkpoint.exportHuggingFace. Every refusal names its field and rule,
before anything is created; `phalanx validate` also checks a pretrained config.json it can read."""

from __future__ import annotations

import copy
import json

import pytest

from phalanx.validate import check_document, pretrained_problems, validate_job
from tests.conftest import MINIMAL

PVC = {"persistentVolumeClaim": {"claimName": "ckpt"}}
MODELS = {"volumes": [{"name": "models", "persistentVolumeClaim": {"claimName": "models", "readOnly": True}}],
          "volumeMounts": [{"name": "models", "mountPath": "/models", "readOnly": True}]}
PRETRAINED = {"pretrained": {"path": "/models/llama"}}
PREPARED = {"source": "prepared", "path": "/checkpoints/data/chat", "seqLen": 128,
            "prepare": {"inputs": ["/models/data/chat.jsonl"], "messagesField": "messages", "evalFraction": 0.1}}
# The whole path: a pretrained model, adapters, prepared chat data, eval, the Hugging Face export.
FINETUNE = {**MODELS, "model": {**PRETRAINED, "lora": {"rank": 16, "alpha": 32, "targets": ["q_proj", "v_proj"]}},
            "data": PREPARED, "training": {"globalBatchSize": 8, "eval": {"everySteps": 10, "batches": 2}},
            "checkpoint": {"volume": PVC, "exportHuggingFace": True}}


def job(**spec) -> dict:
    obj = copy.deepcopy(MINIMAL)
    obj["spec"].update(copy.deepcopy(spec))
    return obj


def problems(obj) -> list:
    return validate_job(obj)[1]


@pytest.mark.parametrize("spec", [
    FINETUNE,
    {"model": PRETRAINED},
    {"model": {**PRETRAINED, "lora": {}}, "training": {"eval": {}}},  # eval of the synthetic stream
    {"model": {"preset": "debug", "lora": {"targets": ["gate_proj", "up_proj", "down_proj"]}}},
    {"model": {"preset": "debug"}, "data": {"source": "prepared", "path": "/data/p"}, "training": {"eval": {"batches": 1}}},
    {"model": {"preset": "debug"}, "data": {"source": "prepared", "path": "/data/p",
                                            "prepare": {"inputs": ["/data/a.txt"], "tokenizer": "/data/tok",
                                                        "evalInputs": ["/data/eval.txt"]}},
     "training": {"eval": {}}},
    {"model": PRETRAINED, "data": {**PREPARED, "prepare": {"inputs": ["/d/a"], "evalFraction": 0.01,
                                                           "evalInputs": ["/d/held-out.jsonl"]}},
     "training": {"eval": {}}},  # both: the eval inputs and a share of the others
    {"model": {"entrypoint": "my.model:build"}, "data": {"source": "prepared", "path": "/data/p",
                                                         "prepare": {"inputs": ["/data/a"], "tokenizer": "/tok"}}},
    {"model": PRETRAINED, "data": {**PREPARED, "path": "/d/prepared", "prepare": {"inputs": ["/d/prep", "/d/prepared.jsonl"],
                                                                          "format": "jsonl", "messagesField": "m"}}},
    {"model": {"preset": "debug"}, "checkpoint": {"volume": PVC, "exportHuggingFace": True}},
    {"data": {"source": "corpus"}, "training": {"eval": {"everySteps": 5}}},  # the bytes after the training corpus
    {"model": {"entrypoint": "m:f"}, "training": {"eval": {}}},  # the token loss of its logits
])
def test_fine_tuning_specs_are_valid(spec):
    assert [str(p) for p in problems(job(**spec))] == []


API, OPERATOR = "api", "operator"


@pytest.mark.parametrize(("spec", "field", "words", "source"), [
    # one model source; overrides reshape a preset only
    ({"model": {**PRETRAINED, "preset": "debug"}}, "spec.model", "set exactly one of model.preset", API),
    ({"model": {**PRETRAINED, "entrypoint": "m:f"}}, "spec.model", "model.pretrained (a Hugging Face model directory)", API),
    ({"model": {"overrides": {"dim": 32}, **PRETRAINED}}, "spec.model.overrides", "with model.preset only", API),
    ({"model": {"overrides": {"dim": 32}, "entrypoint": "m:f"}}, "spec.model.overrides", "with model.preset only", API),
    ({"model": {"pretrained": {"path": "models/llama"}}}, "spec.model.pretrained.path", "must be an absolute path", API),
    ({"model": {"pretrained": {}}}, "spec.model.pretrained.path", "Field required", API),
    # adapters
    ({"model": {"entrypoint": "m:f", "lora": {}}}, "spec.model.lora", "not model.entrypoint", API),
    ({"model": {**PRETRAINED, "lora": {"rank": 0}}}, "spec.model.lora.rank", "greater than or equal to 1", API),
    ({"model": {**PRETRAINED, "lora": {"rank": 2048}}}, "spec.model.lora.rank", "less than or equal to 1024", API),
    ({"model": {**PRETRAINED, "lora": {"alpha": 0}}}, "spec.model.lora.alpha", "greater than 0", API),
    ({"model": {**PRETRAINED, "lora": {"dropout": 1.0}}}, "spec.model.lora.dropout", "less than 1", API),
    ({"model": {**PRETRAINED, "lora": {"targets": []}}}, "spec.model.lora.targets", "at least 1 item", API),
    ({"model": {**PRETRAINED, "lora": {"targets": ["wq"]}}}, "spec.model.lora.targets[0]", "'q_proj'", API),
    ({"model": {**PRETRAINED, "lora": {"targets": ["q_proj", "q_proj"]}}}, "spec.model.lora.targets",
     "duplicate target 'q_proj'", API),
    ({"nodes": 2, "procsPerNode": 1, "parallelism": {"parameterServer": {}}, "model": {"preset": "debug", "lora": {}}},
     "spec.model.lora", "parallelism.parameterServer: model.lora is not supported", API),
    ({"nodes": 2, "procsPerNode": 1, "parallelism": {"parameterServer": {}}, "model": PRETRAINED},
     "spec.model.pretrained", "parallelism.parameterServer: model.pretrained is not supported", API),
    # prepared data
    ({"data": {"source": "prepared"}}, "spec.data.path", "data.path is required when source is prepared", API),
    ({"data": {"source": "tokens", "path": "/d/t.bin", "prepare": {"inputs": ["/d/a.txt"], "tokenizer": "/t"}}},
     "spec.data.prepare", "data.prepare needs data.source prepared", API),
    ({"data": {"source": "prepared", "path": "/d/p", "prepare": {"inputs": ["/d/a.txt"]}}},
     "spec.data.prepare.tokenizer", "required unless model.pretrained is set", API),
    ({"model": PRETRAINED, "data": {**PREPARED, "prepare": {"inputs": []}}}, "spec.data.prepare.inputs", "at least 1 item", API),
    ({"model": PRETRAINED, "data": {**PREPARED, "prepare": {"inputs": ["data.jsonl"]}}}, "spec.data.prepare.inputs[0]",
     "must be an absolute path", API),
    ({"model": PRETRAINED, "data": {**PREPARED, "prepare": {"inputs": ["/d"], "format": "csv"}}}, "spec.data.prepare.format",
     "'jsonl', 'parquet', 'text' or 'arrow'", API),
    ({"model": PRETRAINED, "data": {**PREPARED, "prepare": {"inputs": ["/d"], "evalFraction": 0.6}}},
     "spec.data.prepare.evalFraction", "less than or equal to 0.5", API),
    ({"model": PRETRAINED, "data": {**PREPARED, "prepare": {"inputs": ["/d/a.txt"], "format": "text",
                                                           "messagesField": "messages"}}},
     "spec.data.prepare.messagesField", "format jsonl, parquet or arrow", API),
    # the prepared files would be read back as inputs
    ({"model": PRETRAINED, "data": {**PREPARED, "path": "/d/prepared", "prepare": {"inputs": ["/d"]}}},
     "spec.data.path", "outside data.prepare.inputs", API),
    ({"model": PRETRAINED, "data": {**PREPARED, "path": "/d/prepared", "prepare": {"inputs": ["/e", "/d/"]}}},
     "spec.data.path", "outside data.prepare.inputs", API),
    ({"model": PRETRAINED, "data": {**PREPARED, "path": "/d", "prepare": {"inputs": ["/d"]}}},
     "spec.data.path", "outside data.prepare.inputs", API),
    ({"model": PRETRAINED, "data": {**PREPARED, "path": "/d/held/p", "prepare": {"inputs": ["/a"], "evalInputs": ["/d/held"]}}},
     "spec.data.path", "outside data.prepare.inputs and evalInputs", API),
    # eval needs a held-out split and the built-in transformer
    ({"data": {"source": "tokens", "path": "/d/t.bin"}, "training": {"eval": {}}}, "spec.training.eval",
     "needs a held-out split", API),
    ({"model": {"entrypoint": "m:f"}, "data": {"source": "tokens", "path": "/d/t.bin"}, "training": {"eval": {}}},
     "spec.training.eval", "a tokens file has none", API),
    ({"model": PRETRAINED, "data": {**PREPARED, "prepare": {"inputs": ["/d"]}}, "training": {"eval": {}}},
     "spec.training.eval", "data.prepare writes no eval split", API),
    ({"training": {"eval": {"batches": 0}}}, "spec.training.eval.batches", "greater than or equal to 1", API),
    ({"training": {"eval": {"everySteps": -1}}}, "spec.training.eval.everySteps", "greater than or equal to 0", API),
    ({"nodes": 2, "procsPerNode": 1, "parallelism": {"parameterServer": {}}, "training": {"eval": {}}},
     "spec.training.eval", "parallelism.parameterServer: training.eval is not supported", API),
    # the Hugging Face export
    ({"checkpoint": {"exportHuggingFace": True}}, "spec.checkpoint.exportHuggingFace", "needs checkpoint.volume", API),
    ({"model": {"entrypoint": "m:f"}, "checkpoint": {"volume": PVC, "exportHuggingFace": True}},
     "spec.checkpoint.exportHuggingFace", "set model.preset or model.pretrained", API),
    ({"model": None, "command": ["python", "train.py"], "checkpoint": {"volume": PVC, "exportHuggingFace": True}},
     "spec.checkpoint.exportHuggingFace", "not a command job", API),
    ({"nodes": 2, "procsPerNode": 1, "parallelism": {"parameterServer": {}},
      "checkpoint": {"volume": PVC, "exportHuggingFace": True}},
     "spec.checkpoint.exportHuggingFace", "parallelism.parameterServer: checkpoint.exportHuggingFace is not supported", API),
])
def test_bad_fine_tuning_specs_name_the_field_and_the_rule(spec, field, words, source):
    obj = job(**spec)
    if spec.get("model", 0) is None:
        obj["spec"].pop("model")
    found = problems(obj)
    match = [p for p in found if p.field == field and words in p.message]
    assert match, [str(p) for p in found]
    assert match[0].source == source, match[0]


# --- A pretrained config.json this machine can read ---------------------------------------------


def llama_config(**changes) -> dict:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 256,
            "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, **changes}


def pretrained_job(directory, **spec) -> dict:
    return job(model={"pretrained": {"path": str(directory)}}, **spec)


@pytest.fixture
def model_dir(tmp_path):
    def write(doc) -> str:
        (tmp_path / "config.json").write_text(doc if isinstance(doc, str) else json.dumps(doc))
        return str(tmp_path)
    return write


def test_a_readable_supported_config_passes(model_dir):
    obj = pretrained_job(model_dir(llama_config()))
    job_, errors = check_document(obj, None, "job.yaml")
    assert errors == [] and job_ is not None


@pytest.mark.parametrize(("config", "spec", "field", "words"), [
    (llama_config(architectures=["GPT2LMHeadModel"]), {}, "spec.model.pretrained.path", "GPT2LMHeadModel"),
    (llama_config(num_key_value_heads=1), {"nodes": 1, "procsPerNode": 2, "parallelism": {"tensor": 2}},
     "spec.parallelism.tensor", "num_key_value_heads 1"),
    (llama_config(num_hidden_layers=1), {"nodes": 1, "procsPerNode": 2,
                                         "parallelism": {"pipeline": 2, "microbatches": 2}},
     "spec.parallelism.pipeline", "num_hidden_layers 1"),
    (llama_config(max_position_embeddings=64), {"data": {"seqLen": 128}}, "spec.data.seqLen", "max_position_embeddings 64"),
])
def test_a_readable_config_the_spec_cannot_train_is_refused(model_dir, config, spec, field, words):
    obj = pretrained_job(model_dir(config), **spec)
    _, problems_ = validate_job(copy.deepcopy(obj))
    assert problems_ == [], "validate_job reads no file: the in-cluster operator's verdict"
    found = pretrained_problems(validate_job(obj)[0].spec)
    assert any(p.field == field and words in p.message and p.source == "operator" for p in found), found
    job_, errors = check_document(obj, None, "job.yaml")
    assert job_ is None and any(f"{field}: " in e and words in e for e in errors), errors


def test_an_unreadable_config_is_named(model_dir):
    spec = validate_job(pretrained_job(model_dir("{not json")))[0].spec
    found = pretrained_problems(spec)
    assert [p.field for p in found] == ["spec.model.pretrained.path"] and "config.json" in found[0].message, found


def test_a_directory_this_machine_does_not_have_is_left_to_the_pods(tmp_path):
    spec = validate_job(pretrained_job(tmp_path / "absent"))[0].spec
    assert pretrained_problems(spec) == []
