"""Shared-cluster safety (issue #12): restricted pods by default, the admin's policy rule by rule,
and Pod Security levels of network profiles against the namespace's label."""

from __future__ import annotations

import copy

import pytest

from phalanx.api.config import NetworkProfile, OperatorConfig, TopoFile
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
    ({"volumes": [{"name": "p", "projected": {"sources": [{"secret": {"name": "db"}}]}}]}, "spec.volumes[0]", "projected volumes are not allowed"),
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


# --- Pod Security levels ------------------------------------------------------------------------------


RDMA = OperatorConfig(network_profiles={"default": NetworkProfile(), "rdma": NetworkProfile(fabric="infiniband", ipc_lock=True)})


def test_rdma_profile_refused_where_baseline_is_enforced():
    labels = {"pod-security.kubernetes.io/enforce": "baseline"}
    refused(job(network={"profile": "rdma"}), "spec.network.profile",
            "needs Pod Security level privileged (network profile 'rdma' needs the IPC_LOCK capability for RDMA); "
            "namespace team enforces baseline (label pod-security.kubernetes.io/enforce=baseline)", RDMA, labels)
    assert problems(job(network={"profile": "rdma"}), RDMA, {"pod-security.kubernetes.io/enforce": "privileged"}) == []


def test_default_jobs_fit_a_restricted_namespace():
    labels = {"pod-security.kubernetes.io/enforce": "restricted"}
    assert problems(job(checkpoint={"volume": {"persistentVolumeClaim": {"claimName": "c"}}}), labels=labels) == []
    refused(job(checkpoint={"volume": {"nfs": {"server": "s", "path": "/p"}}}), "spec.checkpoint.volume",
            "needs Pod Security level baseline (a nfs volume)", labels=labels)


def test_profile_levels_declared_and_derived():
    from phalanx.policy.podsecurity import profile_level

    assert profile_level(NetworkProfile())[0] == "restricted"
    assert profile_level(NetworkProfile(topo_file=TopoFile(path="/t.xml", host_path="/opt/t.xml")))[0] == "privileged"
    assert profile_level(NetworkProfile(pod_security_level="baseline"))[0] == "baseline"
