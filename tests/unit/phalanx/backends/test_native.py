from phalanx.backends import apply_mutation, render_backend
from phalanx.backends.base import PodMutation
from tests.unit.phalanx.backends.fixtures import job


def test_native_gates_pods():
    r = render_backend(job())
    assert r.objects == []
    out = apply_mutation({"spec": {}}, r.pod)
    assert out["spec"]["schedulingGates"] == [{"name": "phalanx.dev/gang"}]
    assert apply_mutation(out, r.pod) == out  # no duplicate gate


def test_apply_mutation_keeps_existing_scheduler():
    p = {"spec": {"schedulerName": "mine"}}
    assert apply_mutation(p, PodMutation(scheduler_name="volcano"))["spec"]["schedulerName"] == "mine"
    assert p == {"spec": {"schedulerName": "mine"}}
