"""The bridge contract: what a bridge kind implements and what the runner does with it.

A bridge kind is a class built as ``Kind(config, http)`` — its :class:`BridgeConfig` and an
:class:`.http.BridgeHttp` (timeouts, size and gzip caps, ``Retry-After``, conditional GETs) —
with one coroutine::

    async def step(self, checkpoint: str | None) -> BridgeStep | None

``checkpoint`` is the JSON text the bridge returned in its last *committed* step (None the
first time). ``step`` reads the remote a bounded amount (one page, one document) and returns:

- ``None``: nothing new; the runner sleeps ``interval_s`` and calls again with the same
  checkpoint;
- a :class:`BridgeStep`: ``changes`` (Change List entries, :class:`~rspush.resourcesync.Entry`,
  as a Source would post them; see below), the new ``checkpoint`` (opaque JSON text the
  bridge resumes from), ``baseline`` (the entries are a Resource List baseline of a topic
  without history, not changes) and ``more`` (call again at once; else sleep ``interval_s``).

The runner (:mod:`.runner`) holds a lease per bridge (one hub process runs a given bridge at a
time), reads the checkpoint from Redis, calls ``step`` and appends the changes **with the new
checkpoint in one atomic script call**, and only if the checkpoint is still the one it read.
So a crash or a restart re-reads the remote from the last committed checkpoint, but never
appends a step twice nor skips one. A step may list no changes and still move the checkpoint.

The changes go through the same planning and validation as a Source's post
(:func:`..ingest.plan_changes`), as the Source ``bridge:<topic>``. What the runner adds:

- an entry without ``rs:md change`` is ``created`` when the topic's state lacks its URI and
  ``updated`` otherwise;
- an entry that would leave the topic's state as it is (a created/updated whose Resource List
  entry equals the state's, a deleted of a URI not in the state) is dropped: a bridge that
  re-reads an overlap (OAI-PMH's inclusive ``from``) or restarts a listing appends nothing
  twice;
- entries without a time are stamped by the hub (like a Source's);
- times must be in forward order within a step and not before the topic's last change (the
  hub's rule for every Source); a bridge keeps its own times forward.

Failures: a bridge raises :class:`BridgeError` for what the remote did wrong or could not do
now (HTTP errors, timeouts, unparsable responses); the runner backs off with jitter (honouring
``retry_after``) and retries with the same checkpoint. :class:`RemoteRegression` is for a
remote that went back in time or lost history: reported in the status and metrics, then
handled as the bridge decides: it may raise it (the step is retried) or return a step that
copes and lists what happened in ``regressions`` (counted and shown the same way).
Any other exception is counted as ``internal`` (logged with its traceback) and retried the
same way.

Also:

- a step lists at most ``config.max_changes_per_step`` changes (the hub refuses more);
- a ``baseline`` step is refused (``topic-has-history``, counted as ``rejected``) once the
  topic has state or changes: a bridge seeds only an empty topic;
- ``notes`` of a step are logged and shown as the bridge's ``last_note``;
- a bridge that has an attribute ``topic_view`` gets a :class:`TopicView` (the URIs the topic
  holds) from the runner before its first step;
- a bridge keeps :attr:`synced_through` (the remote's time through which every change has been
  bridged, when the remote says it; None otherwise) so the runner can report the lag behind
  the remote;
- ``http.get(url, conditional=True)`` sends the validators of the URL's last ``200`` and
  returns None for ``304 Not Modified``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from rspush.resourcesync import Entry

if TYPE_CHECKING:
    from ..settings import BridgeConfig
    from .http import BridgeHttp


@dataclass(frozen=True, slots=True)
class BridgeStep:
    changes: list[Entry]
    checkpoint: str
    baseline: bool = False
    more: bool = False
    notes: list[str] = field(default_factory=list)
    """Things an operator should know about this step (logged and shown in the status)."""
    regressions: list[str] = field(default_factory=list)
    """The remote went back in time or lost history, and the step copes (re-reads more):
    counted as ``regression`` errors and shown, but the step is committed."""
    at: datetime | None = None
    """With ``baseline``: the remote's time of the Resource List (its ``at``), the topic's
    seed time; the remote's changes after it then follow in order. None: the hub's clock."""


class BridgeError(Exception):
    """The remote failed or could not answer now; the step is retried later."""

    def __init__(self, message: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class RemoteRegression(BridgeError):
    """The remote went back in time or lost history (reported, not fatal)."""


class Bridge(Protocol):
    synced_through: datetime | None

    async def step(self, checkpoint: str | None) -> BridgeStep | None: ...


class TopicView(Protocol):
    """What a bridge may read of its topic: the URIs its state holds (a bridge that has an
    attribute ``topic_view`` gets one from the runner before its first step)."""

    async def uris(self) -> set[str]: ...


class BridgeKind(Protocol):
    def __call__(self, config: BridgeConfig, http: BridgeHttp) -> Bridge: ...


KINDS: dict[str, str] = {
    "oai-pmh": "rspush.hub.bridges.oaipmh:OaiPmhBridge",
    "resourcesync": "rspush.hub.bridges.resourcesync:ResourceSyncBridge",
}
"""Each kind's class, imported when a bridge of that kind is configured."""


def bridge_kind(kind: str) -> BridgeKind:
    module, _, name = KINDS[kind].partition(":")
    cls: BridgeKind = getattr(importlib.import_module(module), name)
    return cls
