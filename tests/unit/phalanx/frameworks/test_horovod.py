"""The horovod plugin (phalanx/frameworks/horovod.py): its rules (data parallel, every pod a
worker, a fixed rendezvous port), the HOROVOD_* env it renders per pod and the rendezvous port its
pods declare and the Service publishes."""

from __future__ import annotations

import pytest

from phalanx import constants
from phalanx.api.horovod import HOROVOD_RULES
from phalanx.api.slots import worker
from phalanx.api.types import Framework, TrainingJob, TrainingJobSpec
from phalanx.frameworks import PLUGINS, plugin_for
from phalanx.render.job import render_children

PLUGIN = PLUGINS[Framework.HOROVOD]
LAUNCH = ["python", "-m", "phalanx_runtime.horovod_launch", "--", "python", "train.py"]


def spec(**over) -> dict:
    return {"image": "x", "framework": "horovod", "command": LAUNCH, "nodes": 2, "procsPerNode": 2} | over


def job(**over) -> TrainingJob:
    return TrainingJob.model_validate({"metadata": {"name": "hvd", "namespace": "ml", "uid": "u"}, "spec": spec(**over)})


def test_the_registry_gives_it_for_framework_horovod():
    assert plugin_for(job().spec) is PLUGIN and PLUGIN.rules == HOROVOD_RULES


# (spec fields besides spec(), the fields refused)
REFUSED = [
    ({"command": None, "model": {"preset": "debug"}}, ["spec.command", "spec.model"]),
    ({"parallelism": {"data": 2}}, ["spec.parallelism.data"]),
    ({"parallelism": {"zero": 2}}, ["spec.parallelism.zero"]),
    ({"parallelism": {"tensor": 2}}, ["spec.parallelism.tensor"]),
    ({"elastic": {"minNodes": 1, "maxNodes": 2}}, ["spec.elastic"]),
    ({"roles": [{"name": "ps"}]}, ["spec.roles"]),
    ({"network": {"hostNetwork": True}}, ["spec.network.hostNetwork"]),
    ({"env": [{"name": constants.ENV_HOROVOD_RANK, "value": "0"}]}, ["spec.env"]),
]


@pytest.mark.parametrize("over,fields", REFUSED, ids=[f"{i}-{fields[0]}" for i, (_, fields) in enumerate(REFUSED)])
def test_validate_names_the_field_and_the_rule(over, fields):
    problems = PLUGIN.validate(TrainingJobSpec.model_validate(spec(**over)))
    assert [p.field for p in problems] == fields
    assert all(p.message.startswith("framework horovod") for p in problems)


@pytest.mark.parametrize("over", [{}, {"parallelism": {"data": 4}}, {"procsPerNode": 1}])
def test_validate_passes_data_parallel_jobs(over):
    assert PLUGIN.validate(TrainingJobSpec.model_validate(spec(**over))) == []


def test_its_rules_leave_other_frameworks_alone():
    other = spec(framework="none", roles=[{"name": "ps"}], elastic={"minNodes": 1, "maxNodes": 2})
    assert PLUGIN.validate(TrainingJobSpec.model_validate(other)) == []


def test_render_the_rendezvous_env_and_port():
    j = job()
    assert PLUGIN.slot_env(j, worker(1), 29500) == [{"name": k, "value": v} for k, v in [
        ("HOROVOD_GLOO_RENDEZVOUS_ADDR", "hvd-node-0.hvd"), ("HOROVOD_GLOO_RENDEZVOUS_PORT", "29502"),
        ("HOROVOD_CONTROLLER", "gloo"), ("HOROVOD_CPU_OPERATIONS", "gloo"), ("HOROVOD_GLOO_TIMEOUT_SECONDS", "600"),
        ("HOROVOD_HOSTNAME", "hvd-node-1"), ("HOROVOD_SIZE", "4"), ("HOROVOD_LOCAL_SIZE", "2"),
        ("HOROVOD_CROSS_RANK", "1"), ("HOROVOD_CROSS_SIZE", "2")]]
    assert PLUGIN.container_ports(j) == [{"name": "horovod", "containerPort": 29502, "protocol": "TCP"}]
    assert PLUGIN.service_ports(j) == [{"name": "horovod", "port": 29502, "targetPort": 29502, "protocol": "TCP"}]
    assert PLUGIN.job_env(j.spec) == [] and PLUGIN.config_files(j.spec) == {}


def test_the_job_renders_what_the_plugin_adds():
    j = job()
    children = render_children(j)
    service = next(c for c in children if c["kind"] == "Service")
    assert service["spec"]["ports"][-1:] == PLUGIN.service_ports(j)
    for pod in (c for c in children if c["kind"] == "Pod"):
        container = pod["spec"]["containers"][0]
        rank = int(pod["metadata"]["labels"][constants.LABEL_NODE_RANK])
        assert container["ports"][-1:] == PLUGIN.container_ports(j)
        assert [e for e in container["env"] if e["name"].startswith("HOROVOD_")] == PLUGIN.slot_env(j, worker(rank), 29500)


def test_it_observes_the_default_success_roles():
    assert PLUGIN.success_roles(job().spec) == ("worker",)
