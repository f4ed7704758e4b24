"""The tensorflow plugin (phalanx/frameworks/tensorflow.py): its rules (one worker per pod, the
roles as TF_CONFIG task types), the TF_CONFIG it renders per pod, and which pods decide that the
job succeeded (the chief, else the workers)."""

from __future__ import annotations

import json

import pytest

from phalanx import constants
from phalanx.api.slots import Slot, worker
from phalanx.api.tensorflow import TENSORFLOW_ROLE_RULES, TENSORFLOW_RULES
from phalanx.api.types import Framework, TrainingJob, TrainingJobSpec
from phalanx.frameworks import PLUGINS, plugin_for
from phalanx.render.job import render_children

PLUGIN = PLUGINS[Framework.TENSORFLOW]
ROLES = [{"name": "chief"}, {"name": "ps", "replicas": 2}]


def spec(**over) -> dict:
    return {"image": "x", "framework": "tensorflow", "command": ["python", "train.py"], "nodes": 2} | over


def job(**over) -> TrainingJob:
    return TrainingJob.model_validate({"metadata": {"name": "tf", "namespace": "ml", "uid": "u"}, "spec": spec(**over)})


def test_the_registry_gives_it_for_framework_tensorflow():
    assert plugin_for(job().spec) is PLUGIN and PLUGIN.rules == TENSORFLOW_RULES + TENSORFLOW_ROLE_RULES


# (spec fields besides spec(), the fields refused, in the rules' order)
REFUSED = [
    ({"command": None, "model": {"preset": "debug"}}, ["spec.command", "spec.model"]),
    ({"procsPerNode": 2}, ["spec.procsPerNode"]),
    ({"parallelism": {"data": 1}}, ["spec.parallelism.data"]),
    ({"parallelism": {"zero": 1}}, ["spec.parallelism.zero"]),
    ({"parallelism": {"pipeline": 2}}, ["spec.parallelism.pipeline"]),
    ({"elastic": {"minNodes": 1, "maxNodes": 2}}, ["spec.elastic"]),
    ({"env": [{"name": constants.ENV_TF_CONFIG, "value": "{}"}]}, ["spec.env"]),
    ({"roles": [{"name": "driver"}]}, ["spec.roles"]),
    ({"roles": [{"name": "chief", "replicas": 2}]}, ["spec.roles"]),
    ({"roles": [{"name": "chief", "env": [{"name": constants.ENV_TF_CONFIG, "value": "{}"}]}]}, ["spec.roles"]),
    ({"roles": [{"name": "ps"}]}, ["spec.roles"]),
]


@pytest.mark.parametrize("over,fields", REFUSED, ids=[str(list(o)) + str(i) for i, (o, _) in enumerate(REFUSED)])
def test_validate_names_the_field_and_the_rule(over, fields):
    problems = PLUGIN.validate(TrainingJobSpec.model_validate(spec(**over)))
    assert [p.field for p in problems] == fields
    assert all(p.message.startswith("framework tensorflow") for p in problems)


@pytest.mark.parametrize("over", [{}, {"roles": ROLES}, {"roles": [*ROLES, {"name": "evaluator"}]},
                                  {"parallelism": {"data": 2}}])
def test_validate_passes_one_worker_per_pod(over):
    assert PLUGIN.validate(TrainingJobSpec.model_validate(spec(**over))) == []


def test_its_rules_leave_other_frameworks_alone():
    other = spec(framework="none", procsPerNode=2, roles=[{"name": "driver", "replicas": 2}])
    assert PLUGIN.validate(TrainingJobSpec.model_validate(other)) == []


def test_render_tf_config_per_pod():
    j = job(roles=ROLES)
    cluster = {"worker": ["tf-node-0.tf.ml.svc:29500", "tf-node-1.tf.ml.svc:29500"],
               "chief": ["tf-chief-0.tf.ml.svc:29500"],
               "ps": ["tf-ps-0.tf.ml.svc:29500", "tf-ps-1.tf.ml.svc:29500"]}
    for slot, task in [(worker(1), {"type": "worker", "index": 1}), (Slot("chief", 0), {"type": "chief", "index": 0}),
                       (Slot("ps", 1), {"type": "ps", "index": 1})]:
        (env,) = PLUGIN.slot_env(j, slot, 29500)
        assert env["name"] == constants.ENV_TF_CONFIG
        assert env["value"] == json.dumps({"cluster": cluster, "task": task}, separators=(",", ":"))
    assert PLUGIN.job_env(j.spec) == [] and PLUGIN.config_files(j.spec) == {}
    assert PLUGIN.container_ports(j) == [] and PLUGIN.service_ports(j) == []


def test_the_job_renders_what_the_plugin_adds():
    j = job()
    for pod in (c for c in render_children(j) if c["kind"] == "Pod"):
        rank = int(pod["metadata"]["labels"][constants.LABEL_NODE_RANK])
        env = pod["spec"]["containers"][0]["env"]
        assert [e for e in env if e["name"] == constants.ENV_TF_CONFIG] == PLUGIN.slot_env(j, worker(rank), 29500)


@pytest.mark.parametrize("roles,deciding", [
    ([], ("worker",)),
    (ROLES, ("chief",)),
    ([{"name": "evaluator"}], ("worker",)),  # an evaluator never decides
])
def test_it_observes_the_chief_else_the_workers(roles, deciding):
    assert PLUGIN.success_roles(job(roles=roles).spec) == deciding
