"""The deepspeed plugin (phalanx/frameworks/deepspeed.py): its rules refuse, each by its field,
what DeepSpeed cannot honour; it renders the DeepSpeed config into the ConfigMap and points every
pod at it; it observes nothing of its own."""

from __future__ import annotations

import json

import pytest

from phalanx import constants
from phalanx.api.deepspeed import DEEPSPEED_RULES
from phalanx.api.slots import worker
from phalanx.api.types import Framework, TrainingJob, TrainingJobSpec
from phalanx.frameworks import PLUGINS, plugin_for
from phalanx.render.job import render_children

PLUGIN = PLUGINS[Framework.DEEPSPEED]


def spec(**over) -> dict:
    return {"image": "x", "framework": "deepspeed", "command": ["torchrun", "train.py"], "nodes": 2,
            "procsPerNode": 2} | over


def job(**over) -> TrainingJob:
    return TrainingJob.model_validate({"metadata": {"name": "ds", "namespace": "ml", "uid": "u"}, "spec": spec(**over)})


def test_the_registry_gives_it_for_framework_deepspeed():
    assert plugin_for(job().spec) is PLUGIN and PLUGIN.rules == DEEPSPEED_RULES


# (spec fields besides spec(), the field refused)
REFUSED = [
    ({"command": None, "model": {"preset": "debug"}}, "spec.framework"),
    ({"parallelism": {"tensor": 2}}, "spec.parallelism.tensor"),
    ({"parallelism": {"sequenceParallel": True}}, "spec.parallelism.sequenceParallel"),
    ({"parallelism": {"replicate": 2, "zero": 2}}, "spec.parallelism.replicate"),
    ({"parallelism": {"pipeline": 3, "microbatches": 3}, "training": {"globalBatchSize": 12}}, "spec.parallelism.pipeline"),
    ({"parallelism": {"pipeline": 2, "microbatches": 2, "zero": 2}}, "spec.parallelism.zero"),
    ({"parallelism": {"pipeline": 2, "microbatches": 2, "pipelineSchedule": "GPipe"}}, "spec.parallelism.pipelineSchedule"),
    ({"parallelism": {"cpuOffload": True}}, "spec.parallelism.cpuOffload"),
    ({"training": {"gradCompression": "powersgd"}}, "spec.training.gradCompression"),
    ({"training": {"globalBatchSize": 6}}, "spec.training.globalBatchSize"),
    ({"elastic": {"minNodes": 1, "maxNodes": 2}}, "spec.elastic"),
]


@pytest.mark.parametrize("over,field", REFUSED, ids=[f for _, f in REFUSED])
def test_validate_names_the_field_and_the_rule(over, field):
    problems = PLUGIN.validate(TrainingJobSpec.model_validate(spec(**over)))
    assert [p.field for p in problems] == [field]
    assert problems[0].message.startswith("framework deepspeed") and problems[0].source == "api"


@pytest.mark.parametrize("over", [{}, {"parallelism": {"zero": 3, "cpuOffload": True}},
                                  {"parallelism": {"pipeline": 2, "microbatches": 2, "zero": 1}}])
def test_validate_passes_what_deepspeed_honours(over):
    assert PLUGIN.validate(TrainingJobSpec.model_validate(spec(**over))) == []


def test_its_rules_leave_other_frameworks_alone():
    other = TrainingJobSpec.model_validate(spec(framework="none", parallelism={"tensor": 2}, elastic={"minNodes": 1, "maxNodes": 2}))
    assert PLUGIN.validate(other) == []


def test_render_the_config_file_and_the_env_that_names_it():
    j = job(resources={"gpus": 2}, parallelism={"zero": 3, "cpuOffload": True}, training={"gradCompression": "bf16"})
    assert PLUGIN.job_env(j.spec) == [{"name": constants.ENV_DEEPSPEED_CONFIG, "value": "/etc/phalanx/deepspeed.json"}]
    files = PLUGIN.config_files(j.spec)
    assert list(files) == [constants.DEEPSPEED_CONFIG_FILE]
    assert json.loads(files[constants.DEEPSPEED_CONFIG_FILE]) == {
        "bf16": {"enabled": True}, "communication_data_type": "bf16", "gradient_accumulation_steps": 2,
        "gradient_clipping": 1.0, "steps_per_print": 1, "train_batch_size": 8, "train_micro_batch_size_per_gpu": 1,
        "zero_allow_untested_optimizer": True, "zero_force_ds_cpu_optimizer": False,
        "zero_optimization": {"offload_optimizer": {"device": "cpu", "pin_memory": True},
                              "offload_param": {"device": "cpu", "pin_memory": True}, "stage": 3}}
    assert PLUGIN.slot_env(j, worker(0), 29500) == []
    assert PLUGIN.container_ports(j) == [] and PLUGIN.service_ports(j) == []


def test_the_job_renders_what_the_plugin_adds():
    j = job()
    children = render_children(j)
    config_map = next(c for c in children if c["kind"] == "ConfigMap")
    assert list(config_map["data"]) == [constants.RUNTIME_CONFIG_KEY, *PLUGIN.config_files(j.spec)]
    assert config_map["data"][constants.DEEPSPEED_CONFIG_FILE] == PLUGIN.config_files(j.spec)[constants.DEEPSPEED_CONFIG_FILE]
    for pod in (c for c in children if c["kind"] == "Pod"):
        env = [e["name"] for e in pod["spec"]["containers"][0]["env"]]
        # after the job's own env (the node name is its last), before the scratch env
        assert env[env.index(constants.ENV_NODE_NAME) + 1] == constants.ENV_DEEPSPEED_CONFIG


def test_it_observes_the_default_success_roles():
    j = job(roles=[{"name": "ps"}])
    assert PLUGIN.success_roles(j.spec) == ("worker", "ps")
