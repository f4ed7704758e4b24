"""Controller expectations of a job's pass (phalanx.expectations): what the pod index must show
before the next pass decides."""

from __future__ import annotations

import asyncio
import time

import pytest

from phalanx import constants, expectations
from phalanx.decision import Plan
from phalanx.expectations import expectations_met, expects_anything


def pod(name, gated=False, deleting=False):
    meta = {"name": name, **({"deletionTimestamp": "2026-01-01T00:00:00Z"} if deleting else {})}
    return {"metadata": meta, "spec": {"schedulingGates": [{"name": constants.GANG_SCHEDULING_GATE}] if gated else []}}


def created(*names):
    return [{"kind": "Pod", "metadata": {"name": n}} for n in names]


@pytest.mark.parametrize("pods, plan, met", [
    ([], Plan(), True),
    ([pod("p-0")], Plan(create=created("p-0")), True),
    ([], Plan(create=created("p-0")), False),  # the create not seen yet
    ([pod("p-0")], Plan(create=created("p-0", "p-1")), False),
    ([], Plan(create=[{"kind": "Service", "metadata": {"name": "svc"}}]), True),  # pods only
    ([pod("p-0")], Plan(delete_pods=["p-0"]), False),  # still there, not terminating
    ([pod("p-0", deleting=True)], Plan(delete_pods=["p-0"]), True),  # terminating counts as deleted
    ([], Plan(delete_pods=["p-0"]), True),
    ([pod("p-0", gated=True)], Plan(release=["p-0"]), False),  # a pass would release it again
    ([pod("p-0")], Plan(release=["p-0"]), True),
    ([pod("p-1", gated=True)], Plan(release=["p-0"]), True),  # another pod's gate is not ours to wait for
])
def test_the_index_shows_a_pass_once_its_creates_deletes_and_releases_show(pods, plan, met):
    assert expectations_met(pods, plan) is met


@pytest.mark.parametrize("plan, expects", [
    (Plan(), False),
    (Plan(create=[{"kind": "ConfigMap", "metadata": {"name": "c"}}]), False),
    (Plan(create=created("p-0")), True),
    (Plan(delete_pods=["p-0"]), True),
    (Plan(release=["p-0"]), True),
    (Plan(force_delete_pods=["p-0"]), False),  # a force delete waits for nothing
])
def test_only_pod_creates_deletes_and_releases_are_waited_for(plan, expects):
    assert expects_anything(plan) is expects


def test_the_next_pass_waits_until_released_pods_show_ungated():
    """Expectations cover releases: a pass on a view that still shows them gated would plan and
    release them again (a 422 per pod, and a booking of nodes the gang already holds)."""
    from phalanx.decision import Plan

    gated = {"metadata": {"name": "p-0"}, "spec": {"schedulingGates": [{"name": constants.GANG_SCHEDULING_GATE}]}}
    index = {("default", "j"): [gated]}
    plan = Plan(release=["p-0"])

    async def main():
        waiter = asyncio.ensure_future(expectations.await_expectations(("default", "j"), index, plan))
        await asyncio.sleep(0.3)
        assert not waiter.done()  # still gated in the index
        index[("default", "j")] = [{"metadata": {"name": "p-0"}, "spec": {"schedulingGates": []}}]
        t0 = time.monotonic()
        await asyncio.wait_for(waiter, 2.0)
        return time.monotonic() - t0

    assert asyncio.run(main()) < 1.0

