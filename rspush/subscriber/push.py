"""Push channel client: subscribe over WebSocket, yield each pushed change with its topic,
epoch and position; raise a typed error for every way the hub can refuse or close.

The Destination agent builds on :func:`push_changes`; ``rs-subscribe watch`` prints it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from rspush.hub.push.protocol import PROTOCOL_VERSION, RSPUSH_NS, CloseCode, TopicRequest
from rspush.resourcesync import DocumentError, parse_document
from rspush.resourcesync.w3cdt import format_w3c_datetime


class PushError(Exception):
    """The push channel failed; ``code`` is the WebSocket close code when there was one."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class HistoryInsufficientError(PushError):
    """The resume point is older than the hub keeps (or the epoch changed): catch up from
    the Change List Archive at ``archive``."""

    def __init__(self, info: dict[str, Any]) -> None:
        super().__init__(
            f"topic {info.get('topic')!r}: history insufficient ({info.get('reason')}); "
            f"oldest available position {info.get('oldest')}; catch up from the Change List "
            f"Archive {info.get('archive')}",
            CloseCode.HISTORY_INSUFFICIENT,
        )
        self.info = info


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
) -> AsyncIterator[Change | dict[str, Any]]:
    """Yield ``subscribed`` control messages (dicts) and :class:`Change` values until the
    connection closes; raise :class:`PushError` (or a subclass) on every abnormal end."""
    request = {
        "type": "subscribe",
        "version": PROTOCOL_VERSION,
        "format": fmt,
        "topics": [t.model_dump(exclude_none=True) for t in topics],
    }
    if token is not None:
        request["token"] = token
    try:
        async with connect(url, open_timeout=open_timeout, max_size=None, compression=None) as ws:
            await ws.send(json.dumps(request))
            async for frame in ws:
                try:
                    items = _decode(frame)
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


def _decode(frame: str | bytes) -> list[Change | dict[str, Any]]:
    """One frame as the changes (or the control message) it carries; raises the typed
    errors for refusals, ValueError/KeyError/TypeError for anything malformed."""
    if isinstance(frame, bytes) or frame.startswith("<"):
        return list(_from_xml(frame))
    message = json.loads(frame)
    kind = message.get("type")
    if kind == "changes":
        return [
            Change(
                topic=message["topic"],
                epoch=message["epoch"],
                position=item["position"],
                loc=item["loc"],
                change=item["change"],
                datetime=item["datetime"],
                data=item,
            )
            for item in message["changes"]
        ]
    if kind == "history-insufficient":
        raise HistoryInsufficientError(message)
    if kind == "error":
        raise RefusedError(f"{message.get('error')}: {message.get('message')}")
    if not isinstance(message, dict):
        raise TypeError("a frame must be a JSON object")
    return [message]


def _from_xml(frame: str | bytes) -> list[Change]:
    data = frame.encode() if isinstance(frame, str) else frame
    document = parse_document(data)
    topic = document.md.extra.get(f"{{{RSPUSH_NS}}}topic", "")
    epoch = document.md.extra.get(f"{{{RSPUSH_NS}}}epoch", "")
    changes = []
    for entry in document.entries:
        md = entry.md
        if md is None or md.datetime is None or md.change is None:
            raise ValueError(f"entry {entry.loc}: no rs:md change/datetime")
        # The same fields, in the same form, as the hub's JSON frames (docs/protocol.md).
        item: dict[str, Any] = {
            "position": md.extra.get(f"{{{RSPUSH_NS}}}position", ""),
            "loc": entry.loc,
            "change": md.change,
            "datetime": format_w3c_datetime(md.datetime),
        }
        if entry.lastmod is not None:
            item["lastmod"] = format_w3c_datetime(entry.lastmod)
        if md.hash:
            item["hash"] = " ".join(str(h) for h in md.hash)
        for name in ("length", "type", "encoding"):
            if getattr(md, name) is not None:
                item[name] = getattr(md, name)
        if entry.links:
            item["links"] = [
                link.model_dump(mode="json", exclude_defaults=True) for link in entry.links
            ]
        changes.append(
            Change(
                topic, epoch, item["position"], entry.loc, str(md.change), item["datetime"], item
            )
        )
    return changes
