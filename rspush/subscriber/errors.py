"""Errors of the Destination agent: one tree, rooted at :class:`SubscriberError`.

Tree::

    SubscriberError             the same class as rspush.remote.errors.RemoteError
    ├── DiscoveryError          the Source could not be discovered (remote.discovery)
    │   └── TopicNotFound       the Source lists no topic of that name
    ├── UnmappedURIError        a URI maps outside the destination (or no --map covers it);
    │                           not retryable: the path stays refused
    ├── FetchError              a resource could not be fetched (HTTP status, network)
    │   ├── VerificationError   fetched bytes differ from the announced length/hash
    │   ├── SupersededError     …but a newer change of the resource has arrived meanwhile
    │   └── RedirectRefusedError  it redirects where the agent may not follow; not
    │                           retryable (subscriber.redirects)
    ├── ApplyError              an applier could not apply a change (subscriber.appliers)
    ├── StateLockedError        another agent holds the state file
    ├── NothingWrittenError     a baseline refused every resource: nothing was written
    │                           (subscriber.baseline_summary)
    ├── SourceError             a Source document is unusable (bad XML, missing list)
    │   ├── ArchiveTooShortError  the Change Lists do not reach back far enough
    │   │                         (subscriber.changelists)
    │   └── DumpError           a Resource Dump package is unusable (subscriber.dump)
    └── PushError               the push channel failed (subscriber.push, defined there)
        ├── HistoryInsufficientError  the hub no longer holds the resume point
        ├── RefusedError        unauthorised, unknown topic or protocol error
        └── MalformedFrameError the hub sent something that is not a protocol frame

Each error says whether a change that failed with it is worth another try later
(:attr:`SubscriberError.retryable`); the agent records that with the failure instead of
reading it from the message. :class:`DiscoveryError` and :class:`SourceError` say whether the
*Source* may answer in a moment (``transient``: it could not be reached, a 5xx, a deadline)
or is misconfigured (a 404, a document that is not ResourceSync): the agent waits and tries
again on the first, and ends only on the second. The command line maps the tree to exit
codes in one table (:mod:`rspush.subscriber.cli`).
"""

from __future__ import annotations

from typing import ClassVar

from rspush.remote.errors import DiscoveryError, RemoteError, SourceError, TopicNotFound

__all__ = [
    "ApplyError",
    "DiscoveryError",
    "FetchError",
    "RedirectRefusedError",
    "SourceError",
    "StateLockedError",
    "SubscriberError",
    "SupersededError",
    "TopicNotFound",
    "UnmappedURIError",
    "VerificationError",
]

SubscriberError = RemoteError
"""Root of the agent's errors: the root of :mod:`rspush.remote`'s, so the discovery and
document errors the agent shares with the hub's bridge are agent errors too. Its
``retryable``: a change that failed with this error is worth retrying later (the agent's
periodic retries); False: only a newer change of the resource, or ``audit --repair``,
settles it."""


class UnmappedURIError(SubscriberError):
    retryable: ClassVar[bool] = False

    def __init__(self, uri: str, reason: str) -> None:
        super().__init__(f"refused {uri}: {reason}")
        self.uri = uri
        self.reason = reason


class FetchError(SubscriberError):
    """``transient``: the same GET may well succeed in a moment (a 503, a dropped
    connection), so the fetcher tries again at once; a 404 or an oversized body is not."""

    def __init__(self, uri: str, reason: str, *, transient: bool = True) -> None:
        super().__init__(f"GET {uri}: {reason}")
        self.uri = uri
        self.reason = reason
        self.transient = transient


class VerificationError(FetchError):
    """The bytes do not match the announced length or hash: never written as good."""


class SupersededError(FetchError):
    """The Source's resource changed again after this change was announced, and the newer
    change is already queued: this one is moot, not failed."""


class ApplyError(SubscriberError):
    """An applier could not make the Destination reflect a change."""


class StateLockedError(SubscriberError):
    pass


class RedirectRefusedError(FetchError):
    """A resource redirects to a URI the agent would not fetch itself (unmapped, excluded,
    or an internal address): the change fails for good, and nothing is written."""

    retryable: ClassVar[bool] = False

    def __init__(self, uri: str, reason: str) -> None:
        super().__init__(uri, reason, transient=False)
