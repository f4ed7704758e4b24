"""framework tensorflow: its spec rules, its role rules (TF_CONFIG task types) and which pods
decide that the job succeeded."""

from __future__ import annotations

import pytest

from phalanx.api.rules import broken
from phalanx.api.tensorflow import TENSORFLOW_ROLE_RULES, TENSORFLOW_RULES, deciding_roles
from phalanx.api.types import TrainingJobSpec
from tests.unit.test_roles import job, problems


def test_tensorflow_role_rules():
    tf = {"framework": "tensorflow"}
    assert problems(**tf) == []
    assert any("chief, ps, evaluator" in p for p in problems(roles=[{"name": "server"}], **tf))
    assert any("replicas 1" in p for p in problems(roles=[{"name": "chief", "replicas": 2}], **tf))
    assert any("needs a chief" in p for p in problems(roles=[{"name": "ps"}], **tf))
    assert job(**tf).spec.success_roles == ("chief",)
    assert job(roles=[{"name": "evaluator"}], **tf).spec.success_roles == ("worker",)
    env = [{"name": "TF_CONFIG", "value": "{}"}]
    assert any(p.startswith("spec.roles") and "TF_CONFIG" in p for p in problems(roles=[{"name": "chief", "env": env}], **tf))


def spec(**fields) -> TrainingJobSpec:
    return TrainingJobSpec.model_validate({"image": "img:1", "command": ["python", "train.py"], **fields})


@pytest.mark.parametrize(("fields", "deciding"), [
    ({}, None),  # another framework: not tensorflow's to say
    ({"framework": "deepspeed"}, None),
    ({"framework": "tensorflow"}, ("worker",)),
    ({"framework": "tensorflow", "roles": [{"name": "chief"}, {"name": "ps"}]}, ("chief",)),
    ({"framework": "tensorflow", "roles": [{"name": "evaluator"}]}, ("worker",)),  # an evaluator never decides
])
def test_the_chief_decides_else_the_workers(fields, deciding):
    assert deciding_roles(spec(**fields)) == deciding


@pytest.mark.parametrize(("fields", "broken_fields"), [
    ({}, []),
    ({"procsPerNode": 2}, [".procsPerNode"]),
    ({"nodes": 2, "parallelism": {"data": 2}}, []),
    ({"nodes": 2, "parallelism": {"data": 1}}, [".parallelism.data"]),
    ({"parallelism": {"tensor": 2}}, [".parallelism.tensor"]),
    ({"parallelism": {"zero": 1}}, [".parallelism.zero"]),
    ({"elastic": {"minNodes": 1, "maxNodes": 2}}, [".elastic"]),
    ({"env": [{"name": "TF_CONFIG", "value": "{}"}]}, [".env"]),
    ({"command": None}, [".command"]),
])
def test_tensorflow_spec_rules_name_their_field(fields, broken_fields):
    tensorflow = spec(framework="tensorflow", **fields)
    assert [field for field, _, _ in broken(TENSORFLOW_RULES, tensorflow, "")] == broken_fields
    # the same spec under no framework breaks none of them
    assert list(broken(TENSORFLOW_RULES, spec(**fields), "")) == []


@pytest.mark.parametrize(("roles", "broken_count"), [
    ([{"name": "chief"}, {"name": "ps", "replicas": 4}, {"name": "evaluator"}], 0),
    ([{"name": "chief", "replicas": 2}], 1),
    ([{"name": "evaluator", "replicas": 2}], 1),
    ([{"name": "ps"}], 1),  # a ps needs a chief (the coordinator)
    ([{"name": "server"}], 1),
])
def test_tensorflow_role_rules_per_spec(roles, broken_count):
    assert len(list(broken(TENSORFLOW_ROLE_RULES, spec(framework="tensorflow", roles=roles), ""))) == broken_count
    assert list(broken(TENSORFLOW_ROLE_RULES, spec(roles=roles), "")) == []
