"""Heterogeneous gangs (spec.roles): API rules, slots, pods, TF_CONFIG, planning all or nothing,
pins, the reconcile's counts, success policy and per-role status, backends and cluster policy."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime

import pytest

from phalanx import constants
from phalanx.api.policy import PolicyRules
from phalanx.api.slots import slot_of, slots
from phalanx.api.types import TrainingJob
from phalanx.backends.base import min_resources
from phalanx.decision import Observed
from phalanx.gang.admission import decision_for
from phalanx.gang.inventory import NodeInfo
from phalanx.gang.pins import pin_affinity
from phalanx.gang.planner import GangRequest, Placement, Unschedulable, plan_gang, plan_queue
from phalanx.lifecycle.reconcile import decide
from phalanx.policy.cluster import policy_problems
from phalanx.render.job import render_children
from phalanx.validate import validate_job

T0 = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)
GPU = constants.RESOURCE_GPU


def job_obj(**spec) -> dict:
    base = {"image": "img:1", "command": ["python", "train.py"], "nodes": 2, "procsPerNode": 1,
            "resources": {"gpus": 8},
            "roles": [{"name": "ps", "replicas": 2, "resources": {"cpu": "4"}},
                      {"name": "chief", "replicas": 1, "command": ["python", "chief.py"], "env": [{"name": "X", "value": "1"}]}]}
    base.update(spec)
    return {"apiVersion": "phalanx.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": "job", "namespace": "team", "uid": "uid-1", "generation": 1}, "spec": base}


def job(**spec) -> TrainingJob:
    return TrainingJob.model_validate(job_obj(**spec))


def problems(**spec) -> list[str]:
    return [f"{p.field}: {p.message}" for p in validate_job(job_obj(**spec))[1]]


# --- API --------------------------------------------------------------------------------------


def test_a_job_with_roles_is_valid_and_counts_every_pod():
    j = job()
    assert problems() == []
    assert j.spec.gang_size == 5 and j.spec.world_size == 2
    assert j.spec.success_roles == ("worker", "ps", "chief")


# --- slots, pods ------------------------------------------------------------------------------


def pods_of(j, **kw):
    return [c for c in render_children(j, **kw) if c["kind"] == "Pod"]


def env_of(pod) -> dict:
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}


def test_every_slot_gets_its_pod_name_hostname_labels_and_back():
    pods = pods_of(job(), attempt=3)
    names = [p["metadata"]["name"] for p in pods]
    assert names == ["job-node-0-3", "job-node-1-3", "job-ps-0-3", "job-ps-1-3", "job-chief-0-3"]
    assert [p["spec"]["hostname"] for p in pods] == [n.rsplit("-", 1)[0] for n in names]
    assert [slot_of(p) for p in pods] == slots(job().spec)
    assert pods[2]["metadata"]["labels"][constants.LABEL_ROLE] == "ps" and constants.LABEL_NODE_RANK not in pods[2]["metadata"]["labels"]
    assert pods[1]["metadata"]["labels"][constants.LABEL_NODE_RANK] == "1"
    assert {p["metadata"]["labels"][constants.LABEL_COMPONENT] for p in pods} == {constants.COMPONENT_WORKER}  # one Service selects all


def test_each_role_has_its_own_resources_command_and_env():
    workers, ps, chief = (pods_of(job())[i]["spec"]["containers"][0] for i in (0, 2, 4))
    assert workers["resources"]["limits"] == {GPU: "8"} and workers["command"] == ["python", "train.py"]
    assert ps["resources"]["limits"] == {"cpu": "4"} and ps["command"] == ["python", "train.py"]
    assert chief["command"] == ["python", "chief.py"] and "resources" not in chief
    assert env_of(pods_of(job())[4])["X"] == "1" and "X" not in env_of(pods_of(job())[0])


def test_role_pods_are_not_ranks_of_the_torch_world_but_know_their_role():
    pods = pods_of(job())
    worker, ps1 = env_of(pods[1]), env_of(pods[3])
    assert worker[constants.ENV_WORLD_SIZE] == "2" and worker[constants.ENV_NODE_RANK] == "1" and worker[constants.ENV_ROLE] == "worker"
    assert constants.ENV_WORLD_SIZE not in ps1 and constants.ENV_NODE_RANK not in ps1 and ps1[constants.ENV_MASTER_ADDR] == "job-node-0.job"
    assert (ps1[constants.ENV_ROLE], ps1[constants.ENV_ROLE_INDEX], ps1[constants.ENV_ROLE_REPLICAS]) == ("ps", "1", "2")
    assert ps1[constants.ENV_ROLES] == "worker=2,ps=2,chief=1" and ps1[constants.ENV_SUBDOMAIN] == "job.team.svc"


def test_a_job_without_roles_renders_no_role_labels_or_env():
    pod = pods_of(job(roles=[]))[0]
    assert constants.LABEL_ROLE not in pod["metadata"]["labels"] and constants.ENV_ROLE not in env_of(pod)


def test_tf_config_lists_every_task_type_and_leaves_the_evaluator_out():
    j = job(framework="tensorflow", resources={}, roles=[{"name": "chief"}, {"name": "ps", "replicas": 2}, {"name": "evaluator"}])
    configs = [json.loads(env_of(p)[constants.ENV_TF_CONFIG]) for p in pods_of(j)]
    cluster = configs[0]["cluster"]
    assert sorted(cluster) == ["chief", "ps", "worker"]
    assert cluster["ps"][1].startswith("job-ps-1.job.team.svc:") and cluster["worker"][0].startswith("job-node-0.job.team.svc:")
    assert [c["task"] for c in configs] == [{"type": "worker", "index": 0}, {"type": "worker", "index": 1},
                                            {"type": "chief", "index": 0}, {"type": "ps", "index": 0},
                                            {"type": "ps", "index": 1}, {"type": "evaluator", "index": 0}]
    assert all(c["cluster"] == cluster for c in configs)


# --- planning ---------------------------------------------------------------------------------


def nodes(n_gpu: int, n_cpu: int) -> list[NodeInfo]:
    gpu = [NodeInfo(f"g{i}", {"kubernetes.io/hostname": f"g{i}"}, {GPU: 8, "cpu": 4000, "pods": 110}) for i in range(n_gpu)]
    cpu = [NodeInfo(f"c{i}", {"kubernetes.io/hostname": f"c{i}"}, {"cpu": 8000, "pods": 110}) for i in range(n_cpu)]
    return gpu + cpu


def request(j=None) -> GangRequest:
    return GangRequest.from_spec((j or job()).spec, "team/job")


def test_roles_are_placed_with_the_workers():
    res = plan_gang(request(), nodes(2, 2))
    assert isinstance(res, Placement)
    assert sorted(res.nodes) == ["g0", "g1"] and len(res.role_nodes["ps"]) == 2 and len(res.role_nodes["chief"]) == 1
    assert len(res.reservations()) == 5 and res.to_status()["roles"]["ps"] == res.role_nodes["ps"]


def test_a_role_that_does_not_fit_holds_nothing_back():
    too_big = job(roles=[{"name": "ps", "replicas": 3, "resources": {"cpu": "60"}}])
    result = plan_queue([request(too_big), GangRequest.from_spec(job(roles=[]).spec, "team/other", creation="z")],
                        nodes(2, 2))
    refused = result.results["team/job"]
    assert isinstance(refused, Unschedulable) and refused.message.startswith("role ps: needs 3 nodes")
    assert isinstance(result.results["team/other"], Placement)  # the workers' reservation was rolled back
    assert {r.gang for r in result.reservations} == {"team/other"}


def test_queue_reserves_role_capacity_before_the_next_gang():
    a = request(job(roles=[{"name": "ps", "replicas": 2, "resources": {"cpu": "8"}}]))
    b = GangRequest.from_spec(job(roles=[{"name": "ps", "replicas": 1, "resources": {"cpu": "8"}}]).spec, "team/b", creation="z")
    result = plan_queue([a, b], nodes(4, 2))
    assert isinstance(result.results["team/job"], Placement)
    refused = result.results["team/b"]  # both CPU nodes are held by a's ps
    assert isinstance(refused, Unschedulable) and refused.message.startswith("role ps: needs 1 node with 8 free cpu")


def test_gpu_roles_keep_the_topology_constraint():
    j = job(roles=[{"name": "eval", "resources": {"gpus": 8}}], scheduling={"topology": {"required": "hostname"}})
    req = request(j)
    assert req.roles[0].required == "hostname" and request().roles[0].required is None


def test_pins_cover_every_role_pod():
    j = job()
    res = plan_gang(request(j), nodes(2, 2))
    pods = pods_of(j)
    decision = decision_for(j, res, pods, [], __import__("phalanx.api.config", fromlist=["OperatorConfig"]).OperatorConfig())
    assert set(decision.pins) == {p["metadata"]["name"] for p in pods}
    assert decision.pins["job-chief-0-0"] == res.role_nodes["chief"][0]


# --- reconcile --------------------------------------------------------------------------------


class Sim:
    def __init__(self, obj):
        self.obj, self.pods, self.now = copy.deepcopy(obj), {}, T0

    def step(self):
        observed = Observed(pods=copy.deepcopy(list(self.pods.values())), service_exists=True, config_map_exists=True,
                            network_policy_exists=True)
        plan = decide(copy.deepcopy(self.obj), observed, self.now)
        for name in plan.delete_pods:
            self.pods.pop(name, None)
        for child in plan.create:
            if child["kind"] == "Pod":
                self.pods[child["metadata"]["name"]] = copy.deepcopy(child)
        for name in plan.release:
            self.pods[name]["spec"]["schedulingGates"] = []
            if name in plan.pins:
                self.pods[name]["spec"]["affinity"] = pin_affinity(plan.pins[name])
        if plan.status is not None:
            self.obj["status"] = plan.status
        return plan

    def set(self, phase, prefix="", code=None, ready=True):
        for name, pod in self.pods.items():
            if name.startswith(prefix):
                pod["spec"]["nodeName"] = "n"
                pod["status"] = {"phase": phase, "conditions": [{"type": "Ready", "status": str(ready)}]}
                if code is not None:
                    pod["status"]["containerStatuses"] = [{"name": constants.CONTAINER_NAME, "state": {"terminated": {"exitCode": code}}}]

    @property
    def status(self):
        return self.obj["status"]


def running_sim(**spec) -> Sim:
    sim = Sim(job_obj(**spec))
    sim.step()
    assert len(sim.pods) == 5
    sim.step()
    assert all(not p["spec"]["schedulingGates"] for p in sim.pods.values())
    sim.set("Running")
    sim.step()
    return sim


def test_the_whole_gang_is_created_released_and_counted_per_role():
    sim = running_sim()
    assert sim.status["phase"] == "Running" and sim.status["nodes"] == "2/2"
    assert sim.status["rolesReady"] == "worker:2/2 ps:2/2 chief:1/1"
    assert sim.status["roles"][1] == {"name": "ps", "replicas": 2, "ready": 2}
    sim.set("Pending", "job-ps-1")
    sim.step()
    assert sim.status["rolesReady"] == "worker:2/2 ps:1/2 chief:1/1"


def test_success_policy_stops_the_servers_once_the_chief_is_done():
    sim = running_sim(successPolicy={"roles": ["chief", "worker"]})
    sim.set("Succeeded", "job-chief", code=0, ready=False)
    sim.step()
    assert sim.status["phase"] == "Running"  # the workers are still at it
    sim.set("Succeeded", "job-node", code=0, ready=False)
    plan = sim.step()
    assert sim.status["phase"] == "Succeeded" and "chief, worker" in sim.status["message"]
    plan = sim.step()
    assert sorted(plan.delete_pods) == ["job-ps-0-0", "job-ps-1-0"]


def test_by_default_every_role_must_succeed():
    sim = running_sim()
    sim.set("Succeeded", "job-node", code=0, ready=False)
    sim.set("Succeeded", "job-chief", code=0, ready=False)
    sim.step()
    assert sim.status["phase"] == "Running"


def test_a_failed_role_pod_restarts_the_whole_gang():
    sim = running_sim()
    sim.set("Failed", "job-ps-0", code=137, ready=False)
    plan = sim.step()
    assert sim.status["phase"] == "Restarting" and "job-ps-0-0" in sim.status["message"]
    assert "node-rank" not in sim.status["message"]
    assert len(plan.delete_pods) == 5


def test_a_lost_role_pod_is_a_failure():
    sim = running_sim()
    del sim.pods["job-chief-0-0"]
    sim.step()
    assert sim.status["phase"] == "Restarting" and "chief 0" in sim.status["message"]


def test_elastic_resizing_keeps_the_roles():
    from phalanx.lifecycle.elastic import at_size

    j = job(nodes=4, elastic={"minNodes": 2, "maxNodes": 4})
    small = at_size(j, 2)
    assert small.spec.gang_size == 5 and [s.role for s in slots(small.spec)].count("ps") == 2


# --- backends, policy -------------------------------------------------------------------------


def test_backends_count_role_pods_and_resources():
    spec = job().spec
    assert min_resources(spec) == {GPU: "16", "cpu": "8"}


def test_cluster_policy_counts_role_pods_and_checks_their_env():
    assert [p.field for p in policy_problems(job().spec, PolicyRules(max_nodes=4))] == ["spec.roles"]
    assert policy_problems(job().spec, PolicyRules(max_nodes=5)) == []
    secret = [{"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]
    j = job(roles=[{"name": "ps", "env": secret}])
    assert [p.field for p in policy_problems(j.spec, PolicyRules(allow_secrets=False))] == ["spec.roles[0].env[0].valueFrom.secretKeyRef"]


@pytest.mark.parametrize("backend, count", [
    ("volcano", lambda objs, pod: objs[0]["spec"]["minMember"]),
    ("coscheduling", lambda objs, pod: objs[0]["spec"]["minMember"]),
    ("kueue", lambda objs, pod: int(pod.annotations[constants.ANNOTATION_KUEUE_POD_GROUP_TOTAL_COUNT])),
    ("workload", lambda objs, pod: objs[0]["spec"]["podGroupTemplates"][0]["schedulingPolicy"]["gang"]["minCount"]),
])
def test_every_gang_backend_waits_for_every_role_pod(backend, count):
    from phalanx.backends import render_backend

    kwargs = {"api_version": "v1alpha2"} if backend == "workload" else {}
    j = job(scheduling={"backend": backend, "queue": "q"})
    out = render_backend(j, **kwargs)
    assert count(out.objects, out.pod) == 5


def test_scarce_roles_are_placed_first_whatever_the_spec_order():
    """A CPU role listed first must not take the CPU a GPU role needs on the only GPU node."""
    a0 = NodeInfo("a0", {"kubernetes.io/hostname": "a0"}, {GPU: 8, "cpu": 4000, "pods": 110})
    b0 = NodeInfo("b0", {"kubernetes.io/hostname": "b0"}, {"cpu": 8000, "pods": 110})
    j = job(nodes=1, resources={"gpus": 4, "cpu": "1"},
            roles=[{"name": "ps", "resources": {"cpu": "3"}}, {"name": "chief", "resources": {"gpus": 4, "cpu": "1"}}])
    for order in ([a0, b0], [b0, a0]):
        res = plan_gang(request(j), order)
        assert isinstance(res, Placement), res
        assert res.role_nodes == {"ps": ["b0"], "chief": ["a0"]}  # spec order kept in the result


def test_required_topology_holds_every_role_inside_the_workers_domain():
    def node(name, rack, gpus=8):
        return NodeInfo(name, {"kubernetes.io/hostname": name, "phalanx.dev/topology-rack": rack}, {GPU: gpus, "cpu": 8000, "pods": 110})

    # The workers alone fit best in r0 (exactly 2 nodes); with the chief the gang needs r1.
    cluster = [node("g0", "r0"), node("g1", "r0"), node("g2", "r1"), node("g3", "r1"), node("g4", "r1"), node("c0", "r1", 0)]
    from phalanx.api.config import TopologyConfig, TopologyLevel

    levels = TopologyConfig(levels=[TopologyLevel(name="rack", label="phalanx.dev/topology-rack"),
                                    TopologyLevel(name="hostname", label="kubernetes.io/hostname")])
    j = job(roles=[{"name": "chief", "resources": {"gpus": 8}}, {"name": "ps", "resources": {"cpu": "1"}}],
            scheduling={"topology": {"required": "rack"}})
    res = plan_gang(request(j), cluster, topology_config=levels)
    racks = {n.name: n.labels["phalanx.dev/topology-rack"] for n in cluster}
    assert isinstance(res, Placement)
    assert {racks[n] for n in res.nodes + res.role_nodes["chief"] + res.role_nodes["ps"]} == {"r1"}
    crowded = job(roles=[{"name": "chief", "replicas": 3, "resources": {"gpus": 8}}], scheduling={"topology": {"required": "rack"}})
    refused = plan_gang(request(crowded), cluster, topology_config=levels)
    assert isinstance(refused, Unschedulable) and "outside the workers' rack" in refused.message, refused


def test_pods_without_gpus_see_none_and_no_env_says_otherwise():
    pods = pods_of(job(roles=[{"name": "ps"}, {"name": "eval", "resources": {"gpus": 1}}]))
    assert env_of(pods[2])[constants.ENV_NVIDIA_VISIBLE_DEVICES] == constants.NVIDIA_NO_DEVICES
    assert constants.ENV_NVIDIA_VISIBLE_DEVICES not in env_of(pods[0]) and constants.ENV_NVIDIA_VISIBLE_DEVICES not in env_of(pods[3])
    # the job's or a role's env comes after the operator's "void": NVIDIA_* there would win (every GPU of the node)
    all_gpus = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    assert any(p.startswith("spec.roles[0].env[0].name: NVIDIA_*") for p in problems(roles=[{"name": "ps", "env": all_gpus}]))
    assert any(p.startswith("spec.env[0].name: NVIDIA_*") for p in problems(roles=[{"name": "ps"}], env=all_gpus))


def test_roles_removed_while_suspended_leave_no_stale_status():
    sim = running_sim()
    sim.obj["spec"]["roles"] = []
    sim.step()
    assert "roles" not in sim.status and "rolesReady" not in sim.status
