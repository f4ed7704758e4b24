"""framework: horovod: the HOROVOD_* env rendered per pod (field by field), the
rendezvous server's port (container, headless Service, NetworkPolicy), what the launcher
(phalanx_runtime.horovod_launch) reads back from it, and the spec's rules (each refusal names its
field; CEL and Python alike, both ways), and nothing of it for other jobs."""

from __future__ import annotations

import pytest

from phalanx import constants
from phalanx.api.config import NetworkPolicyConfig, NetworkProfile, OperatorConfig
from phalanx.api.crd import build_crd
from phalanx.api.horovod import HOROVOD_RULES
from phalanx.api.rules import broken_rules
from phalanx.api.slots import Slot, worker
from phalanx.api.types import TrainingJob, TrainingJobSpec
from phalanx.frameworks.horovod import horovod_env
from phalanx.render.job import render_children
from phalanx.render.networkpolicy import build_network_policy
from phalanx.render.pod import rendezvous_env
from phalanx.validate import validate_job
from phalanx_runtime.horovod_launch import HorovodPod, LaunchError

LAUNCH = ["python", "-m", "phalanx_runtime.horovod_launch", "--", "python", "train.py"]


def spec(**over) -> dict:
    s = {"image": "x", "framework": "horovod", "command": LAUNCH, "nodes": 2}
    for k, v in over.items():
        s[k] = {**s[k], **v} if isinstance(v, dict) and isinstance(s.get(k), dict) else v
    return {k: v for k, v in s.items() if v is not None}


def job(name: str = "hvd", namespace: str = "ml", **over) -> TrainingJob:
    return TrainingJob.model_validate({"metadata": {"name": name, "namespace": namespace}, "spec": spec(**over)})


def pods(j: TrainingJob, config: OperatorConfig | None = None) -> list[dict]:
    out = [c for c in render_children(j, config) if c["kind"] == "Pod"]
    return sorted(out, key=lambda p: int(p["metadata"]["labels"][constants.LABEL_NODE_RANK]))


def env_of(pod: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}


def hvd_env(pod: dict) -> dict[str, str]:
    return {k: v for k, v in env_of(pod).items() if k.startswith("HOROVOD_")}


# --- the env, pod by pod -----------------------------------------------------------------------

def test_one_process_per_pod_gets_every_variable_with_its_rank():
    for rank, pod in enumerate(pods(job(nodes=3))):
        assert hvd_env(pod) == {
            "HOROVOD_GLOO_RENDEZVOUS_ADDR": "hvd-node-0.hvd",
            "HOROVOD_GLOO_RENDEZVOUS_PORT": "29502",
            "HOROVOD_CONTROLLER": "gloo",
            "HOROVOD_CPU_OPERATIONS": "gloo",
            "HOROVOD_GLOO_TIMEOUT_SECONDS": "600",
            "HOROVOD_HOSTNAME": f"hvd-node-{rank}",
            "HOROVOD_SIZE": "3",
            "HOROVOD_LOCAL_SIZE": "1",
            "HOROVOD_CROSS_RANK": str(rank),
            "HOROVOD_CROSS_SIZE": "3",
            "HOROVOD_RANK": str(rank),
            "HOROVOD_LOCAL_RANK": "0",
        }


def test_several_processes_per_pod_leave_rank_and_local_rank_to_the_launcher():
    for rank, pod in enumerate(pods(job(nodes=2, procsPerNode=4))):
        env = hvd_env(pod)
        assert constants.ENV_HOROVOD_RANK not in env and constants.ENV_HOROVOD_LOCAL_RANK not in env
        assert (env["HOROVOD_SIZE"], env["HOROVOD_LOCAL_SIZE"]) == ("8", "4")
        assert (env["HOROVOD_CROSS_RANK"], env["HOROVOD_CROSS_SIZE"]) == (str(rank), "2")
        assert env["HOROVOD_HOSTNAME"] == f"hvd-node-{rank}"


def test_server_address_is_worker_0_through_the_headless_service_and_hostname_the_pods():
    ps = pods(job(nodes=2))
    for pod in ps:
        env = env_of(pod)
        assert env[constants.ENV_HOROVOD_RENDEZVOUS_ADDR] == env[constants.ENV_MASTER_ADDR] == f"{ps[0]['spec']['hostname']}.hvd"
        assert env[constants.ENV_HOROVOD_HOSTNAME] == pod["spec"]["hostname"]
        assert pod["spec"]["subdomain"] == "hvd"


def test_the_horovod_port_is_declared_published_and_apart_from_the_torch_rendezvous():
    children = render_children(job())
    service = next(c for c in children if c["kind"] == "Service")
    assert {"name": "horovod", "port": 29502, "targetPort": 29502, "protocol": "TCP"} in service["spec"]["ports"]
    for pod in (c for c in children if c["kind"] == "Pod"):
        ports = {p["name"]: p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]}
        assert ports[constants.PORT_NAME_HOROVOD] == constants.HOROVOD_RENDEZVOUS_PORT == 29502
        assert len(set(ports.values())) == len(ports)  # distinct from rendezvous, progress, metrics
        assert env_of(pod)[constants.ENV_HOROVOD_RENDEZVOUS_PORT] == str(ports[constants.PORT_NAME_HOROVOD])


def test_the_network_policy_admits_the_gang_on_every_port():
    """The server's port and gloo's ephemeral pair ports: the gang's own rule names no port."""
    policy = build_network_policy(job(), NetworkPolicyConfig())
    gang = [r for r in policy["spec"]["ingress"] if r["from"] == [{"podSelector": {"matchLabels": {constants.LABEL_JOB_NAME: "hvd"}}}]]
    assert gang and all("ports" not in r for r in gang)


@pytest.mark.parametrize("over", [{"framework": "none"}, {"framework": "tensorflow", "procsPerNode": 1},
                                  {"framework": "deepspeed"}, {"framework": None}])
def test_nothing_of_it_for_other_command_jobs(over):
    j = job(**over)
    children = render_children(j)
    service = next(c for c in children if c["kind"] == "Service")
    assert all(p["name"] != "horovod" for p in service["spec"]["ports"])
    for pod in (c for c in children if c["kind"] == "Pod"):
        assert not hvd_env(pod)
        assert all(p["name"] != "horovod" for p in pod["spec"]["containers"][0]["ports"])


def test_built_in_jobs_and_role_pods_get_no_horovod_env():
    b = TrainingJob.model_validate({"metadata": {"name": "b"}, "spec": {"image": "x", "model": {"preset": "debug"}, "nodes": 2}})
    assert not [e for e in rendezvous_env(b, 1, 0, 29500) if e["name"].startswith("HOROVOD_")]
    assert horovod_env(job(), Slot("ps", 0)) == []  # roles are refused; a role pod would get nothing
    assert horovod_env(job(), worker(1))


def test_the_users_env_comes_after_the_horovod_env():
    pod = pods(job(env=[{"name": "HOROVOD_FUSION_THRESHOLD", "value": "0"}]))[0]
    names = [e["name"] for e in pod["spec"]["containers"][0]["env"]]
    assert names.index(constants.ENV_HOROVOD_CROSS_SIZE) < names.index("HOROVOD_FUSION_THRESHOLD")


# --- what the launcher reads back ---------------------------------------------------------------

@pytest.mark.parametrize("nodes, procs", [(1, 1), (2, 1), (3, 4)])
def test_the_launcher_reads_the_rendered_env(nodes, procs):
    ps = pods(job(nodes=nodes, procsPerNode=procs))
    launched = [HorovodPod.from_env(hvd_env(p)) for p in ps]
    hosts = ",".join(f"{p['spec']['hostname']}:{procs}" for p in ps)
    assert launched[0].serves and not any(p.serves for p in launched[1:])
    assert launched[0].hosts() == hosts  # the server's plan names the pods as HOROVOD_HOSTNAME does
    assert [p.timeout for p in launched] == [600.0] * nodes
    ranks = [(int(e[constants.ENV_HOROVOD_RANK]), int(e[constants.ENV_HOROVOD_LOCAL_RANK]))
             for p in launched for e in (p.process_env(local) for local in range(procs))]
    assert ranks == [(r, r % procs) for r in range(nodes * procs)]
    if procs == 1:  # the rendered rank is the process's
        assert [hvd_env(p)[constants.ENV_HOROVOD_RANK] for p in ps] == [str(r) for r in range(nodes)]


@pytest.mark.parametrize("edit, message", [
    ({constants.ENV_HOROVOD_RENDEZVOUS_ADDR: None}, "HOROVOD_GLOO_RENDEZVOUS_ADDR is not set"),
    ({constants.ENV_HOROVOD_CROSS_RANK: "x"}, "is not an integer"),
    ({constants.ENV_HOROVOD_CROSS_RANK: "2"}, "outside HOROVOD_CROSS_SIZE"),
    ({constants.ENV_HOROVOD_SIZE: "3"}, "HOROVOD_SIZE=3 is not"),
    ({constants.ENV_HOROVOD_HOSTNAME: "hvd-node-7"}, "does not end in '-1'"),
    ({constants.ENV_HOROVOD_RENDEZVOUS_PORT: "0"}, "is not a TCP port"),
])
def test_the_launcher_refuses_an_env_that_is_not_a_horovod_pods(edit, message):
    env = hvd_env(pods(job())[1])
    for k, v in edit.items():
        env.pop(k) if v is None else env.__setitem__(k, v)
    with pytest.raises(LaunchError, match=message):
        HorovodPod.from_env(env)


# --- the rules ---------------------------------------------------------------------------------

def broken(s: dict) -> dict[str, str]:
    return {path: msg for path, msg, _ in broken_rules(TrainingJobSpec.model_validate(s), "spec")}


def test_valid_horovod_specs_break_no_rule():
    assert broken(spec()) == {}
    assert broken(spec(procsPerNode=8, resources={"gpus": 8}, parallelism={"data": 16})) == {}
    assert broken(spec(env=[{"name": "HOROVOD_FUSION_THRESHOLD", "value": "0"}])) == {}  # not rendered


REFUSALS = [
    ({"command": None, "model": {"preset": "debug"}}, "spec.command"),
    ({"model": {"preset": "debug"}}, "spec.model"),
    ({"parallelism": {"data": 3}}, "spec.parallelism.data"),
    ({"parallelism": {"zero": 1}}, "spec.parallelism.zero"),
    ({"parallelism": {"replicate": 2}}, "spec.parallelism.replicate"),
    ({"parallelism": {"cpuOffload": True}}, "spec.parallelism.cpuOffload"),
    ({"parallelism": {"tensor": 2}}, "spec.parallelism.tensor"),
    ({"parallelism": {"sequenceParallel": True}}, "spec.parallelism.sequenceParallel"),
    ({"parallelism": {"pipeline": 2}}, "spec.parallelism.pipeline"),
    ({"parallelism": {"pipelineSchedule": "GPipe"}}, "spec.parallelism.pipelineSchedule"),
    ({"parallelism": {"microbatches": 4}}, "spec.parallelism.microbatches"),
    ({"parallelism": {"virtualStages": 2}}, "spec.parallelism.virtualStages"),
    ({"elastic": {"minNodes": 1, "maxNodes": 2}}, "spec.elastic"),
    ({"roles": [{"name": "ps"}]}, "spec.roles"),
    ({"network": {"hostNetwork": True}}, "spec.network.hostNetwork"),
] + [({"env": [{"name": name, "value": "1"}]}, "spec.env") for name in constants.HOROVOD_RENDERED_ENV]


@pytest.mark.parametrize("over, field", REFUSALS)
def test_refusals_name_their_field_and_hold_for_other_frameworks(over, field):
    out = broken(spec(**over))
    assert field in out, out
    assert out[field].startswith("framework horovod")
    assert field in out[field], out[field]  # the message names the field, as the API server's fieldPath does
    if over.get("env"):
        assert over["env"][0]["name"] in out[field]  # …and the variable
    # the same field under another framework is no horovod rule's business
    assert not any(m.startswith("framework horovod") for m in broken(spec(**over, framework="none")).values())


def test_roles_message_says_every_pod_is_a_worker():
    assert broken(spec(roles=[{"name": "chief"}]))["spec.roles"] == \
        "framework horovod: every pod is a Horovod worker; spec.roles is not supported"


def test_one_verdict_for_the_operator_and_phalanx_validate():
    _, problems = validate_job({"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "h"},
                                "spec": spec(parallelism={"tensor": 2}, env=[{"name": "HOROVOD_RANK", "value": "0"}])})
    fields = {p.field for p in problems}
    assert {"spec.parallelism.tensor", "spec.env"} <= fields
    assert all(p.source == "api" for p in problems if p.field in ("spec.parallelism.tensor", "spec.env"))


def test_host_network_is_refused_even_where_the_profile_allows_it():
    config = OperatorConfig(network_profiles={"default": NetworkProfile(allow_host_network=True)})
    doc = {"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "h"},
           "spec": spec(network={"hostNetwork": True})}
    _, problems = validate_job(doc, config)
    assert [p.field for p in problems] == ["spec.network.hostNetwork"]


def test_every_rule_is_in_the_crd_with_its_field_path():
    crd_spec = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    in_crd = {(r["rule"], r.get("fieldPath")) for r in crd_spec["x-kubernetes-validations"]}
    assert len(HOROVOD_RULES) == 15 + len(constants.HOROVOD_RENDERED_ENV)
    for rule in HOROVOD_RULES:
        assert rule.cel.startswith("!has(self.framework) || self.framework != 'horovod' || ")
        assert rule.cel.count("(") == rule.cel.count(")") and rule.cel.count("'") % 2 == 0
        assert (rule.cel, rule.field) in in_crd
    assert "horovod" in crd_spec["properties"]["framework"]["enum"]
