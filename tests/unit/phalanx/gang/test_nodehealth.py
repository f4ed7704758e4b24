"""gang/nodehealth.py: node signals, job evidence, and what to quarantine, renew and release."""

from datetime import UTC, datetime, timedelta

import pytest

from phalanx.api.config import HealthConfig
from phalanx.api.quarantine import MAX_EVIDENCE, NodeQuarantineSpec
from phalanx.constants import FailureCategory, NodeExclusion, QuarantineReason
from phalanx.gang.inventory import NodeInfo
from phalanx.gang.nodehealth import (
    Evidence,
    Quarantine,
    failure_evidence,
    implicates,
    mark_quarantined,
    next_expiry,
    node_signal,
    plan_health,
    quarantine_object,
)
from phalanx.gang.planner import GangRequest, Placement, Unschedulable, plan_gang, plan_queue

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
CONFIG = HealthConfig(unhealthy_taints=["example.com/gpu-bad"])
GPU = "nvidia.com/gpu"


def node(conditions=(), taints=()):
    return {"metadata": {"name": "n1"},
            "status": {"conditions": [{"type": "Ready", "status": "True"},
                                      *({"type": t, "status": s, "message": "xid 79"} for t, s in conditions)]},
            "spec": {"taints": [{"key": k, "effect": "NoSchedule"} for k in taints]}}


@pytest.mark.parametrize(("conditions", "taints", "signal"), [
    ((), (), None),
    ((("SysLogsXIDError", "True"),), (), "condition SysLogsXIDError=True: xid 79"),
    ((("SysLogsXIDError", "False"),), (), None),
    ((("GpuUnhealthy", "Unknown"),), (), None),
    ((("MemoryPressure", "True"),), (), None),  # not configured as a device signal
    ((), ("example.com/gpu-bad",), "taint example.com/gpu-bad"),
    ((), ("node.kubernetes.io/unreachable",), None),  # the planner already leaves it out: not counted twice
])
def test_node_signal(conditions, taints, signal):
    assert node_signal(node(conditions, taints), CONFIG) == signal


def test_the_conditions_are_configurable():
    config = HealthConfig(unhealthy_conditions=["MemoryPressure"])
    assert node_signal(node([("MemoryPressure", "True")]), config).startswith("condition MemoryPressure")
    assert node_signal(node([("SysLogsXIDError", "True")]), config) is None


@pytest.mark.parametrize(("failure", "implicated"), [
    ({"category": FailureCategory.COMMUNICATION, "reason": "exited"}, True),
    ({"category": FailureCategory.PREFLIGHT, "reason": "exited"}, True),
    ({"category": FailureCategory.INFRASTRUCTURE, "reason": "NodeLost"}, True),
    ({"category": FailureCategory.INFRASTRUCTURE, "reason": "Evicted"}, False),  # preemption, eviction: not the node's fault
    ({"category": FailureCategory.HANG, "reason": "Hang"}, False),  # the job-wide no-progress timeout names rank 0 only
    ({"category": FailureCategory.HANG, "reason": "exited", "rank": 5}, True),  # a rank's own watchdog
    ({"category": FailureCategory.USER_CODE, "reason": "exited", "message": "KeyError: 'x'"}, False),
    ({"category": FailureCategory.USER_CODE, "reason": "exited", "message": "RuntimeError: CUDA error: uncorrectable ECC error encountered"}, True),
    ({"category": FailureCategory.OUT_OF_MEMORY, "reason": "OOMKilled", "message": "Xid 31"}, False),
    ({"category": FailureCategory.INVALID_CONFIG, "reason": "exited"}, False),
    ({"category": FailureCategory.UNKNOWN, "reason": "exited"}, False),
])
def test_which_failures_implicate_the_node(failure, implicated):
    assert implicates(failure) is implicated


def job(failure, nodes=("n0", "n1"), uid="u1"):
    return {"metadata": {"namespace": "team", "name": "j", "uid": uid},
            "status": {"lastFailure": failure, "placement": {"nodes": list(nodes)}}}


def test_failure_evidence_names_the_node_the_failure_recorded():
    failure = {"pod": "j-node-1", "nodeRank": 1, "node": "n1", "rank": 9, "reason": "exited",
               "category": "CommunicationError", "message": "NCCL error: unhandled system error",
               "time": "2026-01-01T11:59:00Z"}
    found = failure_evidence(job(failure))
    assert (found.node, found.job, found.node_rank, found.category) == ("n1", "team/j", 1, "CommunicationError")
    assert found.time == NOW - timedelta(minutes=1)
    assert found.key == ("u1", "2026-01-01T11:59:00Z", "j-node-1")
    # the placement moved on since the failure (a later attempt): the recorded node is blamed, not rank 1's now
    assert failure_evidence(job(failure, nodes=("n5", "n6"))).node == "n1"
    assert failure_evidence(job({**failure, "node": None})) is None  # an older record without the node
    assert failure_evidence(job({**failure, "category": "UserCodeError", "message": "ValueError"})) is None
    assert failure_evidence(job({**failure, "time": None})) is None
    assert failure_evidence({"metadata": {}, "status": {}}) is None


@pytest.mark.parametrize("bad", [
    {"time": "2026-01-01T11:59:00"},  # no zone: cannot be compared with the window
    {"time": ["2026"]}, {"time": "x" * 10_000},
    {"node": ["n1"]}, {"node": "n" * 300}, {"node": 7},
    {"category": ["CommunicationError"]}, {"reason": {"a": 1}}, {"message": ["Xid"], "category": "Unknown"},
])
def test_malformed_failures_are_no_evidence_and_never_raise(bad):
    failure = {"pod": "p", "nodeRank": 0, "node": "n1", "reason": "exited", "category": "CommunicationError",
               "message": "NCCL error", "time": "2026-01-01T11:59:00Z", **bad}
    found = failure_evidence(job(failure))
    assert found is None or (isinstance(found.node, str) and found.time.tzinfo is not None)
    plan_health({"n1": None}, {}, [found] if found else [], NOW, CONFIG)
    assert failure_evidence({"status": {"lastFailure": ["x"]}}) is None


def ev(node, minutes_ago, job="team/a", category="CommunicationError"):
    when = NOW - timedelta(minutes=minutes_ago)
    return Evidence(node, category, when, "NCCL error", job, 0, key=(job, when))


def test_a_signal_quarantines_at_once_and_renews_while_it_lasts():
    actions = plan_health({"n1": "condition SysLogsXIDError=True", "n2": None}, {}, [], NOW, CONFIG)
    assert [(q.node, q.reason) for q in actions.create] == [("n1", QuarantineReason.CONDITION)]
    assert actions.create[0].expires_at == NOW + timedelta(seconds=CONFIG.quarantine_seconds)
    taint = plan_health({"n1": "taint example.com/gpu-bad"}, {}, [], NOW, CONFIG)
    assert taint.create[0].reason == QuarantineReason.TAINT
    soon = {"n1": Quarantine("n1", "Condition", NOW + timedelta(minutes=5))}
    later = {"n1": Quarantine("n1", "Condition", NOW + timedelta(minutes=50))}
    assert plan_health({"n1": "condition X=True"}, soon, [], NOW, CONFIG).renew == {"n1": NOW + timedelta(hours=1)}
    assert plan_health({"n1": "condition X=True"}, later, [], NOW, CONFIG).renew == {}  # no write on every pass
    expired = {"n1": Quarantine("n1", "Condition", NOW - timedelta(seconds=1))}
    still = plan_health({"n1": "condition X=True"}, expired, [], NOW, CONFIG)
    assert still.release == [] and "n1" in still.renew


NODES = ("n1", "n2", "n3")


@pytest.mark.parametrize(("evidence", "quarantined"), [
    ([ev("n1", 10)], []),  # once is chance
    ([ev("n1", 10), ev("n1", 5, job="lab/b")], ["n1"]),  # twice within the hour, from two namespaces
    ([ev("n1", 10), ev("n1", 5)], []),  # twice by one job: one tenant's word
    ([ev("n1", 10), ev("n1", 5, job="team/b")], []),  # two jobs of one namespace
    ([ev("n1", 90), ev("n1", 5)], []),  # the first fell out of the window
    ([ev("n1", 10), ev("n2", 5)], []),  # different nodes
])
def test_evidence_quarantines_a_node_named_threshold_times_within_the_window(evidence, quarantined):
    actions = plan_health(dict.fromkeys(NODES), {}, evidence, NOW, CONFIG)
    assert [q.node for q in actions.create] == quarantined
    for q in actions.create:
        assert q.reason == QuarantineReason.JOB_EVIDENCE and q.tipping_job == evidence[-1].job
        assert "2 failures within 3600s named node n1" in q.message


def test_a_lost_node_counts_without_a_second_namespace():
    lost = Evidence("n1", "NodeLost", NOW - timedelta(minutes=5), "node lost", "team/a", 0, key=(1,), observed=True)
    assert [q.node for q in plan_health(dict.fromkeys(NODES), {}, [ev("n1", 10), lost], NOW, CONFIG).create] == ["n1"]
    failure = {"nodeRank": 0, "node": "n0", "category": "NodeLost", "reason": "NodeLost", "time": "2026-01-01T11:00:00Z"}
    assert failure_evidence(job(failure)).observed
    assert not failure_evidence(job({**failure, "reason": "Failed", "category": "CommunicationError"})).observed


def test_one_tenant_cannot_quarantine_the_cluster():
    nodes = {f"n{i}": None for i in range(40)}
    flood = [ev(f"n{i}", 10, job=f"ns{k}/j") for i in range(40) for k in range(2)]
    flood += [ev("n7", 9, job="ns9/j")]  # named most: first in line
    created = plan_health(nodes, {}, flood, NOW, CONFIG).create
    assert [q.node for q in created][0] == "n7" and len(created) == 4  # 10% of 40
    held = {f"n{i}": Quarantine(f"n{i}", QuarantineReason.JOB_EVIDENCE, NOW + timedelta(minutes=5)) for i in (1, 2, 3)}
    assert len(plan_health(nodes, held, flood, NOW, CONFIG).create) == 1
    manual = {"n1": Quarantine("n1", QuarantineReason.MANUAL, None)}  # an admin's does not use up the room
    assert len(plan_health(nodes, manual, flood, NOW, CONFIG).create) == 4
    assert len(plan_health({"n1": None}, {}, [ev("n1", 10), ev("n1", 9, job="x/y")], NOW, CONFIG).create) == 1


def test_evidence_threshold_is_configurable_and_an_existing_quarantine_is_not_duplicated():
    known = dict.fromkeys(NODES)
    assert [q.node for q in plan_health(known, {}, [ev("n1", 1)], NOW, HealthConfig(evidence_threshold=1, evidence_namespaces=1)).create] == ["n1"]
    held = {"n1": Quarantine("n1", "Manual", None)}
    two = [ev("n1", 10), ev("n1", 5, job="lab/b")]
    assert plan_health(known, held, two, NOW, CONFIG).create == []
    assert plan_health({"n2": None}, {}, two, NOW, CONFIG).create == []  # n1 is gone
    assert plan_health({"n1": "condition X=True"}, {}, two, NOW, CONFIG).create[0].reason == "Condition"


def test_disabled_creates_nothing_but_still_releases():
    off = HealthConfig(enabled=False)
    expired = {"n1": Quarantine("n1", "JobEvidence", NOW - timedelta(seconds=1))}
    actions = plan_health({"n2": "condition X=True", "n3": None}, expired, [ev("n3", 10), ev("n3", 5)], NOW, off)
    assert actions.create == [] and actions.release == ["n1"]


@pytest.mark.parametrize(("expires", "released"), [
    (NOW - timedelta(seconds=1), True),
    (NOW + timedelta(seconds=1), False),
    (None, False),  # an admin's, without an expiry: until deleted
])
def test_expiry_releases(expires, released):
    actions = plan_health({"n1": None}, {"n1": Quarantine("n1", "JobEvidence", expires)}, [], NOW, CONFIG)
    assert actions.release == (["n1"] if released else [])


def test_quarantine_object_passes_the_crd_model_and_keeps_the_newest_evidence():
    many = [ev("n1", 40 - i, job=f"ns{i}/j") for i in range(MAX_EVIDENCE + 4)]
    new = plan_health({"n1": None}, {}, many, NOW, CONFIG).create[0]
    obj = quarantine_object(new)
    assert obj["metadata"]["name"] == "n1" and obj["kind"] == "NodeQuarantine"
    spec = NodeQuarantineSpec.model_validate(obj["spec"])
    assert len(spec.evidence) == MAX_EVIDENCE and spec.evidence[-1].time == many[-1].time
    assert spec.reason == "JobEvidence" and spec.expires_at == NOW + timedelta(hours=1)
    assert Quarantine.from_object(obj) == Quarantine("n1", "JobEvidence", NOW + timedelta(hours=1))


def test_next_expiry():
    assert next_expiry([], NOW) is None
    assert next_expiry([Quarantine("a", "Manual"), Quarantine("b", "Condition", NOW + timedelta(seconds=30))], NOW) == 30
    assert next_expiry([Quarantine("b", "Condition", NOW - timedelta(seconds=30))], NOW) == 0


def test_the_planner_leaves_quarantined_nodes_out_of_new_placements():
    nodes = [NodeInfo(f"n{i}", {"kubernetes.io/hostname": f"n{i}"}, {GPU: 8, "pods": 110}) for i in range(3)]
    request = GangRequest(key="ns/j", count=2, requests={GPU: 8, "pods": 1})
    marked = mark_quarantined(nodes, ["n0"])
    assert [n.quarantined for n in marked] == [True, False, False] and mark_quarantined(nodes, []) == nodes
    placed = plan_gang(request, marked, [])
    assert isinstance(placed, Placement) and sorted(placed.nodes) == ["n1", "n2"]
    three = GangRequest(key="ns/j", count=3, requests={GPU: 8, "pods": 1})
    refused = plan_gang(three, marked, [])
    assert isinstance(refused, Unschedulable)
    assert refused.excluded == {NodeExclusion.QUARANTINED: 1} and "1 quarantined" in refused.message
    queue = plan_queue([three], mark_quarantined(nodes, ["n0", "n1"]))
    assert queue.results["ns/j"].excluded == {"quarantined": 2}
