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
import contextlib
import logging
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import PurePosixPath
from typing import Any

from rspush.resourcesync.w3cdt import format_w3c_datetime

from .appliers import Applier, NullApplier
from .changes import ChangeType, Channel, Outcome, ResourceChange
from .checkpoint import Checkpoint
from .decide import Decision, ResourceState, decide, new_state
from .errors import SubscriberError, SupersededError
from .fetch import Fetched, Fetcher
from .filters import ChangeFilter
from .gcpause import gc_paused
from .mapping import UriMap
from .watermark import NO_WATERMARK, Watermark, WatermarkTracker

log = logging.getLogger("rs_subscribe")

DEFAULT_CONCURRENCY = 8
DEFAULT_WINDOW = 2048
"""Changes queued ahead of the ones applying (tasks waiting for a slot: cheap)."""
BATCH_CHANGES = DEFAULT_WINDOW
"""Changes of the lists applied as one run (:meth:`Mirror.apply_batch`) at most: the
catch-up's look-ahead (as the window is :meth:`Mirror.submit`'s) and its commit size."""
KNOWN_STATES = 200_000
"""Resource rows a catch-up keeps in memory at most (a few hundred bytes each)."""
_BATCH_MAX = 1000
"""Records per commit at most (a long burst still commits regularly)."""
_FLUSH_EVERY = 500
"""Skipped changes move the watermark in memory; it is written at least this often."""

EventSink = Callable[[dict[str, Any]], None]


def _now() -> datetime:
    return datetime.now(UTC)


def _never() -> bool:
    return False


class _Unread:
    """The checkpoint row of a resource not read yet (``None`` means: read, no row)."""


_UNREAD = _Unread()


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
        self._concurrency = concurrency
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
        self._applied_text: tuple[datetime | None, str] = (None, "")
        self._known: dict[str, ResourceState | None] | None = None
        """Resource rows by URI while :meth:`states_in_memory` lasts (None: no row)."""
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

    async def apply_batch(self, changes: Sequence[ResourceChange]) -> None:
        """Apply a run of changes read from the Source's lists (catch-up), in stream order,
        and return once each is finished and committed (or abandoned by stopping).

        What :meth:`submit` does one task per change for, done once for the run: a change
        with a newer one of its URI later in the run is superseded (the whole run is the
        look-ahead); the checkpoint rows of the run's URIs are read in one query; the rest
        are applied by ``concurrency`` workers; their records and the watermark they move
        are written in one transaction (``executemany``). The watermark only passes the
        run's changes in that transaction, so a crash before it loses the run's records and
        the watermark alike: the run comes again, as with any uncommitted record
        (docs/reliability.md)."""
        if not changes:
            return
        batch = asyncio.create_task(self._batch(list(changes)), name="apply a batch")
        try:
            await asyncio.shield(batch)
        except asyncio.CancelledError:
            batch.cancel()
            await asyncio.wait([batch])
            raise

    async def _batch(self, changes: list[ResourceChange]) -> None:
        kept = [c for c in changes if _storable(c.uri)]
        if len(kept) < len(changes):
            self.stats["refused"] += len(changes) - len(kept)
            log.warning("refused %d changes: not valid Unicode URIs", len(changes) - len(kept))
        me = asyncio.current_task()
        assert me is not None
        uris = [c.uri for c in kept]
        # Changes of a URI already applying (a retry) finish first: one writer per file.
        lanes = self._lanes
        earlier = {u: t for u in uris if (t := lanes.get(u)) is not None} if lanes else {}
        seqs = self._tracker.submitted_many(kept)
        self._live += 1
        self._idle.clear()
        lanes.update(dict.fromkeys(uris, me))
        try:
            superseded = _superseded_in(kept)
            todo = [i for i, gone in enumerate(superseded) if not gone]
            stored = self._stored({uris[i] for i in todo})
            results: list[tuple[ResourceState | None, Failed | None] | None] = [None] * len(kept)
            pending = iter(todo)

            async def worker() -> None:
                for i in pending:
                    if self._abandoning:
                        return  # never finished: the watermark cannot pass it
                    change = kept[i]
                    row: ResourceState | None | _Unread = stored.get(change.uri)
                    lane = earlier.get(change.uri)
                    if lane is not None:
                        await asyncio.wait([lane])
                        row = _UNREAD  # what that change left, read now
                    results[i] = await self._apply(change, None, _never, row)

            if not earlier and self._settled_at_once:
                # Nothing to fetch, nothing to write: the run is decided and recorded in one
                # synchronous pass (nothing else runs meanwhile: stopping is seen before it).
                with gc_paused():  # synchronous, acyclic states and records (.gcpause)
                    if not self._abandoning:
                        self._settle_all(kept, todo, stored, results)
                    self._record_batch(kept, seqs, superseded, results)
                    results.clear()  # freed before the collector runs again
                return
            workers = min(self._concurrency, len(todo))
            if workers == 1:
                await worker()
            elif workers:
                await asyncio.gather(*(worker() for _ in range(workers)))
            with gc_paused():  # synchronous, acyclic rows and records (.gcpause)
                self._record_batch(kept, seqs, superseded, results)
        finally:
            for uri in uris:
                if lanes.get(uri) is me:
                    del lanes[uri]
            self._live -= 1
            if self._live == 0:
                self._idle.set()

    @property
    def _settled_at_once(self) -> bool:
        """Metadata-only (no fetcher) with the :class:`NullApplier`: applying a change is
        deciding and recording it — no I/O, nothing to await."""
        return self.fetcher is None and type(self.applier) is NullApplier

    def _settle(
        self, change: ResourceChange, stored: ResourceState | None
    ) -> tuple[ResourceState | None, Failed | None]:
        """:meth:`_apply` of a change when :attr:`_settled_at_once`, without the
        coroutines: the :class:`NullApplier` it would await does nothing."""
        try:
            settled = self._decide(change, stored)
            if not isinstance(settled, PurePosixPath):
                return settled
            if change.change == ChangeType.DELETED:
                return self._state(change, settled, None, None), None
            return self._state(change, settled, change.length, change.hash_text), None
        except Exception as exc:  # noqa: BLE001 - as in _apply
            return self._unexpected(change, exc)

    def _settle_all(
        self,
        kept: list[ResourceChange],
        todo: list[int],
        stored: dict[str, ResourceState],
        results: list[tuple[ResourceState | None, Failed | None] | None],
    ) -> None:
        """:meth:`_settle` of ``kept[i]`` into ``results[i]`` for each ``i`` of ``todo``, with
        the usual case inline — no filter, a change to apply, its path mapped: the state it
        leaves, as :meth:`_settle` makes it. Any other case is :meth:`_settle`'s (it decides
        and maps again, both pure, so nothing is counted twice)."""
        settle = self._settle
        if self.filter.active:
            for i in todo:
                change = kept[i]
                results[i] = settle(change, stored.get(change.uri))
            return
        text_for = self.uri_map.text_for
        apply, deleted = Decision.APPLY, ChangeType.DELETED
        for i in todo:
            change = kept[i]
            row = stored.get(change.uri)
            try:
                relative = text_for(change.uri) if decide(row, change) is apply else None
            except Exception:  # noqa: BLE001 - refused or worse: _settle says which
                relative = None
            if relative is None:
                results[i] = settle(change, row)
                continue
            kind = change.change
            if kind is deleted:
                length, hash_text = None, None
            else:
                length, hash_text = change.length, change.hash_text
            state = new_state(change.uri, change.time, str(kind), length, hash_text, relative)
            results[i] = (state, None)

    def _stored(self, uris: set[str]) -> dict[str, ResourceState]:
        """The checkpoint rows of ``uris`` (absent: no row), from memory where a catch-up
        keeps them (:meth:`states_in_memory`)."""
        if self._known is None:
            return self.checkpoint.resources_of(uris)
        missing = [uri for uri in uris if uri not in self._known]
        if missing:
            if len(self._known) + len(missing) > KNOWN_STATES:
                self._known.clear()
                missing = list(uris)
            read = self.checkpoint.resources_of(missing)
            for uri in missing:
                self._known[uri] = read.get(uri)
        return {uri: state for uri in uris if (state := self._known[uri]) is not None}

    @contextlib.contextmanager
    def states_in_memory(self) -> Iterator[None]:
        """While it lasts, :meth:`apply_batch` keeps the resource rows it read or wrote in
        memory (at most :data:`KNOWN_STATES`), so a long catch-up reads each URI's row once.
        Every other write of a row (a retry, a pushed change) drops it from memory."""
        self._known = {}
        try:
            yield
        finally:
            self._known = None

    def _record_batch(
        self,
        kept: list[ResourceChange],
        seqs: list[int],
        superseded: list[bool],
        results: list[tuple[ResourceState | None, Failed | None] | None],
    ) -> None:
        """One transaction: every finished change's record, then the watermark."""
        now = self.clock()
        applied: list[tuple[ResourceChange, ResourceState]] = []
        reports: list[tuple[ResourceChange, str, datetime, dict[str, Any]]] = []
        done: list[int] = []
        gone_count = 0
        listened = self._listened
        self.checkpoint.begin_batch()
        for change, seq, gone, result in zip(kept, seqs, superseded, results, strict=True):
            if gone:
                gone_count += 1
            elif result is None:
                continue  # abandoned: never finished
            else:
                state, failed = result
                if failed is not None:
                    log.warning("%s", failed.reason)
                    self.checkpoint.record_failure(
                        change, failed.reason, None, now=now, retryable=failed.retryable
                    )
                    reports.append((change, "failed", now, {"reason": failed.reason}))
                elif state is not None:
                    applied.append((change, state))
                    if listened:
                        reports.append((change, "applied", now, _NO_EXTRA))
            done.append(seq)
        if gone_count:
            self.stats["superseded"] += gone_count
        if applied:
            self.stats["applied"] += len(applied)
        moved = self._tracker.finished_many(done)
        self.checkpoint.record_many(applied)
        if self._known is not None:
            if len(self._known) + len(applied) > KNOWN_STATES:
                self._known.clear()  # bounded: rows are read again from the checkpoint
            known = self._known
            for change, state in applied:
                known[change.uri] = state
        if moved and not self._held():
            self.checkpoint.set_watermark(self.watermark, now=now)
            self._dirty = 0
        elif moved:
            self._dirty += 1
        if listened:
            self._unreported.extend(reports)
        self.commit()

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
        self,
        change: ResourceChange,
        content: Fetched | None,
        superseded: Callable[[], bool],
        stored: ResourceState | None | _Unread = _UNREAD,
    ) -> tuple[ResourceState | None, Failed | None]:
        """(new resource state or None, why it failed or None). ``stored``: the resource's
        checkpoint row when the caller read it already (a batch reads them all at once)."""
        try:
            return await self._decide_and_apply(change, content, superseded, stored)
        except Exception as exc:  # noqa: BLE001 - one bad change must not stall the rest
            return self._unexpected(change, exc)
        finally:
            if content is not None:
                content.path.unlink(missing_ok=True)

    def _unexpected(
        self, change: ResourceChange, exc: Exception
    ) -> tuple[ResourceState | None, Failed | None]:
        # Whatever an applier (or a hostile URI) raises becomes a reported failure: the
        # change's sequence number must finish, or the watermark stops for good.
        log.exception("unexpected error applying %s", change.uri)
        self.stats["failed"] += 1
        return None, Failed(f"{change.uri}: {type(exc).__name__}: {exc}")

    async def _decide_and_apply(
        self,
        change: ResourceChange,
        content: Fetched | None,
        superseded: Callable[[], bool],
        stored: ResourceState | None | _Unread = _UNREAD,
    ) -> tuple[ResourceState | None, Failed | None]:
        if isinstance(stored, _Unread):
            stored = self.checkpoint.resource(change.uri)
        settled = self._decide(change, stored)
        if not isinstance(settled, PurePosixPath):
            return settled
        relative = settled
        try:
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
        except (SubscriberError, OSError) as exc:
            return self._failed(change, exc)

    def _decide(
        self, change: ResourceChange, stored: ResourceState | None
    ) -> tuple[ResourceState | None, Failed | None] | PurePosixPath:
        """Filter, decide, map: the outcome when that settles the change, else the path to
        apply it at."""
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
        except (SubscriberError, OSError) as exc:
            return self._failed(change, exc)
        if decision is Decision.SAME_CONTENT:
            assert stored is not None
            self.stats["same-content"] += 1
            return self._state(change, relative, stored.length, stored.hash), None
        return relative

    def _failed(
        self, change: ResourceChange, exc: SubscriberError | OSError
    ) -> tuple[ResourceState | None, Failed | None]:
        """What an expected failure of a change becomes (counted; a refusal kept)."""
        if isinstance(exc, SupersededError):
            self.stats["superseded"] += 1
            return None, None
        if isinstance(exc, SubscriberError):
            self.stats["failed" if exc.retryable else "refused"] += 1
            if not exc.retryable and self.first_refused is None:
                self.first_refused = exc
            return None, Failed(str(exc), exc.retryable)
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
        return new_state(
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
        if self._known is not None:
            self._known.pop(change.uri, None)  # written here, not by a run
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
        if pending:
            self._report(pending)

    @property
    def _listened(self) -> bool:
        return self.events is not None or self.on_outcome is not None

    def _emit(self, change: ResourceChange, event: str, now: datetime, **extra: Any) -> None:
        if self._listened:  # else no event is built (its JSON formats times and hashes)
            self._unreported.append((change, event, now, extra))
        self._batched += 1
        if self._batched >= _BATCH_MAX:
            self.commit()

    def _report(self, pending: list[tuple[ResourceChange, str, datetime, dict[str, Any]]]) -> None:
        """Each outcome of ``pending`` to the listeners, in order: a run's thousands in one
        loop, what they share (the sinks, the moment they were applied) looked up once."""
        on_outcome, events = self.on_outcome, self.events
        applied_at, applied_text = self._applied_text
        try:
            for change, event, now, extra in pending:
                if on_outcome is not None:
                    on_outcome(Outcome(change, event, now, extra.get("reason")))
                if events is None:
                    continue
                if applied_at != now:  # a batch reports many outcomes at one moment
                    applied_at, applied_text = now, format_w3c_datetime(now)
                # Only the fields an event carries (not the whole change: hash text, length…).
                data: dict[str, Any] = {"event": event, **change.identity_json()}
                data["applied"] = applied_text
                events(data | extra if extra else data)
        finally:
            self._applied_text = (applied_at, applied_text)


_NO_EXTRA: dict[str, Any] = {}
"""An outcome's extra event fields when it has none (shared: never written to)."""


def _superseded_in(changes: list[ResourceChange]) -> list[bool]:
    """For each change: is another change of its URI in the run the one that defines the
    resource's state — a later one at the same time or after, or any at a later time (an
    older change arriving after a newer one is skipped as decide() would skip it)? So each
    URI is applied at most once per run, from one checkpoint row read before it."""
    best: dict[str, int] = {}
    for i, change in enumerate(changes):
        j = best.get(change.uri)
        if j is None or change.time >= changes[j].time:
            best[change.uri] = i
    return [best[c.uri] != i for i, c in enumerate(changes)]


def _storable(uri: str) -> bool:
    if uri.isascii():
        return True  # as nearly every URI: no encoding to try
    try:
        uri.encode()
    except UnicodeEncodeError:
        return False
    return True
