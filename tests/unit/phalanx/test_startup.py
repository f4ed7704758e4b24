"""kopf settings the operator relies on: no diff base (startup.NoDiffBase) is only sound while
no change-detecting handler exists."""

from __future__ import annotations

import asyncio

import kopf

from phalanx import handlers, startup
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
