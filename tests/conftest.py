from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

# Operator/cluster fixtures (crd, operator, api, pool) for the integration suites.
pytest_plugins = ["tests.integration.harness"]

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def example_jobs() -> list[Path]:
    return [p for p in EXAMPLES if any(d and d.get("kind") == "TrainingJob" for d in yaml.safe_load_all(p.read_text()))]


MINIMAL = {
    "apiVersion": "phalanx.dev/v1alpha1",
    "kind": "TrainingJob",
    "metadata": {"name": "job", "namespace": "team", "uid": "uid-1", "generation": 1},
    "spec": {"image": "phalanx/runtime:test", "nodes": 2, "procsPerNode": 4, "model": {"preset": "debug"},
             "training": {"globalBatchSize": 8}},
}


@pytest.fixture
def job_obj() -> dict:
    return copy.deepcopy(MINIMAL)
