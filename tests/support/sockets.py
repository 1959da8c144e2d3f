"""Listening sockets on loopback for the test servers (origins, static Sites)."""

from __future__ import annotations

import asyncio
import contextlib
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


async def close_stream(writer: asyncio.StreamWriter) -> None:
    """Close a client stream whose peer may already have reset it: a server that closes while
    the client is still sending resets the connection (RFC 9293 §3.6.1), and wait_closed then
    re-raises that reset, which says nothing about the behaviour under test."""
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
