"""Shared-cluster safety: restricted pods by default, the admin's policy rule by rule (Pod Security
levels against the namespace's label: policy/test_podsecurity.py)."""

from __future__ import annotations

import copy

import pytest

from phalanx.api.config import NetworkProfile, OperatorConfig
from phalanx.api.policy import ClusterPolicy, NamespacePolicy, PolicyRules
from phalanx.render.job import render_children
from phalanx.validate import validate_job
from tests.conftest import MINIMAL


def job(**spec):
    obj = copy.deepcopy(MINIMAL)
    obj["spec"].update(spec)
    return obj


def problems(obj, config=None, labels=None):
    return [str(p) for p in validate_job(obj, config or OperatorConfig(), labels)[1]]


def refused(obj, field, words, config=None, labels=None):
    found = problems(obj, config, labels)
    assert any(p.startswith(field) and words in p for p in found), found


def pod_of(obj, config=None):
    parsed, found = validate_job(obj, config or OperatorConfig())
    assert not found, found
    parsed.metadata.uid = "u"
    return next(c for c in render_children(parsed, config or OperatorConfig(), attempt=0) if c["kind"] == "Pod")


# --- Restricted by default ------------------------------------------------------------------------


def test_pods_are_restricted_by_default():
    pod = pod_of(job())
    sc, csc = pod["spec"]["securityContext"], pod["spec"]["containers"][0]["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == sc["runAsGroup"] == sc["fsGroup"] == 1000
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert csc == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert pod["spec"]["automountServiceAccountToken"] is False
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["HOME"] == env["TMPDIR"] == "/phalanx/scratch"
    assert {"name": "phalanx-scratch", "emptyDir": {}} in pod["spec"]["volumes"]


def test_token_mounted_only_for_a_named_service_account():
    config = OperatorConfig(policy=ClusterPolicy(default=PolicyRules(allowed_service_accounts=["trainer"])))
    assert pod_of(job(serviceAccountName="trainer"), config)["spec"]["automountServiceAccountToken"] is True


def test_rdma_profile_adds_only_ipc_lock():
    config = OperatorConfig(network_profiles={"ib": NetworkProfile(fabric="infiniband", ipc_lock=True)})
    csc = pod_of(job(network={"profile": "ib"}), config)["spec"]["containers"][0]["securityContext"]
    assert csc["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}


# --- The admin's policy, rule by rule --------------------------------------------------------------


@pytest.mark.parametrize(("spec", "field", "words"), [
    ({"checkpoint": {"volume": {"hostPath": {"path": "/"}}}}, "spec.checkpoint.volume", "hostPath volumes are not allowed"),
    ({"volumes": [{"name": "sock", "hostPath": {"path": "/run/containerd/containerd.sock"}}]}, "spec.volumes[0]", "hostPath volumes are not allowed"),
    ({"volumes": [{"name": "s", "secret": {"secretName": "db"}}]}, "spec.volumes[0]", "secret volumes are not allowed"),
    ({"volumes": [{"name": "p", "projected": {"sources": [{"secret": {"name": "db"}}]}}]}, "spec.volumes[0].projected.sources[0].secret", "Secrets are not allowed"),
    ({"env": [{"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}}]}, "spec.env[0].valueFrom.secretKeyRef", "Secret references"),
    ({"serviceAccountName": "cluster-admin-sa"}, "spec.serviceAccountName", "not allowed here"),
    ({"scheduling": {"schedulerName": "my-scheduler"}}, "spec.scheduling.schedulerName", "not allowed here"),
    ({"tolerations": [{"operator": "Exists"}]}, "spec.tolerations[0]", "tolerates every taint"),
    ({"tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]}, "spec.tolerations[0].key", "not allowed"),
    ({"nodeSelector": {"node-role.kubernetes.io/control-plane": ""}}, "spec.nodeSelector[node-role.kubernetes.io/control-plane]", "not allowed"),
])
def test_default_policy_refuses(spec, field, words):
    refused(job(**spec), field, words)


def test_policy_limits():
    rules = PolicyRules(max_nodes=4, max_restarts=5, min_restart_backoff_seconds=30, allowed_network_profiles=["default"],
                        allowed_priority_classes=["low"])
    config = OperatorConfig(policy=ClusterPolicy(default=rules))
    refused(job(nodes=8, procsPerNode=1), "spec.nodes", "at most 4 pods per job", config)
    refused(job(failurePolicy={"maxRestarts": 9}), "spec.failurePolicy.maxRestarts", "at most 5", config)
    refused(job(failurePolicy={"backoffSeconds": 1}), "spec.failurePolicy.backoffSeconds", "at least 30", config)
    refused(job(scheduling={"priorityClassName": "high"}), "spec.scheduling.priorityClassName", "allowed: low", config)
    assert problems(job(failurePolicy={"backoffSeconds": 30}, scheduling={"priorityClassName": "low"}), config) == []


def test_policy_per_namespace_first_match_wins():
    ml = NamespacePolicy(match_labels={"team": "ml"}, rules=PolicyRules(allow_secrets=True, allowed_service_accounts=["trainer"]))
    config = OperatorConfig(policy=ClusterPolicy(namespaces=[ml]))
    obj = job(serviceAccountName="trainer", env=[{"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db", "key": "pw"}}}])
    assert problems(obj, config, {"team": "ml"}) == []
    assert len(problems(obj, config, {"team": "web"})) == 2


# --- The tables the policy keeps against Kubernetes and the renderer ----------------------------


def test_the_scheduler_a_backend_implies_is_the_one_its_pods_get():
    from phalanx.api.policy import effective_scheduler_name
    from phalanx.api.types import GangBackend
    served = ("v1alpha2",)  # the workload backend as on a cluster that serves its newest API
    for backend in GangBackend:
        for named in (None, "custom"):
            scheduling = {"backend": str(backend), "queue": "q"} | ({"schedulerName": named} if named else {})
            rules = PolicyRules(allowed_backends=list(GangBackend),
                                allowed_scheduler_names=["volcano", "scheduler-plugins-scheduler", "custom"])
            config = OperatorConfig(policy=ClusterPolicy(default=rules)).with_workload_api(served)
            parsed, found = validate_job(job(scheduling=scheduling), config)
            assert not found, found
            parsed.metadata.uid = "u"
            pod = next(c for c in render_children(parsed, OperatorConfig().with_workload_api(served), attempt=0)
                       if c["kind"] == "Pod")
            assert pod["spec"].get("schedulerName") == effective_scheduler_name(named, backend), (backend, named)


def test_reserved_rendezvous_env_is_what_every_worker_gets():
    """Derived from the renderer: the names a worker and a role pod get, but the operator's own
    (PHALANX_*), the framework ones (reserved under their framework) and the ones a job may change."""
    from phalanx import constants
    from phalanx.render.pod import scratch_env

    obj = job(model=None, command=["python", "train.py"], roles=[{"name": "ps"}])
    pods = [c for c in render_children(validate_job(obj)[0], OperatorConfig(), attempt=0) if c["kind"] == "Pod"]
    rendered = {e["name"] for pod in pods for e in pod["spec"]["containers"][0]["env"]}
    own = {n for n in rendered if n.startswith(constants.ENV_RESERVED_PREFIX)} | {e["name"] for e in scratch_env()}
    network = {e["name"] for e in (pods[0]["spec"]["containers"][0]["env"]) if e["name"].startswith(("NCCL_", "TORCH_NCCL_"))}
    assert rendered - own - network - {constants.ENV_PYTHONUNBUFFERED, constants.ENV_NVIDIA_VISIBLE_DEVICES} == set(constants.RENDEZVOUS_ENV)


@pytest.mark.parametrize("env", [
    {"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]},
    {"env": [{"name": "NVIDIA_REQUIRE_CUDA", "value": "cuda>=12"}]},
    {"env": [{"name": "AWS_NEURON_VISIBLE_DEVICES", "value": "ALL"}]},
    {"env": [{"name": "ASCEND_RUNTIME_MOUNTS", "value": "hostlog"}]},
    {"env": [{"name": "WORLD_SIZE", "value": "1"}]},
    {"env": [{"name": "PET_RDZV_ENDPOINT", "value": "evil:29400"}]},
    {"network": {"ncclEnv": {"NVIDIA_VISIBLE_DEVICES": "all"}}},
    {"network": {"ncclEnv": {"MASTER_PORT": "1"}}},
])
def test_env_no_job_may_set(env):
    assert any(p.split(":")[0] in ("spec.env[0].name", "spec.network.ncclEnv") for p in problems(job(**env)))


def test_process_level_device_filters_stay_the_jobs():
    env = [{"name": n, "value": "0"} for n in ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
                                               "NEURON_RT_VISIBLE_CORES", "TPU_VISIBLE_CHIPS", "ASCEND_RT_VISIBLE_DEVICES")]
    assert problems(job(env=env, network={"ncclEnv": {"CUDA_VISIBLE_DEVICES": "0"}})) == []


def test_projected_sources_one_by_one():
    from phalanx.policy.cluster import _projected

    rules = PolicyRules(allowed_projected_sources=["configMap", "secret"])
    found = _projected("spec.volumes[0]", {"sources": [{"configMap": {}}, {"secret": {}}, {"unknownSource": {}}]}, rules)
    assert [p.field for p in found] == ["spec.volumes[0].projected.sources[1].secret", "spec.volumes[0].projected.sources[2].unknownSource"]
    assert _projected("spec.volumes[0]", {"sources": [{"secret": {}}]}, rules.model_copy(update={"allow_secrets": True})) == []
    assert [p.field for p in _projected("v", {"sources": [{"secret": {}}]}, PolicyRules(allow_secrets=True))] == []


def test_secret_volume_needs_allow_secrets_whatever_the_list_says():
    listed = OperatorConfig(policy=ClusterPolicy(default=PolicyRules(allowed_volume_types=["secret"])))
    refused(job(volumes=[{"name": "s", "secret": {"secretName": "db"}}]), "spec.volumes[0]", "secret volumes are not allowed", listed)
    opened = OperatorConfig(policy=ClusterPolicy(default=PolicyRules(allow_secrets=True)))
    assert problems(job(volumes=[{"name": "s", "secret": {"secretName": "db"}}]), opened) == []


def test_priority_classes_any_but_system_unless_listed():
    listed = OperatorConfig(policy=ClusterPolicy(default=PolicyRules(allowed_priority_classes=["system-cluster-critical"])))
    assert problems(job(scheduling={"priorityClassName": "system-cluster-critical"}), listed) == []
    assert problems(job(scheduling={"priorityClassName": "batch-low"})) == []
    refused(job(scheduling={"priorityClassName": "system-cluster-critical"}), "spec.scheduling.priorityClassName", "system-* classes")


def test_a_sweep_template_is_a_job_and_every_value_counts():
    from phalanx.sweep.check import check_sweep

    def sweep(template=None, **spec):
        return {"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingSweep", "metadata": {"name": "s", "namespace": "team"},
                "spec": {"template": {"spec": {**MINIMAL["spec"], **(template or {})}}, **spec}}

    # random sampling might never pick 5, the policy refuses it anyway (as the admission policy does)
    lots = sweep(algorithm="random", maxTrials=1, seed=1, parameters=[{"path": "scheduling.priorityClassName", "values": ["a", "system-node-critical"]}])
    assert [p.field for p in check_sweep(lots).problems] == ["spec.parameters[0].values[1]"]
    assert [p.field for p in check_sweep(sweep({"tolerations": [{"operator": "Exists"}]}, parameters=[{"path": "training.lr", "values": [0.1]}])).problems] \
        == ["spec.template.spec.tolerations[0]"]
