"""How long a job's loop lets a burst of wake-ups gather before its next pass (pure)."""

from __future__ import annotations

WAKE_COALESCE_MIN_SECONDS = 0.2
WAKE_COALESCE_MAX_SECONDS = 2.0
PODS_PER_COALESCE_SECOND = 256


def wake_coalesce_seconds(pods: int) -> float:
    """0.2 s for a gang of up to 51 pods, then a gang's size / 256 s, at most 2 s (512 pods and up).

    A big gang's pods turn Running one by one over tens of seconds, each a wake-up; every pass
    re-decides the whole gang and writes its changed ready counts. Waiting in proportion to the
    gang keeps that to about one pass and one status write per 2 s, at the price of reacting to a
    failed pod up to 2 s later in a 512-pod gang (its restart takes far longer)."""
    return min(WAKE_COALESCE_MAX_SECONDS, max(WAKE_COALESCE_MIN_SECONDS, pods / PODS_PER_COALESCE_SECOND))
