"""Loopback TCP servers that answer HTTP requests the way broken networks do: a proxy's 502 to
a WebSocket upgrade, a connection closed before any answer, a body fed a byte at a time.

``async with RawServer(reply).running() as url:`` serves on 127.0.0.1, a free port, and counts
the requests it read; each connection gets ``reply(writer)`` once its request head is read.
Handlers still running when the block ends (a trickle) are cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

Reply = Callable[[asyncio.StreamWriter], Awaitable[None]]


class RawServer:
    def __init__(self, reply: Reply) -> None:
        self.reply = reply
        self.requests = 0
        """Request heads read (one per connection)."""
        self.heads: list[bytes] = []
        self._handlers: set[asyncio.Task[None]] = set()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            self.heads.append(await reader.readuntil(b"\r\n\r\n"))
            self.requests += 1
            await self.reply(writer)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        except asyncio.CancelledError:
            pass  # the server is closing (a trickle never ends by itself)
        finally:
            self._handlers.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                await writer.wait_closed()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[str]:
        """Serve on 127.0.0.1, a free port; yield ``http://127.0.0.1:PORT``."""
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        try:
            yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        finally:
            server.close()
            for handler in list(self._handlers):
                handler.cancel()
            await server.wait_closed()


async def bad_gateway(writer: asyncio.StreamWriter) -> None:
    """What a reverse proxy answers when the hub behind it is down."""
    body = b"bad gateway\n"
    writer.write(
        b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
    )
    await writer.drain()


async def close_at_once(writer: asyncio.StreamWriter) -> None:
    """No answer at all: the connection is closed before the status line."""


def trickle(body: bytes, interval: float = 1.0) -> Reply:
    """A 200 announcing ``body``'s full length, then one byte every ``interval`` seconds (the
    server paces itself; the test waits on what the client does)."""

    async def reply(writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
            b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
        )
        for byte in body:
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(interval)

    return reply
