"""The pre-flight check (phalanx_runtime/preflight.py) with real processes on gloo: it passes on a
healthy gang, a failing rank's report names its node, and a rank that never joins fails the gang
within the timeout."""

from __future__ import annotations

import json

import pytest
from runtime_parity_util import job

pytestmark = pytest.mark.runtime
WORLD = 3


def _run(tmp_path, monkeypatch, timeout_s=30, **env):
    from runtime_preflight_probe import preflight_rank

    from phalanx_runtime.spawn import run_ranks

    monkeypatch.setenv("PROBE_DIR", str(tmp_path))
    for key, value in env.items():
        monkeypatch.setenv(key, str(value))
    doc = job({}, world=WORLD)
    doc["spec"]["failurePolicy"] = {"preflight": True, "preflightTimeoutSeconds": timeout_s}
    run_ranks(doc, WORLD, fn=preflight_rank, timeout=120)
    return {p.name: json.loads(p.read_text()) for p in tmp_path.glob("rank-*.json")}


def test_a_healthy_gang_passes(tmp_path, monkeypatch):
    outcomes = _run(tmp_path, monkeypatch)
    assert [outcomes[f"rank-{r}.json"]["error"] for r in range(WORLD)] == [None] * WORLD
    assert not list(tmp_path.glob("report-*"))  # no failure, nothing reported


def test_a_failing_rank_names_its_node_and_its_peers_stop(tmp_path, monkeypatch):
    outcomes = _run(tmp_path, monkeypatch, PROBE_FAILING_RANK=1)
    assert outcomes["rank-1.json"]["error"].startswith("PreflightError: pre-flight device check failed on node node-1 (rank 1)")
    for peer in (0, 2):
        assert outcomes[f"rank-{peer}.json"]["error"].startswith("PreflightPeerError: pre-flight check failed on 1 rank(s) (rank 1")
    report = json.loads((tmp_path / "report-1").read_text())["error"]
    assert report["type"] == "phalanx_runtime.preflight.PreflightError" and report["rank"] == 1
    assert "node node-1" in report["message"] and "uncorrectable ECC" in report["message"]
    assert json.loads((tmp_path / "report-0").read_text())["error"]["type"].endswith("PreflightPeerError")


def test_a_rank_that_never_joins_fails_the_gang_within_the_timeout(tmp_path, monkeypatch):
    outcomes = _run(tmp_path, monkeypatch, timeout_s=4, PROBE_SILENT_RANK=2, PROBE_SILENT_SECONDS=25)
    for rank in (0, 1):
        outcome = outcomes[f"rank-{rank}.json"]
        assert outcome["error"] is not None and "PreflightError" not in outcome["error"], outcome
        assert outcome["elapsed"] < 4 + 10, outcome


def test_the_trainer_runs_it_before_training_when_asked():
    from phalanx_runtime.spawn import run_ranks

    doc = job({}, world=2, steps=2)
    doc["spec"]["failurePolicy"] = {"preflight": True, "preflightTimeoutSeconds": 30}
    out = run_ranks(doc, 2, timeout=180)
    assert out["steps"] == 2 and len(out["losses"]) == 2
    import torch

    if torch.cuda.is_available():
        return
    # a job that asks for GPUs on a CPU-only machine: every rank's device check fails first
    doc["spec"]["resources"] = {"gpus": 1}
    with pytest.raises(Exception, match="pre-flight device check failed on node .* CUDA is not available"):
        run_ranks(doc, 2, timeout=180)
