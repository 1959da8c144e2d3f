"""The Destination agent: discover, baseline, then follow — push when it can, polling when it
must, the archives when it was away too long, a new baseline when nothing else can answer.

It drives the pure state machine of :mod:`rspush.subscriber.states`: it does the I/O of each state
and reports what happened as an event. Its parts are built by :mod:`rspush.subscriber.wiring`.

Every network failure — discovery, the push handshake, frames, documents — is waited out
with backoff (and polling, where there is a push channel to come back to); only a
configuration error ends :meth:`Agent.run`. A stop request is honoured within
``stop_grace`` (1 s): downloads still running then are cancelled, the checkpoint committed.

Framework frames: when the Capability List advertises a framework-notification channel
(Framework Notification §5), the push session asks the hub for framework frames too
(protocol version 2): Change List rotations, Resource List and Capability List updates
reach the agent as they happen. While push is up every change arrives pushed, so the agent
reads no Change List, index or archive at all; a rotation only moves where the next catch-up
finds the lists, which the frames tell (:meth:`ChangeLists.note_framework`). When push is
down, or the hub is older (no channel advertised: a version 1 subscribe, as before), the
agent polls the open list as before.

Resuming after poll or catch-up is by time (``since``, inclusive): changes already applied
come again and are skipped (:mod:`rspush.subscriber.decide`), so nothing is missed and nothing is
applied twice.

Why one module of this size: each state's I/O (baseline, push session, polling, catch-up)
shares the agent's running parts and its stop handling; the decisions themselves live in the
small pure modules above.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine
from datetime import UTC, datetime
from typing import Any, TypeAlias

from rspush.protocol import FrameworkFrame, Position, TopicRequest
from rspush.remote.discovery import TopicEndpoints
from rspush.resourcesync import Capability, FrameworkChange
from rspush.resourcesync.w3cdt import format_w3c_datetime, parse_w3c_datetime

from .appliers import Applier
from .backoff import Backoff
from .baseline import dump_changes, open_resource_list, resource_list_changes
from .baseline_summary import BaselineCounts
from .changelists import ArchiveTooShortError
from .changes import ChangeType, Channel, Outcome, ResourceChange, from_push
from .config import USER_AGENT, AgentConfig
from .errors import SourceError
from .mirror import BATCH_CHANGES, EventSink, Mirror
from .progress import LogReporter, Reporter
from .push import (
    Change,
    HistoryInsufficientError,
    MalformedFrameError,
    PushError,
    RefusedError,
    push_changes,
)
from .push_failures import guarded
from .source_auth import push_token
from .states import STOPPED_STATES, Event, Machine, State, holds_watermark, retries_failures
from .stopping import sleep_unless_stopped
from .watermark import Watermark
from .wiring import AgentParts, agent_parts

__all__ = ["USER_AGENT", "Agent", "AgentConfig"]

log = logging.getLogger("rs_subscribe")

ResumePoint: TypeAlias = tuple[str, str]  # (position, epoch) a push session starts after

MAX_FRAMEWORK_KEPT = 1000
"""Framework changes :attr:`Agent.framework_changes` keeps (the oldest are dropped)."""


class Agent:
    def __init__(
        self,
        config: AgentConfig,
        *,
        applier: Applier | None = None,
        events: EventSink | None = None,
        on_outcome: Callable[[Outcome], None] | None = None,
        reporter: Reporter | None = None,
    ) -> None:
        self.config = config
        self._applier = applier
        self._events = events
        self._on_outcome = on_outcome
        self.reporter = reporter or LogReporter()
        self.machine = Machine()
        self._stopped = asyncio.Event()  # set by stop(): wakes a poll interval, a push session
        self._parts: AgentParts | None = None
        self._main: asyncio.Task[None] | None = None
        self.rebaselines = 0
        self._last_baseline: float | None = None
        """Event-loop time the last baseline completed (rebaselines are rate-limited)."""
        self._deferred: str | None = None
        """Why a rebaseline is being put off (logged once, not at every poll)."""
        self.framework_changes: deque[FrameworkChange] = deque(maxlen=MAX_FRAMEWORK_KEPT)
        """The latest framework changes pushed (for status and tests), oldest first."""

    @property
    def channel(self) -> State:
        """What the agent is doing now: baseline, push, poll, catch-up… (for tests, status)."""
        return self.machine.state

    @property
    def stopping(self) -> bool:
        return self.machine.stopping

    @property
    def mirror(self) -> Mirror | None:
        return None if self._parts is None else self._parts.mirror

    @property
    def endpoints(self) -> TopicEndpoints | None:
        return None if self._parts is None else self._parts.endpoints

    def stop(self) -> None:
        """Finish the files being written, commit the checkpoint, return from :meth:`run`.
        Changes queued but not started are left for the next run (the watermark stays
        before them); so are a baseline's (an interrupted baseline starts over, without
        fetching again what it has). After ``stop_grace`` seconds whatever still runs is cut
        short: downloads are cancelled (their temp files deleted), the checkpoint
        committed."""
        self._stopped.set()
        if self._fire(Event.STOP) in STOPPED_STATES and self.mirror is not None:
            self.mirror.abandon()
        with contextlib.suppress(RuntimeError):  # no running loop: nothing runs to cut
            asyncio.get_running_loop().call_later(self.config.stop_grace, self._cut_short)

    def _cut_short(self) -> None:
        if self.mirror is not None:
            self.mirror.cancel_transfers()
        if self._main is not None and not self._main.done():
            log.info("stopping: cancelling what is still in flight")
            self._main.cancel()

    def _fire(self, event: Event, *, at: datetime | None = None) -> State:
        log.debug("%s in %s", event, self.machine.state)
        return self.machine.fire(event, at=at)

    def _need(self) -> AgentParts:
        assert self._parts is not None, "the agent is not running"
        return self._parts

    async def run(self, *, baseline_only: bool = False) -> None:
        async with agent_parts(
            self.config,
            applier=self._applier,
            events=self._events,
            on_outcome=self._on_outcome,
            watermark_held=lambda: holds_watermark(self.machine.state),
            stopped=self._stopped,
        ) as parts:
            if parts is None:
                return  # stopped while waiting for the Source to be reachable
            self._parts = parts
            main = self._main = asyncio.create_task(self._sync(baseline_only), name="rs-sync")
            try:
                await asyncio.wait([main])
            finally:
                if not main.done():  # run() itself is cancelled
                    main.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await main
                # Whatever ended the run (stop, error, cancellation): let the changes in
                # flight finish — or be cut short, stop_grace after a stop — and commit
                # the checkpoint.
                await asyncio.shield(parts.mirror.drain())
            if not main.cancelled():  # cancelled: cut short by stop()
                main.result()

    async def _sync(self, baseline_only: bool) -> None:
        mirror = self._need().mirror
        state = mirror.checkpoint.state()
        if state is None or state.baseline_at is None:
            await self._baseline_patiently(rebaseline=False)
        elif baseline_only:
            await self._baseline_patiently(rebaseline=True)
        if not baseline_only and not self.stopping:
            await self._follow()

    async def _baseline_patiently(self, *, rebaseline: bool) -> None:
        """:meth:`baseline`, started again after a backoff delay while the Source's
        documents are unavailable (a transient :class:`SourceError`); a Source that is
        wrong as served ends the run."""
        backoff = Backoff(self.config.backoff_initial, self.config.backoff_max)
        while not self.stopping:
            try:
                await self.baseline(rebaseline=rebaseline)
                return
            except SourceError as exc:
                if not exc.transient:
                    raise
                delay = backoff.next()
                log.warning("baseline: %s; starting again in %.1f s", exc, delay)
            await sleep_unless_stopped(self._stopped, delay)

    # --- baseline --------------------------------------------------------------------------

    async def baseline(self, *, rebaseline: bool) -> None:
        parts = self._need()
        mirror, endpoints = parts.mirror, parts.endpoints
        self._fire(Event.BASELINE_NEEDED)
        await mirror.drain()
        url = None
        if self.config.use_dump and endpoints.resource_dump is not None:
            url = endpoints.resource_dump
        url = url or endpoints.resource_list
        if url is None:
            raise SourceError(
                f"{endpoints.capability_list} offers no Resource List to baseline from"
            )
        try:
            source = await open_resource_list(parts.reader, url)
        except SourceError as exc:
            # An advertised Resource Dump that is missing (404) or not a dump: the Resource
            # List answers as well, as it does for a damaged package below.
            if url == endpoints.resource_list or endpoints.resource_list is None or exc.transient:
                raise
            log.warning("%s; baseline from the Resource List instead", exc)
            url = endpoints.resource_list
            source = await open_resource_list(parts.reader, url)
        log.info("%s from %s", "rebaseline" if rebaseline else "baseline", url)
        started = datetime.now(UTC)
        mirror.checkpoint.start_baseline(now=started)
        seen: set[str] = set()
        before = mirror.stats.copy()
        with contextlib.closing(self.reporter.phase("baseline", source.total)) as phase:
            if source.first.md.capability == Capability.RESOURCEDUMP:
                try:
                    async for change, content in dump_changes(
                        source, parts.fetcher, max_bytes=self.config.max_bytes
                    ):
                        if self.stopping:
                            break
                        seen.add(change.uri)
                        await mirror.submit(change, content)
                        phase.advance()
                except SourceError as exc:
                    if endpoints.resource_list is None:
                        raise
                    log.warning("%s; baseline from the Resource List instead", exc)
                    source = await open_resource_list(parts.reader, endpoints.resource_list)
            if source.first.md.capability == Capability.RESOURCELIST:
                async for change in resource_list_changes(source, fallback_time=started):
                    if self.stopping:
                        break
                    seen.add(change.uri)
                    await mirror.submit(change)
                    phase.advance()
            await mirror.drain()
            if self.stopping:
                return  # the baseline is not complete: the next run starts it again
            # §10.1: without `at` the Source does not say when the snapshot was taken; the
            # moment we started reading it is the latest it can be from.
            at = source.at or started
            # Resources the Source no longer has: a baseline deletes them. Always, not only on
            # a *re*baseline — a first baseline holds nothing yet, and an interrupted
            # rebaseline is finished by a run that no longer knows it was one.
            for held in list(mirror.checkpoint.resources()):
                if held.uri not in seen and held.time <= at:
                    if self.stopping:
                        break
                    await mirror.submit(
                        ResourceChange(held.uri, ChangeType.DELETED, at, Channel.BASELINE)
                    )
            await mirror.drain()
            if self.stopping:
                return  # deletions were dropped: not complete, the next run starts again
        counts = BaselineCounts.between(len(seen), before, mirror.stats)
        nothing = counts.nothing_written(mirror.first_refused)
        if nothing is not None:
            raise nothing  # not recorded as done: the next run (with a --map) starts again
        watermark = Watermark(None, None, at)
        self._last_baseline = asyncio.get_running_loop().time()
        mirror.checkpoint.finish_baseline(at, watermark, now=datetime.now(UTC), started=started)
        mirror.set_watermark(watermark)
        # Right after any baseline, lists that still start later than its `at` are a
        # Source's property, not a reason to baseline again (see _archive_too_short).
        self._fire(Event.BASELINE_DONE, at=at)
        log.info("%s", counts.line(format_w3c_datetime(at)))

    # --- following -------------------------------------------------------------------------

    async def _follow(self) -> None:
        retries = asyncio.create_task(self._retry_failures(), name="rs-subscribe retries")
        try:
            await self._follow_channels()
        finally:
            retries.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await retries

    async def _retry_failures(self) -> None:
        """Every ``retry_interval``, changes that failed (the Source was down, or served
        bytes not matching their hash) are tried again — up to ``max_tries`` times; a newer
        change of the resource, or ``audit --repair``, settles them too."""
        mirror = self._need().mirror
        while True:
            await asyncio.sleep(self.config.retry_interval)
            if not retries_failures(self.machine.state):
                continue
            try:
                await mirror.retry_failures(self.config.max_tries, lambda: self.stopping)
            except Exception:
                # Never end silently: later rounds retry what this one could not.
                log.exception("retrying failed changes failed; trying again later")

    async def _follow_channels(self) -> None:
        parts = self._need()
        mirror, endpoints = parts.mirror, parts.endpoints
        backoff = Backoff(self.config.backoff_initial, self.config.backoff_max)
        caught_up_to: Watermark | None = None  # the watermark the last catch-up reached
        resume: ResumePoint | None = None
        while not self.stopping:
            if endpoints.push_url is None:
                await self._poll_for(None)
                return
            request = _request(endpoints.topic, mirror.watermark, resume)
            resume = None
            try:
                await self._until_stopped(self._push_session(endpoints.push_url, request, backoff))
                continue
            except HistoryInsufficientError as exc:
                log.warning("%s", exc)
                mark = mirror.watermark
                resume = _before_oldest(exc.info, mark.last_time)
                if resume is not None and mark == caught_up_to:
                    # We just read the archive and the open list, yet the hub still finds
                    # a trimmed change at our last change time (several changes share it).
                    # Everything it still holds is the open list we read: replay from its
                    # oldest position (duplicates are skipped) instead of looping.
                    continue
                resume = None
                self._fire(Event.HISTORY_INSUFFICIENT)
                try:
                    await self._catch_up()
                except SourceError as error:
                    # The Source's documents are briefly unavailable: poll (which retries
                    # them) for a backoff delay, then try push — and so the catch-up — again.
                    delay = backoff.next()
                    log.warning("catch-up: %s; retrying in %.1f s", error, delay)
                    await self._poll_for(delay)
                    continue
                self._fire(Event.CAUGHT_UP)
                caught_up_to = mirror.watermark
            except RefusedError:
                raise
            except PushError as exc:
                delay = backoff.next()
                log.warning("push channel down (%s); polling, retrying push in %.1f s", exc, delay)
                await self._poll_for(delay)

    async def _push_session(self, url: str, request: TopicRequest, backoff: Backoff) -> None:
        # Every way the channel fails (a 502 to the upgrade, a connection closed before
        # the 101, a reset) becomes a PushError: reconnect with backoff, poll meanwhile.
        token = push_token(url, self.config.source_url, self.config.token)
        # Framework frames only from a hub that advertises the channel: an older hub
        # refuses the version 2 subscribe they need.
        framework = self._need().endpoints.framework is not None
        stream = guarded(push_changes(url, [request], token=token, framework=framework), url)
        async with contextlib.aclosing(stream) as items:
            async for item in items:
                await self._pushed(item, backoff)
        raise PushError("push channel closed")

    async def _pushed(
        self, item: Change | FrameworkFrame | dict[str, Any], backoff: Backoff
    ) -> None:
        parts = self._need()
        mirror = parts.mirror
        if isinstance(item, FrameworkFrame):
            for announced in item.changes:
                log.info(
                    "framework: %s %s %s%s",
                    announced.capability,
                    announced.change.value,
                    announced.loc,
                    "" if announced.index is None else f" (under {announced.index})",
                )
                self.framework_changes.append(announced)
                parts.lists.note_framework(announced)
        elif isinstance(item, Change):
            try:
                change = from_push(item.data, epoch=item.epoch)
            except (ValueError, KeyError, TypeError) as exc:
                raise MalformedFrameError(f"unreadable pushed change: {exc}") from exc
            await mirror.submit(change)
        elif item.get("type") == "subscribed":
            backoff.reset()
            self._fire(Event.SUBSCRIBED)
            mirror.note_epoch(item.get("epoch"))
            log.info(
                "push: subscribed to %s (epoch %s, after %s)",
                item.get("topic"),
                item.get("epoch"),
                item.get("position"),
            )

    async def _catch_up(self) -> None:
        parts = self._need()
        mirror = parts.mirror
        await mirror.drain()
        since = mirror.watermark.last_time
        if since is None:
            await self.baseline(rebaseline=True)
            return
        try:
            with (
                contextlib.closing(self.reporter.phase("catch-up", None)) as phase,
                mirror.states_in_memory(),
            ):
                lists = parts.lists.since_by_list(since, Channel.ARCHIVE)
                async for batch in self._batches(lists):
                    await mirror.apply_batch(batch)
                    phase.advance(len(batch))
                await mirror.drain()
        except ArchiveTooShortError as exc:
            await self._archive_too_short(exc)

    def _batches(
        self, lists: AsyncIterator[list[ResourceChange]]
    ) -> AsyncIterator[list[ResourceChange]]:
        """The changes of ``lists`` in runs of up to :data:`BATCH_CHANGES`, until stopping."""
        return runs_of(lists, BATCH_CHANGES, lambda: self.stopping)

    async def _archive_too_short(self, exc: ArchiveTooShortError) -> None:
        """Rebaseline — unless we just did and the Source's lists still start after its
        Resource List's ``at``: then say so and go on from where the lists start
        (:meth:`rspush.subscriber.states.Machine.follow_lists_from`)."""
        mirror = self._need().mirror
        start = self.machine.follow_lists_from(mirror.watermark.last_time, exc.earliest)
        if start is not None:
            log.warning(
                "%s, even right after a baseline: the Source's Change Lists start after its "
                "Resource List; following them from %s",
                exc,
                format_w3c_datetime(start),
            )
            mirror.set_watermark(Watermark(mirror.epoch, None, start))
            return
        wait = self._rebaseline_wait()
        if wait > 0:
            await self._follow_what_can_be(exc, wait)
            return
        self._deferred = None
        log.warning("%s: rebaselining", exc)
        mirror.report_rebaseline(str(exc))
        self.rebaselines += 1
        await self.baseline(rebaseline=True)

    def _rebaseline_wait(self) -> float:
        """Seconds until a rebaseline is allowed: at most one per ``rebaseline_interval``
        after any baseline (a Source that keeps calling for one — its lists never show where
        they start — is not re-read in full at every poll)."""
        if self._last_baseline is None:
            return 0.0
        elapsed = asyncio.get_running_loop().time() - self._last_baseline
        return max(0.0, self.config.rebaseline_interval - elapsed)

    async def _follow_what_can_be(self, exc: ArchiveTooShortError, wait: float) -> None:
        """A rebaseline must wait: apply what the Source's lists do hold after the
        watermark (changes it may have lost before them are for the rebaseline to find)."""
        parts = self._need()
        mirror = parts.mirror
        reason = str(exc)
        if reason != self._deferred:
            self._deferred = reason
            log.warning(
                "%s; the last baseline was %.0f s ago, rebaselining in %.0f s at the earliest "
                "(--rebaseline-interval); following the Change Lists meanwhile",
                reason,
                self.config.rebaseline_interval - wait,
                wait,
            )
        since = mirror.watermark.last_time
        if since is None:
            return
        async for batch in self._batches(parts.lists.readable_by_list(since, Channel.POLL)):
            await mirror.apply_batch(batch)
        await mirror.drain()

    async def _poll_for(self, seconds: float | None) -> None:
        """Poll the open Change List every ``poll_interval`` for ``seconds`` (None: until
        stopped)."""
        parts = self._need()
        mirror = parts.mirror
        loop = asyncio.get_running_loop()
        deadline = None if seconds is None else loop.time() + seconds
        while not self.stopping:
            self._fire(Event.POLLING)
            try:
                try:
                    async for change in parts.lists.poll(mirror.watermark.last_time):
                        if self.stopping:
                            break
                        await mirror.submit(change)
                    await mirror.drain()
                    self._fire(Event.POLLED)
                except ArchiveTooShortError as exc:
                    await mirror.drain()
                    await self._archive_too_short(exc)
            except SourceError as exc:
                # The lists, or the rebaseline they called for, are unavailable: the next
                # round tries again.
                log.warning("poll: %s", exc)
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                return
            wait = (
                self.config.poll_interval
                if remaining is None
                else min(self.config.poll_interval, remaining)
            )
            await sleep_unless_stopped(self._stopped, wait)

    async def _until_stopped(self, session: Coroutine[Any, Any, None]) -> None:
        """Run ``session`` until it ends or :meth:`stop` is called (then cancel it)."""
        task = asyncio.ensure_future(session)
        stopper = asyncio.ensure_future(self._stopped.wait())
        try:
            await asyncio.wait([task, stopper], return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if task.done() and not task.cancelled():
            task.result()


def _request(topic: str, mark: Watermark, resume: ResumePoint | None) -> TopicRequest:
    """Where a push session starts: ``resume`` when given, else the watermark's position, else
    its time, else now."""
    if resume is not None:
        position, epoch = resume
        return TopicRequest(topic=topic, position=position, epoch=epoch)
    if mark.position is not None and mark.epoch is not None:
        return TopicRequest(topic=topic, position=mark.position, epoch=mark.epoch)
    if mark.last_time is not None:
        # With the epoch we knew: the hub refuses it if the stream was recreated since.
        return TopicRequest(
            topic=topic, since=format_w3c_datetime(mark.last_time), epoch=mark.epoch
        )
    return TopicRequest(topic=topic)


def _before_oldest(info: dict[str, Any], caught_up: datetime | None) -> ResumePoint | None:
    """Where the hub's stream holds everything after: its ``after`` (protocol v1 hubs send
    it), else the position just before its oldest change — but only if our catch-up reached
    the last trimmed change's time; if retention trimmed further meanwhile, catch up again."""
    after, oldest, epoch = info.get("after"), info.get("oldest"), info.get("epoch")
    if not epoch:
        return None
    after_time = info.get("after_time")
    if after_time and (caught_up is None or parse_w3c_datetime(after_time) > caught_up):
        return None
    if after:
        return after, epoch
    if oldest:
        return str(Position.parse(oldest).predecessor()), epoch
    return None


async def runs_of(
    lists: AsyncIterator[list[ResourceChange]], size: int, stopping: Callable[[], bool]
) -> AsyncIterator[list[ResourceChange]]:
    """The changes of ``lists`` (each list's in turn, in order) in runs of ``size`` (the
    last may be shorter), cut across lists; none after ``stopping()`` turns true."""
    run: list[ResourceChange] = []
    async for changes in lists:
        start = 0
        while start < len(changes):
            if stopping():
                return
            end = start + size - len(run)
            run.extend(changes[start:end])
            start = end
            if len(run) >= size:
                yield run
                run = []
    if run and not stopping():
        yield run
