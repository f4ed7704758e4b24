"""Shared fixtures for the backend tests (vendored schemas, a job); no tests of its own."""

import json
from pathlib import Path

import jsonschema

from phalanx.api.types import TrainingJob

SCHEMAS = Path(__file__).parent / "schemas"


def schema(name):
    return json.loads((SCHEMAS / name).read_text())


def validate(obj, name):
    jsonschema.validate(obj, schema(name))


def job(**spec):
    base = {"image": "x", "model": {"preset": "debug"}, "nodes": 4, "procsPerNode": 8,
            "resources": {"gpus": 8, "cpu": "48", "memory": "512Gi", "extra": {"rdma/ib": 1}}}
    base.update(spec)
    return TrainingJob.model_validate({"metadata": {"name": "llm", "namespace": "team", "uid": "u-1"}, "spec": base})


def pod():
    return {"metadata": {"name": "llm-0", "labels": {"a": "b"}},
            "spec": {"schedulingGates": [{"name": "phalanx.dev/gang"}], "containers": [{"name": "trainer"}]}}
