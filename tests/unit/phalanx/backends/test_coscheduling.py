from phalanx.backends import apply_mutation
from phalanx.backends.coscheduling import render
from tests.unit.phalanx.backends.fixtures import job, pod, validate


def test_podgroup_matches_crd_and_fields():
    r = render(job(scheduling={"backend": "coscheduling", "gangTimeoutSeconds": 300}))
    (pg,) = r.objects
    validate(pg, "coscheduling-podgroup-v1alpha1.json")
    assert pg["apiVersion"] == "scheduling.x-k8s.io/v1alpha1" and pg["kind"] == "PodGroup"
    assert pg["spec"] == {"minMember": 4, "scheduleTimeoutSeconds": 300,
                          "minResources": {"nvidia.com/gpu": "32", "cpu": "192", "memory": "2Ti", "rdma/ib": "4"}}


def test_no_timeout_when_forever_and_pod_label():
    r = render(job(scheduling={"backend": "coscheduling", "gangTimeoutSeconds": 0}))
    assert "scheduleTimeoutSeconds" not in r.objects[0]["spec"]
    out = apply_mutation(pod(), r.pod)
    assert out["metadata"]["labels"] == {"a": "b", "scheduling.x-k8s.io/pod-group": "llm"}
    assert out["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
    assert "schedulingGates" not in out["spec"]
    assert render(job(), scheduler_name="default-scheduler").pod.scheduler_name == "default-scheduler"
