"""The ingest service's policy without HTTP or Redis: authentication and authorisation, the
idempotency key, the change-notification case and the re-stamp-and-retry decision. The store
is a stand-in recording what reaches it; the clock is a list of moments."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rspush.hub.app import HTTP_STATUS
from rspush.hub.errors import (
    AuthError,
    ChangeTimeBackwards,
    Code,
    Forbidden,
    HubError,
    IngestError,
    NotFound,
    RequestError,
    Unauthenticated,
)
from rspush.hub.ingest import IngestPlan
from rspush.hub.metrics import HubMetrics
from rspush.hub.scripts import CheckpointSet
from rspush.hub.service import STAMP_RETRIES, IngestService, should_restamp
from rspush.resourcesync import Change, Entry, Metadata
from rspush.resourcesync.w3cdt import to_us
from tests.support.fragments import TOKEN_A, TOKEN_B, change_fragment
from tests.support.hubs import make_settings

BASE = "http://hub.example"
T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
STAMPED = (
    b'<?xml version="1.0" encoding="UTF-8"?>'
    b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
    b'xmlns:rs="http://www.openarchives.org/rs/terms/">'
    b'<rs:md capability="changelist"/>'
    b'<url><loc>http://e.org/a</loc><rs:md change="updated"/></url></urlset>'
)
GIVEN = change_fragment(("http://e.org/a", "updated", "2026-03-01T11:00:00Z"))


class FakeStore:
    """Answers appends from a script: a ChangeTimeBackwards for the first ``backwards``
    calls, then a receipt (``replayed`` as given)."""

    def __init__(self, *, backwards: int = 0, replayed: bool = False) -> None:
        self.backwards = backwards
        self.replayed = replayed
        self.appends: list[tuple[IngestPlan, int, str | None]] = []
        self.scopes: list[dict[str, Any]] = []

    async def state_entries(self, topic: str, locs: list[str]) -> dict[str, str]:
        return {}  # a topic without state: every bridged change is new

    async def append(
        self,
        topic: str,
        plan: IngestPlan,
        *,
        now_us: int,
        idempotency_key: str | None,
        idempotency_ttl_s: int,
        **scope: Any,
    ) -> tuple[dict[str, Any], bool]:
        self.appends.append((plan, now_us, idempotency_key))
        self.scopes.append(scope)
        if len(self.appends) <= self.backwards:
            raise ChangeTimeBackwards(
                "backwards", topic=topic, first_us=plan.first_time_us, last_us=now_us
            )
        return {"accepted": len(plan.records)}, self.replayed


def clock() -> Iterator[datetime]:
    moment = T0
    while True:
        yield moment
        moment += timedelta(seconds=1)


def service(store: FakeStore | None = None) -> tuple[IngestService, FakeStore, HubMetrics]:
    store = store or FakeStore()
    metrics = HubMetrics()
    ticks = clock()
    ingest = IngestService(
        make_settings("redis://unused", "p", BASE),
        store,  # type: ignore[arg-type]
        metrics,
        clock=lambda: next(ticks),
    )
    return ingest, store, metrics


def body(data: bytes) -> Any:
    async def read() -> bytes:
        return data

    return read


async def unread() -> bytes:
    raise AssertionError("the body of a refused request must not be read")


# --- authentication and authorisation ---------------------------------------------------


@pytest.mark.parametrize(
    ("token", "topic", "error", "code"),
    [
        (None, "dataset1", Unauthenticated, Code.UNAUTHENTICATED),
        ("not-a-token", "dataset1", Unauthenticated, Code.UNAUTHENTICATED),
        (TOKEN_A, "nope", NotFound, Code.UNKNOWN_TOPIC),
        (TOKEN_A, "dataset2", Forbidden, Code.FORBIDDEN),
    ],
)
async def test_refused_posts_are_refused_before_the_body_is_read(
    token: str | None, topic: str, error: type[HubError], code: Code
) -> None:
    ingest, store, _ = service()
    with pytest.raises(error) as excinfo:
        await ingest.changes(token=token, topic=topic, idempotency_key=None, body=unread)
    assert excinfo.value.code == code
    assert store.appends == []


def test_authorise_names_the_source_and_the_topic() -> None:
    ingest, _, _ = service()
    assert ingest.authorise(TOKEN_B, "dataset2").name == "b"
    with pytest.raises(Forbidden) as excinfo:
        ingest.authorise(TOKEN_B, "dataset1")
    assert (excinfo.value.source, excinfo.value.topic) == ("b", "dataset1")
    assert isinstance(excinfo.value, AuthError)


# --- idempotency key --------------------------------------------------------------------


@pytest.mark.parametrize("key", ["", "has space", "x" * 201, "é"])
async def test_a_bad_idempotency_key_is_refused_before_the_body_is_read(key: str) -> None:
    ingest, store, _ = service()
    with pytest.raises(RequestError) as excinfo:
        await ingest.changes(token=TOKEN_A, topic="dataset1", idempotency_key=key, body=unread)
    assert excinfo.value.code == Code.BAD_IDEMPOTENCY_KEY
    assert store.appends == []


async def test_the_idempotency_key_reaches_the_store_and_a_replay_is_not_counted() -> None:
    ingest, store, metrics = service(FakeStore(replayed=True))
    receipt = await ingest.changes(
        token=TOKEN_A, topic="dataset1", idempotency_key="k-1", body=body(GIVEN)
    )
    assert receipt["replayed"] is True
    assert receipt["topic"] == "dataset1"
    assert [key for _, _, key in store.appends] == ["k-1"]
    assert metrics.accepted.labels("dataset1")._value.get() == 0


# --- change notifications posted to the hub URI -----------------------------------------


@pytest.mark.parametrize(
    ("media_type", "links", "code"),
    [
        ("text/xml", {"self": f"{BASE}/topics/dataset1", "hub": f"{BASE}/hub"}, "content-type"),
        ("application/xml", {"self": f"{BASE}/topics/dataset1"}, "link-header"),
        ("application/xml", {"hub": f"{BASE}/hub"}, "link-header"),
        ("application/xml", {"self": "http://other/topics/x", "hub": f"{BASE}/hub"}, None),
    ],
)
async def test_a_notification_names_its_topic_and_this_hub(
    media_type: str, links: dict[str, str], code: str | None
) -> None:
    ingest, _, _ = service()
    with pytest.raises(HubError) as excinfo:
        await ingest.notify(
            token=TOKEN_A, media_type=media_type, links=links, idempotency_key=None, body=unread
        )
    assert excinfo.value.code == (code or Code.UNKNOWN_TOPIC)


async def test_a_notification_is_the_changes_of_the_linked_topic() -> None:
    ingest, store, _ = service()
    receipt = await ingest.notify(
        token=TOKEN_A,
        media_type="application/xml",
        links={"self": f"{BASE}/topics/dataset1/", "hub": f"{BASE}/hub"},
        idempotency_key=None,
        body=body(GIVEN),
    )
    assert receipt["topic"] == "dataset1"
    assert len(store.appends) == 1


# --- re-stamp and retry -----------------------------------------------------------------


def test_should_restamp_only_times_the_hub_made_up_and_while_attempts_are_left() -> None:
    stamped, given = IngestPlan([], stamped=True), IngestPlan([], stamped=False)
    assert should_restamp(stamped, 0)
    assert should_restamp(stamped, STAMP_RETRIES - 2)
    assert not should_restamp(stamped, STAMP_RETRIES - 1)
    assert not should_restamp(given, 0)


async def test_hub_stamped_changes_are_stamped_again_after_losing_a_race() -> None:
    ingest, store, metrics = service(FakeStore(backwards=2))
    receipt = await ingest.changes(
        token=TOKEN_A, topic="dataset1", idempotency_key=None, body=body(STAMPED)
    )
    assert receipt == {"accepted": 1, "topic": "dataset1", "replayed": False}
    times = [plan.first_time_us for plan, _, _ in store.appends]
    assert times == [to_us(T0 + timedelta(seconds=n)) for n in range(3)]
    assert [now_us for _, now_us, _ in store.appends] == times
    assert metrics.accepted.labels("dataset1")._value.get() == 1


async def test_a_bridges_hub_stamped_changes_are_stamped_again_too() -> None:
    # The bridges' step goes through the same re-stamp policy as a Source's post, and keeps
    # its checkpoint on every attempt.
    ingest, store, metrics = service(FakeStore(backwards=2))
    checkpoint = CheckpointSet(expected=None, value="c1")
    receipt = await ingest.bridged(
        "dataset1", [Entry(loc="http://e.org/a")], checkpoint=checkpoint, max_entries=10
    )
    assert receipt == {"accepted": 1, "topic": "dataset1", "replayed": False}
    times = [plan.first_time_us for plan, _, _ in store.appends]
    assert times == [to_us(T0 + timedelta(seconds=n)) for n in range(3)]
    assert [scope["checkpoint"] for scope in store.scopes] == [checkpoint] * 3
    assert {scope["source"] for scope in store.scopes} == {"bridge:dataset1"}
    assert metrics.accepted.labels("dataset1")._value.get() == 1


async def test_a_bridges_given_times_are_never_restamped() -> None:
    ingest, store, _ = service(FakeStore(backwards=1))
    given = Entry(
        loc="http://e.org/a",
        md=Metadata(change=Change.UPDATED, datetime=T0 - timedelta(hours=1)),
    )
    with pytest.raises(ChangeTimeBackwards):
        await ingest.bridged(
            "dataset1", [given], checkpoint=CheckpointSet(None, "c1"), max_entries=10
        )
    assert len(store.appends) == 1


async def test_source_given_times_are_never_restamped() -> None:
    ingest, store, _ = service(FakeStore(backwards=1))
    with pytest.raises(ChangeTimeBackwards):
        await ingest.changes(
            token=TOKEN_A, topic="dataset1", idempotency_key=None, body=body(GIVEN)
        )
    assert len(store.appends) == 1


async def test_restamping_gives_up_after_the_retries() -> None:
    ingest, store, _ = service(FakeStore(backwards=STAMP_RETRIES))
    with pytest.raises(ChangeTimeBackwards) as excinfo:
        await ingest.changes(
            token=TOKEN_A, topic="dataset1", idempotency_key=None, body=body(STAMPED)
        )
    assert len(store.appends) == STAMP_RETRIES
    assert excinfo.value.topic == "dataset1"
    assert isinstance(excinfo.value, IngestError)


# --- the error tree and the HTTP edge ---------------------------------------------------


def test_every_error_code_has_an_http_status() -> None:
    assert set(HTTP_STATUS) == set(Code)


def test_the_json_body_of_an_error_is_its_code_message_and_violations() -> None:
    error = RequestError(Code.CONTENT_TYPE, "Content-Type must be application/xml")
    assert error.as_json() == {
        "error": "content-type",
        "message": "Content-Type must be application/xml",
        "violations": [],
    }
