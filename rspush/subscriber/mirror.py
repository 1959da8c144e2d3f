"""Applying changes: filtering, ordering, verification, apply, checkpoint.

Changes of one URI are applied in the order they were submitted; different URIs run
concurrently, up to ``concurrency`` at once. The checkpoint's watermark only moves over a
gap-free prefix of finished changes (:class:`rspush.subscriber.watermark.WatermarkTracker`), written
in the same transaction as the change that moved it.

Why one module of this size: the queue per URI, the look-ahead that lets a newer change
supersede a queued one, the verification and the checkpoint write share one lock-free state
(the queues and the in-flight set) that must change in one place.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import PurePosixPath
from typing import Any

from rspush.resourcesync.w3cdt import format_w3c_datetime

from .appliers import Applier
from .changes import ChangeType, Channel, Outcome, ResourceChange
from .checkpoint import Checkpoint
from .decide import Decision, ResourceState, decide
from .errors import SubscriberError, SupersededError
from .fetch import Fetched, Fetcher
from .filters import ChangeFilter
from .mapping import UriMap
from .watermark import NO_WATERMARK, Watermark, WatermarkTracker

log = logging.getLogger("rs_subscribe")

DEFAULT_CONCURRENCY = 8
DEFAULT_WINDOW = 2048
"""Changes queued ahead of the ones applying (tasks waiting for a slot: cheap)."""
_BATCH_MAX = 1000
"""Records per commit at most (a long burst still commits regularly)."""
_FLUSH_EVERY = 500
"""Skipped changes move the watermark in memory; it is written at least this often."""

EventSink = Callable[[dict[str, Any]], None]


def _now() -> datetime:
    return datetime.now(UTC)


def _never() -> bool:
    return False


@dataclass(frozen=True, slots=True)
class Failed:
    """Why a change could not be applied, and whether a later retry may succeed (a refused
    path never will: only a newer change or ``audit --repair`` settles it)."""

    reason: str
    retryable: bool = True


class Mirror:
    def __init__(
        self,
        checkpoint: Checkpoint,
        uri_map: UriMap,
        applier: Applier,
        fetcher: Fetcher | None,
        *,
        change_filter: ChangeFilter | None = None,
        events: EventSink | None = None,
        on_outcome: Callable[[Outcome], None] | None = None,
        concurrency: int = DEFAULT_CONCURRENCY,
        window: int = DEFAULT_WINDOW,
        clock: Callable[[], datetime] = _now,
        watermark_held: Callable[[], bool] = _never,
    ) -> None:
        """``watermark_held``: asked before the checkpoint's watermark is written; True (the
        agent is in a baseline) keeps it where it is until the agent sets it."""
        self.checkpoint = checkpoint
        self.uri_map = uri_map
        self.applier = applier
        self.fetcher = fetcher
        """None: metadata-only — record changes without fetching (the benchmark's mode)."""
        self.filter = change_filter or ChangeFilter()
        self.events = events
        self.on_outcome = on_outcome
        self.clock = clock
        self.stats: Counter[str] = Counter()
        self.first_refused: SubscriberError | None = None
        """The first change refused for good (not retryable), for the baseline's summary."""
        state = checkpoint.state()
        self._tracker = WatermarkTracker(state.watermark if state is not None else NO_WATERMARK)
        self._held = watermark_held
        self._slots = asyncio.Semaphore(concurrency)
        self._window = asyncio.Semaphore(max(window, concurrency))
        self._lanes: dict[str, asyncio.Task[None]] = {}
        self._latest: dict[str, tuple[int, datetime]] = {}
        """The newest submitted change per URI (in flight only): sequence number, time."""
        self._dirty = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._unreported: list[tuple[ResourceChange, str, datetime, dict[str, Any]]] = []
        """Outcomes waiting for the batch's commit before they are reported."""
        self._batched = 0
        self._live = 0
        """Tasks submitted and not yet ended: idle at zero."""
        self._abandoning = False
        self._transfers: set[asyncio.Future[Fetched]] = set()
        """Downloads running now (:meth:`cancel_transfers` cuts them short)."""

    @property
    def watermark(self) -> Watermark:
        """Where the gap-free prefix of finished changes stands (in memory; :meth:`flush`
        writes it)."""
        return self._tracker.watermark

    @property
    def epoch(self) -> str | None:
        return self._tracker.epoch

    # --- submitting ------------------------------------------------------------------------

    async def submit(self, change: ResourceChange, content: Fetched | None = None) -> None:
        """Queue a change; waits while ``window`` changes are queued or in flight (at most
        ``concurrency`` of them applying). ``content``: bytes already verified (from a
        Resource Dump package) instead of a fetch.

        The window is the agent's look-ahead: a change whose URI already has a newer change
        queued is superseded, not fetched (after an absence the backlog is full of them)."""
        if not _storable(change.uri):
            # Not even recordable (a lone surrogate from a JSON frame): refuse it here.
            self.stats["refused"] += 1
            log.warning("refused %r: not a valid Unicode URI", change.uri)
            if content is not None:
                content.path.unlink(missing_ok=True)
            return
        await self._window.acquire()
        seq = self._tracker.submitted(change)
        self._live += 1
        self._idle.clear()
        self._latest[change.uri] = (seq, change.time)
        previous = self._lanes.get(change.uri)
        task = asyncio.create_task(
            self._run(seq, change, previous, content), name=f"apply {change.uri}"
        )
        self._lanes[change.uri] = task

    async def drain(self) -> None:
        """Wait until every submitted change is finished (or abandoned), then write the
        watermark."""
        await self._idle.wait()
        self.flush()

    def note_epoch(self, epoch: str | None) -> None:
        """The hub named the stream's epoch (:meth:`WatermarkTracker.note_epoch`)."""
        if self._tracker.note_epoch(epoch):
            self._dirty += 1

    async def retry_failures(self, max_tries: int, stopping: Callable[[], bool]) -> None:
        """Submit again the failed changes worth another try (fewer than ``max_tries``),
        until ``stopping()``."""
        for change in self.checkpoint.retryable_failures(max_tries=max_tries):
            if stopping():
                return
            await self.submit(change)

    def report_unplaced(self, uri: str, change: ChangeType, reason: str) -> None:
        """A change the Source announced but gave no time to place it by: a failure row
        (not retried: the same list says the same; a newer change of the resource, a
        baseline or ``audit --repair`` settles it) and a ``failed`` event, at once."""
        now = self.clock()
        unplaced = ResourceChange(uri, change, now, Channel.POLL)
        log.warning("%s", reason)
        self.stats["failed"] += 1
        self.checkpoint.record_failure(unplaced, reason, None, now=now, retryable=False)
        self._emit(unplaced, "failed", now, reason=reason)
        self.commit()

    def report_rebaseline(self, reason: str) -> None:
        """Tell the event sink that the agent starts a new baseline, and why."""
        if self.events is not None:
            applied = format_w3c_datetime(self.clock())
            self.events({"event": "rebaseline", "reason": reason, "applied": applied})

    def abandon(self) -> None:
        """Stopping: changes not yet being applied are dropped, not applied. The watermark
        stays at the gap-free prefix before the first of them, so the next run gets them
        again; only the files being written now are finished."""
        self._abandoning = True

    def cancel_transfers(self) -> None:
        """Stopping, and the grace is over: cancel the downloads still running (their temp
        files are deleted) and drop whatever is queued. Those changes never finish, so the
        watermark stays before them and the next run gets them again."""
        self._abandoning = True
        for transfer in list(self._transfers):
            transfer.cancel()

    def flush(self) -> None:
        if self._dirty and not self._held():
            self.checkpoint.set_watermark(self.watermark, now=self.clock())
            self._dirty = 0
        self.commit()

    def set_watermark(self, watermark: Watermark) -> None:
        """Move the watermark without a change (a baseline's ``at``, a subscription's
        starting point). Only when nothing is in flight."""
        assert self._idle.is_set(), "set_watermark while changes are in flight"
        self._tracker.reset(watermark)
        self.checkpoint.set_watermark(watermark, now=self.clock())
        self._dirty = 0
        self.commit()

    # --- applying --------------------------------------------------------------------------

    async def _run(
        self,
        seq: int,
        change: ResourceChange,
        previous: asyncio.Task[None] | None,
        content: Fetched | None,
    ) -> None:
        try:
            if previous is not None:
                # Same URI: strictly after the previous change of it, whatever became of it.
                await asyncio.wait([previous])
            async with self._slots:
                if self._abandoning:
                    if content is not None:
                        content.path.unlink(missing_ok=True)
                    return  # never finished: the watermark cannot pass it
                superseded = self._superseded(change, seq)
                if superseded() and change.channel != Channel.BASELINE:
                    # A newer change of this URI is queued behind us: it defines the
                    # resource's state; fetching now would get its bytes, failing our hash.
                    self.stats["superseded"] += 1
                    if content is not None:
                        content.path.unlink(missing_ok=True)
                    state, failed = None, None
                else:
                    try:
                        state, failed = await self._apply(change, content, superseded)
                    except asyncio.CancelledError:
                        task = asyncio.current_task()
                        if task is not None and task.cancelling():
                            raise  # this task itself is cancelled, not just its download
                        return  # the download was cut short by stopping: never finished
                self._finish(seq, change, state, failed)
        finally:
            if self._lanes.get(change.uri) is asyncio.current_task():
                del self._lanes[change.uri]
            if self._latest.get(change.uri, (None,))[0] == seq:
                del self._latest[change.uri]
            self._window.release()
            self._live -= 1
            if self._live == 0:
                self._idle.set()

    def _superseded(self, change: ResourceChange, seq: int) -> Callable[[], bool]:
        """True once a change of the same URI, at the same time or later, is queued behind
        this one (an *older* one arriving late never supersedes: decide() skips it)."""

        def check() -> bool:
            latest_seq, latest_time = self._latest.get(change.uri, (seq, change.time))
            return latest_seq != seq and latest_time >= change.time

        return check

    async def _apply(
        self, change: ResourceChange, content: Fetched | None, superseded: Callable[[], bool]
    ) -> tuple[ResourceState | None, Failed | None]:
        """(new resource state or None, why it failed or None)."""
        try:
            return await self._decide_and_apply(change, content, superseded)
        except Exception as exc:  # noqa: BLE001 - one bad change must not stall the rest
            # Whatever an applier (or a hostile URI) raises becomes a reported failure: the
            # change's sequence number must finish, or the watermark stops for good.
            log.exception("unexpected error applying %s", change.uri)
            self.stats["failed"] += 1
            return None, Failed(f"{change.uri}: {type(exc).__name__}: {exc}")
        finally:
            if content is not None:
                content.path.unlink(missing_ok=True)

    async def _decide_and_apply(
        self, change: ResourceChange, content: Fetched | None, superseded: Callable[[], bool]
    ) -> tuple[ResourceState | None, Failed | None]:
        stored = self.checkpoint.resource(change.uri)
        held = stored is not None and stored.change != ChangeType.DELETED
        # A deletion of something we hold is applied even if its entry lacks the links the
        # filter looks for (Change List entries for deletions often carry none).
        if not (self.filter.wants(change) or (change.change == ChangeType.DELETED and held)):
            self.stats["filtered"] += 1
            return None, None
        decision = decide(stored, change)
        if decision in (Decision.SKIP_OLDER, Decision.SKIP_DUPLICATE):
            self.stats[str(decision)] += 1
            if change.channel == Channel.RETRY:
                self.checkpoint.clear_failure(change.uri)  # settled by a newer change
            return None, None
        try:
            relative = self.uri_map.path_for(change.uri)
            if decision is Decision.SAME_CONTENT:
                assert stored is not None
                self.stats["same-content"] += 1
                return self._state(change, relative, stored.length, stored.hash), None
            if change.change == ChangeType.DELETED:
                await self.applier.apply(change, relative, None)
                return self._state(change, relative, None, None), None
            if content is None and self.fetcher is None:
                await self.applier.apply(change, relative, None)
                hash_text = change.hash_text
                return self._state(change, relative, change.length, hash_text), None
            fetched = content or await self._fetch(change, superseded)
            try:
                await self.applier.apply(change, relative, fetched.path)
            finally:
                fetched.path.unlink(missing_ok=True)
            own = f"sha256:{fetched.sha256}" if fetched.sha256 else None
            hash_text = change.hash_text or own
            return self._state(change, relative, fetched.length, hash_text), None
        except SupersededError:
            self.stats["superseded"] += 1
            return None, None
        except SubscriberError as exc:
            self.stats["failed" if exc.retryable else "refused"] += 1
            if not exc.retryable and self.first_refused is None:
                self.first_refused = exc
            return None, Failed(str(exc), exc.retryable)
        except OSError as exc:
            self.stats["failed"] += 1
            return None, Failed(f"{change.uri}: {exc.strerror or exc}")

    async def _fetch(self, change: ResourceChange, superseded: Callable[[], bool]) -> Fetched:
        assert self.fetcher is not None
        # A task of its own, so that stopping can cancel the download alone (the rest of
        # the change — apply, record — never runs half-way).
        transfer = asyncio.ensure_future(self.fetcher.fetch(change, superseded))
        self._transfers.add(transfer)
        try:
            return await transfer
        finally:
            self._transfers.discard(transfer)

    @staticmethod
    def _state(
        change: ResourceChange, relative: PurePosixPath, length: int | None, hash_text: str | None
    ) -> ResourceState:
        return ResourceState(
            change.uri, change.time, str(change.change), length, hash_text, str(relative)
        )

    def _finish(
        self,
        seq: int,
        change: ResourceChange,
        state: ResourceState | None,
        failed: Failed | None,
    ) -> None:
        moved = self._tracker.finished(seq) and not self._held()
        watermark = self.watermark if moved else None
        now = self.clock()
        if (failed is not None or state is not None) and not self.checkpoint.in_batch:
            # Group commit: everything finishing in this event-loop pass, one COMMIT.
            self.checkpoint.begin_batch()
            asyncio.get_running_loop().call_soon(self.commit)
        if failed is not None:
            log.warning("%s", failed.reason)
            self.checkpoint.record_failure(
                change, failed.reason, watermark, now=now, retryable=failed.retryable
            )
            self._dirty = 0 if moved else self._dirty
            self._emit(change, "failed", now, reason=failed.reason)
        elif state is not None:
            self.checkpoint.record(change, state, watermark, now=now)
            self._dirty = 0 if moved else self._dirty
            self.stats["applied"] += 1
            self._emit(change, "applied", now)
        elif moved:
            self._dirty += 1
            if self._dirty >= _FLUSH_EVERY:
                self.flush()

    def commit(self) -> None:
        """Commit the open batch, then tell the world: an event (or outcome) is only ever
        reported once its record is durable."""
        self.checkpoint.commit_batch()
        self._batched = 0
        pending, self._unreported = self._unreported, []
        for args in pending:
            self._report(*args)

    def _emit(self, change: ResourceChange, event: str, now: datetime, **extra: Any) -> None:
        self._unreported.append((change, event, now, extra))
        self._batched += 1
        if self._batched >= _BATCH_MAX:
            self.commit()

    def _report(
        self, change: ResourceChange, event: str, now: datetime, extra: dict[str, Any]
    ) -> None:
        if self.on_outcome is not None:
            self.on_outcome(Outcome(change, event, now, extra.get("reason")))
        if self.events is None:
            return
        self.events(
            {"event": event}
            | {k: v for k, v in change.as_json().items() if k in _EVENT_FIELDS}
            | {"applied": format_w3c_datetime(now)}
            | extra
        )


_EVENT_FIELDS = ("uri", "change", "time", "position", "channel")


def _storable(uri: str) -> bool:
    try:
        uri.encode()
    except UnicodeEncodeError:
        return False
    return True
