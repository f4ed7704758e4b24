"""Free TCP ports on this host (phalanx_common/net.py)."""

from __future__ import annotations

import socket

import pytest

from phalanx_common.net import free_port, free_ports


@pytest.mark.parametrize("count", [1, 8])
def test_free_ports_are_distinct_and_free(count):
    ports = free_ports(count)
    assert len(ports) == len(set(ports)) == count
    sockets = [socket.socket() for _ in ports]
    try:
        for sock, port in zip(sockets, ports, strict=True):
            sock.bind(("127.0.0.1", port))  # each still free once chosen
    finally:
        for sock in sockets:
            sock.close()


def test_free_port_is_a_port():
    assert 0 < free_port() < 65536
