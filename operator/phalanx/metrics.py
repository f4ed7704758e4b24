"""Operator Prometheus metrics: the fleet view (reconciles, jobs by phase, pods, API requests).
Per-job series live in ``phalanx.jobmetrics``; the runtime's per-pod series in
``phalanx_runtime.components.metrics``. Names follow Prometheus conventions: ``phalanx_`` prefix,
base units (``_seconds``), ``_total`` on counters only."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from phalanx.api.types import Phase
from phalanx.constants import QuarantineReason

RECONCILE_RESULTS = ("ok", "error")

RECONCILES = Counter("phalanx_reconciles_total", "Reconcile passes", ["result"])
RECONCILE_SECONDS = Histogram(
    "phalanx_reconcile_duration_seconds", "Reconcile latency",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
JOBS = Gauge("phalanx_jobs", "TrainingJobs by phase", ["phase"])
PODS_CREATED = Counter("phalanx_pods_created_total", "Worker pods created")
API_REQUESTS = Counter("phalanx_api_requests_total", "Kubernetes API requests made by the operator", ["verb"])
RESTARTS = Counter("phalanx_gang_restarts_total", "Whole-gang restarts")
NODE_QUARANTINED = Gauge("phalanx_node_quarantined", "1 while a NodeQuarantine keeps the node out of new placements", ["node", "reason"])
QUARANTINES = Counter("phalanx_node_quarantines_total", "Nodes quarantined by the operator", ["reason"])
RESTART_IN_PLACE = Gauge("phalanx_restart_in_place", "1: gangs restart in place (found at start-up: the API server keeps "
                         "RestartAllContainers rules and every node declares the feature); 0: by recreating their pods")
TOPOLOGY_PRESET = Gauge("phalanx_topology_preset", "1 for the topology the nodes were found to carry (topology.preset; "
                        "auto: detected from their labels) and its levels, coarse to fine", ["preset", "levels"])
TOPOLOGY_UNLABELLED_NODES = Gauge("phalanx_topology_unlabelled_nodes", "Accelerator nodes without the detected "
                                  "topology's labels (placement treats each as an unknown domain)")
LEADER = Gauge("phalanx_leader", "1 while this operator process reconciles (holds the leader lease, or runs without leader election)")

# Every known label value exists from the start at 0, so rate()/increase() see the first error
# and "no jobs in phase X" is a 0, not an absent series.
for _result in RECONCILE_RESULTS:
    RECONCILES.labels(_result)
for _phase in Phase:
    JOBS.labels(_phase.value)
for _reason in QuarantineReason:
    QUARANTINES.labels(_reason.value)
