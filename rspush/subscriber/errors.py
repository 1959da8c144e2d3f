"""Errors of the Destination agent: one tree, rooted at :class:`SubscriberError`.

Tree::

    SubscriberError
    ├── DiscoveryError          the Source could not be discovered (subscriber.discovery)
    ├── UnmappedURIError        a URI maps outside the destination (or no --map covers it);
    │                           not retryable: the path stays refused
    ├── FetchError              a resource could not be fetched (HTTP status, network)
    │   ├── VerificationError   fetched bytes differ from the announced length/hash
    │   └── SupersededError     …but a newer change of the resource has arrived meanwhile
    ├── ApplyError              an applier could not apply a change (subscriber.appliers)
    ├── StateLockedError        another agent holds the state file
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
reading it from the message. The command line maps the tree to exit codes in one table
(:mod:`rspush.subscriber.cli`).
"""

from __future__ import annotations

from typing import ClassVar


class SubscriberError(Exception):
    """Root of the agent's errors."""

    retryable: ClassVar[bool] = True
    """A change that failed with this error is worth retrying later (the agent's periodic
    retries); False: only a newer change of the resource, or ``audit --repair``, settles it."""


class DiscoveryError(SubscriberError):
    """The Source could not be discovered; the message says what was missing or tried.
    ``url`` names the document the problem is about, when there is one."""

    def __init__(self, message: str, *, url: str | None = None) -> None:
        super().__init__(message)
        self.url = url


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


class SourceError(SubscriberError):
    pass
