"""Native gang placement with the real kube-scheduler on a private pool of kwok GPU nodes."""

from __future__ import annotations

import pytest
from kubernetes import client

from localcluster import finish_pod
from tests.integration.harness import Jobs, pooled, wait_for


@pytest.fixture
def jobs(api, namespace, operator):
    return Jobs(api, namespace)


def bound(jobs, name, attempt=0):
    return [p for p in jobs.pods(name, attempt) if p.spec.node_name]


def all_running(jobs, name, n):
    pods = jobs.pods(name, 0)
    return len(pods) == n and all(p.status.phase == "Running" for p in pods) and pods


def schedulable(jobs, name):
    return jobs.condition(name, "Schedulable") or {}


def test_pods_bind_exactly_where_the_plan_says(jobs, pool):
    jobs.create(pooled(pool, "placed", 4))
    pods = wait_for(lambda: all_running(jobs, "placed", 4), 60, "gang Running")
    status = jobs.status("placed")
    planned = status["placement"]["nodes"]
    by_rank = {int(p.metadata.labels["phalanx.dev/node-rank"]): p.spec.node_name for p in pods}
    assert [by_rank[r] for r in range(4)] == planned
    for p in pods:
        field = p.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms[0].match_fields[0]
        assert (field.key, field.operator, field.values) == ("metadata.name", "In", [p.spec.node_name])
    # 4 nodes fit under one subblock: the plan must not spread wider.
    subblocks = {pool["labels"][n]["phalanx.dev/topology-subblock"] for n in planned}
    assert len(subblocks) == 1 and status["placement"]["span"]["subblock"] == 1
    # Consecutive ranks share a rack (depth-first rank order).
    racks = [pool["labels"][n]["phalanx.dev/topology-rack"] for n in planned]
    assert racks[0] == racks[1] and racks[2] == racks[3]
    assert status["placement"]["predictedAllreduceSeconds"] > 0
    assert schedulable(jobs, "placed")["reason"] == "Placed"


def test_a_gang_placed_at_once_is_created_pinned(jobs, pool):
    """Placed before its pods exist: each pod created pinned and ungated, never patched
    (generation 1). A first job proves the operator's node index already shows the new pool."""
    jobs.create(pooled(pool, "warm", 1))
    wait_for(lambda: all_running(jobs, "warm", 1), 60, "a first gang Running on the pool")
    jobs.create(pooled(pool, "pinned", 4))
    pods = wait_for(lambda: all_running(jobs, "pinned", 4), 60, "gang Running")
    assert {p.metadata.generation for p in pods} == {1} and not any(p.spec.scheduling_gates for p in pods)
    assert [p.spec.node_name for p in sorted(pods, key=lambda p: int(p.metadata.labels["phalanx.dev/node-rank"]))] \
        == jobs.status("pinned")["placement"]["nodes"]
    assert any("pinned to their nodes" in e.message for e in jobs.events("pinned") if e.reason == "Creating")


def test_required_topology_that_cannot_fit_waits_with_reason(jobs, pool):
    jobs.create(pooled(pool, "toobig", 6, scheduling={"topology": {"required": "subblock"}}))
    cond = wait_for(lambda: (c := schedulable(jobs, "toobig")).get("status") == "False" and c, 30, "Schedulable=False")
    assert "under one subblock" in cond["message"] and "the largest has 4" in cond["message"], cond["message"]
    assert not bound(jobs, "toobig")
    assert all(p.spec.scheduling_gates for p in jobs.pods("toobig"))
    assert jobs.status("toobig")["phase"] == "Scheduling"


def test_gang_waits_then_starts_when_capacity_frees(cluster, jobs, pool):
    jobs.create(pooled(pool, "first", 12))
    first = wait_for(lambda: all_running(jobs, "first", 12), 90, "first gang Running")
    jobs.create(pooled(pool, "second", 8))
    # A pass that re-plans "first" from a lagging watch books nodes until the API server refuses
    # that second release (Gangs.released drops the booking then): the reason settles on 4 fit.
    cond = wait_for(lambda: (c := schedulable(jobs, "second")).get("status") == "False"
                    and "4 fit" in c.get("message", "") and c, 60, "second waits with 4 nodes fitting")
    assert "needs 8 nodes with 8 free nvidia.com/gpu" in cond["message"], cond["message"]
    assert not bound(jobs, "second")  # all or nothing: no partial hold
    for p in first:
        finish_pod(cluster.kubeconfig, jobs.ns, p.metadata.name, 0)
    jobs.wait_phase("first", "Succeeded", 60)
    second = wait_for(lambda: all_running(jobs, "second", 8), 90, "second gang Running after capacity frees")
    # created gated (no room then), pinned and released by one patch each when capacity freed
    assert {p.metadata.generation for p in second} == {2}


def test_two_competing_gangs_never_deadlock(cluster, jobs, pool):
    jobs.create(pooled(pool, "left", 10))
    jobs.create(pooled(pool, "right", 10))

    def one_whole_gang():
        counts = {name: len(bound(jobs, name)) for name in ("left", "right")}
        return sorted(counts.values()) == [0, 10] and counts

    counts = wait_for(one_whole_gang, 90, "exactly one whole gang bound, the other none")
    winner = max(counts, key=counts.get)
    loser = "right" if winner == "left" else "left"
    pods = wait_for(lambda: all_running(jobs, winner, 10), 60, "winner Running")
    assert len(bound(jobs, loser)) == 0
    for p in pods:
        finish_pod(cluster.kubeconfig, jobs.ns, p.metadata.name, 0)
    wait_for(lambda: all_running(jobs, loser, 10), 90, "the other gang runs next")


def test_higher_priority_gang_goes_first(cluster, jobs, pool):
    sched = client.SchedulingV1Api(jobs.core.api_client)
    high = f"high-{pool['id']}"
    sched.create_priority_class({"metadata": {"name": high}, "value": 100000})
    try:
        jobs.create(pooled(pool, "filler", 16))
        filler = wait_for(lambda: all_running(jobs, "filler", 16), 90, "filler Running")
        jobs.create(pooled(pool, "low", 10))
        jobs.create(pooled(pool, "urgent", 10, scheduling={"priorityClassName": high}))
        wait_for(lambda: schedulable(jobs, "urgent").get("status") == "False", 30, "urgent waits")
        for p in filler:
            finish_pod(cluster.kubeconfig, jobs.ns, p.metadata.name, 0)
        wait_for(lambda: all_running(jobs, "urgent", 10), 90, "urgent Running first")
        assert not bound(jobs, "low")
    finally:
        sched.delete_priority_class(high)


def test_a_pinned_creation_cut_short_is_recreated_behind_the_gate(jobs, operator, pool):
    """The operator stopped after creating one pod of a placed gang (pinned, ungated): the
    restarted operator waits for the rest to show, then deletes that pod — it would start without
    its peers — and creates the gang again behind the gate, which is then placed and released."""
    from phalanx.api.config import OperatorConfig
    from phalanx.gang.pins import pin_pod
    from phalanx.render.job import render_children
    from phalanx.validate import validate_job

    operator.stop()
    try:
        obj = jobs.create(pooled(pool, "cut", 2))
        job, problems = validate_job(obj)
        assert job is not None, problems
        first = next(c for c in render_children(job, OperatorConfig(), 0) if c["kind"] == "Pod")
        pin_pod(first, pool["nodes"][0])
        jobs.core.create_namespaced_pod(jobs.ns, first)
    finally:
        operator.start()
    event = wait_for(lambda: next((e for e in jobs.events("cut") if e.reason == "PinnedCreateInterrupted"), None),
                     90, "the cut-short creation noticed")
    assert "1/2 pods of a pinned creation exist" in event.message
    pods = wait_for(lambda: (p := jobs.pods("cut", 1)) and len(p) == 2 and all(x.status.phase == "Running" for x in p) and p,
                    90, "the gang of attempt 1 Running")
    assert {p.metadata.generation for p in pods} == {2}  # created gated, released by a patch
    assert jobs.pods("cut", 0) == [] or all(p.metadata.deletion_timestamp for p in jobs.pods("cut", 0))
    status = jobs.status("cut")
    assert status["restartAttempt"] == 1 and status.get("restarts", 0) == 0
