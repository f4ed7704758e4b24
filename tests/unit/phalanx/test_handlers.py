"""The kopf wiring (phalanx/handlers.py): what its indexes keep of each object. The helpers here
(a job, a node, the indexes, a job's loop as the daemon starts it) serve the job loop's and the
gang step's tests too (test_jobloop.py, test_gangstep.py)."""

from __future__ import annotations

from phalanx import constants, gangstep, handlers, jobloop
from phalanx.sweep import handlers as _sweep_handlers  # noqa: F401 - registers the sweep's handlers

GPU = "nvidia.com/gpu"


def job(name="huge", nodes=2048, status=None):
    return {"apiVersion": f"{constants.GROUP}/{constants.VERSION}", "kind": "TrainingJob",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "generation": 1,
                         "creationTimestamp": "2026-11-30T00:00:00Z"},
            "spec": {"image": "phalanx/runtime:dev", "nodes": nodes, "procsPerNode": 8,
                     "resources": {"gpus": 8, "cpu": "1", "memory": "1Gi"}, "model": {"preset": "debug"},
                     "training": {"globalBatchSize": nodes * 8}},
            "status": status or {}}


def node(name):
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "spec": {"taints": [], "unschedulable": False},
            "status": {"allocatable": {GPU: "8", "cpu": "16", "memory": "64Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def indexes(nodes=(), usage=()):
    return gangstep.Indexes(job_pods={}, job_services={}, job_config_maps={}, job_network_policies={},
                            cluster_nodes={k: [v] for n in nodes for k, v in handlers.cluster_nodes(name=n["metadata"]["name"], body=n).items()}, usage={None: list(usage)},
                            priority_classes={}, namespace_labels={}, resource_quotas={})


def job_loop(memo, name, ix, body=None):
    """The job's loop as the daemon starts it: the native gang step and elastic probe."""
    return jobloop.JobLoop(memo, "default", name, body if body is not None else {}, ix,
                           gangstep.native_gang_step(memo, ix), gangstep.elastic_probe(memo, "default", name, ix))


def test_the_node_index_keeps_parsed_nodes_and_lost_nodes_reads_them():
    ready, gone = node("n1"), node("n2")
    gone["status"]["conditions"] = [{"type": "Ready", "status": "Unknown"}]
    ix = indexes([ready, gone])
    entry = next(iter(ix.cluster_nodes["n1"]))
    assert entry.ready and entry.allocatable[GPU] == 8 and entry.allocatable["memory"] == 64 * 2**30
    pods = [{"spec": {"nodeName": n}} for n in ("n1", "n2", "n3")] + [{"spec": {}}]
    assert jobloop._lost_nodes(jobloop._job_nodes(pods, {}), ix.cluster_nodes) == frozenset({"n2", "n3"})


def test_a_node_with_a_bad_quantity_is_indexed_with_nothing_allocatable_not_lost():
    bad = node("n1")
    bad["status"]["allocatable"][GPU] = "eight"
    entry = next(iter(indexes([bad]).cluster_nodes["n1"]))
    assert entry.allocatable == {} and entry.ready
    assert jobloop._lost_nodes({"n1"}, indexes([bad]).cluster_nodes) == frozenset()
