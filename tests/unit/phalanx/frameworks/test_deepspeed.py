"""The deepspeed plugin (phalanx/frameworks/deepspeed.py): its rules refuse, each by its field,
what DeepSpeed cannot honour; it renders the DeepSpeed config into the ConfigMap and points every
pod at it; it observes nothing of its own."""

from __future__ import annotations

import json

import pytest

from phalanx import constants
from phalanx.api.deepspeed import DEEPSPEED_RULES
from phalanx.api.rules import broken_rules
from phalanx.api.slots import worker
from phalanx.api.types import Framework, TrainingJob, TrainingJobSpec
from phalanx.frameworks import PLUGINS, plugin_for
from phalanx.frameworks.deepspeed import deepspeed_config
from phalanx.render.configmap import build_config_map
from phalanx.render.job import render_children
from phalanx.render.pod import rendezvous_env

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


# -------------------------------------------------------------------------------------------------
# framework: deepspeed: the spec's rules (each refusal names its field) and the
# rendered DeepSpeed config, field by field; the ConfigMap key and the pod's env.

def _r_spec(**over) -> dict:
    s = {"image": "x", "framework": "deepspeed", "command": ["torchrun"], "nodes": 2, "procsPerNode": 2,
         "parallelism": {"zero": 2}, "training": {"globalBatchSize": 16, "microBatchSize": 2}}
    for k, v in over.items():
        s[k] = {**s[k], **v} if isinstance(v, dict) and isinstance(s.get(k), dict) else v
    return s


def broken(s: dict) -> dict[str, str]:
    return {path: msg for path, msg, _ in broken_rules(TrainingJobSpec.model_validate(s), "spec")}


def test_default_framework_is_none_and_renders_nothing():
    job = TrainingJob.model_validate({"metadata": {"name": "j"}, "spec": {"image": "x", "command": ["sh"]}})
    assert job.spec.framework == "none"
    assert set(build_config_map(job)["data"]) == {constants.RUNTIME_CONFIG_KEY}
    assert constants.ENV_DEEPSPEED_CONFIG not in {e["name"] for e in rendezvous_env(job, 0, 0, 29500)}


def test_valid_deepspeed_spec_breaks_no_rule():
    assert broken(_r_spec()) == {}


@pytest.mark.parametrize("over, field", [
    ({"command": None, "model": {"preset": "debug"}}, "spec.framework"),
    ({"model": {"preset": "debug"}}, "spec.framework"),
    ({"parallelism": {"tensor": 2}}, "spec.parallelism.tensor"),
    ({"parallelism": {"sequenceParallel": True}}, "spec.parallelism.sequenceParallel"),
    ({"parallelism": {"replicate": 2}}, "spec.parallelism.replicate"),
    ({"parallelism": {"pipeline": 3, "zero": 0}}, "spec.parallelism.pipeline"),
    ({"parallelism": {"data": 3}}, "spec.parallelism.data"),
    ({"parallelism": {"pipeline": 2, "zero": 2, "microbatches": 2}}, "spec.parallelism.zero"),
    ({"parallelism": {"pipeline": 2, "zero": 1, "pipelineSchedule": "GPipe", "microbatches": 2}},
     "spec.parallelism.pipelineSchedule"),
    ({"parallelism": {"zero": 0, "cpuOffload": True}}, "spec.parallelism.cpuOffload"),
    ({"training": {"gradCompression": "powersgd"}}, "spec.training.gradCompression"),
    ({"training": {"globalBatchSize": 12}}, "spec.training.globalBatchSize"),
    ({"elastic": {"minNodes": 1, "maxNodes": 2}}, "spec.elastic"),
])
def test_refusals_name_their_field(over, field):
    out = broken(_r_spec(**over))
    assert field in out, out
    assert "deepspeed" in out[field].lower() or field == "spec.framework"


def test_tensor_refusal_names_spec_parallelism_tensor():
    assert "spec.parallelism.tensor" in broken(_r_spec(parallelism={"tensor": 2}))["spec.parallelism.tensor"]


def test_rules_do_not_touch_plain_command_jobs():
    assert broken(_r_spec(framework="none", parallelism={"tensor": 2}, training={"globalBatchSize": 3})) == {}


def ds(**over) -> dict:
    return deepspeed_config(TrainingJobSpec.model_validate(_r_spec(**over)))


def test_batch_fields():
    cfg = ds()  # 4 ranks, global 16, micro 2 → accumulation 2
    assert (cfg["train_batch_size"], cfg["train_micro_batch_size_per_gpu"], cfg["gradient_accumulation_steps"]) == (16, 2, 2)
    assert 16 == cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"] * 4
    cfg = ds(training={"globalBatchSize": 8, "microBatchSize": 2})
    assert cfg["gradient_accumulation_steps"] == 1


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_zero_stage(zero):
    cfg = ds(parallelism={"zero": zero})
    assert cfg["zero_optimization"] == {"stage": zero}
    assert "zero_force_ds_cpu_optimizer" not in cfg


def test_cpu_offload():
    z2 = ds(parallelism={"zero": 2, "cpuOffload": True}, resources={"gpus": 2})
    assert z2["zero_optimization"] == {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True}}
    assert z2["zero_force_ds_cpu_optimizer"] is False
    z3 = ds(parallelism={"zero": 3, "cpuOffload": True})
    assert z3["zero_optimization"]["offload_param"] == {"device": "cpu", "pin_memory": False}


def test_precision_bf16_on_gpus_only():
    assert ds(resources={"gpus": 2})["bf16"] == {"enabled": True}
    assert ds()["bf16"] == {"enabled": False}  # no GPUs: fp32, as the built-in runtime
    assert ds(resources={"gpus": 2}, training={"precision": "fp32"})["bf16"] == {"enabled": False}
    assert "fp16" not in ds()


def test_gradient_clipping_and_compression():
    assert ds()["gradient_clipping"] == 1.0
    assert "gradient_clipping" not in ds(training={"gradClip": 0})
    assert ds(training={"gradClip": 0.5})["gradient_clipping"] == 0.5
    assert "communication_data_type" not in ds()
    assert ds(training={"gradCompression": "bf16"})["communication_data_type"] == "bf16"


def test_pipeline_stages_and_microbatches():
    cfg = ds(parallelism={"zero": 1, "pipeline": 2, "microbatches": 4})  # data 2, global 16
    assert cfg["pipeline"] == {"stages": 2}
    assert (cfg["train_micro_batch_size_per_gpu"], cfg["gradient_accumulation_steps"]) == (2, 4)
    assert "pipeline" not in ds()


def test_config_map_and_pod_env():
    job = TrainingJob.model_validate({"metadata": {"name": "j"}, "spec": _r_spec(parallelism={"zero": 3})})
    data = build_config_map(job)["data"]
    assert json.loads(data[constants.DEEPSPEED_CONFIG_FILE]) == deepspeed_config(job.spec)
    env = {e["name"]: e.get("value") for e in rendezvous_env(job, 1, 0, 29500)}
    assert env[constants.ENV_DEEPSPEED_CONFIG] == "/etc/phalanx/deepspeed.json"
    assert env[constants.ENV_DEEPSPEED_CONFIG].startswith(constants.RUNTIME_CONFIG_DIR + "/")
