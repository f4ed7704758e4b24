import pytest
from test_backends_common import job, pod, validate

from phalanx.backends import apply_mutation, render_backend
from phalanx.backends.workload import render


def test_v1alpha1_workload_and_pod_ref():
    r = render(job(scheduling={"backend": "workload"}))
    (wl,) = r.objects
    validate(wl, "workload-v1alpha1.json")
    assert wl["apiVersion"] == "scheduling.k8s.io/v1alpha1" and wl["kind"] == "Workload"
    assert wl["spec"] == {"controllerRef": {"apiGroup": "phalanx.dev", "kind": "TrainingJob", "name": "llm"},
                          "podGroups": [{"name": "workers", "policy": {"gang": {"minCount": 4}}}]}
    out = apply_mutation(pod(), r.pod)
    validate(out["spec"]["workloadRef"], "pod-workloadref-v1.35.json")
    assert out["spec"]["workloadRef"] == {"name": "llm", "podGroup": "workers"}
    assert "schedulingGates" not in out["spec"]


def test_v1alpha2_standalone_podgroup():
    r = render_backend(job(scheduling={"backend": "workload"}), api_version="v1alpha2")
    wl, pg = r.objects
    assert wl["apiVersion"] == pg["apiVersion"] == "scheduling.k8s.io/v1alpha2"
    assert wl["spec"]["podGroupTemplates"] == [{"name": "workers", "policy": {"gang": {"minCount": 4}}}]
    assert pg["metadata"]["name"] == "llm-workers"
    assert pg["spec"] == {"podGroupTemplateRef": {"workloadName": "llm", "podGroupTemplateName": "workers"},
                          "schedulingPolicy": {"gang": {"minCount": 4}}}
    assert apply_mutation(pod(), r.pod)["spec"]["schedulingGroup"] == {"podGroupName": "llm-workers"}
    with pytest.raises(ValueError):
        render(job(), api_version="v2")
