"""The Destination agent inside a benchmark's own process: :func:`agent_running`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from rspush.subscriber.agent import Agent

STOP_TIMEOUT_S = 30


@contextlib.asynccontextmanager
async def agent_running(agent: Agent) -> AsyncIterator[asyncio.Task[None]]:
    """The agent's :meth:`~rspush.subscriber.agent.Agent.run` as a task; stopped (and its
    errors raised) on exit."""
    task = asyncio.create_task(agent.run(), name="agent")
    try:
        yield task
    finally:
        agent.stop()
        async with asyncio.timeout(STOP_TIMEOUT_S):
            with contextlib.suppress(asyncio.CancelledError):
                await task
