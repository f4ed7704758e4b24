"""phalanx/nodehealth.py: the watches feed NodeHealth, its pass creates, renews and deletes
NodeQuarantines, posts Events and keeps the metrics."""

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from phalanx import nodehealth as module
from phalanx.api.config import HealthConfig
from phalanx.metrics import NODE_QUARANTINED, QUARANTINES
from phalanx.nodehealth import NodeHealth

CONFIG = HealthConfig()


class FakeKube:
    def __init__(self):
        self.created, self.renewed, self.deleted, self.versions = [], [], [], []

    async def create_quarantine(self, obj):
        self.created.append(obj)
        return True

    async def renew_quarantine(self, name, expires_at):
        self.renewed.append((name, expires_at))

    async def delete_quarantine(self, name, resource_version=""):
        self.deleted.append(name)
        self.versions.append(resource_version)
        return True


@pytest.fixture
def events(monkeypatch):
    posted = []
    monkeypatch.setattr(module.kopf, "event", lambda ref, **kw: posted.append((ref["kind"], ref["metadata"]["name"], kw)))
    return posted


def failing_job(name, when, node_rank=1, category="CommunicationError", namespace="team"):
    return {"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"namespace": namespace, "name": name, "uid": f"uid-{name}"},
            "status": {"placement": {"nodes": ["n0", "n1"]},
                       "lastFailure": {"pod": f"{name}-node-{node_rank}", "nodeRank": node_rank, "node": f"n{node_rank}", "reason": "exited",
                                       "category": category, "message": "NCCL error", "time": when}}}


def test_two_jobs_implicating_a_node_quarantine_it_once_with_events(events):
    health, kube = NodeHealth(), FakeKube()
    health.node_event(None, "n1", {"metadata": {"name": "n1", "uid": "u-n1"}}, CONFIG)
    when = datetime.now(UTC).replace(microsecond=0)
    first = failing_job("a", (when - timedelta(minutes=2)).isoformat())
    health.job_event(None, first)
    health.job_event("MODIFIED", first)  # the same failure, seen again: counts once
    assert asyncio.run(_pass(health, kube)) == [] and len(health.evidence) == 1
    health.job_event("MODIFIED", failing_job("c", when.isoformat()))  # the same tenant again: its word alone
    assert asyncio.run(_pass(health, kube)) == [] and len(health.evidence) == 2
    health.job_event("MODIFIED", failing_job("b", when.isoformat(), namespace="lab"))
    created = asyncio.run(_pass(health, kube))
    assert [(o["metadata"]["name"], o["spec"]["reason"]) for o in created] == [("n1", "JobEvidence")]
    assert [e["job"] for e in created[0]["spec"]["evidence"]] == ["team/a", "team/c", "lab/b"]
    assert [(kind, name, kw["reason"]) for kind, name, kw in events] == [
        ("Node", "n1", "NodeQuarantined"), ("TrainingJob", "b", "NodeQuarantined")]
    assert health.evidence == {}  # spent: the node starts over after its quarantine
    health.job_event("MODIFIED", failing_job("b", when.isoformat(), namespace="lab"))
    assert health.evidence == {}  # and the same failure is not counted again


def test_a_user_code_failure_is_no_evidence(events):
    health = NodeHealth()
    health.job_event(None, failing_job("a", datetime.now(UTC).isoformat(), category="UserCodeError"))
    assert health.evidence == {}


def test_a_node_signal_quarantines_and_the_quarantine_set_follows_the_objects(events):
    changed = []
    health, kube = NodeHealth(changed=lambda: changed.append(1)), FakeKube()
    body = {"metadata": {"name": "n1", "uid": "node-uid"},
            "status": {"conditions": [{"type": "SysLogsXIDError", "status": "True", "message": "Xid 79"}]}}
    health.node_event(None, "n1", body, CONFIG)
    (created,) = asyncio.run(_pass(health, kube))
    assert created["spec"]["reason"] == "Condition" and "Xid 79" in created["spec"]["message"]
    assert events[0][:2] == ("Node", "n1")
    before = QUARANTINES.labels("Condition")._value.get()
    assert health.quarantined() == frozenset()  # until the watch shows the object
    health.quarantine_event(None, "n1", created)
    assert health.quarantined() == {"n1"} and changed == [1]
    assert NODE_QUARANTINED.labels("n1", "Condition")._value.get() == 1
    health.quarantine_event("DELETED", "n1", created)  # an admin cleared it
    assert health.quarantined() == frozenset() and changed == [1, 1]
    assert ("Node", "n1") == events[-1][:2] and events[-1][2]["reason"] == "NodeQuarantineReleased"
    assert QUARANTINES.labels("Condition")._value.get() == before


def test_an_expired_quarantine_is_deleted_and_no_longer_excludes(events):
    health, kube = NodeHealth(), FakeKube()
    past = (datetime.now(UTC) - timedelta(seconds=5)).isoformat()
    health.quarantine_event(None, "n2", {"metadata": {"name": "n2"},
                                         "spec": {"node": "n2", "reason": "JobEvidence", "expiresAt": past}})
    assert health.quarantined() == frozenset()  # expired: the planner may use it before the delete lands
    asyncio.run(_pass(health, kube))
    assert kube.deleted == ["n2"]


async def _pass(health, kube):
    before = len(kube.created)
    await health.act(kube, health.decide(CONFIG), CONFIG)
    return kube.created[before:]


def test_the_task_wakes_for_a_change_and_only_the_leader_writes(events):
    class Follower:
        def leading(self):
            return False

    async def main(leader):
        health, kube = NodeHealth(), FakeKube()
        task = asyncio.create_task(health.run(kube, HealthConfig(resync_seconds=60), leader))
        await asyncio.sleep(0)
        body = {"metadata": {"name": "n1"}, "status": {"conditions": [{"type": "GpuUnhealthy", "status": "True"}]}}
        health.node_event(None, "n1", body, CONFIG)
        await asyncio.sleep(0.05)
        task.cancel()
        return kube.created

    assert [o["metadata"]["name"] for o in asyncio.run(main(None))] == ["n1"]
    assert asyncio.run(main(Follower())) == []


def test_the_scheduler_plans_against_the_quarantined_set():
    from phalanx.gang.inventory import NodeInfo
    from phalanx.scheduler import Scheduler

    scheduler = Scheduler()
    scheduler.attach({name: [NodeInfo(name, {}, {})] for name in ("n0", "n1")}, {None: []})
    assert [n.quarantined for n in scheduler._nodes()] == [False, False]
    health = NodeHealth(changed=scheduler.changed)
    scheduler.quarantined = health.quarantined
    health.quarantine_event(None, "n1", {"metadata": {"name": "n1"}, "spec": {"node": "n1", "reason": "Manual"}})
    assert [(n.name, n.quarantined) for n in scheduler._nodes()] == [("n0", False), ("n1", True)]


def test_one_task_however_many_handlers_start_it_and_none_after_stop(monkeypatch):
    """Every object's memo is a copy sharing memo.node_health: the task lives on it, starts once,
    is cancelled by stop, and does not start again after it (kopf waits for strays at exit)."""
    import asyncio

    async def forever(self, kube, config, leader=None):
        await asyncio.Event().wait()

    monkeypatch.setattr(NodeHealth, "run", forever)

    async def scenario():
        health = NodeHealth()
        for _ in range(3):
            health.start(None, None)
        assert sum(t.get_name() == "phalanx-node-health" for t in asyncio.all_tasks()) == 1
        task = health.task
        health.stop()
        await asyncio.sleep(0)
        health.start(None, None)
        assert task.cancelled() and health.task is task
        assert not any(t.get_name() == "phalanx-node-health" and not t.done() for t in asyncio.all_tasks())

    asyncio.run(scenario())


def test_a_replica_that_never_leads_keeps_memory_bounded(events):
    health = NodeHealth()
    old = (datetime.now(UTC) - timedelta(hours=3)).isoformat()
    for i in range(300):
        health.job_event(None, failing_job(f"j{i}", old))
    assert len(health.evidence) == 300
    health.prune(CONFIG)
    assert health.evidence == {} and health.seen == {}
    now = datetime.now(UTC).isoformat()
    module.MAX_TRACKED, limit = 50, module.MAX_TRACKED
    try:
        for i in range(120):
            health.job_event(None, failing_job(f"k{i}", now))
        assert len(health.evidence) <= 50 and len(health.seen) <= 50
    finally:
        module.MAX_TRACKED = limit


class Standby:
    def leading(self):
        return False


def test_a_standby_spends_the_evidence_a_quarantine_took_and_posts_no_release_event(events):
    """After a failover, the new leader must not quarantine again from evidence the old leader's
    quarantine spent (an admin may have deleted it since); only the leader says it was released."""
    health = NodeHealth()
    health.leader = Standby()
    when = datetime.now(UTC).isoformat()
    for name, namespace in (("a", "team"), ("b", "lab")):
        health.job_event(None, failing_job(name, when, namespace=namespace))
    assert len(health.evidence) == 2
    created = {"metadata": {"name": "n1", "resourceVersion": "7"}, "spec": {"node": "n1", "reason": "JobEvidence"}}
    health.quarantine_event("ADDED", "n1", created)  # the old leader's quarantine, seen by the standby
    assert health.evidence == {}
    health.quarantine_event("DELETED", "n1", created)  # an admin cleared it; the old leader is gone
    assert events == []
    assert health.decide(CONFIG).create == []  # the new leader does not put it back


def test_an_expired_quarantine_is_deleted_at_the_version_seen(events):
    health, kube = NodeHealth(), FakeKube()
    past = (datetime.now(UTC) - timedelta(seconds=5)).isoformat()
    health.quarantine_event(None, "n2", {"metadata": {"name": "n2", "resourceVersion": "41"},
                                         "spec": {"node": "n2", "reason": "Manual", "expiresAt": past}})
    asyncio.run(_pass(health, kube))
    assert kube.versions == ["41"]  # an admin's later change (409) is not deleted with it


def test_failures_older_than_a_quarantine_seen_first_are_spent(events):
    """A replica that starts sees the quarantine before the job statuses behind it: those failures
    were spent on it; a later one counts."""
    health = NodeHealth()
    created = datetime.now(UTC).replace(microsecond=0)
    health.quarantine_event("ADDED", "n1", {"metadata": {"name": "n1", "creationTimestamp": created.isoformat()},
                                            "spec": {"node": "n1", "reason": "JobEvidence"}})
    health.job_event(None, failing_job("a", (created - timedelta(minutes=1)).isoformat()))
    assert health.evidence == {}
    health.job_event(None, failing_job("b", (created + timedelta(minutes=1)).isoformat(), namespace="lab"))
    assert [e.job for e in health.evidence.values()] == ["lab/b"]


def test_a_quarantine_an_admin_extended_since_the_decision_is_not_deleted(events):
    health, kube = NodeHealth(), FakeKube()
    past = (datetime.now(UTC) - timedelta(seconds=5)).isoformat()
    obj = {"metadata": {"name": "n2", "resourceVersion": "41"}, "spec": {"node": "n2", "reason": "Manual", "expiresAt": past}}
    health.quarantine_event(None, "n2", obj)
    actions = health.decide(CONFIG)
    assert actions.release == ["n2"]
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    health.quarantine_event("MODIFIED", "n2", {"metadata": {"name": "n2", "resourceVersion": "42"},
                                               "spec": {"node": "n2", "reason": "Manual", "expiresAt": later}})
    asyncio.run(health.act(kube, actions, CONFIG))
    assert kube.deleted == []
