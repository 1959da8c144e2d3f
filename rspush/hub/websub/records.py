"""What the hub keeps of a subscription and of its delivery cursor (pure: JSON and text)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

from rspush.protocol import Position


def subscription_id(topic_uri: str, callback: str) -> str:
    """A subscription is its (topic, callback) pair (WebSub §5.1: a new request for the same
    pair renews it)."""
    return hashlib.sha256(f"{topic_uri}\n{callback}".encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class Subscription:
    topic_uri: str
    topic: str
    channel: str
    callback: str
    expires_us: int
    secret: str | None = None
    subscriber: str | None = None
    """The subscriber token holder that subscribed to a private topic (checked again before
    every delivery: a holder whose access was removed stops receiving)."""

    @property
    def id(self) -> str:
        return subscription_id(self.topic_uri, self.callback)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Subscription:
        return cls(**json.loads(text))


@dataclass(frozen=True, slots=True)
class Cursor:
    """Delivered up to ``position`` (inclusive); the last notification ended at ``until_us``
    (None before the first one)."""

    position: Position
    until_us: int | None

    def encode(self) -> str:
        return f"{self.position} {'-' if self.until_us is None else self.until_us}"

    @classmethod
    def decode(cls, text: str) -> Cursor:
        position, _, until = text.partition(" ")
        return cls(Position.parse(position or "0-0"), None if until in ("", "-") else int(until))
