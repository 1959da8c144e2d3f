"""Waiting that a stop request (SIGINT/SIGTERM, :meth:`rspush.subscriber.agent.Agent.stop`)
cuts short: backoff delays, and work with nothing to commit (discovery)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


async def sleep_unless_stopped(stopped: asyncio.Event, seconds: float) -> bool:
    """Sleep ``seconds``; True (at once) if ``stopped`` is or becomes set meanwhile."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(max(seconds, 0.0)):
            await stopped.wait()
    return stopped.is_set()


async def unless_stopped(work: Coroutine[Any, Any, T], stopped: asyncio.Event) -> T | None:
    """``work``'s result; None — ``work`` cancelled — as soon as ``stopped`` is set."""
    task = asyncio.ensure_future(work)
    waiter = asyncio.ensure_future(stopped.wait())
    try:
        await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if task.cancelled():
        return None
    return task.result()
