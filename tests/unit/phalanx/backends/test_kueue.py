from test_backends_common import job, pod

from phalanx.api.config import TopologyConfig
from phalanx.backends import apply_mutation
from phalanx.backends.kueue import render

LEVELS = TopologyConfig().levels


def test_pod_group_labels_and_tas():
    r = render(job(scheduling={"backend": "kueue", "queue": "lq", "topology": {"required": "block"}}), levels=LEVELS)
    assert r.objects == [] and r.errors == []
    out = apply_mutation(pod(), r.pod)
    assert out["metadata"]["labels"] == {"a": "b", "kueue.x-k8s.io/pod-group-name": "llm", "kueue.x-k8s.io/queue-name": "lq"}
    assert out["metadata"]["annotations"] == {"kueue.x-k8s.io/pod-group-total-count": "4",
                                              "kueue.x-k8s.io/podset-required-topology": "phalanx.dev/topology-block"}
    assert "schedulingGates" not in out["spec"] and "schedulerName" not in out["spec"]


def test_preferred_and_missing_queue():
    r = render(job(scheduling={"backend": "kueue", "topology": {"preferred": "cloud.google.com/gce-topology-block"}}),
               levels=LEVELS, group_name="llm-attempt-2")
    assert r.errors == ["scheduling.queue: backend kueue needs a LocalQueue name"]
    assert r.pod.labels == {"kueue.x-k8s.io/pod-group-name": "llm-attempt-2"}
    assert r.pod.annotations["kueue.x-k8s.io/podset-preferred-topology"] == "cloud.google.com/gce-topology-block"


def test_kueue_gate_left_to_kueue():
    p = pod()
    p["spec"]["schedulingGates"].append({"name": "kueue.x-k8s.io/admission"})
    out = apply_mutation(p, render(job(scheduling={"backend": "kueue", "queue": "q"})).pod)
    assert out["spec"]["schedulingGates"] == [{"name": "kueue.x-k8s.io/admission"}]
