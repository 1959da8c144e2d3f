"""Waiting for a condition, never for a fixed time.

``RSPUSH_TIMEOUT_SCALE`` multiplies every timeout on slow machines. A timeout fails the test
with what it waited for.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import time
from collections.abc import Awaitable, Callable

TIMEOUT_SCALE = float(os.environ.get("RSPUSH_TIMEOUT_SCALE", "1"))

POLL_S = 0.02


async def eventually(
    predicate: Callable[[], object | Awaitable[object]],
    what: str = "condition",
    timeout: float = 15,
    *,
    interval: float = POLL_S,
) -> None:
    """Poll ``predicate`` (plain or async) in this event loop until it holds; fail after
    ``timeout`` (scaled) seconds naming ``what``."""
    deadline = time.monotonic() + timeout * TIMEOUT_SCALE
    while True:
        outcome = predicate()
        if inspect.isawaitable(outcome):
            outcome = await outcome
        if outcome:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(interval)


def wait_for(
    predicate: Callable[[], object],
    what: str = "condition",
    timeout: float = 60,
    *,
    ignoring: tuple[type[BaseException], ...] = (),
    interval: float = 0.05,
) -> None:
    """Poll ``predicate`` outside an event loop (blocking) until it holds; an exception in
    ``ignoring`` counts as not yet. Fail after ``timeout`` (scaled) seconds naming ``what``."""
    deadline = time.monotonic() + timeout * TIMEOUT_SCALE
    while True:
        try:
            if predicate():
                return
        except ignoring:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)
