"""The plugin of ``framework: none`` (phalanx/frameworks/none.py): the built-in runtime or a
command that splits its world itself. It has no rules and renders nothing of its own; every role
decides that the job succeeded. And the registry: one plugin per Framework member."""

from __future__ import annotations

import pytest

from phalanx import constants
from phalanx.api.slots import Slot, worker
from phalanx.api.types import Framework, TrainingJob, TrainingJobSpec
from phalanx.frameworks import PLUGINS, FrameworkPlugin, plugin_for
from phalanx.render.job import render_children

PLUGIN = PLUGINS[Framework.NONE]


def job(**over) -> TrainingJob:
    spec = {"image": "x", "command": ["torchrun", "train.py"], "nodes": 2} | over
    return TrainingJob.model_validate({"metadata": {"name": "j", "namespace": "ml", "uid": "u"}, "spec": spec})


def test_every_framework_has_its_plugin():
    assert set(PLUGINS) == set(Framework)
    assert all(isinstance(p, FrameworkPlugin) and p.framework == f for f, p in PLUGINS.items())
    for framework in Framework:
        assert plugin_for(TrainingJobSpec.model_construct(framework=framework.value)) is PLUGINS[framework]


def test_the_specs_checks_hold_every_plugins_rules():
    checks = TrainingJobSpec.checks
    for plugin in PLUGINS.values():
        assert all(rule in checks for rule in plugin.rules), plugin.framework


@pytest.mark.parametrize("over", [
    {},
    {"command": None, "model": {"preset": "debug"}, "parallelism": {"tensor": 2}, "procsPerNode": 2},
    {"roles": [{"name": "ps", "replicas": 2}], "procsPerNode": 4, "env": [{"name": constants.ENV_TF_CONFIG, "value": "{}"}]},
])
def test_validate_has_no_rules_of_its_own(over):
    assert PLUGIN.rules == () and PLUGIN.validate(job(**over).spec) == []


def test_render_adds_nothing():
    j = job(roles=[{"name": "ps"}])
    assert PLUGIN.job_env(j.spec) == [] and PLUGIN.config_files(j.spec) == {}
    assert PLUGIN.slot_env(j, worker(0), 29500) == [] and PLUGIN.slot_env(j, Slot("ps", 0), 29500) == []
    assert PLUGIN.container_ports(j) == [] and PLUGIN.service_ports(j) == []
    children = render_children(j)
    config_map = next(c for c in children if c["kind"] == "ConfigMap")
    assert list(config_map["data"]) == [constants.RUNTIME_CONFIG_KEY]
    framework_env = (constants.ENV_DEEPSPEED_CONFIG, constants.ENV_TF_CONFIG)
    for pod in (c for c in children if c["kind"] == "Pod"):
        names = [e["name"] for e in pod["spec"]["containers"][0]["env"]]
        assert not [n for n in names if n in framework_env or n.startswith("HOROVOD_")]
        assert [p["name"] for p in pod["spec"]["containers"][0]["ports"]] == ["rendezvous", "progress", "metrics"]


@pytest.mark.parametrize("over,deciding", [
    ({}, ("worker",)),
    ({"roles": [{"name": "ps"}, {"name": "chief"}]}, ("worker", "ps", "chief")),
    ({"roles": [{"name": "ps"}], "successPolicy": {"roles": ["worker"]}}, ("worker",)),
])
def test_it_observes_every_role_unless_the_success_policy_names_some(over, deciding):
    assert PLUGIN.success_roles(job(**over).spec) == deciding
