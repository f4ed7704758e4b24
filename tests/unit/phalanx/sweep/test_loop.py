"""The sweep's loop (sweep/loop.py): its plan carried out through Kube (a refused trial fails
with the API server's words, a replayed create is fine), its controller expectations, and its
errors backed off on the shared scheme (controlloop)."""

from __future__ import annotations

import asyncio

import kopf
import pytest
from kubernetes.client.rest import ApiException

from phalanx import constants
from phalanx.controlloop import Wakeups
from phalanx.sweep import loop as sweep_loop
from phalanx.sweep.decide import SweepPlan


def _trial(name, suspend=False):
    return {"metadata": {"name": name}, "spec": {"suspend": suspend}}


@pytest.mark.parametrize("seen, plan, shown", [
    ([], SweepPlan(), True),  # nothing done, nothing to wait for
    ([_trial("s-0")], SweepPlan(create=[_trial("s-0")]), True),
    ([], SweepPlan(create=[_trial("s-0")]), False),  # not in the index yet
    ([_trial("s-0", suspend=True)], SweepPlan(suspend=["s-0"]), True),
    ([_trial("s-0")], SweepPlan(suspend=["s-0"]), False),  # the index still shows it running
    ([], SweepPlan(suspend=["s-0"]), True),  # gone: nothing to stop
])
def test_the_next_pass_waits_until_the_index_shows_the_trials(seen, plan, shown):
    assert sweep_loop.trials_show(seen, plan) is shown


class _Kube:
    def __init__(self, create_status=None):
        self.create_status, self.calls = create_status, []

    async def create_job(self, namespace, obj):
        self.calls.append(("create", obj["metadata"]["name"]))
        if self.create_status is not None:
            exc = ApiException(status=self.create_status, reason="Reason")
            exc.body = '{"message": "admission webhook denied the request: no GPUs for you"}'
            raise exc
        return True

    async def suspend_job(self, namespace, name):
        self.calls.append(("suspend", name))

    async def patch_status(self, namespace, name, status, before, plural):
        self.calls.append(("status", plural, status))


STATUS = {"phase": "Running", "totalTrials": 2, "trials": [{"name": "s-0", "index": 0, "phase": "Pending"},
                                                          {"name": "s-1", "index": 1, "phase": "Running"}]}


def _execute(kube, plan, monkeypatch):
    events = []
    monkeypatch.setattr(kopf, "event", lambda body, **kwargs: events.append(kwargs))
    obj = {"metadata": {"name": "s", "namespace": "ns"}, "status": STATUS}
    body = {"status": plan.status or STATUS}  # the watch shows the write at once
    asyncio.run(sweep_loop.execute(kube, "ns", "s", obj, plan, body))
    return events


def test_a_trial_the_api_server_rejects_fails_with_its_words_and_the_sweep_goes_on(monkeypatch):
    kube = _Kube(create_status=403)
    events = _execute(kube, SweepPlan(create=[_trial("s-0")]), monkeypatch)
    (_, plural, status) = kube.calls[-1]
    assert plural == constants.SWEEP_PLURAL
    rejected = next(t for t in status["trials"] if t["name"] == "s-0")
    assert rejected["phase"] == "Failed" and "no GPUs for you" in rejected["message"]
    assert events == [{"type": "Warning", "reason": constants.SweepReason.CREATE_REJECTED,
                       "message": "s-0: admission webhook denied the request: no GPUs for you"}]


@pytest.mark.parametrize("status", [500, 429])
def test_other_create_errors_are_not_a_rejection(status, monkeypatch):
    """API trouble is raised (a pass that backs off); 409 never reaches the loop: Kube answers it."""
    with pytest.raises(ApiException):
        _execute(_Kube(create_status=status), SweepPlan(create=[_trial("s-0")]), monkeypatch)


def test_a_plan_is_carried_out_in_order(monkeypatch):
    kube = _Kube()
    written = {**STATUS, "phase": "Running", "message": "1 trial running"}
    plan = SweepPlan(create=[_trial("s-1")], suspend=["s-0"], status=written,
                     events=[("Normal", constants.SweepReason.TRIAL_CREATED, "created s-1")])
    events = _execute(kube, plan, monkeypatch)
    assert kube.calls == [("create", "s-1"), ("suspend", "s-0"), ("status", constants.SWEEP_PLURAL, written)]
    assert [e["reason"] for e in events] == [constants.SweepReason.TRIAL_CREATED]


def test_a_failing_pass_backs_off_on_the_shared_scheme_and_a_good_one_starts_over(monkeypatch):
    memo = kopf.Memo(config=None, kube=_Kube(), leader=None, sweep_wakeups=Wakeups())
    loop = sweep_loop.SweepLoop(memo, "ns", "s", {"metadata": {"name": "s"}}, {}, None)
    waits = []

    async def back_off(wake, consecutive, limit=None):
        waits.append((consecutive, limit))

    async def fail():
        raise RuntimeError("a bug")

    async def nothing_to_do():
        return {"status": {}}, SweepPlan()

    async def resync(wake):
        waits.append("resync")

    monkeypatch.setattr(sweep_loop, "back_off", back_off)
    monkeypatch.setattr(sweep_loop, "resync", resync)
    monkeypatch.setattr(loop, "decide", fail)
    assert asyncio.run(loop.reconcile()) and asyncio.run(loop.reconcile())
    limit = sweep_loop.ERROR_BACKOFF_LIMIT_SECONDS
    assert waits == [(1, limit), (2, limit)] and loop.errors == 2
    monkeypatch.setattr(loop, "decide", nothing_to_do)
    assert asyncio.run(loop.reconcile())
    assert waits == [(1, limit), (2, limit), "resync"] and loop.errors == 0
    assert memo.sweep_wakeups.events == {("ns", "s"): loop.wake}
