"""The command line's one map from errors to exit statuses (``subscriber.cli.exit_status``)."""

from __future__ import annotations

import pytest

from rspush.protocol import CloseCode, HistoryInsufficient, Position, ProtocolError
from rspush.subscriber.changelists import ArchiveTooShortError
from rspush.subscriber.cli import ENDING_ERRORS, exit_status
from rspush.subscriber.errors import (
    DiscoveryError,
    FetchError,
    SourceError,
    StateLockedError,
    SubscriberError,
    UnmappedURIError,
)
from rspush.subscriber.push import (
    HistoryInsufficientError,
    MalformedFrameError,
    PushError,
    RefusedError,
)


@pytest.mark.parametrize(
    ("error", "status", "message"),
    [
        (DiscoveryError("no topic 'x'"), 2, "no topic 'x'"),
        (ProtocolError("bad since"), 2, "bad since"),
        (StateLockedError("in use"), 5, "in use"),
        (RefusedError("unauthorised: no"), 4, "refused: unauthorised: no"),
        (PushError("closed (4001): no", CloseCode.UNAUTHORISED), 4, "closed (4001): no"),
        (PushError("closed (4004): ?", CloseCode.UNKNOWN_TOPIC), 4, "closed (4004): ?"),
        (PushError("push channel closed", CloseCode.SHUTDOWN), 1, "push channel closed"),
        (MalformedFrameError("unreadable"), 1, "unreadable"),
        (SourceError("bad XML"), 1, "bad XML"),
        (FetchError("http://x/", "HTTP 404"), 1, "GET http://x/: HTTP 404"),
    ],
)
def test_each_error_has_one_status_and_line(error: Exception, status: int, message: str) -> None:
    assert isinstance(error, ENDING_ERRORS)
    assert exit_status(error) == (status, message)


def test_history_insufficient_is_status_3() -> None:
    error = HistoryInsufficientError(
        HistoryInsufficient(
            topic="t",
            reason="trimmed",
            epoch="e",
            oldest=Position(1, 0),
            after=None,
            after_time=None,
            archive="http://hub.example/topics/t/changelist-archive.xml",
        )
    )
    assert exit_status(error)[0] == 3


def test_the_tree_has_one_root_and_retryability_is_structured() -> None:
    for kind in (DiscoveryError, StateLockedError, SourceError, ArchiveTooShortError, FetchError):
        assert issubclass(kind, SubscriberError)
    assert UnmappedURIError("http://x/", "outside").retryable is False
    assert FetchError("http://x/", "HTTP 404", transient=False).retryable is True
