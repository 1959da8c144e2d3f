"""The agent's state machine (one topic of one Source), without I/O.

:func:`next_state` is the whole of it: the agent (:mod:`rspush.subscriber.agent`) does the work of
each state and reports what happened as an :class:`Event`::

    STARTING ──baseline needed──> BASELINE ──baseline done──> CONNECTING
    STARTING, CONNECTING, POLL ──subscribed──> PUSH
    STARTING, CONNECTING, PUSH, POLL, CATCH_UP, BASELINE ──polling──> POLL
        (a pull-only Source; the push channel is down; a catch-up or a rebaseline failed
        because the Source's documents are unavailable: poll a while)
    STARTING, CONNECTING, PUSH, POLL ──history insufficient──> CATCH_UP
    CATCH_UP, CONNECTING ──caught up──> CONNECTING
    POLL, CATCH_UP ──baseline needed──> BASELINE
        (the Change Lists do not reach back far enough; a catch-up with no watermark)
    BASELINE ──baseline needed──> BASELINE
        (the Source was unavailable part-way: the baseline starts again after a delay)
    BASELINE ──stop──> BASELINE_STOPPING   (the baseline's watermark stays held)
    any other ──stop──> STOPPING
    (in both, changes not yet started are dropped; those being written get the stop grace)
    STOPPING, BASELINE_STOPPING: every event leaves them as they are

:class:`Machine` adds the one thing the agent remembers across states: the ``at`` of a
baseline that nothing has followed yet (see :meth:`Machine.follow_lists_from`).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Final


class State(StrEnum):
    STARTING = "starting"
    BASELINE = "baseline"
    """Reading the Source's Resource List (or Dump); the checkpoint's watermark is held."""
    CONNECTING = "connecting"
    """Opening a push session after a baseline or a catch-up."""
    PUSH = "push"
    POLL = "poll"
    CATCH_UP = "catch-up"
    """Reading the Change List Archive and the open Change List since the watermark."""
    STOPPING = "stopping"
    BASELINE_STOPPING = "baseline-stopping"


class Event(StrEnum):
    BASELINE_NEEDED = "baseline needed"
    BASELINE_DONE = "baseline done"
    SUBSCRIBED = "subscribed"
    POLLING = "polling"
    """A round of polling the open Change List begins."""
    POLLED = "polled"
    """A round of polling ended without an error."""
    HISTORY_INSUFFICIENT = "history insufficient"
    CAUGHT_UP = "caught up"
    STOP = "stop"


_FOLLOWING: Final = (State.STARTING, State.CONNECTING, State.PUSH, State.POLL)

TRANSITIONS: Final[dict[tuple[State, Event], State]] = {
    (State.STARTING, Event.BASELINE_NEEDED): State.BASELINE,
    (State.POLL, Event.BASELINE_NEEDED): State.BASELINE,
    (State.CATCH_UP, Event.BASELINE_NEEDED): State.BASELINE,
    (State.BASELINE, Event.BASELINE_NEEDED): State.BASELINE,
    (State.BASELINE, Event.BASELINE_DONE): State.CONNECTING,
    (State.STARTING, Event.SUBSCRIBED): State.PUSH,
    (State.CONNECTING, Event.SUBSCRIBED): State.PUSH,
    (State.POLL, Event.SUBSCRIBED): State.PUSH,
    (State.PUSH, Event.SUBSCRIBED): State.PUSH,
    **{
        (state, Event.POLLING): State.POLL
        for state in (*_FOLLOWING, State.CATCH_UP, State.BASELINE)
    },
    (State.POLL, Event.POLLED): State.POLL,
    **{(state, Event.HISTORY_INSUFFICIENT): State.CATCH_UP for state in _FOLLOWING},
    (State.CATCH_UP, Event.CAUGHT_UP): State.CONNECTING,
    (State.CONNECTING, Event.CAUGHT_UP): State.CONNECTING,  # a catch-up that rebaselined
    (State.BASELINE, Event.STOP): State.BASELINE_STOPPING,
    **{
        (state, Event.STOP): State.STOPPING
        for state in State
        if state not in (State.BASELINE, State.BASELINE_STOPPING)
    },
}

STOPPED_STATES: Final = frozenset({State.STOPPING, State.BASELINE_STOPPING})


class TransitionError(AssertionError):
    """An event the state does not expect: a bug in the agent, not in the Source."""


def next_state(state: State, event: Event) -> State:
    if state in STOPPED_STATES:
        return state
    try:
        return TRANSITIONS[state, event]
    except KeyError:
        raise TransitionError(f"no transition from {state} on {event}") from None


def holds_watermark(state: State) -> bool:
    """A baseline's changes never move the checkpoint's watermark: the baseline sets it
    when (and only if) it completes."""
    return state in (State.BASELINE, State.BASELINE_STOPPING)


def retries_failures(state: State) -> bool:
    """Failed changes are retried only while following the Source live."""
    return state in (State.PUSH, State.POLL)


class Machine:
    """The current :class:`State`, and the ``at`` of a baseline nothing has followed yet."""

    def __init__(self, state: State = State.STARTING) -> None:
        self.state = state
        self.fresh_baseline: datetime | None = None
        """The ``at`` of the last baseline, until a subscription or a poll round follows it."""

    def fire(self, event: Event, *, at: datetime | None = None) -> State:
        """Take ``event`` (``at``: a completed baseline's time) and return the new state."""
        self.state = next_state(self.state, event)
        if event is Event.BASELINE_DONE:
            self.fresh_baseline = at
        elif event in (Event.SUBSCRIBED, Event.POLLED):
            self.fresh_baseline = None
        return self.state

    @property
    def stopping(self) -> bool:
        return self.state in STOPPED_STATES

    def follow_lists_from(
        self, last_time: datetime | None, earliest: datetime | None
    ) -> datetime | None:
        """The Change Lists start after the watermark (at ``earliest``, None: there are
        none): None — rebaseline — unless the watermark is still the ``at`` of a baseline
        just made and the lists do start somewhere. Then the changes in between are
        unknowable (a property of the Source, not a reason to baseline again and again):
        follow the lists from where they start, the time returned."""
        if self.fresh_baseline is not None and last_time == self.fresh_baseline:
            return earliest
        return None
