"""The operator's topology report (phalanx/topologywatch.py)."""

from __future__ import annotations

import pytest

from phalanx.api.config import TopologyConfig
from phalanx.gang.inventory import NodeInfo
from phalanx.gang.topology_presets import detect
from phalanx.metrics import TOPOLOGY_PRESET, TOPOLOGY_UNLABELLED_NODES
from phalanx.topologywatch import TopologyWatch, api_version_rank


@pytest.mark.parametrize(("versions", "newest"), [
    (["v1beta1", "v1beta2"], "v1beta2"), (["v1beta2", "v1"], "v1"), (["v1alpha1", "v1beta1"], "v1beta1"),
    (["v2beta1", "v1"], "v1"), (["v1beta10", "v1beta9"], "v1beta10"),
])
def test_newest_served_version(versions, newest):
    assert max(versions, key=api_version_rank) == newest


def test_report_once_per_change_with_warning_and_metrics(caplog):
    watch = TopologyWatch()
    gke = NodeInfo("g", {"kubernetes.io/hostname": "g", "cloud.google.com/gce-topology-block": "b",
                         "cloud.google.com/gce-topology-subblock": "s"}, {"nvidia.com/gpu": 8})
    bare = NodeInfo("u", {"kubernetes.io/hostname": "u"}, {"nvidia.com/gpu": 8})
    with caplog.at_level("INFO", logger="phalanx.operator"):
        assert watch.report(detect(TopologyConfig(), [gke]))
        assert not watch.report(detect(TopologyConfig(), [gke]))  # unchanged: said once
        assert watch.report(detect(TopologyConfig(), [gke, bare]))
    assert "topology: gke (block, subblock, hostname): 1 of 1 accelerator nodes labelled" in caplog.text
    assert any(r.levelname == "WARNING" and "1 of 2 nodes carry no topology labels" in r.message for r in caplog.records)
    assert TOPOLOGY_PRESET.labels("gke", "block,subblock,hostname")._value.get() == 1
    assert TOPOLOGY_UNLABELLED_NODES._value.get() == 1
