"""Running the agent in the test's event loop (beside a hub, or a static Source on a loopback
origin), and waiting for the mirror to equal the origin."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from rspush.subscriber.agent import Agent, AgentConfig
from tests.support.origin import Origin
from tests.support.waiting import TIMEOUT_SCALE, eventually


def mirror_files(dest: Path) -> dict[str, bytes]:
    """Every file of the mirror (the agent's own .rs-subscribe/ left out), by '/path'."""
    return {
        "/" + p.relative_to(dest).as_posix(): p.read_bytes()
        for p in sorted(dest.rglob("*"))
        if p.is_file() and ".rs-subscribe" not in p.relative_to(dest).parts
    }


_RUNNING: list[Agent] = []
"""The agents :func:`running_agent` runs in this event loop now."""


async def converged(origin: Origin, dest: Path, timeout: float = 15) -> None:
    """The mirror equals the origin, and the agents running in this loop have reported it:
    a file is in place a moment before its event (events follow the checkpoint's commit),
    so the agents' work is drained too before a test reads their events."""

    def same() -> bool:
        return mirror_files(dest) == origin.resources

    try:
        await eventually(same, "the mirror to equal the origin", timeout)
    except AssertionError:
        mine, theirs = mirror_files(dest), origin.resources
        raise AssertionError(
            f"mirror != origin: missing {sorted(set(theirs) - set(mine))}, "
            f"extra {sorted(set(mine) - set(theirs))}, "
            f"different {sorted(k for k in mine if k in theirs and mine[k] != theirs[k])}"
        ) from None
    async with asyncio.timeout(timeout * TIMEOUT_SCALE):
        for agent in list(_RUNNING):
            if agent.mirror is not None:
                await agent.mirror.drain()  # idle, then commit: every event reported


class Running:
    def __init__(self, agent: Agent, task: asyncio.Task[None], events: list[dict[str, Any]]):
        self.agent = agent
        self.task = task
        self.events = events

    def applied(self, channel: str | None = None) -> list[dict[str, Any]]:
        return [
            e
            for e in self.events
            if e.get("event") == "applied" and (channel is None or e["channel"] == channel)
        ]


@asynccontextmanager
async def running_agent(config: AgentConfig, **kwargs: Any) -> AsyncIterator[Running]:
    events: list[dict[str, Any]] = []
    agent = Agent(config, events=events.append, **kwargs)
    task = asyncio.create_task(agent.run(), name="agent")
    running = Running(agent, task, events)
    _RUNNING.append(agent)
    try:
        yield running
    finally:
        _RUNNING.remove(agent)
        agent.stop()
        async with asyncio.timeout(20 * TIMEOUT_SCALE):
            with contextlib.suppress(asyncio.CancelledError):
                await task
