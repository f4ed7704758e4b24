"""backends.base: the Backend interface's defaults and the shapes the backends share — the pod
mutation, the objects' metadata, the gang's requests, a topology level's node label."""

from __future__ import annotations

import copy

import pytest

from phalanx import constants
from phalanx.api.config import TopologyLevel
from phalanx.backends.base import (
    Backend,
    BackendRender,
    PodMutation,
    apply_mutation,
    level_label,
    merge_mutation,
    min_resources,
    object_meta,
    pod_requests,
)
from tests.unit.phalanx.backends.fixtures import job

GATE = constants.GANG_SCHEDULING_GATE


def pod(scheduler=None, gates=(GATE,)):
    spec = {"containers": [{"name": "trainer"}]}
    if scheduler:
        spec["schedulerName"] = scheduler
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    return {"metadata": {"name": "p", "labels": {"a": "1"}}, "spec": spec}


@pytest.mark.parametrize("before,mutation,scheduler,gates", [
    (pod(), PodMutation(), None, [GATE]),  # nothing to change
    (pod(), PodMutation(scheduler_name="volcano"), "volcano", [GATE]),
    (pod(scheduler="custom"), PodMutation(scheduler_name="volcano"), "custom", [GATE]),  # the pod's own scheduler stays
    (pod(), PodMutation(remove_gates=[GATE]), None, None),  # no gate left: no schedulingGates at all
    (pod(), PodMutation(add_gates=[GATE, "kueue.x-k8s.io/admission"]), None, [GATE, "kueue.x-k8s.io/admission"]),  # no duplicate
    (pod(gates=()), PodMutation(add_gates=["x"]), None, ["x"]),
    (pod(gates=("x", GATE)), PodMutation(remove_gates=[GATE], add_gates=["y"]), None, ["x", "y"]),
])
def test_merge_mutation_scheduler_and_gates(before, mutation, scheduler, gates):
    after = merge_mutation(before, mutation)
    assert after is before  # in place
    assert after["spec"].get("schedulerName") == scheduler
    assert [g["name"] for g in after["spec"].get("schedulingGates", [])] == (gates or [])
    assert ("schedulingGates" in after["spec"]) is bool(gates)


def test_merge_mutation_labels_annotations_and_spec_fields():
    group = {"podGroupName": "g"}
    after = merge_mutation(pod(), PodMutation(labels={"b": "2", "a": "9"}, annotations={"k": "v"}, spec_fields={"schedulingGroup": group}))
    assert after["metadata"]["labels"] == {"a": "9", "b": "2"} and after["metadata"]["annotations"] == {"k": "v"}
    assert after["spec"]["schedulingGroup"] == group and after["spec"]["schedulingGroup"] is not group  # each pod its own copy


def test_apply_mutation_leaves_the_pod_as_it_was():
    original = pod()
    kept = copy.deepcopy(original)
    after = apply_mutation(original, PodMutation(labels={"b": "2"}, remove_gates=[GATE], scheduler_name="volcano"))
    assert original == kept
    assert after["metadata"]["labels"]["b"] == "2" and "schedulingGates" not in after["spec"]


def test_object_meta():
    j = job()
    meta = object_meta(j, "job-pg")
    assert meta["name"] == "job-pg" and meta["namespace"] == j.metadata.namespace
    assert meta["labels"] == {constants.LABEL_JOB_NAME: j.metadata.name, constants.LABEL_MANAGED_BY: constants.MANAGED_BY}
    assert meta["ownerReferences"] == j.owner_references() and meta["ownerReferences"]
    assert object_meta(j)["name"] == j.metadata.name
    anonymous = j.model_copy(update={"metadata": j.metadata.model_copy(update={"uid": None})})
    assert "ownerReferences" not in object_meta(anonymous)


def test_requests_per_pod_and_for_the_whole_gang():
    spec = job(nodes=3, resources={"gpus": 8, "cpu": "1500m", "memory": "64Gi"}).spec
    assert pod_requests(spec) == {constants.RESOURCE_GPU: 8, "cpu": 1500, "memory": 64 * 2**30}  # no pods slot
    assert pod_requests(spec, {"rdma/ib": 1})["rdma/ib"] == 1
    assert min_resources(spec) == {constants.RESOURCE_GPU: "24", "cpu": "4500m", "memory": "192Gi"}
    assert min_resources(spec, {"rdma/ib": 2})["rdma/ib"] == "6"


LEVELS = [TopologyLevel(name="block", label="example.com/block"), TopologyLevel(name="hostname", label="kubernetes.io/hostname")]


@pytest.mark.parametrize("level,levels,label", [
    ("block", LEVELS, "example.com/block"),  # by name
    ("kubernetes.io/hostname", LEVELS, "kubernetes.io/hostname"),  # by label
    ("rack", LEVELS, "rack"),  # unknown: taken as a label key
    ("block", None, "block"),
    (None, LEVELS, None),
    ("", LEVELS, None),
])
def test_level_label(level, levels, label):
    assert level_label(level, levels) == label


class Refusing(Backend):
    def render(self, job, **kwargs):
        return BackendRender(errors=["spec.scheduling.queue: required"])


def test_a_backends_defaults():
    backend = Refusing()
    assert backend.validate(job()) == ["spec.scheduling.queue: required"]  # its render's errors
    assert backend.reads_pod_group(("v1alpha2",)) is False and backend.reads_pod_group(None) is False
    assert Backend.admits_itself is False and Backend.reads_kueue_workload is False
    with pytest.raises(TypeError, match="abstract method render"):
        Backend()  # a backend without its render cannot exist
