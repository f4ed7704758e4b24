"""policy.podsecurity: the Pod Security level a job's pods need, refused with the cause and the
namespace's label where the namespace enforces less."""

from __future__ import annotations

from phalanx.api.config import NetworkProfile, OperatorConfig, TopoFile
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
