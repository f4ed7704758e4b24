import jsonschema
import pytest

from phalanx.api.config import TopologyConfig
from phalanx.backends import apply_mutation, render_backend
from phalanx.backends.volcano import render, tier_of
from tests.unit.phalanx.backends.fixtures import job, pod, validate

LEVELS = TopologyConfig().resolved_levels


def test_podgroup_matches_crd_and_fields():
    j = job(scheduling={"backend": "volcano", "queue": "research", "priorityClassName": "high",
                        "topology": {"required": "subblock"}})
    r = render(j, levels=LEVELS, extra_requests={"rdma/rdma_shared_device_a": 1})
    (pg,) = r.objects
    validate(pg, "volcano-podgroup-v1beta1.json")
    assert pg["apiVersion"] == "scheduling.volcano.sh/v1beta1" and pg["kind"] == "PodGroup"
    assert pg["metadata"]["name"] == "llm" and pg["metadata"]["namespace"] == "team"
    assert pg["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert pg["spec"] == {"minMember": 4, "queue": "research", "priorityClassName": "high",
                          "minResources": {"nvidia.com/gpu": "32", "cpu": "192", "memory": "2Ti", "rdma/ib": "4",
                                           "rdma/rdma_shared_device_a": "4"},
                          "networkTopology": {"mode": "hard", "highestTierAllowed": 1}}
    assert r.errors == []


def test_pod_mutation():
    r = render_backend(job(scheduling={"backend": "volcano"}), levels=LEVELS)
    out = apply_mutation(pod(), r.pod)
    assert out["metadata"]["annotations"] == {"scheduling.k8s.io/group-name": "llm"}
    assert out["spec"]["schedulerName"] == "volcano"
    assert "schedulingGates" not in out["spec"]
    assert "networkTopology" not in r.objects[0]["spec"] and "queue" not in r.objects[0]["spec"]
    custom = render(job(scheduling={"backend": "volcano", "schedulerName": "volcano-2"}))
    assert custom.pod.scheduler_name == "volcano-2"


def test_soft_topology_and_tiers():
    r = render(job(scheduling={"backend": "volcano", "topology": {"preferred": "block"}}), levels=LEVELS)
    assert r.objects[0]["spec"]["networkTopology"] == {"mode": "soft", "highestTierAllowed": 2}
    assert tier_of("phalanx.dev/topology-subblock", LEVELS) == 1 and tier_of("rack", LEVELS) is None
    bad = render(job(scheduling={"backend": "volcano", "topology": {"required": "rack"}}), levels=LEVELS)
    assert bad.errors == ["scheduling.topology: level 'rack' is not a configured topology level"]


def test_schema_rejects_typos():
    (pg,) = render(job()).objects
    pg["spec"]["minMembers"] = 3
    with pytest.raises(jsonschema.ValidationError):
        validate(pg, "volcano-podgroup-v1beta1.json")
