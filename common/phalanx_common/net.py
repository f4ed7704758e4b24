"""Host networking helpers (torch-free)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port free on this host right now (local rendezvous, progress servers in tests)."""
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports free on 127.0.0.1 right now (held together while chosen, so none
    repeats): local processes that each listen on their own, as each pod does on its own address."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()
