"""The process-group timeout: ``$PHALANX_PG_TIMEOUT_SECONDS`` (rendered by the operator from the
network profile's ``watchdog.pgTimeoutSeconds``) bounds every collective of the runtime's groups —
the default group and each device-mesh group — instead of torch's 30-minute default."""

from __future__ import annotations

from datetime import timedelta

import pytest
from runtime_parity_util import job

pytestmark = pytest.mark.runtime

# The timeout bounds the groups' set-up too (store waits): 2 s failed there once on the loaded CI
# machine, before the collective under test was reached.
TIMEOUT_S = 8
PEER_SLEEP_S = TIMEOUT_S + 12  # the silent peer outlives the timeout by far, then exits


def test_pg_timeout_env_parsed():
    from phalanx_runtime.distributed.process_group import pg_timeout

    assert pg_timeout({}) is None
    assert pg_timeout({"PHALANX_PG_TIMEOUT_SECONDS": "600"}) == timedelta(seconds=600)
    with pytest.raises(ValueError, match="PHALANX_PG_TIMEOUT_SECONDS"):
        pg_timeout({"PHALANX_PG_TIMEOUT_SECONDS": "0"})


def test_collective_with_a_silent_peer_fails_within_the_configured_timeout(monkeypatch):
    """4 ranks, mesh (pp, dp_replicate, dp_shard, tp) = (1, 1, 2, 2): rank 0 all-reduces on its tp
    group {0, 1}; rank 1 is alive but never joins. Rank 0 must fail after ~TIMEOUT_S, not when the
    peer finally exits (PEER_SLEEP_S) or after 30 minutes."""
    from runtime_pg_probe import hang_in_tp_group

    from phalanx_runtime.spawn import run_ranks

    monkeypatch.setenv("PHALANX_PG_TIMEOUT_SECONDS", str(TIMEOUT_S))
    monkeypatch.setenv("PROBE_PEER_SLEEP", str(PEER_SLEEP_S))
    out = run_ranks(job({"zero": 2, "tensor": 2}, world=4), 4, fn=hang_in_tp_group, timeout=180)
    print(f"\nPG TIMEOUT: failed after {out['elapsed']:.1f}s: {out['error']}; group timeouts {out['timeouts']}")
    assert out["error"] is not None and "timed out" in out["error"].lower(), out["error"]
    assert out["elapsed"] < TIMEOUT_S + 6, out
    assert out["timeouts"] == dict.fromkeys(("pp", "dp_replicate", "dp_shard", "tp", "dp", "default"), TIMEOUT_S)
