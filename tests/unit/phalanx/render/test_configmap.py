"""render.configmap: the ConfigMap with the resolved runtime config and the framework's files."""

from __future__ import annotations

import json

from tests.unit.phalanx.render.test_job import _render


def test_config_map_holds_resolved_spec(job_obj):
    cm = _render(job_obj)[1]
    cfg = json.loads(cm["data"]["config.json"])
    assert cfg["metadata"] == {"name": "job", "namespace": "team"}
    assert cfg["spec"]["parallelism"]["zero"] == 0  # defaults filled in
    assert cfg["spec"]["training"]["globalBatchSize"] == 8
