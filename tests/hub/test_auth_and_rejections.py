"""Who may post, and what happens to everything the hub refuses: against a real hub on
loopback and a real Redis. Every rejection must write nothing, so each test compares a dump
of every key under the test's prefix before and after."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from redis.asyncio import Redis

from rspush.hub.server import RunningHub
from rspush.resourcesync import parse_document
from tests.support.fragments import TOKEN_A, TOKEN_B, auth, change_fragment
from tests.support.hubs import HubFactory
from tests.support.rejections import Clock, Unchanged, seeded

RS = (
    'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
    'xmlns:rs="http://www.openarchives.org/rs/terms/"'
)


def iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def resource_list(*locs: str, at: datetime) -> bytes:
    urls = "".join(f'<url><loc>{loc}</loc><rs:md length="{len(loc)}"/></url>' for loc in locs)
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><urlset {RS}>'
        f'<rs:md capability="resourcelist" at="{iso(at)}"/>{urls}</urlset>'
    ).encode()


def hub_link(base: str, topic: str = "dataset1") -> str:
    return f'<{base}/topics/{topic}>; rel="self", <{base}/hub>; rel="hub"'


# --- the auth matrix ---------------------------------------------------------------------

Post = Callable[[httpx.AsyncClient, str, str, dict[str, str]], Awaitable[httpx.Response]]


def poster(endpoint: str, clock: Clock) -> tuple[Post, int]:
    """How to post to ``endpoint`` (changes, baseline, hub) and its success status."""

    async def changes(
        client: httpx.AsyncClient, base: str, topic: str, headers: dict[str, str]
    ) -> httpx.Response:
        body = change_fragment(("http://example.com/x", "updated", clock()))
        return await client.post(f"/topics/{topic}/changes", content=body, headers=headers)

    async def baseline(
        client: httpx.AsyncClient, base: str, topic: str, headers: dict[str, str]
    ) -> httpx.Response:
        clock()
        body = resource_list("http://example.com/x", at=clock.last)
        return await client.post(f"/topics/{topic}/baseline", content=body, headers=headers)

    async def websub(
        client: httpx.AsyncClient, base: str, topic: str, headers: dict[str, str]
    ) -> httpx.Response:
        body = change_fragment(("http://example.com/x", "updated", clock()))
        headers = {**headers, "Content-Type": "application/xml", "Link": hub_link(base, topic)}
        return await client.post("/hub", content=body, headers=headers)

    return {"changes": (changes, 202), "baseline": (baseline, 202), "hub": (websub, 200)}[endpoint]


@pytest.mark.parametrize("endpoint", ["changes", "baseline", "hub"])
async def test_auth_matrix(
    endpoint: str, hub: RunningHub, client: httpx.AsyncClient, redis_url: str, prefix: str
) -> None:
    clock = Clock()
    await seeded(client, clock)
    await seeded(client, clock, "dataset2")
    post, ok = poster(endpoint, clock)
    if endpoint == "baseline":
        ok = 409  # authorised, then refused: both topics have history (seeded above)
    xml = {"Content-Type": "application/xml"}
    cases: list[tuple[str, str, dict[str, str], int, str]] = [
        ("no Authorization", "dataset1", xml, 401, "unauthenticated"),
        ("unknown token", "dataset1", {**xml, "Authorization": "Bearer nope"}, 401, "unauth"),
        ("scheme only", "dataset1", {**xml, "Authorization": "Bearer"}, 401, "unauth"),
        ("no scheme", "dataset1", {**xml, "Authorization": TOKEN_A}, 401, "unauth"),
        ("basic", "dataset1", {**xml, "Authorization": "Basic dG9rZW4tb2Y="}, 401, "unauth"),
        (
            "token with a suffix",
            "dataset1",
            {**xml, "Authorization": f"Bearer {TOKEN_A}x"},
            401,
            "unauth",
        ),
        ("other source's topic", "dataset1", auth(TOKEN_B), 403, "forbidden"),
        ("other source's topic", "dataset2", auth(TOKEN_A), 403, "forbidden"),
        ("unknown topic", "nope", auth(TOKEN_A), 404, "unknown-topic"),
    ]
    async with Unchanged(redis_url, prefix):
        for name, topic, headers, status, code in cases:
            reply = await post(client, hub.url, topic, headers)
            assert reply.status_code == status, (name, reply.text)
            assert reply.headers["content-type"].startswith("application/json"), name
            assert reply.json()["error"].startswith(code), (name, reply.json())
            assert reply.json()["message"], name
    for token, topic in ((TOKEN_A, "dataset1"), (TOKEN_B, "dataset2")):
        reply = await post(client, hub.url, topic, auth(token))
        assert reply.status_code == ok, reply.text
        if endpoint == "baseline":
            assert reply.json()["error"] == "topic-has-history"
            continue
        assert reply.json()["topic"] == topic
        assert reply.json()["replayed"] is False
    # The bearer scheme is case-insensitive (RFC 7235 §2.1).
    lower = {**auth(), "Authorization": f"bearer {TOKEN_A}"}
    assert (await post(client, hub.url, "dataset1", lower)).status_code == ok


async def test_401_carries_a_bearer_challenge(client: httpx.AsyncClient) -> None:
    """RFC 9110 §15.5.2 / RFC 6750 §3: a 401 MUST carry WWW-Authenticate."""
    body = change_fragment(("http://example.com/x", "updated", iso(datetime.now(UTC))))
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        reply = await client.post("/topics/dataset1/changes", content=body, headers=headers)
        assert reply.status_code == 401
        assert reply.headers.get("www-authenticate", "").lower().startswith("bearer"), reply.headers


# --- the change notification way (POST /hub) ---------------------------------------------


async def test_topic_uri_answers_as_the_notification_spec_says(
    hub: RunningHub, client: httpx.AsyncClient
) -> None:
    """Notification spec §4.1: 200, application/xml, Link self + hub, Content-Length 0."""
    for method in ("GET", "HEAD"):
        reply = await client.request(method, "/topics/dataset1")
        assert reply.status_code == 200, method
        assert reply.headers["content-type"].split(";")[0] == "application/xml"
        assert reply.headers["content-length"] == "0"
        assert reply.content == b""
        link = reply.headers["link"]
        assert f'<{hub.url}/topics/dataset1>; rel="self"' in link
        assert f'<{hub.url}/hub>; rel="hub"' in link
        assert f'<{hub.url}/topics/dataset1/capabilitylist.xml>; rel="resourcesync"' in link
    assert (await client.get("/topics/nope")).status_code == 404
    assert (await client.head("/topics/nope")).status_code == 404


async def test_post_to_the_hub_uri(
    hub: RunningHub, client: httpx.AsyncClient, redis_url: str, prefix: str
) -> None:
    clock = Clock()
    await seeded(client, clock)
    base = hub.url
    body = change_fragment(("http://example.com/n", "created", clock()))
    rejects: list[tuple[str, dict[str, str], int, str]] = [
        ("no Link", {}, 400, "link-header"),
        ("self only", {"Link": f'<{base}/topics/dataset1>; rel="self"'}, 400, "link-header"),
        ("hub only", {"Link": f'<{base}/hub>; rel="hub"'}, 400, "link-header"),
        (
            "another hub",
            {"Link": f'<{base}/topics/dataset1>; rel="self", <http://else.example/hub>; rel="hub"'},
            400,
            "link-header",
        ),
        (
            "a topic of another host",
            {"Link": f'<http://else.example/topics/dataset1>; rel="self", <{base}/hub>; rel="hub"'},
            404,
            "unknown-topic",
        ),
        ("unknown topic", {"Link": hub_link(base, "nope")}, 404, "unknown-topic"),
        ("forbidden topic", {"Link": hub_link(base, "dataset2")}, 403, "forbidden"),
        (
            "text/plain",
            {"Link": hub_link(base), "Content-Type": "text/plain"},
            415,
            "content-type",
        ),
        (
            # a form is a WebSub subscription request (docs/websub.md): not one, here
            "form",
            {"Link": hub_link(base), "Content-Type": "application/x-www-form-urlencoded"},
            400,
            "bad-subscription",
        ),
    ]
    async with Unchanged(redis_url, prefix):
        for name, extra, status, code in rejects:
            reply = await client.post("/hub", content=body, headers={**auth(), **extra})
            assert reply.status_code == status, (name, reply.text)
            assert reply.json()["error"] == code, (name, reply.json())
        no_type = {"Authorization": f"Bearer {TOKEN_A}", "Link": hub_link(base)}
        assert (await client.post("/hub", content=body, headers=no_type)).status_code == 415

    # Example 2 of the spec: spaces around ';' and an extra resourcesync link.
    example_2 = (
        f'<{base}/topics/dataset1> ; rel="self", <{base}/hub> ; rel="hub", '
        f'<{base}/topics/dataset1/capabilitylist.xml> ; rel="resourcesync"'
    )
    reply = await client.post(
        "/hub",
        content=body,
        headers={**auth(), "Link": example_2, "Content-Type": "application/xml; charset=utf-8"},
    )
    assert reply.status_code == 200, reply.text
    receipt = reply.json()
    assert receipt["accepted"] == 1 and receipt["topic"] == "dataset1"
    listed = parse_document((await client.get("/topics/dataset1/changelist.xml")).content)
    assert listed.entries[-1].loc == "http://example.com/n"

    # A change notification payload (capability change-notification, from/until).
    start, when = clock(), clock()
    notification = (
        f'<?xml version="1.0" encoding="UTF-8"?><urlset {RS}>'
        f'<rs:ln rel="up" href="{base}/topics/dataset1/capabilitylist.xml"/>'
        f'<rs:md capability="change-notification" from="{start}" until="{clock()}"/>'
        f'<url><loc>http://example.com/m</loc><rs:md change="updated" datetime="{when}"'
        f' length="8876" type="application/pdf"/></url></urlset>'
    ).encode()
    reply = await client.post(
        "/hub", content=notification, headers={**auth(), "Link": hub_link(base)}
    )
    assert reply.status_code == 200, reply.text
    listed = parse_document((await client.get("/topics/dataset1/changelist.xml")).content)
    assert listed.entries[-1].loc == "http://example.com/m"


async def test_link_header_may_come_as_several_field_lines(
    hub: RunningHub, client: httpx.AsyncClient
) -> None:
    """RFC 9110 §5.3: several Link field lines mean the same as one comma-joined line."""
    body = change_fragment(("http://example.com/n", "created", iso(datetime.now(UTC))))
    headers = [
        ("Authorization", f"Bearer {TOKEN_A}"),
        ("Content-Type", "application/xml"),
        ("Link", f'<{hub.url}/topics/dataset1>; rel="self"'),
        ("Link", f'<{hub.url}/hub>; rel="hub"'),
    ]
    reply = await client.post("/hub", content=body, headers=headers)
    assert reply.status_code == 200, reply.text


# --- every rejection writes nothing ------------------------------------------------------


def urlset(urls: str, md: str = 'capability="changelist"') -> bytes:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><urlset {RS}><rs:md {md}/>{urls}</urlset>'.encode()
    )


def change(loc: str, when: str, change: str = "updated") -> str:
    return f'<url><loc>{loc}</loc><rs:md change="{change}" datetime="{when}"/></url>'


Case = tuple[str, Callable[[Clock, datetime], bytes], dict[str, str], int, str, str | None]

AFTER = "http://example.com/after"
REJECTIONS: list[Case] = [
    ("changes", lambda c, last: b"<urlset", {}, 400, "malformed", None),
    ("changes", lambda c, last: b"\xff\xfe<urlset/>", {}, 400, "malformed", None),
    (
        "changes",
        lambda c, last: (
            b'<?xml version="1.0"?><!DOCTYPE urlset [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>'
            b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            b"<url><loc>&xxe;</loc></url></urlset>"
        ),
        {},
        400,
        "unsafe",
        None,
    ),
    (
        "changes",
        lambda c, last: (
            b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
            b'<!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">]><urlset>&lol2;</urlset>'
        ),
        {},
        400,
        "unsafe",
        None,
    ),
    (
        "changes",
        lambda c, last: (
            b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.8" '
            b'xmlns:rs="http://www.openarchives.org/rs/terms/"><rs:md capability="changelist"/>'
            b"<url><loc>http://example.com/after</loc></url></urlset>"
        ),
        {},
        400,
        "wrong-namespace",
        None,
    ),
    (
        "changes",
        lambda c, last: (
            b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            b"<url><loc>http://example.com/after</loc></url></urlset>"
        ),
        {},
        400,
        "not-resourcesync",
        None,
    ),
    (
        "changes",
        lambda c, last: resource_list(AFTER, at=last + timedelta(seconds=5)),
        {},
        400,
        "wrong-capability",
        None,
    ),
    (
        "baseline",
        lambda c, last: urlset(change(AFTER, c())),
        {},
        400,
        "wrong-capability",
        None,
    ),
    ("changes", lambda c, last: urlset(""), {}, 400, "empty", None),
    (
        "changes",
        lambda c, last: urlset(change(AFTER, c(), "created") + change(AFTER, c(), "modified")),
        {},
        400,
        "invalid-document",
        "change-value@1",
    ),
    (
        "changes",
        lambda c, last: urlset(
            change(AFTER, c(), "created") + f"<url><loc>{AFTER}</loc><rs:md/></url>"
        ),
        {},
        400,
        "invalid-document",
        "change-missing@1",
    ),
    (
        "changes",
        lambda c, last: urlset(
            change(AFTER, c(), "created")
            + change(AFTER, c(), "updated").replace('datetime="', 'datetime="yesterday')
        ),
        {},
        400,
        "invalid-document",
        "datetime-syntax@1",
    ),
    (
        "changes",
        lambda c, last: urlset(
            change(AFTER, iso(last + timedelta(seconds=20)))
            + change(AFTER, iso(last + timedelta(seconds=10)))
        ),
        {},
        400,
        "forward-order",
        "forward-order@1",
    ),
    (
        "changes",
        lambda c, last: urlset(
            change(AFTER, c()) + change(AFTER, iso(datetime.now(UTC) + timedelta(hours=1)))
        ),
        {},
        400,
        "future-change-time",
        "entry 1",
    ),
    (
        "changes",
        lambda c, last: urlset(
            change(AFTER, iso(last - timedelta(seconds=1)))
            + change(AFTER, iso(last + timedelta(seconds=1)))
        ),
        {},
        409,
        "change-time-backwards",
        "before the topic's last accepted change",
    ),
    (
        "baseline",
        lambda c, last: resource_list(AFTER, at=last + timedelta(seconds=5)),
        {},
        409,
        "topic-has-history",
        "only seeds a topic without history",
    ),
    (
        "changes",
        lambda c, last: urlset(change(AFTER, c())),
        {"Idempotency-Key": "has a space"},
        400,
        "bad-idempotency-key",
        None,
    ),
    (
        "changes",
        lambda c, last: urlset(change(AFTER, c())),
        {"Idempotency-Key": "k" * 201},
        400,
        "bad-idempotency-key",
        None,
    ),
    (
        "baseline",
        lambda c, last: resource_list(AFTER, at=last + timedelta(seconds=5)),
        {"Idempotency-Key": ""},
        400,
        "bad-idempotency-key",
        None,
    ),
]


def _case_id(case: Case) -> str:
    return f"{case[0]}-{case[4]}-{case[5] or ''}"


@pytest.mark.parametrize("case", REJECTIONS, ids=[_case_id(c) for c in REJECTIONS])
async def test_rejection_writes_nothing(
    case: Case, hub: RunningHub, client: httpx.AsyncClient, redis_url: str, prefix: str
) -> None:
    endpoint, make_body, extra, status, code, detail = case
    clock = Clock()
    await seeded(client, clock)
    last = clock.last
    body = make_body(clock, last)
    async with Unchanged(redis_url, prefix):
        reply = await client.post(
            f"/topics/dataset1/{endpoint}", content=body, headers={**auth(), **extra}
        )
        assert reply.status_code == status, reply.text
    error = reply.json()
    rules = {v["rule"] for v in error["violations"]}
    assert code in error["error"] or code in rules, error
    assert error["message"]
    if detail is not None and "@" in detail:
        rule, entry = detail.split("@")
        found = {(v["rule"], v["entry"]) for v in error["violations"]}
        assert (rule, int(entry)) in found or (
            error["error"] == rule and f"entry {entry}" in error["message"]
        ), error
    elif detail is not None:
        assert detail in error["message"], error
    if code == "change-time-backwards":
        # Both times are in the message, so the Source can act on it.
        assert last.strftime("%Y-%m-%dT%H:%M:%S") in error["message"], error
    metrics = (await client.get("/metrics")).text
    assert f'rspush_rejected_requests_total{{reason="{error["error"]}"}} 1.0' in metrics


async def test_limits_reject_and_write_nothing(
    hub_factory: HubFactory, redis_url: str, prefix: str
) -> None:
    clock = Clock()
    async with (
        hub_factory(max_body_bytes=2048, max_entries_per_request=3) as running,
        httpx.AsyncClient(base_url=running.url, timeout=30) as client,
    ):
        await seeded(client, clock)
        three = urlset("".join(change(f"http://example.com/{i}", clock()) for i in range(3)))
        four = urlset("".join(change(f"http://example.com/{i}", clock()) for i in range(4)))
        large = urlset(
            "".join(change(f"http://example.com/{'x' * 700}/{i}", clock()) for i in range(3))
        )
        assert len(large) > 2048

        async def chunks() -> AsyncIterator[bytes]:
            for start in range(0, len(large), 512):
                yield large[start : start + 512]

        async with Unchanged(redis_url, prefix):
            reply = await client.post("/topics/dataset1/changes", content=four, headers=auth())
            assert reply.status_code == 413, reply.text
            assert reply.json()["error"] == "too-many-entries"
            assert "at most 3" in reply.json()["message"]

            reply = await client.post("/topics/dataset1/changes", content=large, headers=auth())
            assert reply.status_code == 413, reply.text
            assert reply.json()["error"] == "body-too-large"
            assert "2048" in reply.json()["message"]

            # Without Content-Length (chunked): the limit holds while reading.
            reply = await client.post("/topics/dataset1/changes", content=chunks(), headers=auth())
            assert reply.status_code == 413, reply.text
            assert reply.json()["error"] == "body-too-large"

            reply = await client.post(
                "/hub", content=large, headers={**auth(), "Link": hub_link(running.url)}
            )
            assert reply.status_code == 413, reply.text

            reply = await client.post("/topics/dataset1/baseline", content=large, headers=auth())
            assert reply.status_code == 413, reply.text

        reply = await client.post("/topics/dataset1/changes", content=three, headers=auth())
        assert reply.status_code == 202, reply.text
        assert reply.json()["accepted"] == 3


# --- idempotency -------------------------------------------------------------------------


async def test_idempotency_key_replays_the_first_receipt(
    hub: RunningHub, client: httpx.AsyncClient, redis_url: str, prefix: str
) -> None:
    clock = Clock()
    stream = f"{prefix}:{{dataset1}}:changes"
    body = change_fragment(
        ("http://example.com/i1", "created", clock()),
        ("http://example.com/i2", "created", clock()),
    )
    headers = {**auth(), "Idempotency-Key": "retry-me-1"}
    first = await client.post("/topics/dataset1/changes", content=body, headers=headers)
    assert first.status_code == 202, first.text
    receipt = first.json()
    assert receipt["replayed"] is False and receipt["accepted"] == 2

    async with Unchanged(redis_url, prefix):
        again = await client.post("/topics/dataset1/changes", content=body, headers=headers)
    assert again.status_code == 202, again.text
    assert again.json() == {**receipt, "replayed": True}

    # A later change moves the topic on; the retry is still a replay, not a 409.
    later = change_fragment(("http://example.com/i3", "created", clock()))
    assert (await client.post("/topics/dataset1/changes", content=later, headers=auth())).is_success
    async with Unchanged(redis_url, prefix):
        late_retry = await client.post("/topics/dataset1/changes", content=body, headers=headers)
        # The same key on the WebSub route replays too.
        websub = await client.post(
            "/hub", content=body, headers={**headers, "Link": hub_link(hub.url)}
        )
    assert late_retry.status_code == 202 and late_retry.json() == {**receipt, "replayed": True}
    assert websub.status_code == 200 and websub.json() == {**receipt, "replayed": True}

    client_redis = Redis.from_url(redis_url)
    try:
        assert await client_redis.xlen(stream) == 3
    finally:
        await client_redis.aclose()
    listed = parse_document((await client.get("/topics/dataset1/changelist.xml")).content)
    assert [e.loc for e in listed.entries] == [
        "http://example.com/i1",
        "http://example.com/i2",
        "http://example.com/i3",
    ]
    # A different key is a different request.
    fresh = change_fragment(("http://example.com/i4", "created", clock()))
    other = await client.post(
        "/topics/dataset1/changes", content=fresh, headers={**auth(), "Idempotency-Key": "k2"}
    )
    assert other.status_code == 202 and other.json()["replayed"] is False
    assert other.json()["first"] != receipt["first"]


async def test_idempotent_baseline(client: httpx.AsyncClient, redis_url: str, prefix: str) -> None:
    clock = Clock()
    clock()  # a baseline seeds only a topic without history
    body = resource_list("http://example.com/r1", "http://example.com/r2", at=clock.last)
    headers = {**auth(), "Idempotency-Key": "baseline-1"}
    first = await client.post("/topics/dataset1/baseline", content=body, headers=headers)
    assert first.status_code == 202, first.text
    assert first.json()["seeded"] == 2 and first.json()["replayed"] is False
    async with Unchanged(redis_url, prefix):
        again = await client.post("/topics/dataset1/baseline", content=body, headers=headers)
    assert again.json() == {**first.json(), "replayed": True}


async def test_a_baseline_key_names_one_body(
    client: httpx.AsyncClient, redis_url: str, prefix: str
) -> None:
    clock = Clock()
    clock()
    body = resource_list("http://example.com/r1", at=clock.last)
    headers = {**auth(), "Idempotency-Key": "baseline-2"}
    first = await client.post("/topics/dataset1/baseline", content=body, headers=headers)
    assert first.status_code == 202, first.text
    other = resource_list("http://example.com/r2", at=clock.last)
    async with Unchanged(redis_url, prefix):
        reused = await client.post("/topics/dataset1/baseline", content=other, headers=headers)
    assert reused.status_code == 422, reused.text
    assert reused.json()["error"] == "idempotency-key-reused"
