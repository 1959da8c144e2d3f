"""Errors of reading a remote ResourceSync Source, rooted at :class:`RemoteError`.

Tree::

    RemoteError
    ├── DiscoveryError      the Source could not be discovered (remote.discovery)
    │   └── TopicNotFound   the Source lists no topic of that name
    └── SourceError         a Source document is unusable (bad XML, missing, too large)

:class:`DiscoveryError` and :class:`SourceError` say whether the *Source* may answer in a
moment (``transient``: it could not be reached, a 5xx, a deadline) or is misconfigured (a
404, a document that is not ResourceSync). The Destination agent's own errors grow from the
same root (``rspush.subscriber.errors``), so one ``except`` covers both.
"""

from __future__ import annotations

from typing import ClassVar


class RemoteError(Exception):
    """Root of the errors of reading a Source (and of the Destination agent's)."""

    retryable: ClassVar[bool] = True
    """A change that failed with this error is worth retrying later; False: only a newer
    change of the resource settles it."""


class DiscoveryError(RemoteError):
    """The Source could not be discovered; the message says what was missing or tried.
    ``url`` names the document the problem is about, when there is one; ``transient``: the
    Source could not be reached or answered 5xx (try again later), else it is a
    configuration error."""

    def __init__(self, message: str, *, url: str | None = None, transient: bool = False) -> None:
        super().__init__(message)
        self.url = url
        self.transient = transient


class TopicNotFound(DiscoveryError):
    """The Source lists no topic of the name asked for (a hub lists a private topic only to
    its subscribers)."""


class SourceError(RemoteError):
    """A Source document is unusable. ``transient``: it could not be fetched now (network,
    5xx, a deadline) and may well be there in a moment; else it is wrong as served."""

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient
