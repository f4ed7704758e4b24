"""spec.roles and spec.successPolicy: the Role model's fields and rules, and the spec's rules
about roles, each refusal by its field."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from phalanx.api.roles import MAX_ROLE_NAME, RESERVED_ROLE_NAMES, ROLE_RULES, Role
from phalanx.api.rules import broken
from phalanx.api.types import TrainingJobSpec
from tests.unit.test_roles import problems


@pytest.mark.parametrize("roles, field, words", [
    ([{"name": "worker"}], "spec.roles[0].name", "reserved"),
    ([{"name": "node"}], "spec.roles[0].name", "reserved"),
    ([{"name": "ps"}, {"name": "ps"}], "spec.roles", "duplicate role name"),
    ([{"name": "Ps"}], "spec.roles[0].name", ""),
    ([{"name": "param-server"}], "spec.roles[0].name", ""),
    ([{"name": "averyverylongrole"}], "spec.roles[0].name", ""),
    ([{"name": "ps", "replicas": 0}], "spec.roles[0].replicas", ""),
])
def test_bad_roles_are_refused_by_field(roles, field, words):
    found = problems(roles=roles)
    assert any(p.startswith(field) and words in p for p in found), found


def test_roles_need_a_command_job():
    found = problems(command=None, model={"preset": "debug"})
    assert any(p.startswith("spec.roles:") and "spec.command" in p for p in found), found


def test_success_policy_names_existing_roles():
    assert problems(successPolicy={"roles": ["chief"]}) == []
    found = problems(successPolicy={"roles": ["evaluator"]})
    assert any(p.startswith("spec.successPolicy.roles") for p in found), found


def test_roles_with_host_network_are_refused():
    assert any(p.startswith("spec.roles") and "hostNetwork" in p for p in problems(network={"hostNetwork": True}))


@pytest.mark.parametrize(("name", "valid"), [
    ("ps", True),
    ("chief", True),
    ("eval2", True),
    ("a" * MAX_ROLE_NAME, True),
    ("a" * (MAX_ROLE_NAME + 1), False),  # "<job>-<role>-<index>" must stay a DNS label
    ("2ps", False),
    ("ps-1", False),  # '-' would make "<job>-<role>-<index>-<attempt>" ambiguous
    ("ps_1", False),
    ("", False),
    ("ps\n", False),
])
def test_role_name_format(name, valid):
    try:
        Role(name=name)
    except ValidationError:
        assert not valid
    else:
        assert valid


@pytest.mark.parametrize("name", RESERVED_ROLE_NAMES)
def test_reserved_role_names_break_the_roles_own_rule(name):
    found = list(broken(Role.checks, Role(name=name), "spec.roles[0]"))
    assert [(field, enforced) for field, _, enforced in found] == [("spec.roles[0].name", True)]
    assert list(broken(Role.checks, Role(name="ps"), "spec.roles[0]")) == []


def test_a_role_refuses_a_repeated_env_name():
    env = [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]
    with pytest.raises(ValidationError, match="duplicate env name 'A'"):
        Role.model_validate({"name": "ps", "env": env})


def test_a_role_defaults_to_one_replica_without_resources_or_command():
    role = Role(name="ps")
    assert (role.replicas, role.resources.gpus, role.command, role.args, role.env) == (1, 0, None, None, [])


def spec(**fields) -> TrainingJobSpec:
    return TrainingJobSpec.model_validate({"image": "img:1", "command": ["python", "train.py"], **fields})


@pytest.mark.parametrize(("fields", "broken_fields"), [
    ({}, []),
    ({"roles": [{"name": "ps"}]}, []),
    ({"network": {"hostNetwork": True}}, []),  # no roles: the host network is another rule's question
    ({"roles": [{"name": "ps"}], "network": {"hostNetwork": True}}, [".roles"]),
    ({"roles": [{"name": "ps"}], "command": None, "model": {"preset": "debug"}}, [".roles"]),
    ({"successPolicy": {"roles": ["worker"]}}, []),
    ({"successPolicy": {"roles": ["ps"]}}, [".successPolicy.roles"]),
    ({"roles": [{"name": "ps"}], "successPolicy": {"roles": ["ps", "worker"]}}, []),
    ({"roles": [{"name": "ps"}], "successPolicy": {"roles": ["chief"]}}, [".successPolicy.roles"]),
])
def test_role_rules_of_the_spec(fields, broken_fields):
    assert [field for field, _, _ in broken(ROLE_RULES, spec(**fields), "")] == broken_fields
