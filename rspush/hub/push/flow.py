"""Flow control of one push connection: sends that wait a bounded time for a full send
buffer, and the slow-consumer close (docs/protocol.md, "Limits and slow consumers").

The connection's write buffer limit (``write_limit``, set to ``[push] send_buffer_bytes``)
makes ``send()`` wait, after writing a frame, until the transport's buffer drains below its
low-water mark. A client that stops reading would hold that wait, and everything the sender
keeps for it, forever: here the wait has a deadline, past which the client is a slow
consumer. So a connection's buffer holds at most the limit plus one frame
(:data:`rspush.protocol.MAX_FRAME_BYTES`), for at most the stall deadline plus the close
deadline.
"""

from __future__ import annotations

import asyncio

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed


class Stalled(Exception):
    """The client did not read its send buffer down within the stall deadline."""


async def send_bounded(connection: ServerConnection, data: bytes, *, stall_s: float) -> None:
    """Send ``data`` as one text frame (it is UTF-8 already); raise :class:`Stalled` when the
    send buffer does not drain within ``stall_s``."""
    try:
        async with asyncio.timeout(stall_s):
            await connection.send(data, text=True)
    except TimeoutError:
        # The frame is in the transport's buffer; only the wait for it to drain is cut
        # short. The connection is closed next, so nothing else is written after it.
        raise Stalled from None


async def close_slow(
    connection: ServerConnection, code: int, reason: str, *, deadline_s: float
) -> None:
    """Close with ``code`` and ``reason`` behind whatever is still queued for the client: a
    client that reads within ``deadline_s`` receives every queued frame, then the close frame;
    after that the TCP connection is dropped (RFC 6455 §7.1.7 allows failing it)."""
    try:
        async with asyncio.timeout(deadline_s):
            await connection.close(code, reason)
    except TimeoutError:
        if connection.transport is not None:
            connection.transport.abort()
    except ConnectionClosed:
        pass
