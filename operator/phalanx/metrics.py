"""Operator Prometheus metrics."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

RECONCILES = Counter("phalanx_reconciles_total", "Reconcile passes", ["result"])
RECONCILE_SECONDS = Histogram(
    "phalanx_reconcile_duration_seconds", "Reconcile latency",
    buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
JOBS = Gauge("phalanx_jobs", "TrainingJobs by phase", ["phase"])
PODS_CREATED = Counter("phalanx_pods_created_total", "Worker pods created")
API_REQUESTS = Counter("phalanx_api_requests_total", "Kubernetes API requests made by the operator", ["verb"])
RESTARTS = Counter("phalanx_gang_restarts_total", "Whole-gang restarts")
