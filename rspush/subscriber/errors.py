"""Errors of the Destination agent.

Tree::

    SubscriberError
    ├── UnmappedURIError      a URI maps outside the destination (or no --map covers it)
    ├── FetchError            a resource could not be fetched (HTTP status, network)
    │   ├── VerificationError fetched bytes differ from the announced length/hash
    │   └── SupersededError   …but a newer change of the resource has arrived meanwhile
    ├── StateLockedError      another agent holds the state file
    └── SourceError           a Source document is unusable (bad XML, missing list)

``DiscoveryError`` (``subscriber.discovery``) and ``PushError`` (``subscriber.push``) stay with
the modules that raise them; the agent maps all of them to log lines and exit codes.
"""

from __future__ import annotations


class SubscriberError(Exception):
    """Root of the agent's errors."""


class UnmappedURIError(SubscriberError):
    def __init__(self, uri: str, reason: str) -> None:
        super().__init__(f"refused {uri}: {reason}")
        self.uri = uri
        self.reason = reason


class FetchError(SubscriberError):
    def __init__(self, uri: str, reason: str, *, retryable: bool = True) -> None:
        super().__init__(f"GET {uri}: {reason}")
        self.uri = uri
        self.reason = reason
        self.retryable = retryable


class VerificationError(FetchError):
    """The bytes do not match the announced length or hash: never written as good."""


class SupersededError(FetchError):
    """The Source's resource changed again after this change was announced, and the newer
    change is already queued: this one is moot, not failed."""


class StateLockedError(SubscriberError):
    pass


class SourceError(SubscriberError):
    pass
