"""The tensorflow plugin (phalanx/frameworks/tensorflow.py): its rules (one worker per pod, the
roles as TF_CONFIG task types), the TF_CONFIG it renders per pod, and which pods decide that the
job succeeded (the chief, else the workers)."""

from __future__ import annotations

import json

import pytest

from phalanx import constants
from phalanx.api.config import NetworkProfile, OperatorConfig
from phalanx.api.crd import build_crd
from phalanx.api.rules import broken_rules
from phalanx.api.slots import Slot, worker
from phalanx.api.tensorflow import TENSORFLOW_ROLE_RULES, TENSORFLOW_RULES
from phalanx.api.types import Framework, TrainingJob, TrainingJobSpec
from phalanx.frameworks import PLUGINS, plugin_for
from phalanx.frameworks.tensorflow import tf_config, worker_address
from phalanx.render.job import render_children
from phalanx.render.pod import rendezvous_env
from phalanx.validate import validate_job

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


# -------------------------------------------------------------------------------------------------
# framework: tensorflow: TF_CONFIG rendered per pod (the cluster in node-rank
# order through the headless Service, this pod's task index = its node rank, the rendezvous port),
# the spec's rules (each refusal names its field; CEL and Python alike), `phalanx local`'s TF_CONFIG
# on 127.0.0.1, and nothing of it for other jobs.

def _r_spec(**over) -> dict:
    s = {"image": "x", "framework": "tensorflow", "command": ["python", "train.py"], "nodes": 3}
    for k, v in over.items():
        s[k] = {**s[k], **v} if isinstance(v, dict) and isinstance(s.get(k), dict) else v
    return {k: v for k, v in s.items() if v is not None}


def _r_job(name: str = "tfj", namespace: str = "ml", **over) -> TrainingJob:
    return TrainingJob.model_validate({"metadata": {"name": name, "namespace": namespace}, "spec": _r_spec(**over)})


def pod_tf_configs(children: list[dict]) -> dict[int, dict]:
    out = {}
    for child in children:
        if child["kind"] != "Pod":
            continue
        env = {e["name"]: e.get("value") for e in child["spec"]["containers"][0]["env"]}
        out[int(child["metadata"]["labels"][constants.LABEL_NODE_RANK])] = json.loads(env[constants.ENV_TF_CONFIG])
    return out


def test_every_pod_gets_the_cluster_in_rank_order_and_its_own_index():
    children = render_children(_r_job())
    configs = pod_tf_configs(children)
    workers = [f"tfj-node-{r}.tfj.ml.svc:{constants.DEFAULT_MASTER_PORT}" for r in range(3)]
    assert set(configs) == {0, 1, 2}
    for rank, cfg in configs.items():
        assert cfg == {"cluster": {"worker": workers}, "task": {"type": "worker", "index": rank}}


def test_addresses_are_the_pods_dns_names_through_the_headless_service():
    children = render_children(_r_job(nodes=2))
    service = next(c for c in children if c["kind"] == "Service")
    pods = sorted((c for c in children if c["kind"] == "Pod"), key=lambda p: p["metadata"]["labels"][constants.LABEL_NODE_RANK])
    workers = pod_tf_configs(children)[0]["cluster"]["worker"]
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    for pod, address in zip(pods, workers, strict=True):
        host, port = address.rsplit(":", 1)
        assert host == f"{pod['spec']['hostname']}.{pod['spec']['subdomain']}.{pod['metadata']['namespace']}.svc"
        assert pod["spec"]["subdomain"] == service["metadata"]["name"]
        rendezvous = next(p for p in pod["spec"]["containers"][0]["ports"] if p["name"] == constants.PORT_NAME_RENDEZVOUS)
        assert int(port) == rendezvous["containerPort"]
        assert int(port) in {p["port"] for p in service["spec"]["ports"]}
    # the torch rendezvous of the same pods names the same host for rank 0
    env = {e["name"]: e.get("value") for e in pods[0]["spec"]["containers"][0]["env"]}
    assert workers[0].startswith(env[constants.ENV_MASTER_ADDR] + ".ml.svc:")


def test_host_network_moves_the_port_with_the_rendezvous():
    config = OperatorConfig(network_profiles={"default": NetworkProfile(allow_host_network=True)})
    children = render_children(_r_job(nodes=2, network={"hostNetwork": True}), config)
    pod = next(c for c in children if c["kind"] == "Pod")
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    port = int(env[constants.ENV_MASTER_PORT])
    assert port != constants.DEFAULT_MASTER_PORT
    assert all(a.endswith(f":{port}") for a in json.loads(env[constants.ENV_TF_CONFIG])["cluster"]["worker"])


def test_tf_config_helpers():
    assert tf_config({"worker": ["a:1", "b:2"]}, 1) == {"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}}
    with pytest.raises(ValueError):
        tf_config({"worker": ["a:1"]}, 1)
    assert worker_address(_r_job(name="j", namespace="default"), 4, 29500) == "j-node-4.j.default.svc:29500"


@pytest.mark.parametrize("over", [{"framework": "none"}, {"framework": "deepspeed", "nodes": 2}, {"framework": None}])
def test_nothing_changes_for_other_command_jobs(over):
    j = _r_job(**over)
    names = {e["name"] for e in rendezvous_env(j, 0, 0, 29500)}
    assert constants.ENV_TF_CONFIG not in names
    assert all(constants.ENV_TF_CONFIG not in {e["name"] for e in c["spec"]["containers"][0]["env"]}
               for c in render_children(j) if c["kind"] == "Pod")
    if over.get("framework") != "deepspeed":  # a plain command job's script splits its world itself
        assert broken(_r_spec(**over, procsPerNode=4, parallelism={"tensor": 2, "zero": 3})) == {}


def test_built_in_jobs_get_no_tf_config():
    j = TrainingJob.model_validate({"metadata": {"name": "b"}, "spec": {"image": "x", "model": {"preset": "debug"}, "nodes": 2}})
    assert constants.ENV_TF_CONFIG not in {e["name"] for e in rendezvous_env(j, 1, 0, 29500)}


def test_tf_env_sits_with_the_rendezvous_env_and_the_users_env_after():
    j = _r_job(env=[{"name": "EPOCHS", "value": "3"}])
    pod = next(c for c in render_children(j) if c["kind"] == "Pod")
    names = [e["name"] for e in pod["spec"]["containers"][0]["env"]]
    assert names.count(constants.ENV_TF_CONFIG) == 1 and names.index(constants.ENV_TF_CONFIG) < names.index("EPOCHS")


# --- the rules ---------------------------------------------------------------------------------

def broken(s: dict) -> dict[str, str]:
    return {path: msg for path, msg, _ in broken_rules(TrainingJobSpec.model_validate(s), "spec")}


def test_valid_tensorflow_spec_breaks_no_rule():
    assert broken(_r_spec()) == {}
    assert broken(_r_spec(parallelism={"data": 3}, resources={"gpus": 8})) == {}  # every GPU of a pod: one worker


@pytest.mark.parametrize("over, field", [
    ({"command": None, "model": {"preset": "debug"}}, "spec.command"),
    ({"model": {"preset": "debug"}}, "spec.model"),
    ({"procsPerNode": 2}, "spec.procsPerNode"),
    ({"parallelism": {"data": 2}}, "spec.parallelism.data"),
    ({"parallelism": {"zero": 1}}, "spec.parallelism.zero"),
    ({"parallelism": {"replicate": 3, "zero": 0}}, "spec.parallelism.replicate"),
    ({"parallelism": {"cpuOffload": True}}, "spec.parallelism.cpuOffload"),
    ({"parallelism": {"tensor": 2}}, "spec.parallelism.tensor"),
    ({"parallelism": {"sequenceParallel": True}}, "spec.parallelism.sequenceParallel"),
    ({"parallelism": {"pipeline": 3}}, "spec.parallelism.pipeline"),
    ({"parallelism": {"pipelineSchedule": "GPipe"}}, "spec.parallelism.pipelineSchedule"),
    ({"parallelism": {"microbatches": 4}}, "spec.parallelism.microbatches"),
    ({"parallelism": {"virtualStages": 2}}, "spec.parallelism.virtualStages"),
    ({"elastic": {"minNodes": 2, "maxNodes": 3}}, "spec.elastic"),
    ({"env": [{"name": "TF_CONFIG", "value": "{}"}]}, "spec.env"),
])
def test_refusals_name_their_field(over, field):
    out = broken(_r_spec(**over))
    assert field in out, out
    assert out[field].startswith("framework tensorflow")
    # the message names the field it refuses (spec.<field>), as the API server's fieldPath does
    assert field in out[field], out[field]


def test_one_verdict_for_the_operator_and_phalanx_validate():
    _, problems = validate_job({"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "t"},
                                "spec": _r_spec(procsPerNode=2, parallelism={"tensor": 2})})
    fields = {p.field for p in problems}
    assert {"spec.procsPerNode", "spec.parallelism.tensor"} <= fields
    assert all(p.source == "api" for p in problems if p.field in ("spec.procsPerNode", "spec.parallelism.tensor"))


def test_every_rule_is_in_the_crd_with_its_field_path():
    crd_spec = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    in_crd = {(r["rule"], r.get("fieldPath")) for r in crd_spec["x-kubernetes-validations"]}
    for rule in TENSORFLOW_RULES:
        assert rule.cel.startswith("!has(self.framework) || self.framework != 'tensorflow' || ")
        assert (rule.cel, rule.field) in in_crd


# --- phalanx local: the same TF_CONFIG on 127.0.0.1 -------------------------------------------

def test_local_pod_env_points_tf_config_at_local_ports():
    from phalanx.local.env import LocalJob, pod_env
    from phalanx_common.net import free_ports

    j = _r_job(nodes=2)
    cfg = LocalJob(spec=j.spec, name=j.metadata.name, namespace=j.metadata.namespace)
    ports = free_ports(2)
    assert len(set(ports)) == 2
    workers = [f"127.0.0.1:{p}" for p in ports]
    envs = [pod_env(cfg, n, master_port=1, config_path="/tmp/x/config.json", checkpoint_dir="/tmp/x",
                    tf_cluster={"worker": workers}) for n in range(2)]
    for node, env in enumerate(envs):
        assert json.loads(env[constants.ENV_TF_CONFIG]) == tf_config({"worker": workers}, node)
