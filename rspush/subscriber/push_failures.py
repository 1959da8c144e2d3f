"""Every way a push connection can fail, as the agent's :class:`~rspush.subscriber.push.PushError`.

Opening a WebSocket can fail long before the hub says anything: a proxy answering 502 to the
upgrade, a connection closed before the ``101``, a name that does not resolve, a timeout.
``websockets`` raises its own exceptions for these (``InvalidStatus``, ``InvalidMessage``
and the rest of ``InvalidHandshake``, ``ConnectionClosed``, ``OSError``, ``TimeoutError``);
all of them mean "the push channel is down" — reconnect after a backoff delay and poll
meanwhile (docs/subscriber.md) — so they are mapped here, in one place, to
:class:`PushError`. Typed errors the client raises itself (refusals, history insufficient)
pass through unchanged.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from typing import TypeVar

from websockets.exceptions import (
    ConnectionClosed,
    InvalidHandshake,
    InvalidStatus,
    WebSocketException,
)

from .push import PushError

T = TypeVar("T")


def push_failure(exc: BaseException, url: str) -> PushError | None:
    """The :class:`PushError` that ``exc`` means for the channel at ``url``; None when it is
    not a channel failure (a bug, a cancellation) or already one."""
    if isinstance(exc, PushError):
        return None
    if isinstance(exc, InvalidStatus):
        status = exc.response.status_code
        return PushError(f"push handshake with {url} refused: HTTP {status}")
    if isinstance(exc, InvalidHandshake):
        return PushError(f"push handshake with {url} failed: {exc or type(exc).__name__}")
    if isinstance(exc, ConnectionClosed):
        code = exc.rcvd.code if exc.rcvd is not None else None
        reason = exc.rcvd.reason if exc.rcvd is not None else ""
        return PushError(f"push channel closed ({code}): {reason}", code)
    if isinstance(exc, WebSocketException):
        return PushError(f"push channel to {url} failed: {exc or type(exc).__name__}")
    if isinstance(exc, (OSError, EOFError)):  # TimeoutError is an OSError
        return PushError(f"cannot connect to {url}: {exc or type(exc).__name__}")
    return None


async def guarded(items: AsyncIterator[T], url: str) -> AsyncGenerator[T, None]:
    """``items`` (a push stream), with every channel failure raised as :class:`PushError`;
    ``items`` is closed (its connection too) however this ends."""
    try:
        async for item in items:
            yield item
    except Exception as exc:
        mapped = push_failure(exc, url)
        if mapped is None:
            raise
        raise mapped from exc
    finally:
        close = getattr(items, "aclose", None)
        if close is not None:
            await close()
