"""Where a subscription starts: the resume decision as a pure function (docs/protocol.md,
"Subscribing" and "History insufficient").

The hub gathers the facts about a topic's stream (its epoch, the oldest change it holds, how
far retention trimmed it, where a ``since`` time falls) and asks :func:`decide_resume`: replay
every change after a position, or tell the client the history it asks for is gone
(:class:`~rspush.protocol.messages.HistoryInsufficient`) rather than skip anything. While the
replay runs, :func:`check_replay` says whether retention has trimmed past its cursor.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from .messages import HistoryInsufficient, HistoryReason
from .positions import ZERO, Position
from .subscribe import TopicRequest


@dataclass(frozen=True, slots=True)
class SinceLookup:
    """Where a ``since`` time falls in the stream (change times are in stream order).

    ``first``: the first change at or after ``since`` (None when there is none). ``before``:
    the change just before that one, or the stream's last change when there is none (None
    when no change the stream holds is before ``since``)."""

    first: Position | None
    before: Position | None


@dataclass(frozen=True, slots=True)
class StreamFacts:
    """What the hub knows about a topic's stream when it decides.

    ``trimmed``/``trimmed_time``: the last change retention removed and its time (None when
    nothing was trimmed). ``since``: where the request's ``since`` falls, when it has one.
    ``archive``: the Change List Archive a client catches up from."""

    epoch: str
    archive: str
    oldest: Position | None
    trimmed: Position | None = None
    trimmed_time: datetime | None = None
    since: SinceLookup | None = None


@dataclass(frozen=True, slots=True)
class Replay:
    """Replay every change after ``after``, then go live; None: no resume point, go live
    from the feed's current position."""

    after: Position | None


def decide_resume(request: TopicRequest, facts: StreamFacts) -> Replay | HistoryInsufficient:
    """The start of one topic's subscription.

    - a resume ``epoch`` other than the stream's: ``epoch-changed`` (positions of another
      life of the topic mean nothing);
    - a resume ``position`` before the last trimmed change: ``trimmed``;
    - a ``since`` time (it overrides a position): replay after the change just before the
      first change at or after it, unless a trimmed change may be at or after ``since``
      (then it would be missed: ``trimmed``, even when the stream is empty).
    """
    if request.epoch is not None and request.epoch != facts.epoch:
        return _insufficient(request.topic, "epoch-changed", facts)
    start = request.resume_position
    if start is not None and facts.trimmed is not None and start < facts.trimmed:
        return _insufficient(request.topic, "trimmed", facts)
    since = request.resume_since
    if since is None:
        return Replay(start)
    found = facts.since
    if found is None:
        raise ValueError("a subscription with 'since' needs StreamFacts.since")
    trimmed_since = facts.trimmed_time is not None and since <= facts.trimmed_time
    if trimmed_since and (found.first is None or found.before is None):
        # The last trimmed change is at or after since: resuming would skip it.
        # The first change at or after since is the stream's oldest (or there is none).
        return _insufficient(request.topic, "trimmed", replace(facts, oldest=found.first))
    return Replay(found.before or facts.trimmed or ZERO)


def check_replay(topic: str, cursor: Position, facts: StreamFacts) -> HistoryInsufficient | None:
    """After a replay page that ended at ``cursor``: has retention trimmed past it since
    the subscription was decided? Then the next page would silently start after a gap."""
    if facts.trimmed is None or facts.trimmed <= cursor:
        return None
    return _insufficient(topic, "trimmed", facts)


def _insufficient(topic: str, reason: HistoryReason, facts: StreamFacts) -> HistoryInsufficient:
    # Everything after ``after`` (the last trimmed change, at after_time) is still in the
    # stream: a client that has caught up from the archive to at least after_time can
    # resume from it exactly.
    return HistoryInsufficient(
        topic=topic,
        reason=reason,
        epoch=facts.epoch,
        oldest=facts.oldest,
        after=facts.trimmed or ZERO,
        after_time=facts.trimmed_time,
        archive=facts.archive,
    )
