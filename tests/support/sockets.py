"""Listening sockets on loopback for the test servers (origins, static Sites)."""

from __future__ import annotations

import socket


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket; port 0 picks a free one (read it back from getsockname)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.setblocking(False)
    return sock
