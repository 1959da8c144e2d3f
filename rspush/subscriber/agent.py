"""The Destination agent: discover, baseline, then follow — push when it can, polling when it
must, the archives when it was away too long, a new baseline when nothing else can answer.

State machine (one topic of one Source)::

    start ──(no completed baseline)──> BASELINE ──> FOLLOW
    FOLLOW: push session ──(channel down)──> poll for a backoff delay ──> push session
            push session ──(history insufficient)──> CATCH-UP ──> push session
            CATCH-UP ──(archive too short)──> BASELINE (again) ──> FOLLOW
    no push channel (pull-only Source): poll every ``poll_interval``

Resuming after poll or catch-up is by time (``since``, inclusive): changes already applied
come again and are skipped (:mod:`subscriber.decide`), so nothing is missed and nothing is
applied twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from rspush.protocol import Position, TopicRequest
from rspush.resourcesync import Capability
from rspush.resourcesync.w3cdt import format_w3c_datetime, parse_w3c_datetime

from .appliers import Applier, FilesystemApplier, NullApplier
from .backoff import Backoff
from .baseline import dump_changes, open_resource_list, resource_list_changes
from .changelists import ArchiveTooShortError, ChangeLists
from .changes import ChangeType, Channel, Outcome, ResourceChange, from_push
from .checkpoint import Checkpoint, Watermark
from .discovery import TopicEndpoints, discover
from .errors import SourceError
from .fetch import DEFAULT_MAX_BYTES, DEFAULT_TRIES, Fetcher, clear_temp
from .filters import ChangeFilter
from .mapping import STATE_DIR, UriMap
from .mirror import DEFAULT_CONCURRENCY, EventSink, Mirror
from .progress import LogReporter, Reporter
from .push import (
    Change,
    HistoryInsufficientError,
    MalformedFrameError,
    PushError,
    RefusedError,
    push_changes,
)
from .reader import DocumentReader

log = logging.getLogger("rs_subscribe")

USER_AGENT = "rs-subscribe/0.1 (rspush)"


@dataclass
class AgentConfig:
    source_url: str
    dest: Path
    state: Path | None = None
    """Default: ``<dest>/.rs-subscribe/state.sqlite``."""
    topic: str | None = None
    maps: list[tuple[str, str]] = field(default_factory=list)
    change_filter: ChangeFilter = field(default_factory=ChangeFilter)
    keep_deleted: bool = False
    concurrency: int = DEFAULT_CONCURRENCY
    poll_interval: float = 5.0
    token: str | None = None
    use_dump: bool = True
    fetch: bool = True
    """False: record changes without fetching content (metadata-only)."""
    tries: int = DEFAULT_TRIES
    max_bytes: int = DEFAULT_MAX_BYTES
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    http_timeout: float = 30.0
    retry_interval: float = 60.0
    """Seconds between retries of failed changes."""
    max_tries: int = 10
    """How often a failed change is retried before only a newer change (or audit --repair)
    can settle it."""

    @property
    def state_path(self) -> Path:
        return self.state or self.dest / STATE_DIR / "state.sqlite"

    @property
    def temp_dir(self) -> Path:
        """Downloads in flight: inside the destination (same file system: renames are
        atomic), one directory per state file — agents of several topics may share a
        destination, each clearing only its own leftovers."""
        key = hashlib.sha256(str(self.state_path.resolve()).encode()).hexdigest()[:12]
        return self.dest / STATE_DIR / "tmp" / key


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
        self._stop = asyncio.Event()
        self.endpoints: TopicEndpoints | None = None
        self.mirror: Mirror | None = None
        self.channel: str = "starting"
        """What the agent is doing now: baseline, push, poll, catch-up (for tests, status)."""
        self.rebaselines = 0
        self._rebaselined_at: datetime | None = None
        self._caught_up_to: Watermark | None = None
        self._resume_after: tuple[str, str] | None = None

    def stop(self) -> None:
        """Finish the files being written, commit the checkpoint, return from :meth:`run`.
        Changes queued but not started are left for the next run (the watermark stays
        before them)."""
        self._stop.set()
        if self.mirror is not None and not self.mirror.hold_watermark:
            # (During a baseline everything in flight finishes: an interrupted baseline
            # starts over anyway, without fetching again what it has.)
            self.mirror.abandon()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    # --- entry points ----------------------------------------------------------------------

    async def run(self, *, baseline_only: bool = False) -> None:
        config = self.config
        headers = {"User-Agent": USER_AGENT}
        async with httpx.AsyncClient(
            timeout=config.http_timeout, follow_redirects=True, headers=headers
        ) as client:
            self.endpoints = endpoints = await discover(client, config.source_url, config.topic)
            config.dest.mkdir(parents=True, exist_ok=True)
            with Checkpoint(
                config.state_path, endpoints.capability_list, endpoints.topic
            ) as checkpoint:
                maps = config.maps or [(endpoints.base_uri, "")]
                clear_temp(config.temp_dir)
                fetcher = Fetcher(
                    client,
                    config.temp_dir,
                    tries=config.tries,
                    max_bytes=config.max_bytes,
                )
                self.mirror = Mirror(
                    checkpoint,
                    UriMap.build(maps),
                    self._applier or self._default_applier(),
                    fetcher if config.fetch else None,
                    change_filter=config.change_filter,
                    events=self._events,
                    on_outcome=self._on_outcome,
                    concurrency=config.concurrency,
                )
                self._fetcher = fetcher
                self._reader = DocumentReader(client)
                self._lists = ChangeLists(
                    self._reader,
                    capability_list=endpoints.capability_list,
                    change_list=endpoints.change_list,
                    archive=endpoints.change_list_archive,
                )
                try:
                    state = checkpoint.state()
                    if state is None or state.baseline_at is None:
                        await self.baseline(rebaseline=False)
                    elif baseline_only:
                        await self.baseline(rebaseline=True)
                    if not baseline_only and not self.stopping:
                        await self._follow()
                finally:
                    # Whatever ended the run (stop, error, cancellation): let the changes in
                    # flight finish and commit the checkpoint.
                    await asyncio.shield(self.mirror.drain())

    # --- baseline --------------------------------------------------------------------------

    async def baseline(self, *, rebaseline: bool) -> None:
        mirror, endpoints = self._parts()
        self.channel = "baseline"
        await mirror.drain()
        url = None
        if self.config.use_dump and endpoints.resource_dump is not None:
            url = endpoints.resource_dump
        url = url or endpoints.resource_list
        if url is None:
            raise SourceError(
                f"{endpoints.capability_list} offers no Resource List to baseline from"
            )
        source = await open_resource_list(self._reader, url)
        log.info("%s from %s", "rebaseline" if rebaseline else "baseline", url)
        started = datetime.now(UTC)
        mirror.checkpoint.start_baseline(now=started)
        mirror.hold_watermark = True
        seen: set[str] = set()
        phase = self.reporter.phase("baseline", source.total)
        try:
            if source.first.md.capability == Capability.RESOURCEDUMP:
                try:
                    async for change, content in dump_changes(
                        source, self._fetcher, max_bytes=self.config.max_bytes
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
                    source = await open_resource_list(self._reader, endpoints.resource_list)
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
                    await mirror.submit(
                        ResourceChange(held.uri, ChangeType.DELETED, at, Channel.BASELINE)
                    )
            await mirror.drain()
        finally:
            phase.close()
            mirror.hold_watermark = False
        watermark = Watermark(None, None, at)
        mirror.checkpoint.finish_baseline(at, watermark, now=datetime.now(UTC))
        mirror.set_watermark(watermark)
        # Right after any baseline, lists that still start later than its `at` are a
        # Source's property, not a reason to baseline again (see _archive_too_short).
        self._rebaselined_at = at
        log.info("baseline complete: %d resources as of %s", len(seen), format_w3c_datetime(at))

    # --- following -------------------------------------------------------------------------

    async def _follow(self) -> None:
        retries = asyncio.create_task(self._retry_failures(), name="rs-subscribe retries")
        try:
            await self._follow_channels()
        finally:
            retries.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await retries

    async def _retry_failures(self) -> None:
        """Every ``retry_interval``, changes that failed (the Source was down, or served
        bytes not matching their hash) are tried again — up to ``max_tries`` times; a newer
        change of the resource, or ``audit --repair``, settles them too."""
        mirror, _ = self._parts()
        while True:
            await asyncio.sleep(self.config.retry_interval)
            if self.stopping or self.channel not in ("push", "poll"):
                continue
            for change in mirror.checkpoint.retryable_failures(max_tries=self.config.max_tries):
                if self.stopping:
                    return
                await mirror.submit(change)

    async def _follow_channels(self) -> None:
        _, endpoints = self._parts()
        backoff = Backoff(self.config.backoff_initial, self.config.backoff_max)
        while not self.stopping:
            if endpoints.push_url is None:
                await self._poll_for(None)
                return
            try:
                await self._until_stopped(self._push_session(endpoints.push_url, backoff))
                continue
            except HistoryInsufficientError as exc:
                log.warning("%s", exc)
                mark = self._parts()[0].watermark
                resume = _before_oldest(exc.info, mark.last_time)
                if resume is not None and mark == self._caught_up_to:
                    # We just read the archive and the open list, yet the hub still finds
                    # a trimmed change at our last change time (several changes share it).
                    # Everything it still holds is the open list we read: replay from its
                    # oldest position (duplicates are skipped) instead of looping.
                    self._resume_after = resume
                    continue
                try:
                    await self._catch_up()
                except SourceError as error:
                    # The Source's documents are briefly unavailable: poll (which retries
                    # them) for a backoff delay, then try push — and so the catch-up — again.
                    delay = backoff.next()
                    log.warning("catch-up: %s; retrying in %.1f s", error, delay)
                    await self._poll_for(delay)
                    continue
                self._caught_up_to = self._parts()[0].watermark
            except RefusedError:
                raise
            except PushError as exc:
                delay = backoff.next()
                log.warning("push channel down (%s); polling, retrying push in %.1f s", exc, delay)
                await self._poll_for(delay)

    async def _push_session(self, url: str, backoff: Backoff) -> None:
        mirror, endpoints = self._parts()
        mark = mirror.watermark
        if self._resume_after is not None:
            position, epoch = self._resume_after
            self._resume_after = None
            request = TopicRequest(topic=endpoints.topic, position=position, epoch=epoch)
        elif mark.position is not None and mark.epoch is not None:
            request = TopicRequest(topic=endpoints.topic, position=mark.position, epoch=mark.epoch)
        elif mark.last_time is not None:
            # With the epoch we knew: the hub refuses it if the stream was recreated since.
            request = TopicRequest(
                topic=endpoints.topic, since=format_w3c_datetime(mark.last_time), epoch=mark.epoch
            )
        else:
            request = TopicRequest(topic=endpoints.topic)
        async for item in push_changes(url, [request], token=self.config.token):
            if isinstance(item, Change):
                try:
                    change = from_push(item.data, epoch=item.epoch)
                except (ValueError, KeyError, TypeError) as exc:
                    raise MalformedFrameError(f"unreadable pushed change: {exc}") from exc
                await mirror.submit(change)
            elif item.get("type") == "subscribed":
                backoff.reset()
                self.channel = "push"
                self._rebaselined_at = None  # the guard is for the first step after one
                mirror.note_epoch(item.get("epoch"))
                log.info(
                    "push: subscribed to %s (epoch %s, after %s)",
                    item.get("topic"),
                    item.get("epoch"),
                    item.get("position"),
                )
        raise PushError("push channel closed")

    async def _catch_up(self) -> None:
        mirror, _ = self._parts()
        self.channel = "catch-up"
        await mirror.drain()
        since = mirror.watermark.last_time
        if since is None:
            await self.baseline(rebaseline=True)
            return
        phase = self.reporter.phase("catch-up", None)
        try:
            async for change in self._lists.since(since, Channel.ARCHIVE):
                if self.stopping:
                    break
                await mirror.submit(change)
                phase.advance()
            await mirror.drain()
        except ArchiveTooShortError as exc:
            phase.close()
            await self._archive_too_short(exc)
            return
        phase.close()

    async def _archive_too_short(self, exc: ArchiveTooShortError) -> None:
        """Rebaseline — unless we just did and the Source's lists still start after its
        Resource List's ``at``: then the changes in between are unknowable; say so and go on
        from where the lists start rather than rebaselining forever."""
        mirror, _ = self._parts()
        if (
            self._rebaselined_at is not None
            and mirror.watermark.last_time == self._rebaselined_at
            and exc.earliest is not None
        ):
            log.warning(
                "%s, even right after a baseline: the Source's Change Lists start after its "
                "Resource List; following them from %s",
                exc,
                format_w3c_datetime(exc.earliest),
            )
            mirror.set_watermark(Watermark(mirror.epoch, None, exc.earliest))
            return
        await self._rebaseline(exc)

    async def _rebaseline(self, exc: ArchiveTooShortError) -> None:
        log.warning("%s: rebaselining", exc)
        if self._events is not None:
            self._events(
                {
                    "event": "rebaseline",
                    "reason": str(exc),
                    "applied": format_w3c_datetime(datetime.now(UTC)),
                }
            )
        self.rebaselines += 1
        await self.baseline(rebaseline=True)

    async def _poll_for(self, seconds: float | None) -> None:
        """Poll the open Change List every ``poll_interval`` for ``seconds`` (None: until
        stopped)."""
        mirror, _ = self._parts()
        loop = asyncio.get_running_loop()
        deadline = None if seconds is None else loop.time() + seconds
        self.channel = "poll"
        while not self.stopping:
            try:
                async for change in self._lists.poll(mirror.watermark.last_time):
                    if self.stopping:
                        break
                    await mirror.submit(change)
                await mirror.drain()
                self._rebaselined_at = None  # the guard is for the first step after one
            except ArchiveTooShortError as exc:
                await mirror.drain()
                await self._archive_too_short(exc)
            except SourceError as exc:
                log.warning("poll: %s", exc)
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                return
            wait = (
                self.config.poll_interval
                if remaining is None
                else min(self.config.poll_interval, remaining)
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), wait)

    async def _until_stopped(self, session: Any) -> None:
        """Run ``session`` until it ends or :meth:`stop` is called (then cancel it)."""
        task = asyncio.ensure_future(session)
        stopper = asyncio.ensure_future(self._stop.wait())
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

    def _default_applier(self) -> Applier:
        if not self.config.fetch:
            return NullApplier()  # metadata-only: there are no bytes to write
        return FilesystemApplier(self.config.dest, keep_deleted=self.config.keep_deleted)

    def _parts(self) -> tuple[Mirror, TopicEndpoints]:
        assert self.mirror is not None and self.endpoints is not None
        return self.mirror, self.endpoints


def _before_oldest(info: dict[str, Any], caught_up: datetime | None) -> tuple[str, str] | None:
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
