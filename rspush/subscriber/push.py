"""Push channel client: subscribe over WebSocket, yield each pushed change with its topic,
epoch and position; raise a typed error for every way the hub can refuse or close
(docs/protocol.md). Frames and messages are read by the shared decoder
(:func:`rspush.protocol.decode_frame`), so the client reads exactly what the hub writes.

The Destination agent builds on :func:`push_changes`; ``rs-subscribe watch`` prints it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from rspush.protocol import (
    FRAMEWORK_VERSION,
    MAX_FRAME_BYTES,
    ChangesFrame,
    CloseCode,
    FrameworkFrame,
    HistoryInsufficient,
    Refusal,
    Subscribe,
    Subscribed,
    TopicRequest,
    decode_frame,
)
from rspush.resourcesync import DocumentError
from rspush.resourcesync.w3cdt import format_w3c_datetime

from .errors import SubscriberError


class PushError(SubscriberError):
    """The push channel failed; ``code`` is the WebSocket close code when there was one."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class HistoryInsufficientError(PushError):
    """The resume point is older than the hub keeps (or the epoch changed): catch up from
    the Change List Archive at ``message.archive``."""

    def __init__(self, message: HistoryInsufficient) -> None:
        info = message.as_dict()
        super().__init__(
            f"topic {info['topic']!r}: history insufficient ({info['reason']}); "
            f"oldest available position {info['oldest']}; catch up from the Change List "
            f"Archive {info['archive']}",
            CloseCode.HISTORY_INSUFFICIENT,
        )
        self.message = message
        self.info = info
        """The message as the hub sent it."""


class RefusedError(PushError):
    """Unauthorised, unknown topic or protocol error."""


class MalformedFrameError(PushError):
    """The hub sent something that is not a frame of the protocol: reconnect (and poll)."""


@dataclass(frozen=True)
class Change:
    topic: str
    epoch: str
    position: str
    loc: str
    change: str
    datetime: str
    data: dict[str, Any]
    """Everything the hub sent for the change (hash, length, type, lastmod, links…)."""

    def as_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "epoch": self.epoch, **self.data}


async def push_changes(
    url: str,
    topics: Sequence[TopicRequest],
    *,
    fmt: str = "json",
    token: str | None = None,
    open_timeout: float = 10.0,
    framework: bool = False,
) -> AsyncIterator[Change | FrameworkFrame | dict[str, Any]]:
    """Yield ``subscribed`` control messages (as the hub sent them, dicts) and
    :class:`Change` values until the connection closes; raise :class:`PushError` (or a
    subclass) on every abnormal end. With ``framework`` (only for a hub that advertises a
    framework channel: a version 1 hub refuses the version 2 message this sends), also
    :class:`~rspush.protocol.FrameworkFrame` values."""
    request = Subscribe(
        type="subscribe",
        format=fmt,
        token=token,
        topics=list(topics),
        **({"version": FRAMEWORK_VERSION, "framework": True} if framework else {}),
    )
    try:
        # The hub's frames never pass MAX_FRAME_BYTES: a larger one is refused (close 1009),
        # so a hostile or broken endpoint cannot make the agent buffer without bound.
        async with connect(
            url, open_timeout=open_timeout, max_size=MAX_FRAME_BYTES, compression=None
        ) as ws:
            await ws.send(request.encode())
            async for frame in ws:
                try:
                    items = _items(decode_frame(frame))
                except (ValueError, KeyError, TypeError, AttributeError, DocumentError) as exc:
                    # A frame we cannot read is a broken channel, not a change to skip.
                    raise MalformedFrameError(
                        f"unreadable push frame ({type(exc).__name__}: {exc})"
                    ) from exc
                for item in items:
                    yield item
    except ConnectionClosed as exc:
        code = exc.rcvd.code if exc.rcvd is not None else None
        reason = exc.rcvd.reason if exc.rcvd is not None else ""
        raise PushError(f"push channel closed ({code}): {reason}", code) from exc
    except OSError as exc:
        raise PushError(f"cannot connect to {url}: {exc}") from exc
    raise PushError("push channel closed by the hub", CloseCode.SHUTDOWN)


def framework_line(frame: FrameworkFrame) -> dict[str, Any]:
    """A framework frame as one JSON object (``rs-subscribe watch --framework``)."""
    return {
        "type": "framework",
        "topic": frame.topic,
        "position": str(frame.position),
        "changes": [
            {
                "loc": change.loc,
                "change": change.change.value,
                "capability": change.capability,
                **({} if change.time is None else {"datetime": format_w3c_datetime(change.time)}),
                **({} if change.index is None else {"index": change.index}),
            }
            for change in frame.changes
        ],
    }


def _items(
    decoded: ChangesFrame
    | FrameworkFrame
    | Subscribed
    | HistoryInsufficient
    | Refusal
    | dict[str, Any],
) -> list[Change | FrameworkFrame | dict[str, Any]]:
    """What one decoded frame yields: its changes, or the control message; raises the typed
    errors for refusals."""
    if isinstance(decoded, ChangesFrame):
        return [
            Change(
                topic=decoded.topic,
                epoch=decoded.epoch,
                position=item["position"],
                loc=item["loc"],
                change=str(item["change"]),
                datetime=item["datetime"],
                data=item,
            )
            for item in decoded.changes
        ]
    if isinstance(decoded, FrameworkFrame):
        return [decoded]
    if isinstance(decoded, HistoryInsufficient):
        raise HistoryInsufficientError(decoded)
    if isinstance(decoded, Refusal):
        raise RefusedError(f"{decoded.error}: {decoded.message}")
    if isinstance(decoded, Subscribed):
        return [decoded.as_dict()]
    return [decoded]
