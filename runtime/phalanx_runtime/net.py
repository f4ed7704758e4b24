"""Host networking helpers (torch-free)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port free on this host right now (local rendezvous, progress servers in tests)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
