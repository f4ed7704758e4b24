"""A corpus of TrainingJob manifests, good and bad, hand-written and generated, for the
one-verdict tests: `phalanx validate` must say what the API server says (tests/unit uses the
offline half, tests/integration/test_one_verdict.py compares with the real API server)."""

from __future__ import annotations

import copy
import random
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]

BASE = {
    "apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "corpus"},
    "spec": {"image": "phalanx/runtime:test", "nodes": 2, "procsPerNode": 4, "model": {"preset": "debug"},
             "training": {"globalBatchSize": 8}},
}
COMMAND = {
    "apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "corpus"},
    "spec": {"image": "ghcr.io/acme/train:1.0", "nodes": 2, "procsPerNode": 8, "resources": {"gpus": 8},
             "command": ["torchrun", "--nnodes=2", "--nproc-per-node=8", "train.py"]},
}

# (base, dotted path → value) edits; None as a value deletes the field.
HAND: list[tuple[str, dict[str, Any]]] = [
    ("command", {}),
    ("command", {"spec.parallelism.tensor": 8}),
    ("command", {"spec.training.globalBatchSize": 3}),
    ("base", {"spec.model.overrides": {"nHeads": 0}}),
    ("base", {"spec.model.overrides": {"dim": -8}}),
    ("base", {"spec.model.overrides": {"bogus": 1}}),
    ("base", {"spec.model.overrides": {"dim": 128, "nLayers": 2}}),
    ("base", {"spec.resources": {"memory": "lots"}}),
    ("base", {"spec.resources": {"cpu": "-1"}}),
    ("base", {"spec.resources": {"cpu": -1}}),
    ("base", {"spec.resources": {"memory": "64GB"}}),
    ("base", {"spec.resources": {"memory": "64Gi", "cpu": "500m", "extra": {"rdma/hca": 1}}}),
    ("base", {"spec.resources": {"extra": {"bad name": 1}}}),
    ("base", {"spec.shmSize": "garbage"}),
    ("base", {"spec.shmSize": "16Gi"}),
    ("base", {"spec.env": [{"value": "x"}]}),
    ("base", {"spec.env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]}),
    ("base", {"spec.env": [{"name": "PHALANX_CONFIG", "value": "/x"}]}),
    ("base", {"spec.env": [{"name": "HF_HOME", "value": "/cache"}, {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]}),
    ("base", {"spec.volumes": [{"name": "dshm", "emptyDir": {}}]}),
    ("base", {"spec.volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
              "spec.volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True}]}),
    ("base", {"spec.volumes": [{"name": "data", "emptyDir": {}}], "spec.volumeMounts": [{"name": "data", "mountPath": "/dev/shm"}]}),
    ("base", {"spec.volumeMounts": [{"name": "missing", "mountPath": "/data"}]}),
    ("base", {"spec.volumes": [{"name": "a"}]}),
    ("base", {"spec.serviceAccountName": "Not_Valid"}),
    ("base", {"spec.image": "my image:latest"}),
    ("base", {"spec.args": ["x" * 4096] * 256}),
    ("base", {"spec.nodes": "4"}),
    ("base", {"spec.suspend": "false"}),
    ("base", {"spec.procs_per_node": 4}),
    ("base", {"apiVersion": "phalanx.dev/v1"}),
    ("base", {"metadata.name": "job\n"}),
    ("base", {"metadata.name": "Upper"}),
    ("base", {"metadata.name": "x" * 50}),
    ("base", {"spec.data": {"source": "tokens"}}),
    ("base", {"spec.checkpoint": {"volume": {"emptyDir": {}}}}),
    ("base", {"spec.checkpoint": {"volume": {"nfs": {"server": "nfs", "path": "/ckpt"}}, "intervalSteps": 10}}),
    ("base", {"spec.checkpoint": {"intervalSteps": 10}}),
    # checkpoint settings need checkpoint.volume; a setting written with its default value is no setting
    ("base", {"spec.nodes": 1, "spec.checkpoint": {"intervalSteps": 5}}),
    ("base", {"spec.checkpoint": {"keepLast": 5}}),
    ("base", {"spec.checkpoint": {"async": False, "resume": False}}),
    ("base", {"spec.checkpoint": {"exportConsolidated": True}}),
    ("base", {"spec.checkpoint": {"mountPath": "/ckpt"}}),
    ("base", {"spec.checkpoint": {"mountPath": "/checkpoints", "intervalSteps": 0, "keepLast": 3, "async": True,
                                  "resume": True, "exportConsolidated": False}}),
    ("command", {"spec.checkpoint": {"intervalSteps": 100}}),
    ("command", {"spec.checkpoint": {"volume": {"persistentVolumeClaim": {"claimName": "c"}}, "intervalSteps": 100,
                                     "keepLast": 1, "async": False, "resume": False, "mountPath": "/ckpt"}}),
    ("base", {"spec.tolerations": [{"operator": "Exists"}]}),
    ("base", {"spec.tolerations": [{"key": "a", "operator": "Exists", "value": "x"}]}),
    ("base", {"spec.tolerations": [{"operator": "Equal", "value": "x"}]}),
    ("base", {"spec.nodeSelector": {"zone": "-bad-"}}),
    ("base", {"spec.nodeSelector": {"topology.kubernetes.io/zone": "a"}}),
    ("base", {"spec.parallelism": {"tensor": 3}}),
    ("base", {"spec.parallelism": {"pipeline": 2, "microbatches": 1}}),
    ("base", {"spec.elastic": {"minNodes": 3, "maxNodes": 1}}),
    ("base", {"spec.failurePolicy": {"retryableExitCodes": [3], "permanentExitCodes": [3]}}),
    ("base", {"spec.failurePolicy": {"retryableExitCodes": [300]}}),
    ("base", {"spec.network": {"ncclEnv": {"NCCL_DEBUG": "INFO"}}}),
    ("base", {"spec.scheduling": {"priorityClassName": "High Priority"}}),
    ("base", {"spec.nodes": 2.0}),
    ("base", {"spec.checkpoint": {"keepLast": 3.0}}),
    ("base", {"spec.training": {"steps": 10.0, "lr": 1}}),
    ("base", {"spec.elastic": None, "spec.shmSize": None}),
    # framework tensorflow: one worker per pod, TF_CONFIG rendered (the rules' CEL against the API server's)
    ("command", {"spec.framework": "tensorflow", "spec.procsPerNode": 1, "spec.parallelism": {"data": 2}}),
    ("command", {"spec.framework": "tensorflow"}),
    ("command", {"spec.framework": "tensorflow", "spec.procsPerNode": 1,
                 "spec.parallelism": {"tensor": 2, "pipelineSchedule": "GPipe"},
                 "spec.env": [{"name": "TF_CONFIG", "value": "{}"}]}),
    ("command", {"spec.framework": "tensorflow", "spec.procsPerNode": 1, "spec.elastic": {"minNodes": 1, "maxNodes": 2}}),
    ("base", {"spec.framework": "tensorflow", "spec.procsPerNode": 1}),
    # framework horovod: data parallel, one process per slot, HOROVOD_* rendered (api/horovod.py)
    ("command", {"spec.framework": "horovod"}),
    ("command", {"spec.framework": "horovod", "spec.parallelism": {"data": 16}}),
    ("command", {"spec.framework": "horovod", "spec.parallelism": {"data": 4, "zero": 1, "pipelineSchedule": "GPipe"}}),
    ("command", {"spec.framework": "horovod", "spec.env": [{"name": "HOROVOD_RANK", "value": "0"}]}),
    ("command", {"spec.framework": "horovod", "spec.env": [{"name": "HOROVOD_FUSION_THRESHOLD", "value": "0"}]}),
    ("command", {"spec.framework": "horovod", "spec.roles": [{"name": "ps"}], "spec.elastic": {"minNodes": 1, "maxNodes": 2}}),
    ("command", {"spec.framework": "horovod", "spec.network": {"hostNetwork": True}}),
    ("base", {"spec.framework": "horovod"}),
    # spec.roles: heterogeneous gangs (api/roles.py rules and the list-map keys, against the API server)
    ("command", {"spec.roles": [{"name": "ps", "replicas": 2, "resources": {"cpu": "4"}}, {"name": "chief"}]}),
    ("command", {"spec.roles": [{"name": "ps"}, {"name": "ps"}]}),
    ("command", {"spec.roles": [{"name": "worker"}]}),
    ("command", {"spec.roles": [{"name": "node"}]}),
    ("command", {"spec.roles": [{"name": "Param-Server"}]}),
    ("command", {"spec.roles": [{"name": "ps", "replicas": 0}]}),
    ("command", {"spec.roles": [{"name": "ps", "env": [{"name": "PHALANX_ROLE", "value": "x"}]}]}),
    ("command", {"spec.roles": [{"name": "ps", "resources": {"extra": {"nvidia.com/gpu": 1}}}]}),
    ("command", {"spec.roles": [{"name": "ps"}], "spec.successPolicy": {"roles": ["ps", "worker"]}}),
    ("command", {"spec.roles": [{"name": "ps"}], "spec.successPolicy": {"roles": ["chief"]}}),
    ("command", {"spec.successPolicy": {"roles": []}}),
    ("base", {"spec.roles": [{"name": "ps"}]}),
    ("command", {"spec.framework": "tensorflow", "spec.procsPerNode": 1,
                 "spec.roles": [{"name": "chief"}, {"name": "ps", "replicas": 2}, {"name": "evaluator"}]}),
    ("command", {"spec.framework": "tensorflow", "spec.procsPerNode": 1, "spec.roles": [{"name": "ps"}]}),
    ("command", {"spec.framework": "tensorflow", "spec.procsPerNode": 1, "spec.roles": [{"name": "chief", "replicas": 2}]}),
    ("command", {"spec.framework": "tensorflow", "spec.procsPerNode": 1, "spec.roles": [{"name": "server"}]}),
    ("command", {"spec.framework": "tensorflow", "spec.procsPerNode": 1,
                 "spec.roles": [{"name": "chief", "env": [{"name": "TF_CONFIG", "value": "{}"}]}]}),
    # parallelism.parameterServer: built-in model only, no layout that splits the model, one worker at least
    ("base", {"spec.parallelism": {"parameterServer": {"servers": 2, "mode": "async", "staleness": 2}}}),
    ("base", {"spec.parallelism": {"parameterServer": {"servers": 8}}}),
    ("base", {"spec.parallelism": {"zero": 1, "tensor": 2, "data": 4, "parameterServer": {"mode": "sync", "staleness": 1}}}),
    ("command", {"spec.parallelism": {"parameterServer": {"servers": 1}}}),
    ("base", {"spec.parallelism": {"parameterServer": {"servers": 0, "mode": "eventually"}}}),
    # fine-tuning (api/pretrained.py): one model source, adapters, prepared data, eval, the Hugging Face export
    ("base", {"spec.model": {"pretrained": {"path": "/models/llama"}, "lora": {"rank": 16, "alpha": 32, "targets": ["q_proj", "v_proj"]}},
              "spec.data": {"source": "prepared", "path": "/ckpt/data", "prepare": {
                  "inputs": ["/models/chat.jsonl"], "messagesField": "messages", "evalFraction": 0.1}},
              "spec.training": {"globalBatchSize": 8, "eval": {"everySteps": 10}},
              "spec.checkpoint": {"volume": {"persistentVolumeClaim": {"claimName": "c"}}, "exportHuggingFace": True}}),
    ("base", {"spec.model": {"pretrained": {"path": "/models/llama"}, "preset": "debug"}}),
    ("base", {"spec.model": {"pretrained": {"path": "/models/llama"}, "overrides": {"dim": 32}}}),
    ("base", {"spec.model": {"pretrained": {"path": "models/llama"}}}),
    ("base", {"spec.model": {"entrypoint": "m:f", "lora": {}}}),
    ("base", {"spec.model": {"preset": "debug", "lora": {"targets": ["q_proj", "q_proj"]}}}),
    ("base", {"spec.model": {"preset": "debug", "lora": {"targets": ["wq"], "rank": 0}}}),
    ("base", {"spec.data": {"source": "prepared"}}),
    ("base", {"spec.data": {"source": "prepared", "path": "/d", "prepare": {"inputs": ["/d/a.txt"]}}}),
    ("base", {"spec.data": {"source": "prepared", "path": "/d", "prepare": {"inputs": ["/d/a.txt"], "tokenizer": "/t",
                                                                            "evalFraction": 0.6, "evalInputs": ["/e"]}}}),
    ("base", {"spec.data": {"source": "corpus", "prepare": {"inputs": ["/d/a.txt"], "tokenizer": "/t"}}}),
    ("base", {"spec.data": {"source": "tokens", "path": "/d/t.bin"}, "spec.training": {"globalBatchSize": 8, "eval": {}}}),
    ("base", {"spec.data": {"source": "corpus"}, "spec.training": {"globalBatchSize": 8, "eval": {}}}),
    ("base", {"spec.data": {"source": "prepared", "path": "/d", "prepare": {"inputs": ["/d/a"], "tokenizer": "/t"}},
              "spec.training": {"globalBatchSize": 8, "eval": {"batches": 2}}}),
    ("base", {"spec.training": {"globalBatchSize": 8, "eval": {"everySteps": 5, "batches": 2}}}),
    ("base", {"spec.checkpoint": {"exportHuggingFace": True}}),
    ("command", {"spec.checkpoint": {"volume": {"persistentVolumeClaim": {"claimName": "c"}}, "exportHuggingFace": True}}),
    ("base", {"spec.parallelism": {"parameterServer": {"servers": 1}}, "spec.model": {"preset": "debug", "lora": {}}}),
    # inside core/v1 types: Kubernetes' own schemas
    ("base", {"spec.volumes": [{"name": "d", "emptyDir": {"a": {"a": {"a": {}}}}}]}),
    ("base", {"spec.volumes": [{"name": "d", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}]}),
    ("base", {"spec.volumes": [{"name": "d", "emptyDir": {"sizeLimit": "1GB"}}]}),
    ("base", {"spec.volumes": [{"name": "d", "emptyDir": {"sizeLimit": 1.5}}]}),
    ("base", {"spec.volumes": [{"name": "d", "persistentVolumeClaim": {}}]}),
    ("base", {"spec.volumes": [{"name": "d", "configMap": {"name": "c", "defaultMode": 4294967296}}]}),
    ("base", {"spec.volumes": [{"name": "d", "configMap": {"name": "c", "defaultMode": 420.0}}]}),
    ("base", {"spec.volumes": [{"name": "d", "configMap": {"name": "c", "items": [{"key": "k"}]}}]}),
    ("base", {"spec.volumes": [{"name": "d", "csi": {"driver": "csi.example.com", "volumeAttributes": {"a": 1}}}]}),
    ("base", {"spec.volumes": [{"name": "d", "ephemeral": {"volumeClaimTemplate": {
        "metadata": {"name": "x"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}}}]}),
    ("base", {"spec.volumes": [{"name": "d", "ephemeral": {"volumeClaimTemplate": {
        "metadata": {"labels": {"a": "b"}}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}}}]}),
    ("base", {"spec.volumes": [{"name": "d", "projected": {"sources": [
        {"configMap": {"name": "c"}}, {"downwardAPI": {"items": [{"path": "l", "fieldRef": {"fieldPath": "metadata.labels"}}]}}]}}]}),
    ("base", {"spec.env": [{"name": "A", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k", "extra": 1}}}]}),
    ("base", {"spec.env": [{"name": "A", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "1m"}}}]}),
    ("base", {"spec.checkpoint": {"volume": {"nfs": {"server": "nfs", "path": "/ckpt", "bogus": True}}}}),
]

# What a careless user writes, by field: right values, wrong types, out of range, malformed.
_VALUES: dict[str, list[Any]] = {
    "spec.nodes": [1, 3, 0, -1, 16385, "2", 2.5, True, None],
    "spec.procsPerNode": [1, 2, 8, 65, "4", 0],
    "spec.suspend": [True, False, "true", 1],
    "spec.image": ["repo/img:tag", "img", "a b", "", "UPPER/case", "localhost:5000/a/b@sha256:" + "a" * 64, 5],
    "spec.imagePullPolicy": ["Always", "Sometimes"],
    "spec.resources.cpu": [4, "4", "250m", "-1", "1.5", "4 cores", 0, -3],
    "spec.resources.memory": ["1Gi", "1G", "1GB", "1e9", "lots", 1024],
    "spec.resources.gpus": [0, 8, 65, -1, "8"],
    "spec.resources.extra": [{"rdma/hca": 1}, {"hugepages-2Mi": "1Gi"}, {"gpu": 1}, {"x/y": "1.5"}],
    "spec.shmSize": ["8Gi", "8 Gi", 0],
    "spec.parallelism.tensor": [1, 2, 4, 8, 3, 0],
    "spec.parallelism.pipeline": [1, 2, 4, 3],
    "spec.parallelism.microbatches": [1, 2, 4, 8],
    "spec.parallelism.zero": [0, 1, 2, 3, 4],
    "spec.parallelism.data": [1, 2, 4, 8, 3],
    "spec.parallelism.replicate": [1, 2],
    "spec.parallelism.pipelineSchedule": ["GPipe", "1F1B", "ZBVZeroBubble", "Looping"],
    "spec.parallelism.virtualStages": [1, 2],
    "spec.training.globalBatchSize": [8, 16, 12, 0],
    "spec.training.lr": [1e-3, 0, -1, 11, "0.1"],
    "spec.training.weightDecay": [0.0, 0.1, 100],
    "spec.training.steps": [1, 10, 0, 2 ** 41],
    "spec.model.preset": ["debug", "tiny", "gpt5"],
    "spec.model.overrides": [{"nHeads": 2}, {"nHeads": 0}, {"dim": 96}, {"nKvHeads": 3}, {"tieEmbeddings": "no"}],
    "spec.model.entrypoint": ["pkg.mod:fn", "not an entrypoint"],
    "spec.data.source": ["synthetic", "corpus", "tokens"],
    "spec.data.seqLen": [8, 128, 4, 4096],
    "spec.checkpoint.mountPath": ["/ckpt", "ckpt", "/dev/shm", "/etc/phalanx/x", "/a/../b"],
    "spec.checkpoint.volume": [{"persistentVolumeClaim": {"claimName": "c"}}, {"emptyDir": {}}, {}, {"hostPath": {"path": "/"}}],
    "spec.checkpoint.intervalSteps": [0, 5, -5],
    "spec.env": [[{"name": "A", "value": "1"}], [{"name": "A"}], [{"value": "1"}], [{"name": "PHALANX_X", "value": "1"}],
                 [{"name": "A", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]],
    "spec.tolerations": [[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}], [{"operator": "Exists"}],
                         [{"key": "gpu", "operator": "Maybe"}], [{"key": "k", "value": "v", "tolerationSeconds": 5}]],
    "spec.nodeSelector": [{"pool": "gpu"}, {"pool": ""}, {"pool": "a b"}],
    "spec.volumes": [[{"name": "d", "emptyDir": {}}], [{"name": "D", "emptyDir": {}}], [{"name": "d", "foo": {}}]],
    "spec.volumeMounts": [[{"name": "d", "mountPath": "/d"}], [{"name": "d", "mountPath": "d"}]],
    "spec.serviceAccountName": ["trainer", "Trainer", "a.b"],
    "spec.scheduling.backend": ["native", "kueue", "slurm"],
    "spec.scheduling.gangTimeoutSeconds": [0, 60, -1],
    "spec.scheduling.topology.required": ["block", "rack", "bad key!"],
    "spec.network.profile": ["default", "ib", "Bad"],
    "spec.network.hostNetwork": [False, True],
    "spec.failurePolicy.maxRestarts": [0, 3, -1],
    "spec.failurePolicy.hangTimeoutSeconds": [0, 60],
    "spec.elastic": [{"minNodes": 1, "maxNodes": 4}, {"minNodes": 3, "maxNodes": 4}, {"minNodes": 1}],
    "spec.activeDeadlineSeconds": [1, 0, 3600],
    "spec.command": [["python", "train.py"], [], "python train.py"],
    "spec.args": [["--lr", "1e-3"], [1, 2]],
    "spec.model": [None],
    "spec.unknownField": [1],
}


def set_path(obj: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    for key in parents:
        obj = obj.setdefault(key, {})
    if value is None:
        obj.pop(leaf, None)
    else:
        obj[leaf] = copy.deepcopy(value)


def hand_written() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for i, (base, edits) in enumerate(HAND):
        obj = copy.deepcopy(BASE if base == "base" else COMMAND)
        for path, value in edits.items():
            set_path(obj, path, value)
        out.append((f"hand-{i}", obj))
    return out


def generated(count: int = 300, seed: int = 11) -> list[tuple[str, dict[str, Any]]]:
    """Up to three random edits of a good job each (seeded: the same corpus every run)."""
    rng = random.Random(seed)
    paths = sorted(_VALUES)
    out = []
    for i in range(count):
        obj = copy.deepcopy(rng.choice([BASE, COMMAND]))
        for path in rng.sample(paths, rng.randint(1, 3)):
            set_path(obj, path, rng.choice(_VALUES[path]))
        out.append((f"gen-{i}", obj))
    return out


def examples() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "TrainingJob":
                out.append((path.name, doc))
    return out


def corpus() -> list[tuple[str, dict[str, Any]]]:
    return examples() + hand_written() + generated()
