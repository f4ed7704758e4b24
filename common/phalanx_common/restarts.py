"""Restart arithmetic shared by the operator and the launcher (torch-free): the operator waits
the backoff before recreating a gang, the launcher waits it after the kubelet restarted its pod
in place (the kubelet restarts at once), so both paths give a job the same pause."""

from __future__ import annotations

from typing import Any

# 2**30 s is far past any cap (backoffs are at most a day): no larger power is ever computed,
# however large a count someone wrote.
_MAX_DOUBLINGS = 30


def restart_count(value: Any) -> int:
    """A restart count a pod carries (an annotation, an env value, a downward-API file): anyone who
    may edit the pod may write it, so anything but a plain decimal of at most nine digits is 0."""
    return int(value) if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 9 else 0


def backoff_seconds(restarts: int, first: int, maximum: int) -> int:
    """Delay before restart number ``restarts`` (1-based): ``first`` × 2^(n-1), at most ``maximum``."""
    if restarts <= 0 or first <= 0:
        return 0
    return min(first * 2 ** min(restarts - 1, _MAX_DOUBLINGS), maximum)
