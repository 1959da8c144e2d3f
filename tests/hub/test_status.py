"""The operator status page, ``GET /status``: its figures after posts (JSON), private topics
listed only to their subscribers, the metrics token when one is set, the HTML, and the
renderer's escaping of every value."""

from __future__ import annotations

from typing import Any

import httpx
from redis.asyncio import Redis

from rspush.hub.metrics import HubMetrics
from rspush.hub.status import TopicRef, collect, render_html
from rspush.hub.store import TopicStore
from rspush.resourcesync.w3cdt import parse_w3c_datetime
from tests.support.edge import METRICS_TOKEN, MIRROR_1, MIRROR_2, PRIVATE, PUBLIC, edge_hub
from tests.support.fragments import TOKEN_A, TOKEN_B, Times, auth, change_fragment

JSON = {"Accept": "application/json"}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def status_json(http: httpx.AsyncClient, token: str | None = None) -> dict[str, Any]:
    headers = JSON | (bearer(token) if token else {})
    reply = await http.get("/status", headers=headers)
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"].startswith("application/json")
    data: dict[str, Any] = reply.json()
    return data


def topic_row(data: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((t for t in data["topics"] if t["name"] == name), None)


async def test_json_shows_the_figures_after_posts(redis_url: str, prefix: str) -> None:
    async with edge_hub(redis_url, prefix) as (running, http):
        before = topic_row(await status_json(http), PUBLIC)
        assert before is not None
        assert before["stream_length"] == 0
        assert before["last_change"] is None
        assert before["open_list"] == {"entries": 0, "age_s": None}

        times = Times()
        sent = [times.next() for _ in range(3)]
        body = change_fragment(
            *((f"http://example.com/r{i}", "updated", t) for i, t in enumerate(sent))
        )
        reply = await http.post(f"/topics/{PUBLIC}/changes", content=body, headers=auth(TOKEN_A))
        assert reply.status_code == 202, reply.text

        data = await status_json(http)
        row = topic_row(data, PUBLIC)
        assert row is not None
        assert row["private"] is False
        assert row["stream_length"] == 3
        assert parse_w3c_datetime(row["last_change"]) == parse_w3c_datetime(sent[-1])
        assert row["open_list"]["entries"] == 3
        assert row["open_list"]["age_s"] >= 0
        assert row["closed_lists"] == 0
        assert row["retention"]["oldest_change"] is not None
        assert parse_w3c_datetime(row["retention"]["oldest_change"]) == parse_w3c_datetime(sent[0])
        assert row["retention"]["trimmed_through"] is None
        assert row["subscribers"] == 0
        assert row["slow_consumer_closes"] == 0
        assert row["push_lag"]["batches"] >= 0
        assert data["process"]["redis"] == "ok"
        assert data["process"]["uptime_s"] >= 0
        assert running.push is not None
        assert data["process"]["push_connections"] == running.push.connections

        # No secrets or internals: not the Redis URL, not a token or its digest.
        text = (await http.get("/status", headers=JSON)).text
        settings = running.hub.settings
        assert redis_url not in text
        for holder in [*settings.sources, *settings.subscribers]:
            assert holder.token_sha256 not in text
        for token in (TOKEN_A, TOKEN_B, MIRROR_1):
            assert token not in text


async def test_a_private_topic_is_listed_only_with_its_subscriber_token(
    redis_url: str, prefix: str
) -> None:
    async with edge_hub(redis_url, prefix) as (_, http):
        anonymous = await status_json(http)
        assert topic_row(anonymous, PUBLIC) is not None
        assert topic_row(anonymous, PRIVATE) is None
        assert topic_row(await status_json(http, MIRROR_2), PRIVATE) is None
        assert topic_row(await status_json(http, "not-a-token"), PRIVATE) is None
        row = topic_row(await status_json(http, MIRROR_1), PRIVATE)
        assert row is not None and row["private"] is True

        page = await http.get("/status")
        assert PUBLIC in page.text and PRIVATE not in page.text
        page = await http.get("/status", headers=bearer(MIRROR_1))
        assert PRIVATE in page.text


async def test_the_metrics_token_is_needed_when_set(redis_url: str, prefix: str) -> None:
    async with edge_hub(redis_url, prefix, metrics_token=True) as (_, http):
        for headers in ({}, bearer("wrong"), bearer(MIRROR_1)):
            for accept in ({}, JSON):
                reply = await http.get("/status", headers=headers | accept)
                assert reply.status_code == 401, reply.text
                assert reply.headers["www-authenticate"].startswith("Bearer")
                assert PUBLIC not in reply.text
        data = await status_json(http, METRICS_TOKEN)
        # The metrics token's holder sees every topic, as on /metrics.
        assert {t["name"] for t in data["topics"]} == {PRIVATE, PUBLIC}
        page = await http.get("/status", headers=bearer(METRICS_TOKEN))
        assert page.status_code == 200


async def test_the_page_is_html_with_the_topics_and_figures(redis_url: str, prefix: str) -> None:
    async with edge_hub(redis_url, prefix) as (_, http):
        times = Times()
        body = change_fragment(
            ("http://example.com/a", "created", times.next()),
            ("http://example.com/b", "created", times.next()),
        )
        reply = await http.post(f"/topics/{PUBLIC}/changes", content=body, headers=auth(TOKEN_A))
        assert reply.status_code == 202, reply.text
        page = await http.get("/status", headers={"Accept": "text/html,*/*;q=0.8"})
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert page.headers["cache-control"] == "no-store"
        card = page.text.split(f'<section class="topic" data-topic="{PUBLIC}">')[1]
        card = card.split("</section>")[0]
        assert '<td data-field="stream_length">2</td>' in card
        assert '<td data-process="redis">ok</td>' in page.text


def test_the_renderer_escapes_every_value() -> None:
    hostile = '<script>alert("x")</script>'
    attr = '"><img src=x onerror=alert(1)>'
    status = {
        "generated": hostile,
        "process": {"redis": hostile, "uptime_s": attr},
        "topics": [
            {
                "name": attr,
                "private": False,
                "stream_length": hostile,
                "last_change": attr,
                "open_list": {"entries": hostile, "age_s": None},
                "retention": {"oldest_change": hostile},
            }
        ],
    }
    page = render_html(status)
    assert hostile not in page and attr not in page
    assert "<img" not in page
    assert page.count("<script>") == 1  # the page's own script only
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    assert 'data-topic="&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"' in page


async def test_redis_unavailable_is_said_without_internals() -> None:
    """A real client of a port nothing listens on: the page says "unavailable", the figures
    of the store are null, and neither the address nor the error text appears."""
    redis = Redis.from_url("redis://127.0.0.1:1", socket_connect_timeout=2)
    try:
        metrics = HubMetrics()
        metrics.declare_topics(["t1"])
        data = await collect(
            TopicStore(redis),
            metrics.registry,
            [TopicRef("t1", False)],
            started_monotonic=0.0,
            now_us=1_700_000_000_000_000,
        )
    finally:
        await redis.aclose()
    assert data["process"]["redis"] == "unavailable"
    assert "push_connections" not in data["process"]
    assert data["topics"][0]["stream_length"] is None
    assert data["topics"][0]["subscribers"] == 0
    page = render_html(data)
    assert "127.0.0.1" not in page and "refused" not in page.lower()
