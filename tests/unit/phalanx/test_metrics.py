"""The operator's fleet metrics (phalanx/metrics.py): Prometheus names and units, and every known
label value present at 0 from the start."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from phalanx import metrics
from phalanx.api.types import Phase

METRICS = [value for name, value in vars(metrics).items() if name.isupper() and hasattr(value, "_type")]


def test_the_conventions_below_see_every_kind_of_metric():
    assert {metric._type for metric in METRICS} == {"counter", "gauge", "histogram"}
    assert metrics.RECONCILES in METRICS and metrics.JOBS in METRICS and metrics.RECONCILE_SECONDS in METRICS


@pytest.mark.parametrize("metric", METRICS, ids=lambda metric: metric._name)
def test_names_follow_prometheus_conventions(metric):
    assert metric._name.startswith("phalanx_")
    # a counter's _total is added on export (prometheus_client keeps its name without it); no other has one
    assert not metric._name.endswith("_total")
    if metric._type == "histogram":
        assert metric._name.endswith("_seconds")


@pytest.mark.parametrize("name, labels", [
    *[("phalanx_jobs", {"phase": phase.value}) for phase in Phase],
    *[("phalanx_reconciles_total", {"result": result}) for result in metrics.RECONCILE_RESULTS],
])
def test_every_known_label_value_exists_from_the_start(name, labels):
    assert REGISTRY.get_sample_value(name, labels) is not None
