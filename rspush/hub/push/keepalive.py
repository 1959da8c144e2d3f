"""Keepalive pings of every push connection of a process, from one task (docs/protocol.md, "Limits
and slow consumers"): each open connection is sent a ping every ``ping_interval_s``, and one
whose pong has not come ``ping_timeout_s`` after its ping is closed with 1011 "keepalive ping
timeout" (RFC 6455 §5.5.2, §7.4.1), as websockets' own keepalive does.

Why not websockets' own: it runs one task per connection that sleeps between pings, and that
task with its timer and futures is about a tenth of what an idle connection holds
(docs/benchmarks.md, "Idle memory per connection"). Here the connections wait in a timer
wheel — one set per twentieth of the interval, visited in turn — and a connection has a task
only while its ping awaits the pong.
"""

from __future__ import annotations

import asyncio
import logging

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode

from ..rotation import cancel_and_wait
from .flow import close_slow

log = logging.getLogger("rspush.hub.push")

SLOTS = 20
"""Slots of the wheel: a connection's first ping comes within a twentieth of the interval
before a full interval has passed, and the pings of many connections are spread over the
interval rather than sent in one burst."""
TIMEOUT_REASON = "keepalive ping timeout"


class Keepalive:
    """Pings the connections :meth:`add` registers until :meth:`discard`; run between
    :meth:`start` and :meth:`stop`."""

    def __init__(self, interval_s: float, timeout_s: float, *, close_timeout_s: float) -> None:
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.close_timeout_s = close_timeout_s
        self._wheel: list[set[ServerConnection]] = [set() for _ in range(SLOTS)]
        self._slot: dict[ServerConnection, int] = {}
        self._next = 0
        """The slot the next tick visits."""
        self._pinging: dict[ServerConnection, asyncio.Task[None]] = {}
        self._task: asyncio.Task[None] | None = None

    @property
    def connections(self) -> int:
        return len(self._slot)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="rspush-keepalive")

    async def stop(self) -> None:
        # The wheel first: a tick while the pings are cancelled would start new ones.
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None
        for task in list(self._pinging.values()):
            await cancel_and_wait(task)

    def add(self, connection: ServerConnection) -> None:
        """Ping ``connection`` from one interval from now on."""
        # The slot the last tick visited comes round again after one whole interval.
        slot = (self._next - 1) % SLOTS
        self._wheel[slot].add(connection)
        self._slot[connection] = slot

    def discard(self, connection: ServerConnection) -> None:
        slot = self._slot.pop(connection, None)
        if slot is not None:
            self._wheel[slot].discard(connection)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        tick = self.interval_s / SLOTS
        due = loop.time()
        while True:
            due += tick
            await asyncio.sleep(max(0.0, due - loop.time()))
            # After a busy spell the wheel goes on from now rather than catching up: visits
            # of a slot stay at least an interval apart, so no connection is pinged sooner.
            due = max(due, loop.time())
            slot, self._next = self._wheel[self._next], (self._next + 1) % SLOTS
            for connection in slot:
                # A ping still waiting for its pong (the timeout may be longer than the
                # interval) is followed by the next one a turn later, not a second at once.
                if connection not in self._pinging:
                    task = asyncio.create_task(self._ping(connection))
                    self._pinging[connection] = task

    async def _ping(self, connection: ServerConnection) -> None:
        try:
            # Like websockets' keepalive, the deadline runs from the moment the ping is
            # written: a send buffer that does not drain is the slow-consumer bounds' job.
            pong = await connection.ping()
            try:
                async with asyncio.timeout(self.timeout_s):
                    await pong
            except TimeoutError:
                await close_slow(
                    connection,
                    CloseCode.INTERNAL_ERROR,
                    TIMEOUT_REASON,
                    deadline_s=self.close_timeout_s,
                )
        except ConnectionClosed:
            pass
        except Exception:
            log.exception("keepalive ping failed")
        finally:
            self._pinging.pop(connection, None)
