"""policy.podsecurity: the Pod Security level a job's pods need, refused with the cause and the
namespace's label where the namespace enforces less."""

from __future__ import annotations

import pytest

from phalanx.api.config import NetworkProfile, OperatorConfig, TopoFile
from phalanx.api.types import TrainingJobSpec
from phalanx.policy.podsecurity import (
    ENFORCE_LABEL,
    pod_security_problems,
    profile_level,
    required_levels,
)
from tests.unit.phalanx.policy.test_cluster import job, problems, refused

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


@pytest.mark.parametrize("profile,level,why", [
    (NetworkProfile(), "restricted", ""),
    (NetworkProfile(ipc_lock=True), "privileged", "the IPC_LOCK capability for RDMA"),
    (NetworkProfile(topo_file=TopoFile(path="/t.xml", config_map="topo")), "restricted", ""),  # not from the node
    (NetworkProfile(pod_security_level="privileged"), "privileged", "declared by the profile"),
    (NetworkProfile(ipc_lock=True, pod_security_level="baseline"), "privileged", "the IPC_LOCK capability for RDMA"),  # the most wins
])
def test_profile_level(profile, level, why):
    assert profile_level(profile) == (level, why)


def spec(**over) -> TrainingJobSpec:
    return TrainingJobSpec.model_validate({"image": "x", "command": ["train"], "nodes": 1} | over)


PVC = {"persistentVolumeClaim": {"claimName": "c"}}


@pytest.mark.parametrize("over,needs", [
    ({}, []),
    ({"checkpoint": {"volume": PVC}, "volumes": [{"name": "d", "configMap": {"name": "cm"}}]}, []),  # restricted allows both
    ({"network": {"hostNetwork": True}}, [("privileged", "spec.network.hostNetwork")]),
    ({"volumes": [{"name": "d", **PVC}, {"name": "h", "hostPath": {"path": "/data"}}]}, [("privileged", "spec.volumes[1]")]),
    ({"volumes": [{"name": "n", "nfs": {"server": "s", "path": "/p"}}]}, [("baseline", "spec.volumes[0]")]),
    ({"checkpoint": {"volume": {"hostPath": {"path": "/ckpt"}}}}, [("privileged", "spec.checkpoint.volume")]),
])
def test_required_levels(over, needs):
    assert [(level, field) for level, field, _ in required_levels(spec(**over), NetworkProfile())] == needs


@pytest.mark.parametrize("labels,refused", [
    (None, False),  # the namespace enforces nothing the operator can read: the pod dry-run decides
    ({}, False),
    ({ENFORCE_LABEL: "unknown"}, False),
    ({ENFORCE_LABEL: "privileged"}, False),
    ({ENFORCE_LABEL: "baseline"}, False),  # an nfs volume needs baseline: allowed
    ({ENFORCE_LABEL: "restricted"}, True),
])
def test_the_namespaces_enforce_label_decides(labels, refused):
    nfs = spec(volumes=[{"name": "n", "nfs": {"server": "s", "path": "/p"}}])
    found = pod_security_problems(nfs, None, "team", labels)
    assert [p.field for p in found] == (["spec.volumes[0]"] if refused else [])
    if refused:
        assert str(found[0]).endswith("needs Pod Security level baseline (a nfs volume); namespace team enforces restricted "
                                      "(label pod-security.kubernetes.io/enforce=restricted)")
