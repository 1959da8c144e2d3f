"""The ingest service: what a post to the hub means, without HTTP.

A post is a bearer token (or None), a topic, an optional idempotency key and a body. The
service authenticates the Source and checks it may post to the topic, checks the key, reads
the body, turns it into a plan (:mod:`.ingest`) and writes it atomically (:mod:`.store`). It
returns the receipt or raises a :class:`.errors.HubError`.

The body comes as a reader, called once the request is admitted: a request without a valid
token or with a malformed key is refused before its body is read.

Change times the hub stamps itself (entries without one) are never refused as going
backwards: when the append is rejected because the topic's last change is later than the
hub's clock (a concurrent post appended later times first, or a Source dated a change ahead
of the clock, within ``future_tolerance_s``), the hub stamps them again with
:func:`restamp_time` — ``max(now, last change time + 1 µs)`` — and retries
(:func:`should_restamp`), at most :data:`STAMP_RETRIES` times. So they keep the stream's
order and a future-dated change of one Source does not lock the others out. Times a Source
gave are never changed, and still go through the backwards check.

An idempotency key is scoped by the topic and the Source; the SHA-256 of the body is stored
with the receipt, and the same key with another body is refused
(:class:`.errors.IdempotencyKeyReused`).

Parsing and planning run in a worker thread (:func:`asyncio.to_thread`), one hop per post:
a 10,000-entry fragment costs the CPU a large fraction of a second, which on the event loop
would stall every other request, the health checks and the push channel; in a thread the
loop keeps its turn (lxml parses with the GIL released, and the interpreter switches threads
every few ms). Small bodies (:data:`INLINE_BYTES`) are cheaper to handle on the loop.

Why one module of this size: the three kinds of post (changes, baselines, a bridge's steps)
share admission and the re-stamping append; split, each part would reach into the others'.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from rspush.resourcesync import Capability, Change, Document, Entry, Metadata
from rspush.resourcesync.w3cdt import format_w3c_datetime, from_us, to_us

from .auth import find_source
from .errors import (
    ChangeTimeBackwards,
    Code,
    Forbidden,
    NotFound,
    RequestError,
    Unauthenticated,
)
from .ingest import IngestPlan, parse_fragment, plan_changes, plan_seed
from .metrics import HubMetrics
from .scripts import CheckpointSet
from .settings import Settings, Source
from .store import TopicStore

BodyReader = Callable[[], Awaitable[bytes]]
Clock = Callable[[], datetime]
P = TypeVar("P")

STAMP_RETRIES = 5
"""Appends of one post with hub-stamped times, before the backwards rejection stands."""
SEED_MAX_ENTRIES = 1_000_000
INLINE_BYTES = 3 * 1024
"""Bodies up to this size are parsed and planned on the event loop, without the hop to a
worker thread and back: a 10-change post with hashes and lengths is about 2 KiB, and the
worst case, 3 KiB of the smallest entries (about 45 changes), costs the loop about 1.5 ms.
Measured: publish-call p50 0.2-0.4 ms lower for 10-change posts (docs/benchmarks.md)."""
NOTIFICATION_MEDIA_TYPE = "application/xml"
_IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,200}")


def _utc_now() -> datetime:
    return datetime.now(UTC)


def should_restamp(plan: IngestPlan, attempt: int) -> bool:
    """After ``attempt`` (0-based) of appending ``plan`` was rejected as going backwards:
    plan again with a fresh ``now`` only if the hub stamped some time itself, and while
    attempts are left."""
    return plan.stamped and attempt + 1 < STAMP_RETRIES


def restamp_time(now: datetime, last_us: int) -> datetime:
    """The time for changes the hub stamps, given the topic's last change time: its clock,
    or just after the last change when that is ahead of the clock. Strictly after, so a
    stamped change never shares its time with a Source's change of the same URI (a
    duplicate or a conflict, docs/hub.md)."""
    return max(now, from_us(last_us) + timedelta(microseconds=1))


def checked_idempotency_key(key: str | None) -> str | None:
    """An ``Idempotency-Key`` is 1-200 printable ASCII characters (no spaces)."""
    if key is not None and not _IDEMPOTENCY_KEY.fullmatch(key):
        raise RequestError(
            Code.BAD_IDEMPOTENCY_KEY, "Idempotency-Key: 1-200 printable ASCII characters"
        )
    return key


@dataclass(frozen=True, slots=True)
class Admitted:
    """An admitted post: its document, its idempotency key, who sent it and its body's
    SHA-256 (which the key's receipt keeps)."""

    document: Document
    key: str | None
    source: str
    body_sha256: str


class IngestService:
    """Posts of changes, baselines and change notifications to the topics of one hub."""

    def __init__(
        self,
        settings: Settings,
        store: TopicStore,
        metrics: HubMetrics,
        *,
        clock: Clock = _utc_now,
    ) -> None:
        self.settings = settings
        self.store = store
        self.metrics = metrics
        self.clock = clock

    def authorise(self, token: str | None, topic: str) -> Source:
        """The Source holding ``token``, if it may post to ``topic``."""
        if token is None:
            raise Unauthenticated("missing 'Authorization: Bearer <token>'")
        source = find_source(self.settings.sources, token)
        if source is None:
            raise Unauthenticated("unknown token")
        if self.settings.topic(topic) is None:
            raise NotFound(f"no topic {topic!r} on this hub", topic=topic, code=Code.UNKNOWN_TOPIC)
        if topic not in source.topics:
            raise Forbidden(
                f"source {source.name!r} may not post to topic {topic!r}",
                topic=topic,
                source=source.name,
            )
        return source

    def notified_topic(self, media_type: str, links: Mapping[str, str]) -> str:
        """Change notification spec §4.1: a notification is ``application/xml`` and names its
        topic with the link ``rel="self"`` and this hub with ``rel="hub"``. ``links`` maps each
        relation to its URI."""
        if media_type != NOTIFICATION_MEDIA_TYPE:
            raise RequestError(Code.CONTENT_TYPE, "Content-Type must be application/xml")
        base_url = self.settings.hub.base_url
        self_uri = links.get("self")
        if self_uri is None or links.get("hub") != f"{base_url}/hub":
            raise RequestError(
                Code.LINK_HEADER,
                f'Link header needs <topic URI>; rel="self" and <{base_url}/hub>; rel="hub"',
            )
        prefix = f"{base_url}/topics/"
        if not self_uri.startswith(prefix):
            raise NotFound(f"{self_uri} is not a topic of this hub", code=Code.UNKNOWN_TOPIC)
        return self_uri.removeprefix(prefix).rstrip("/")

    async def notify(
        self,
        *,
        token: str | None,
        media_type: str,
        links: Mapping[str, str],
        idempotency_key: str | None,
        body: BodyReader,
    ) -> dict[str, Any]:
        """A change notification posted to the hub URI: the changes of the linked topic."""
        topic = self.notified_topic(media_type, links)
        return await self.changes(
            token=token, topic=topic, idempotency_key=idempotency_key, body=body
        )

    async def changes(
        self, *, token: str | None, topic: str, idempotency_key: str | None, body: BodyReader
    ) -> dict[str, Any]:
        """A Change List fragment or change notification: appended to the topic's stream."""
        limits = self.settings.limits

        def planned(document: Document, now: datetime, stamp: datetime) -> IngestPlan:
            # Every plan checks the given times against the clock (future tolerance), never
            # against the stamp; a re-plan only moves the stamped times.
            return plan_changes(
                document,
                now=now,
                stamp=stamp,
                max_entries=limits.max_entries_per_request,
                future_tolerance=timedelta(seconds=limits.future_tolerance_s),
            )

        admitted, now, plan = await self._admit(
            token, topic, idempotency_key, body, lambda d, now: planned(d, now, now)
        )
        receipt, replayed = await self._append_restamping(
            topic,
            lambda now, stamp: planned(admitted.document, now, stamp),
            plan=plan,
            now=now,
            idempotency_key=admitted.key,
            source=admitted.source,
            body_sha256=admitted.body_sha256,
        )
        if not replayed:  # duplicates the topic already held are not counted again
            self.metrics.accepted.labels(topic).inc(int(receipt.get("accepted", 0)))
        return _receipt(receipt, topic, replayed)

    async def baseline(
        self, *, token: str | None, topic: str, idempotency_key: str | None, body: BodyReader
    ) -> dict[str, Any]:
        """A Resource List taken as the state at its ``at`` of a topic without history (no
        change events); a topic with state or changes is refused
        (:class:`.errors.TopicHasHistory`)."""
        limits = self.settings.limits
        admitted, now, plan = await self._admit(
            token,
            topic,
            idempotency_key,
            body,
            lambda document, now: plan_seed(
                document,
                max_entries=SEED_MAX_ENTRIES,
                now=now,
                future_tolerance=timedelta(seconds=limits.future_tolerance_s),
            ),
        )
        receipt, replayed = await self.store.seed(
            topic,
            plan,
            now_us=to_us(now),
            idempotency_key=admitted.key,
            idempotency_ttl_s=limits.idempotency_ttl_s,
            source=admitted.source,
            body_sha256=admitted.body_sha256,
        )
        # The store keeps microseconds; clients get a W3C datetime like every other time.
        receipt["at"] = format_w3c_datetime(from_us(int(receipt["at"])))
        return _receipt(receipt, topic, replayed)

    async def bridged(
        self,
        topic: str,
        entries: list[Entry],
        *,
        checkpoint: CheckpointSet,
        baseline: bool = False,
        at: datetime | None = None,
        max_entries: int,
    ) -> dict[str, Any]:
        """A bridge's step (:mod:`.bridges.base`): its changes (or its baseline) and its new
        checkpoint, written atomically, planned and validated as a Source's post by
        ``bridge:<topic>``. Raises :class:`.store.StaleCheckpoint` if the checkpoint moved."""
        source = f"bridge:{topic}"
        limits = self.settings.limits
        now = self.clock()
        tolerance = timedelta(seconds=limits.future_tolerance_s)
        if baseline:
            # The remote's own time of the baseline when the bridge knows it (a ResourceSync
            # Resource List's at): its changes after it must not read as going backwards.
            document = Document(md=Metadata(capability=Capability.RESOURCELIST, at=at or now))
            document = document.model_copy(update={"entries": tuple(entries)})
            seed = await asyncio.to_thread(
                plan_seed, document, max_entries=max_entries, now=now, future_tolerance=tolerance
            )
            receipt, _ = await self.store.seed(
                topic,
                seed,
                now_us=to_us(now),
                idempotency_key=None,
                idempotency_ttl_s=limits.idempotency_ttl_s,
                source=source,
                checkpoint=checkpoint,
            )
            return _receipt(receipt, topic, False)
        held = await self.store.state_entries(topic, sorted({e.loc for e in entries}))
        typed = with_change_types(entries, set(held))

        def planned(now: datetime, stamp: datetime) -> IngestPlan:
            plan = IngestPlan()
            if typed:
                plan = plan_changes(
                    Document(md=Metadata(capability=Capability.CHANGELIST), entries=tuple(typed)),
                    now=now,
                    stamp=stamp,
                    max_entries=max_entries,
                    future_tolerance=tolerance,
                )
            return without_no_ops(plan, held)

        receipt, _ = await self._append_restamping(
            topic,
            planned,
            plan=await asyncio.to_thread(planned, now, now),
            now=now,
            idempotency_key=None,
            source=source,
            checkpoint=checkpoint,
        )
        self.metrics.accepted.labels(topic).inc(int(receipt.get("accepted") or 0))
        return _receipt(receipt, topic, False)

    async def _append_restamping(
        self,
        topic: str,
        replan: Callable[[datetime, datetime], IngestPlan],
        *,
        plan: IngestPlan,
        now: datetime,
        idempotency_key: str | None,
        source: str,
        body_sha256: str = "",
        checkpoint: CheckpointSet | None = None,
    ) -> tuple[dict[str, Any], bool]:
        """Append ``plan``. If the topic's last change is later than its first (another post
        got in between) and the hub stamped some of its times, ``replan(now, stamp)`` with
        the times moved past that change, in a worker thread, and try again: at most
        :data:`STAMP_RETRIES` appends, then the rejection stands."""
        for attempt in range(STAMP_RETRIES):
            try:
                return await self.store.append(
                    topic,
                    plan,
                    now_us=to_us(now),
                    idempotency_key=idempotency_key,
                    idempotency_ttl_s=self.settings.limits.idempotency_ttl_s,
                    source=source,
                    body_sha256=body_sha256,
                    checkpoint=checkpoint,
                )
            except ChangeTimeBackwards as exc:
                if not should_restamp(plan, attempt):
                    raise
                now = self.clock()
                plan = await asyncio.to_thread(replan, now, restamp_time(now, exc.last_us))
        raise AssertionError("unreachable: the last attempt re-raises")

    async def _admit(
        self,
        token: str | None,
        topic: str,
        idempotency_key: str | None,
        body: BodyReader,
        plan: Callable[[Document, datetime], P],
    ) -> tuple[Admitted, datetime, P]:
        """Authorise, check the key, read the body; then, in one worker-thread hop, parse it,
        hash it, read the clock and ``plan`` the document at that time. (Each hop to a thread
        and back costs a wake-up of the loop and a GIL hand-off: one per request, measured
        faster than two for small posts as for large ones.)"""
        source = self.authorise(token, topic)
        key = checked_idempotency_key(idempotency_key)
        raw = await body()
        max_bytes = self.settings.limits.max_body_bytes

        def admitted() -> tuple[Admitted, datetime, P]:
            document = parse_fragment(raw, max_bytes=max_bytes)
            digest = hashlib.sha256(raw).hexdigest()
            now = self.clock()
            return Admitted(document, key, source.name, digest), now, plan(document, now)

        if len(raw) <= INLINE_BYTES:
            return admitted()
        return await asyncio.to_thread(admitted)


def with_change_types(entries: list[Entry], held: set[str]) -> list[Entry]:
    """Entries without a change type: ``created`` if the topic's state (``held`` URIs, as
    changed by the entries before) lacks the URI, else ``updated``."""
    present = set(held)
    typed: list[Entry] = []
    for entry in entries:
        md = entry.md or Metadata()
        change = md.change
        if change is None:
            change = Change.UPDATED if entry.loc in present else Change.CREATED
            entry = entry.model_copy(update={"md": md.model_copy(update={"change": change})})
        if change == Change.DELETED:
            present.discard(entry.loc)
        else:
            present.add(entry.loc)
        typed.append(entry)
    return typed


def without_no_ops(plan: IngestPlan, held: dict[str, str]) -> IngestPlan:
    """The plan without changes that leave the topic's state as it is: a created/updated
    whose Resource List entry is the state's, a deleted of a URI the state lacks. ``held`` is
    the state of the plan's URIs before it; each kept change updates it for the next."""
    state = dict(held)
    kept = []
    for record in plan.records:
        if record.state_xml is None:
            if record.loc not in state:
                continue
            del state[record.loc]
        else:
            if state.get(record.loc) == record.state_xml:
                continue
            state[record.loc] = record.state_xml
        kept.append(record)
    return IngestPlan(kept, plan.stamped)


def _receipt(receipt: dict[str, Any], topic: str, replayed: bool) -> dict[str, Any]:
    receipt["topic"] = topic
    receipt["replayed"] = replayed
    return receipt
