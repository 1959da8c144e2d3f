"""The agent's state machine (``subscriber.states``): the transition table, read without I/O."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from rspush.subscriber.states import (
    TRANSITIONS,
    Event,
    Machine,
    State,
    TransitionError,
    holds_watermark,
    next_state,
    retries_failures,
)

AT = datetime(2026, 3, 1, tzinfo=UTC)


def run(*events: Event, start: State = State.STARTING) -> list[State]:
    machine = Machine(start)
    return [machine.fire(event) for event in events]


def test_a_first_run_baselines_then_subscribes() -> None:
    assert run(Event.BASELINE_NEEDED, Event.BASELINE_DONE, Event.SUBSCRIBED) == [
        State.BASELINE,
        State.CONNECTING,
        State.PUSH,
    ]


def test_a_resumed_run_goes_straight_to_push() -> None:
    assert next_state(State.STARTING, Event.SUBSCRIBED) is State.PUSH


def test_push_down_polls_then_returns_to_push() -> None:
    assert run(Event.SUBSCRIBED, Event.POLLING, Event.POLLED, Event.SUBSCRIBED) == [
        State.PUSH,
        State.POLL,
        State.POLL,
        State.PUSH,
    ]


def test_history_insufficient_catches_up_then_connects() -> None:
    assert run(Event.SUBSCRIBED, Event.HISTORY_INSUFFICIENT, Event.CAUGHT_UP) == [
        State.PUSH,
        State.CATCH_UP,
        State.CONNECTING,
    ]


def test_an_archive_too_short_rebaselines_from_catch_up_or_poll() -> None:
    assert next_state(State.CATCH_UP, Event.BASELINE_NEEDED) is State.BASELINE
    assert next_state(State.POLL, Event.BASELINE_NEEDED) is State.BASELINE
    # A catch-up that had to rebaseline still ends as a catch-up.
    assert (
        run(Event.BASELINE_NEEDED, Event.BASELINE_DONE, Event.CAUGHT_UP, start=State.CATCH_UP)[-1]
        is State.CONNECTING
    )


def test_a_failed_catch_up_or_rebaseline_polls() -> None:
    assert next_state(State.CATCH_UP, Event.POLLING) is State.POLL
    assert next_state(State.BASELINE, Event.POLLING) is State.POLL


def test_stop_during_a_baseline_lets_it_finish_what_is_in_flight() -> None:
    assert next_state(State.BASELINE, Event.STOP) is State.BASELINE_STOPPING
    for state in (State.STARTING, State.CONNECTING, State.PUSH, State.POLL, State.CATCH_UP):
        assert next_state(state, Event.STOP) is State.STOPPING


@pytest.mark.parametrize("stopped", [State.STOPPING, State.BASELINE_STOPPING])
def test_stopping_absorbs_every_event(stopped: State) -> None:
    for event in Event:
        assert next_state(stopped, event) is stopped
    assert Machine(stopped).stopping


def test_an_unexpected_event_is_a_bug() -> None:
    with pytest.raises(TransitionError, match="no transition from push on baseline done"):
        next_state(State.PUSH, Event.BASELINE_DONE)
    assert (State.PUSH, Event.BASELINE_DONE) not in TRANSITIONS


def test_what_each_state_allows() -> None:
    assert {s for s in State if holds_watermark(s)} == {State.BASELINE, State.BASELINE_STOPPING}
    assert {s for s in State if retries_failures(s)} == {State.PUSH, State.POLL}


def test_states_read_as_the_channel_names() -> None:
    assert State.PUSH == "push" and State.POLL == "poll" and State.CATCH_UP == "catch-up"


def test_short_lists_are_followed_only_right_after_a_baseline() -> None:
    earliest = AT + timedelta(hours=1)
    machine = Machine()
    assert machine.follow_lists_from(AT, earliest) is None  # no baseline yet: rebaseline

    machine.fire(Event.BASELINE_NEEDED)
    machine.fire(Event.BASELINE_DONE, at=AT)
    assert machine.follow_lists_from(AT, earliest) == earliest
    assert machine.follow_lists_from(AT, None) is None  # no lists at all
    assert machine.follow_lists_from(AT + timedelta(seconds=1), earliest) is None  # moved on

    machine.fire(Event.POLLING)
    assert machine.follow_lists_from(AT, earliest) == earliest  # the first poll round
    machine.fire(Event.POLLED)
    assert machine.follow_lists_from(AT, earliest) is None  # a round followed it


def test_a_subscription_ends_the_guard_too() -> None:
    machine = Machine()
    machine.fire(Event.BASELINE_NEEDED)
    machine.fire(Event.BASELINE_DONE, at=AT)
    machine.fire(Event.SUBSCRIBED)
    assert machine.follow_lists_from(AT, AT + timedelta(hours=1)) is None
