"""Every Redis key the hub uses, from one place.

A topic's keys share the hash tag ``{topic}`` so they live in one Redis Cluster slot: the
Lua scripts that append changes and rotate Change Lists touch several of them atomically.
``prefix`` (default ``rs``) lets several hubs, or test runs, share one Redis.

    {prefix}:{topic}:changes        stream: one entry per accepted change
    {prefix}:{topic}:meta           hash: epoch, last change time, open list bounds, counters
    {prefix}:{topic}:state          hash: URI -> Resource List entry XML (current state)
    {prefix}:{topic}:latest         hash: URI -> its last change (time, type, entry digest)
    {prefix}:{topic}:closed         list: JSON records of closed Change Lists, in order
    {prefix}:{topic}:closed:{n}     string: the n-th closed Change List (immutable XML)
    {prefix}:{topic}:idem:{source}/{key}  string: receipt of an idempotent request (expires)
    {prefix}:{topic}:lease          string: the rotation lease holder's token (expires)
    {prefix}:{topic}:framework      stream: one entry per framework event (framework
                                    notification §3: a capability document changed)
    {prefix}:framework:topics       set: the topics the hub last ran with (not per topic)
    {prefix}:framework:description  string: digest of the Source Description last announced
    {prefix}:{topic}:bridge:lease   string: the token of the process running the topic's bridge
    {prefix}:{topic}:bridge:checkpoint  string: the bridge's checkpoint (set with its changes)
    {prefix}:{topic}:bridge:status  hash: the bridge's last success, errors, lag, counters

WebSub subscriptions (:class:`WebSubKeys`), under their own hash tag: a subscription's keys
are touched together, never with a topic's.

    {prefix}:{websub}:subs          hash: subscription id -> JSON record
    {prefix}:{websub}:cursors       hash: subscription id -> "position until_us" delivered
    {prefix}:{websub}:failing       hash: subscription id -> first failure time (µs)
    {prefix}:{websub}:lease:{id}    string: the delivering process's token (expires)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TopicKeys:
    """The keys of one topic."""

    prefix: str
    topic: str

    @property
    def _base(self) -> str:
        return f"{self.prefix}:{{{self.topic}}}"

    @property
    def stream(self) -> str:
        return f"{self._base}:changes"

    @property
    def meta(self) -> str:
        return f"{self._base}:meta"

    @property
    def state(self) -> str:
        return f"{self._base}:state"

    @property
    def latest(self) -> str:
        return f"{self._base}:latest"

    @property
    def closed(self) -> str:
        return f"{self._base}:closed"

    def closed_list(self, number: int) -> str:
        return f"{self._base}:closed:{number}"

    def idempotency(self, key: str) -> str:
        return f"{self._base}:idem:{key}"

    @property
    def lease(self) -> str:
        return f"{self._base}:lease"

    @property
    def framework(self) -> str:
        return f"{self._base}:framework"

    @property
    def bridge_lease(self) -> str:
        return f"{self._base}:bridge:lease"

    @property
    def bridge_checkpoint(self) -> str:
        return f"{self._base}:bridge:checkpoint"

    @property
    def bridge_status(self) -> str:
        return f"{self._base}:bridge:status"


@dataclass(frozen=True, slots=True)
class HubKeys:
    """The few keys that belong to the hub as a whole, not to one topic (each used alone:
    no script touches them together with a topic's keys)."""

    prefix: str

    @property
    def topics(self) -> str:
        return f"{self.prefix}:framework:topics"

    @property
    def description(self) -> str:
        return f"{self.prefix}:framework:description"


@dataclass(frozen=True, slots=True)
class WebSubKeys:
    """The keys of the WebSub subscriptions (all topics)."""

    prefix: str

    @property
    def _base(self) -> str:
        return f"{self.prefix}:{{websub}}"

    @property
    def subscriptions(self) -> str:
        return f"{self._base}:subs"

    @property
    def cursors(self) -> str:
        return f"{self._base}:cursors"

    @property
    def failing(self) -> str:
        return f"{self._base}:failing"

    def lease(self, subscription: str) -> str:
        return f"{self._base}:lease:{subscription}"
