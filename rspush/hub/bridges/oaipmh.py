"""The OAI-PMH bridge: an OAI-PMH 2.0 repository's records as a topic's changes, with no
change at the repository (docs/bridges.md).

Each step sends at most a few requests: on the first, ``Identify`` (granularity,
deletedRecord, earliestDatestamp) and ``ListMetadataFormats`` (and ``ListSets`` when sets are
configured, to refuse a misspelt one); at each window's start, ``Identify`` again; then one
``ListIdentifiers`` page. What a page becomes, the windows, the overlap and the checkpoint are
in :mod:`.oai_plan`; parsing is in :mod:`.oai_parse`.

The first window lists the whole repository (no ``from``): its records arrive as ``created``
changes, page by page, each page committed with its checkpoint — a Destination following the
topic sees every record as it is bridged, and one that starts later takes the topic's
Resource List as usual. (A Resource List baseline would need the whole repository in one
atomic step; changes page by page keep each step bounded and resumable.)

Deleted records: a repository with ``deletedRecord`` ``persistent`` lists them with
``status="deleted"`` (§2.5.1), which become ``deleted`` changes. One with ``no`` or
``transient`` may forget them, so every ``full_list_interval_s`` the bridge lists every
identifier (no ``from``) and deletes what the topic holds that the listing no longer has.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from rspush.resourcesync.w3cdt import format_w3c_datetime, parse_w3c_datetime

from ..settings import BridgeConfig
from .base import BridgeError, BridgeStep, TopicView
from .http import BridgeHttp
from .oai_parse import OaiParseError, Page, parse_response
from .oai_plan import Checkpoint, changes, deletions, lanes, list_params, next_from
from .oai_plan import synced_through as synced_through_of

PARSE_IN_THREAD_BYTES = 64 * 1024
"""Responses larger than this are parsed in a worker thread, off the hub's event loop."""


class OaiPmhBridge:
    def __init__(self, config: BridgeConfig, http: BridgeHttp) -> None:
        self.config = config
        self.http = http
        self.base_url = config.url.split("?", 1)[0]
        self.synced_through: datetime | None = None
        self.topic_view: TopicView | None = None
        """Set by the runner: the topic's URIs, for full listings."""
        self._full_seen: set[str] | None = None
        self._deleted_record = "no"

    async def _get(self, params: dict[str, str]) -> Page:
        fetched = await self.http.get(self.base_url, params=params)
        if fetched is None:  # pragma: no cover - only conditional GETs answer 304
            raise BridgeError("unexpected 304 to an unconditional request")
        try:
            if len(fetched.content) > PARSE_IN_THREAD_BYTES:
                return await asyncio.to_thread(parse_response, fetched.content)
            return parse_response(fetched.content)
        except OaiParseError as exc:
            raise BridgeError(f"{params.get('verb')}: {exc}") from None

    async def _verb(self, params: dict[str, str]) -> Page:
        page = await self._get(params)
        if page.error is not None:
            raise BridgeError(
                f"{params['verb']}: OAI-PMH error {page.error.code}: {page.error.message}"
            )
        return page

    async def _setup(self, cp: Checkpoint) -> None:
        """Identify and the formats to bridge (fixed in the checkpoint at the first step)."""
        identify = (await self._verb({"verb": "Identify"})).identify
        assert identify is not None
        self._deleted_record = identify.deleted_record
        cp.granularity = identify.granularity
        if cp.formats:
            return
        listed = (await self._verb({"verb": "ListMetadataFormats"})).formats
        wanted = self.config.metadata_prefixes or sorted(listed)
        missing = [p for p in wanted if p not in listed]
        if missing:
            raise BridgeError(f"the repository lists no metadata format {missing[0]!r}")
        if self.config.sets:
            known: list[str] = []
            params = {"verb": "ListSets"}
            while True:
                page = await self._verb(params)
                known += page.sets
                if page.token is None:
                    break
                params = {"verb": "ListSets", "resumptionToken": page.token}
            unknown = [s for s in self.config.sets if s not in known]
            if unknown:
                raise BridgeError(f"the repository lists no set {unknown[0]!r}")
        cp.formats = {p: listed[p] for p in wanted}

    def _full_due(self, cp: Checkpoint, now: datetime) -> bool:
        if self._deleted_record == "persistent" or cp.from_ is None or self.topic_view is None:
            return False
        if cp.last_full is None:
            return True
        age = (now - parse_w3c_datetime(cp.last_full)).total_seconds()
        return age >= self.config.full_list_interval_s

    async def step(self, checkpoint: str | None) -> BridgeStep | None:
        cp = Checkpoint.loads(checkpoint)
        now = datetime.now(UTC)
        notes: list[str] = []
        regressions: list[str] = []
        if not cp.formats or cp.window_start:
            await self._setup(cp)
        self.synced_through = synced_through_of(cp)
        if cp.deletes:
            chunk = cp.deletes[: self.config.max_changes_per_step]
            cp.deletes = cp.deletes[len(chunk) :]
            entries, cp.floor_us = deletions(chunk, floor_us=cp.floor_us, now=now)
            return BridgeStep(entries, cp.dumps(), more=True)
        if cp.window_start and cp.phase == "incremental" and self._full_due(cp, now):
            cp.phase = "full"
            self._full_seen = set()
        if cp.phase == "full" and self._full_seen is None:
            # The identifiers listed before a restart are gone with the process: list again.
            cp.lane, cp.token = 0, None
            self._full_seen = set()
        full = cp.phase == "full"
        all_lanes = lanes(cp.formats, self.config.sets)
        lane = all_lanes[cp.lane]
        page = await self._get(list_params(lane, cp, full=full))
        token: str | None = page.token
        if page.error is not None:
            code = page.error.code
            if code == "badResumptionToken" and cp.token is not None:
                # Harvester guidelines §6: the list must be started again. From the
                # window's `from`: nothing is skipped; what was bridged is dropped as no-op.
                notes.append("the repository refused the resumptionToken: listing again")
                cp.lane, cp.token = 0, None
                if full:
                    self._full_seen = set()
                return BridgeStep([], cp.dumps(), more=True, notes=notes)
            if code == "cannotDisseminateFormat":
                notes.append(f"the repository no longer disseminates {lane.prefix!r}")
            elif code != "noRecordsMatch":
                raise BridgeError(f"ListIdentifiers: OAI-PMH error {code}: {page.error.message}")
            token = None
        if cp.window_start and not full:
            start = next_from(page.response_date, cp.granularity)
            if cp.from_ is not None and start < cp.from_:
                regressions.append(
                    f"the repository's responseDate {format_w3c_datetime(page.response_date)} "
                    f"is before the harvest's from {cp.from_}: its clock went back; the next "
                    "window starts from the earlier time"
                )
            cp.next_from = start
            cp.began = format_w3c_datetime(page.response_date)
        entries = []
        if full:
            assert self._full_seen is not None
            self._full_seen.update(
                e.loc
                for e in changes(
                    [h for h in page.headers if not h.deleted],
                    base_url=self.base_url,
                    lane=lane,
                    namespace="",
                    floor_us=0,
                    now=now,
                )[0]
            )
        else:
            entries, cp.floor_us = changes(
                page.headers,
                base_url=self.base_url,
                lane=lane,
                namespace=cp.formats.get(lane.prefix, ""),
                floor_us=cp.floor_us,
                now=now,
            )
        cp.token = token
        if token is None:
            cp.lane += 1
        done = cp.lane >= len(all_lanes)
        if done:
            cp.lane, cp.token = 0, None
            if full:
                assert self._full_seen is not None and self.topic_view is not None
                held = await self.topic_view.uris()
                cp.deletes = sorted(held - self._full_seen)
                if cp.deletes:
                    notes.append(
                        f"a full listing found {len(cp.deletes)} record(s) gone without a "
                        "deletion record"
                    )
                self._full_seen = None
                cp.phase = "incremental"
                cp.last_full = format_w3c_datetime(now)
            else:
                if cp.from_ is None:
                    cp.last_full = format_w3c_datetime(now)  # a whole-repository listing
                cp.from_, cp.next_from = cp.next_from, None
                cp.synced, cp.began = cp.began, None
                self.synced_through = synced_through_of(cp)
        return BridgeStep(
            entries,
            cp.dumps(),
            more=not done or bool(cp.deletes),
            notes=notes,
            regressions=regressions,
        )
