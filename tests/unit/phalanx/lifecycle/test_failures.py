"""lifecycle.failures: failed pods classified by the ExitCode policy, lost pods and nodes, hangs,
pods stuck terminating, a released gang left unbound, the restart backoff."""

from __future__ import annotations

from phalanx.api.types import FailurePolicy
from phalanx.lifecycle.failures import backoff_seconds


def test_backoff_doubles_and_caps():
    policy = FailurePolicy(backoff_seconds=10, max_backoff_seconds=60)
    assert [backoff_seconds(n, policy) for n in range(0, 6)] == [0, 10, 20, 40, 60, 60]
