"""kopf settings the operator relies on: no diff base (startup.NoDiffBase) is only sound while
no change-detecting handler exists."""

from __future__ import annotations

import asyncio

import kopf
import pytest
from kubernetes.client.exceptions import ApiException

from phalanx import handlers, startup
from phalanx.metrics import RESTART_IN_PLACE
from phalanx.sweep import handlers as _sweep_handlers  # noqa: F401 - registers the sweep's handlers


def test_no_change_detecting_handler_is_registered():
    registry = kopf.get_default_registry()
    changing = registry._changing.get_all_handlers()
    assert changing == [], (
        "a change-detecting kopf handler (on.create/update/delete/field) needs kopf's diff base: "
        f"drop startup.NoDiffBase before adding {[h.id for h in changing]}")
    assert registry._spawning.get_all_handlers(), "the job and sweep daemons are registered"


def test_the_diff_base_is_empty_on_both_sides():
    storage = startup.NoDiffBase()
    body = kopf.Body({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "managedFields": [{}] * 10},
                      "spec": {"containers": [{"name": "c"}]}})
    assert storage.build(body=body) == {} and storage.fetch(body=body) == {}


def test_startup_installs_it(monkeypatch):
    settings = kopf.OperatorSettings()
    memo = kopf.Memo()

    class _Kube:  # no cluster: discovery fails and is logged
        def __init__(self, *a, **k):
            pass

        async def served_resources(self, group):
            raise OSError("no cluster")

    monkeypatch.setattr(startup, "Kube", _Kube)
    monkeypatch.setattr(startup, "load_client", lambda *a, **k: None)
    reflector = object()

    async def start_pod_reflector(memo):  # no cluster to list
        return reflector

    monkeypatch.setattr(startup, "_start_pod_reflector", start_pod_reflector)
    async def configure_then_stop():
        await handlers.configure(settings=settings, memo=memo)
        running = not memo.scheduler_task.done()
        memo.scheduler_task.cancel()
        return running

    assert asyncio.run(configure_then_stop())
    assert isinstance(settings.persistence.diffbase_storage, startup.NoDiffBase)
    assert memo.pod_reflector is reflector  # started (and synced) before any watch
    assert memo.scheduler is memo.gangs.scheduler  # one scheduler, whatever the memo carried


def test_healthz_fails_once_the_scheduler_task_has_stopped():
    async def check():
        memo = startup.new_memo()
        assert "the gang scheduler's task has stopped" not in startup.problems(memo)  # not started: nothing to say
        memo.scheduler_task = asyncio.create_task(asyncio.sleep(3600))
        await asyncio.sleep(0)
        healthy = startup.problems(memo)
        memo.scheduler_task.cancel()
        await asyncio.sleep(0)
        memo.decider.shutdown()
        return healthy, startup.problems(memo)

    healthy, stopped = asyncio.run(check())
    assert "the gang scheduler's task has stopped" not in healthy
    assert "the gang scheduler's task has stopped" in stopped


class _Cluster:
    """What discovery of in-place restarts reads: the dry-run answer and the nodes."""

    def __init__(self, keeps_rules: bool, nodes: list[dict], fails: Exception | None = None, nodes_fail: bool = False):
        self.keeps_rules, self.nodes, self.fails, self.nodes_fail, self.asked = keeps_rules, nodes, fails, nodes_fail, []

    async def dry_run_pod(self, pod):
        if self.fails is not None:
            raise self.fails
        self.asked.append(pod["metadata"]["namespace"])
        if not self.keeps_rules:
            pod = {**pod, "spec": {"containers": [{"name": "trainer"}]}}
        return pod

    async def list_nodes(self):
        if self.nodes_fail:
            raise ApiException(status=403, reason="Forbidden")
        return self.nodes


NEW_NODE = {"metadata": {"name": "a"}, "status": {"declaredFeatures": ["RestartAllContainersOnContainerExits"]}}
OLD_NODE = {"metadata": {"name": "b"}, "status": {}}


@pytest.mark.parametrize(("cluster", "supported"), [
    pytest.param(_Cluster(True, [NEW_NODE]), True, id="supported"),
    pytest.param(_Cluster(False, [NEW_NODE]), False, id="the-api-server-drops-the-rules"),
    pytest.param(_Cluster(True, [NEW_NODE, OLD_NODE]), False, id="a-kubelet-without-it"),
    pytest.param(_Cluster(True, [NEW_NODE], fails=OSError("connection refused")), False, id="api-server-unreachable"),
    pytest.param(_Cluster(True, [NEW_NODE], fails=ApiException(status=422, reason="Invalid")), False,
                 id="the-api-server-refuses-the-rule"),
    # a webhook, quota or RBAC refusing the probe says nothing of the feature: the nodes decide
    pytest.param(_Cluster(True, [NEW_NODE], fails=ApiException(status=403, reason="Forbidden")), True,
                 id="probe-refused-every-node-declares-it"),
    pytest.param(_Cluster(True, [NEW_NODE, OLD_NODE], fails=ApiException(status=403, reason="Forbidden")), False,
                 id="probe-refused-a-node-lacks-it"),
    pytest.param(_Cluster(True, [NEW_NODE], nodes_fail=True), False, id="nodes-unreadable"),
])
def test_in_place_discovery(cluster, supported):
    assert asyncio.run(startup._discover_in_place(cluster, ["team-a", "team-b"])) is supported
    assert cluster.asked == ([] if cluster.fails else ["team-a"])  # a namespace the operator may create pods in
    assert RESTART_IN_PLACE._value.get() == (1 if supported else 0)
