"""gang.quota: would the namespace's ResourceQuotas admit a whole gang at once?"""

from __future__ import annotations

import pytest

from phalanx.gang.quota import quota_entry, quota_shortfall


def pod(cpu="1", memory="1Gi", gpu=None, limits=None, init=None):
    requests = {"cpu": cpu, "memory": memory, **({"nvidia.com/gpu": gpu} if gpu else {})}
    spec = {"containers": [{"name": "c", "resources": {"requests": requests, **({"limits": limits} if limits else {})}}]}
    if init:
        spec["initContainers"] = [{"name": "i", "resources": {"requests": init}}]
    return {"spec": spec}


def quota(hard, used=None, **spec):
    return quota_entry({"metadata": {"name": "q"}, "spec": {"hard": hard, **spec},
                        "status": {"hard": hard, "used": used or {}}})


def test_no_quota_no_shortfall():
    assert quota_shortfall([pod()] * 4, []) is None


@pytest.mark.parametrize("hard,used,room", [
    ({"pods": "4"}, {"pods": "0"}, True),
    ({"pods": "4"}, {"pods": "1"}, False),
    ({"count/pods": "3"}, {}, False),
    ({"requests.cpu": "4"}, {"requests.cpu": "0"}, True),
    ({"cpu": "3500m"}, {}, False),  # a bare name is requests.<name>
    ({"requests.memory": "4Gi"}, {"requests.memory": "1Mi"}, False),
    ({"requests.nvidia.com/gpu": "32"}, {"requests.nvidia.com/gpu": "0"}, True),
    ({"requests.nvidia.com/gpu": "32"}, {"requests.nvidia.com/gpu": "1"}, False),
    ({"services": "0", "configmaps": "0", "requests.storage": "0"}, {}, True),  # not what pods count against
])
def test_the_gang_is_summed_against_room(hard, used, room):
    pods = [pod(gpu="8")] * 4
    assert (quota_shortfall(pods, [quota(hard, used)]) is None) is room


def test_limits_are_summed_and_requests_default_to_limits():
    limited = pod(cpu="1", limits={"cpu": "2", "memory": "2Gi"})
    assert quota_shortfall([limited] * 2, [quota({"limits.cpu": "4"})]) is None
    assert "limits.cpu has room for 3000, the gang needs 4000" in quota_shortfall([limited] * 2, [quota({"limits.cpu": "3"})])
    only_limits = {"spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}
    assert quota_shortfall([only_limits] * 2, [quota({"requests.nvidia.com/gpu": "15"})]) is not None


def test_init_containers_count_as_the_scheduler_counts_them():
    big_init = pod(cpu="1", init={"cpu": "3"})  # effective request: max(1, 3) = 3
    assert quota_shortfall([big_init] * 2, [quota({"requests.cpu": "5"})]) is not None
    assert quota_shortfall([big_init] * 2, [quota({"requests.cpu": "6"})]) is None


def test_every_quota_must_have_room():
    assert quota_shortfall([pod()] * 2, [quota({"pods": "10"}), quota({"requests.cpu": "1"})]) is not None


def test_what_cannot_be_judged_counts_as_no_room():
    scoped = quota({"pods": "100"}, scopes=["BestEffort"])
    selected = quota({"pods": "100"}, scopeSelector={"matchExpressions": [{"scopeName": "PriorityClass", "operator": "Exists"}]})
    fresh = quota_entry({"metadata": {"name": "new"}, "spec": {"hard": {"pods": "100"}}})  # the controller has not counted yet
    for q in (scoped, selected, fresh):
        assert quota_shortfall([pod()], [q]) is not None


def test_a_quota_on_something_a_pod_leaves_undeclared_counts_as_no_room():
    """A LimitRange may default it at admission: the sum here would not include it."""
    no_memory = {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}
    assert "declares no requests.memory" in quota_shortfall([no_memory], [quota({"requests.memory": "100Gi"})])
    cpu_role = pod(cpu="1")  # no GPU: a GPU quota cannot be summed for it
    assert quota_shortfall([pod(gpu="8"), cpu_role], [quota({"requests.nvidia.com/gpu": "64"})]) is not None
    assert quota_shortfall([pod(gpu="8")] * 2, [quota({"requests.nvidia.com/gpu": "64", "pods": "10"})]) is None
