"""The agent's side of the frame bound: a frame larger than the protocol's
``MAX_FRAME_BYTES`` (which the hub's frames never exceed) is refused by the client with
1009, never buffered whole."""

from __future__ import annotations

import asyncio
import json

import pytest
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from rspush.protocol import MAX_FRAME_BYTES, TopicRequest
from rspush.subscriber.push import PushError, push_changes


@pytest.mark.timeout(30)
async def test_the_agent_refuses_a_frame_past_the_bound() -> None:
    huge = {
        "type": "changes",
        "topic": "t",
        "epoch": "e",
        "changes": [
            {
                "position": "1-0",
                "loc": "http://example.com/" + "x" * MAX_FRAME_BYTES,
                "change": "created",
                "datetime": "2026-01-01T00:00:00Z",
            }
        ],
    }

    async def hostile(connection: ServerConnection) -> None:
        await connection.recv()
        await connection.send(json.dumps(huge))
        await connection.wait_closed()

    async with serve(hostile, "127.0.0.1", 0, max_size=None) as server:
        port = server.sockets[0].getsockname()[1]
        with pytest.raises(PushError) as failed:
            async with asyncio.timeout(20):
                async for _ in push_changes(f"ws://127.0.0.1:{port}/", [TopicRequest(topic="t")]):
                    pass
        # The agent itself closed with 1009, message too big (RFC 6455 §7.4.1).
        closed = failed.value.__cause__
        assert isinstance(closed, ConnectionClosed) and closed.sent is not None
        assert closed.sent.code == 1009
