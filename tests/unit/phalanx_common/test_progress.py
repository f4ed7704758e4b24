from __future__ import annotations

import json
import math
import urllib.request

from phalanx_common.progress import (
    MAX_FINAL_BYTES,
    Progress,
    ProgressServer,
    encode_final,
    write_final,
)


def test_the_final_record_drops_metrics_to_fit():
    progress = Progress(100, 8, "job")
    progress.update(step=100, loss=math.nan, metrics={f"metric_{i:02d}_{'x' * 50}": i / 3 for i in range(32)},
                    lastCheckpoint={"step": 100, "path": "/c/" + "p" * 1000, "time": "t"})
    data = encode_final(progress.snapshot())
    record = json.loads(data)
    assert len(data) <= MAX_FINAL_BYTES and record["step"] == 100 and math.isnan(record["loss"])
    assert 0 < len(record["metrics"]) < 32 and "metric_00_" + "x" * 50 in record["metrics"]  # the first ones stay
    assert "job" not in record and "startTime" not in record


def test_without_metrics_nothing_is_dropped():
    progress = Progress(None, None)
    progress.update(step=1, metrics={"eval_loss": 1.0})
    assert json.loads(encode_final(progress.snapshot()))["metrics"] == {"eval_loss": 1.0}
    assert "metrics" not in json.loads(encode_final(Progress(None, None).snapshot()))


def test_the_record_the_operator_accepts(tmp_path):
    """The operator parses the final record (and the endpoint's body) strictly: NaN only as loss."""
    from phalanx.lifecycle.progress import loss_not_finite, parse_progress

    progress = Progress(30, 2)
    progress.update(step=30, loss=math.nan, epoch=1.5, metrics={"eval_loss": 2.0}, resumedStep=20,
                    lastCheckpoint={"step": 30, "path": "/c/30", "time": "2026-01-01T00:00:00Z"})
    path = tmp_path / "termination-log"
    path.touch()
    assert write_final(progress, str(path))
    report = parse_progress(path.read_bytes())
    assert report["step"] == 30 and loss_not_finite(report) and report["lastCheckpoint"]["path"] == "/c/30"


def test_the_endpoint():
    progress = Progress(10, 1)
    server = ProgressServer(progress, 0, host="127.0.0.1")
    try:
        progress.update(step=4, loss=math.inf)
        body = urllib.request.urlopen(f"http://127.0.0.1:{server.port}/progress", timeout=10).read()
        assert b"Infinity" in body and json.loads(body)["step"] == 4
        assert json.loads(urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=10).read())["ok"]
    finally:
        server.close()
