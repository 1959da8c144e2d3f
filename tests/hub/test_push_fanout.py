"""Frames framed once and written to many connections (rspush.hub.push.fanout), against real
websockets servers and clients on 127.0.0.1: what the clients receive, which connections are
skipped, and that a connection a frame cannot be written to is dropped, not skipped."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.frames import Frame, Opcode
from websockets.protocol import State

from rspush.hub.push.fanout import wire_text, write_text
from tests.support.waiting import TIMEOUT_SCALE, eventually


@dataclass
class Pair:
    server: ServerConnection
    client: ClientConnection
    received: list[str | bytes] = field(default_factory=list)


@asynccontextmanager
async def pairs(count: int, *, compression: str | None = None) -> AsyncIterator[list[Pair]]:
    """``count`` connected (server side, client side) pairs; each client records what it
    receives."""
    accepted: list[ServerConnection] = []
    done = asyncio.Event()

    async def handler(connection: ServerConnection) -> None:
        accepted.append(connection)
        await done.wait()

    async with serve(handler, "127.0.0.1", 0, compression=compression) as server:
        port = server.sockets[0].getsockname()[1]
        clients = [
            await connect(f"ws://127.0.0.1:{port}/", compression=compression) for _ in range(count)
        ]
        await eventually(lambda: len(accepted) == count, "every connection accepted")
        made = [Pair(s, c) for s, c in zip(accepted, clients, strict=True)]

        async def read(pair: Pair) -> None:
            try:
                async for message in pair.client:
                    pair.received.append(message)
            except ConnectionClosed:
                pass

        readers = [asyncio.create_task(read(pair)) for pair in made]
        try:
            yield made
        finally:
            done.set()
            for client in clients:
                await client.close()
            for task in readers:
                await asyncio.wait_for(task, 10 * TIMEOUT_SCALE)


def test_the_wire_bytes_are_websockets_own_framing_of_a_server_text_frame() -> None:
    for size in (0, 125, 126, 65_535, 65_536, 200_000):
        payload = b"x" * size
        assert wire_text(payload) == Frame(Opcode.TEXT, payload).serialize(mask=False)
        assert wire_text(payload)[0] == 0x81  # FIN, text (RFC 6455 §5.2)
        assert wire_text(payload)[1] & 0x80 == 0  # a server's frames are not masked


async def test_every_open_connection_gets_the_same_frame_in_order() -> None:
    async with pairs(5) as made:
        frames = [b'{"n":1}', ("é" * 70_000).encode(), b"{}"]
        for payload in frames:
            written = write_text([p.server for p in made], payload, wire_text(payload))
            assert written == 5
        expected = [payload.decode() for payload in frames]
        await eventually(
            lambda: all(len(p.received) == 3 for p in made), "every client has every frame"
        )
        assert all(p.received == expected for p in made)


async def test_a_closing_connection_gets_nothing_after_its_close_frame() -> None:
    async with pairs(2) as (closing, open_):
        await closing.server.close(4000, "bye")
        assert closing.server.protocol.state is not State.OPEN
        payload = b'{"after":"close"}'
        assert write_text([closing.server, open_.server], payload, wire_text(payload)) == 1
        await eventually(lambda: open_.received == [payload.decode()], "the open one has it")
        assert closing.received == []
        assert closing.client.close_code == 4000


async def test_a_connection_that_cannot_be_written_to_is_dropped_not_skipped() -> None:
    async with pairs(2) as (broken, fine):
        # The TCP connection half-closed under websockets: the state is still OPEN but a
        # write fails. Skipping it would let it receive later frames after a gap.
        broken.server.transport.write_eof()
        payload = b'{"n":1}'
        assert write_text([broken.server, fine.server], payload, wire_text(payload)) == 1
        assert broken.server.transport.is_closing()
        await eventually(lambda: fine.received == [payload.decode()], "the other has it")
        await asyncio.wait_for(broken.server.wait_closed(), 10 * TIMEOUT_SCALE)
        assert broken.received == []


async def test_a_connection_with_an_extension_gets_the_frame_through_websockets() -> None:
    async with pairs(2, compression="deflate") as made:
        assert all(p.server.protocol.extensions for p in made)
        payload = ('{"changes":"' + "a" * 5000 + '"}').encode()
        assert write_text([p.server for p in made], payload, wire_text(payload)) == 2
        await eventually(
            lambda: all(p.received == [payload.decode()] for p in made), "both have it"
        )
