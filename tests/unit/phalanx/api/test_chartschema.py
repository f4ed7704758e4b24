"""The chart's values.schema.json: generated from the operator config's models, it takes the
chart's own values and refuses what the operator would."""

from __future__ import annotations

import copy
from pathlib import Path

import jsonschema
import pytest
import yaml

from phalanx.api.chartschema import values_schema

CHART = Path(__file__).resolve().parents[4] / "charts" / "phalanx"


def test_values_schema_is_generated():
    from phalanx.api.chartschema import values_schema_json

    assert (CHART / "values.schema.json").read_text() == values_schema_json()


VALUES = yaml.safe_load((CHART / "values.yaml").read_text())


def errors(values) -> list[str]:
    validator = jsonschema.Draft7Validator(values_schema())
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(values)]


def test_the_charts_own_values_are_valid():
    assert errors(VALUES) == []


@pytest.mark.parametrize(("path", "value", "ok"), [
    (["replicas"], 0, False),
    (["podCreateConcurrency"], 2000, False),
    (["livenessPort"], 70000, False),
    (["bogus"], 1, False),  # unknown keys are refused, as in the operator's models
    (["policy", "default", "maxNodes"], None, True),  # null: no limit
    (["policy", "default", "maxNodes"], 0, False),
    (["policy", "default", "allowedPriorityClasses"], None, True),  # null: any
    (["policy", "default", "allowedBackends"], ["slurm"], False),
    (["policy", "default", "alowSecrets"], True, False),  # a misspelt rule is no rule
    (["networkProfiles", "rdma"], {"fabric": "infiniband", "ipcLock": True}, True),
    (["networkProfiles", "rdma"], {"fabric": "myrinet"}, False),
    (["topology", "levels"], [{"name": "rack", "label": "example.com/rack"}], True),
    (["topology", "levels"], [{"name": "rack"}], False),  # label required
    (["defaultShmSize"], 1024, True),
])
def test_values(path, value, ok):
    values = copy.deepcopy(VALUES)
    node = values
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    assert (errors(values) == []) is ok, errors(values)


def test_kubernetes_extensions_are_not_in_helms_schema():
    text = str(values_schema())
    assert "x-kubernetes-" not in text and "x-phalanx-nullable" not in text and "'format'" not in text
