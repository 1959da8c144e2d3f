"""The push port's sockets are counted from accept: idle, handshaking and replaying ones are
visible in ``/metrics`` (``rspush_push_connections``), not only subscribed ones."""

from __future__ import annotations

import asyncio
import re
from urllib.parse import urlsplit

import httpx

from rspush.hub.server import RunningHub
from tests.support.sockets import close_stream
from tests.support.waiting import eventually


async def _gauge(client: httpx.AsyncClient) -> float:
    text = (await client.get("/metrics")).text
    found = re.search(r"^rspush_push_connections (\S+)$", text, re.MULTILINE)
    assert found is not None, "the gauge is exported"
    return float(found.group(1))


async def test_sockets_count_from_accept_until_closed(
    hub: RunningHub, client: httpx.AsyncClient
) -> None:
    assert hub.push_url is not None
    address = urlsplit(hub.push_url)
    assert await _gauge(client) == 0
    # Connected, and never a byte sent: no handshake, no subscription.
    sockets = [await asyncio.open_connection(address.hostname, address.port) for _ in range(5)]
    try:

        async def counted() -> bool:
            return await _gauge(client) == 5

        await eventually(counted, "five idle sockets in the gauge")
    finally:
        for _, writer in sockets:
            await close_stream(writer)

    async def released() -> bool:
        return await _gauge(client) == 0

    await eventually(released, "closed sockets leaving the gauge")
