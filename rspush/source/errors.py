"""Errors of the Source side (``rs-publish``, ``rs-publish watch``): one tree, rooted at
:class:`PublishError`.

Tree::

    PublishError
    ├── ChangeArgumentError   a --created/--updated/--deleted value cannot be used (also a
    │                         ValueError) (source.fragment)
    ├── HubRefused            the hub refused a post for good: a 4xx other than 408/425/429
    │                         (source.posting)
    ├── StateError            rs-publish watch's state file cannot be used (source.state)
    └── TreeGone              the watched directory itself is gone (source.watcher)

Every message is one line, printed as it is; each command maps these to the exit status its
help names (:mod:`.publish`, :mod:`.watch_cli`).
"""

from __future__ import annotations


class PublishError(Exception):
    """Root of the Source side's errors."""


class ChangeArgumentError(PublishError, ValueError):
    """A change given on the command line cannot be used; the message says why."""


class HubRefused(PublishError):
    """The hub refused a post for good (a 4xx other than 408/425/429); the message is one
    line: the status and the hub's own message."""


class StateError(PublishError):
    """The state file cannot be used; the message says why, on one line."""


class TreeGone(PublishError):
    """The watched directory itself is gone (moved, deleted, unmounted)."""
