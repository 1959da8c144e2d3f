"""The push channel of a real hub read by the subscriber's own client (``push_changes``) as
well as by raw WebSocket clients: resume by position, history-insufficient after trimming and
on an epoch mismatch, private topics, protocol errors, and the resume positions at shutdown."""

from __future__ import annotations

import asyncio
import hashlib
import json
from contextlib import aclosing
from typing import Any

import httpx
import pytest
from redis.asyncio import Redis
from websockets.asyncio.client import connect

from rspush.hub.server import RunningHub
from rspush.hub.settings import Settings, Subscriber, Topic
from rspush.protocol import (
    CloseCode,
    TopicRequest,
)
from rspush.resourcesync import parse_document
from rspush.resourcesync.w3cdt import format_w3c_datetime, parse_w3c_datetime
from rspush.subscriber.push import (
    Change,
    HistoryInsufficientError,
    PushError,
    RefusedError,
    push_changes,
)
from tests.support.fragments import Times
from tests.support.hubs import HubFactory
from tests.support.push import (
    Client,
    assert_contiguous,
    batch,
    custom_hub,
    meta,
    post,
    stream,
    subscribed,
)
from tests.support.waiting import eventually


async def collect(url: str, topics: list[TopicRequest], count: int, **options: Any) -> list[Change]:
    """The first ``count`` changes :func:`push_changes` yields (then it is closed)."""
    got: list[Change] = []
    async with aclosing(push_changes(url, topics, **options)) as items, asyncio.timeout(10):
        async for item in items:
            if isinstance(item, Change):
                got.append(item)
                if len(got) == count:
                    break
    return got


async def test_resume_by_position_is_exclusive(hub: RunningHub, client: httpx.AsyncClient) -> None:
    assert hub.push_url is not None
    times = Times()
    sent = batch(times, "r", 5)
    receipt = await post(client, sent)
    async with subscribed(hub.push_url, [{"topic": "dataset1", "position": "0-0"}]) as everything:
        await eventually(lambda: len(everything.changes()) == 5)
    positions = everything.positions()
    assert positions[-1] == receipt["last"]

    resume = {"topic": "dataset1", "position": positions[2], "epoch": receipt["epoch"]}
    async with subscribed(hub.push_url, [resume]) as sub:
        [ack] = sub.control("subscribed")
        assert ack["position"] == positions[2]
        await eventually(lambda: len(sub.changes()) >= 2)
        more = batch(times, "after", 2)
        await post(client, more)
        await eventually(lambda: len(sub.changes()) >= 4)
        await asyncio.sleep(0.05)
        assert [c["loc"] for c in sub.changes()] == [loc for loc, _, _ in sent[3:] + more]
        assert sub.positions()[:2] == positions[3:]
        assert_contiguous(sub.frames, first_from=sent[2][2])

    # At the tail: nothing to replay, then live.
    tail = {"topic": "dataset1", "position": receipt["last"], "epoch": receipt["epoch"]}
    async with subscribed(hub.push_url, [tail]) as sub:
        await eventually(lambda: len(sub.changes()) >= 2)  # the two posted after
        assert [c["loc"] for c in sub.changes()] == [loc for loc, _, _ in more]

    # Through the client library, without an epoch.
    got = await collect(hub.push_url, [TopicRequest(topic="dataset1", position=positions[3])], 3)
    assert [c.loc for c in got] == [sent[4][0], more[0][0], more[1][0]]
    assert got[0].position == positions[4]
    assert got[0].epoch == receipt["epoch"] and got[0].topic == "dataset1"


@pytest.mark.timeout(60)
async def test_history_insufficient_after_trimming(
    hub_factory: HubFactory, redis: Redis, prefix: str
) -> None:
    async with (
        hub_factory(changelist_max_entries=3, retention_s=0) as running,
        httpx.AsyncClient(base_url=running.url, timeout=30) as http,
    ):
        assert running.push_url is not None
        times = Times()
        sent = batch(times, "h", 10)
        receipts = [await post(http, [change]) for change in sent]
        positions = [r["last"] for r in receipts]
        epoch = receipts[0]["epoch"]
        # Three lists of three close; their nine changes leave the stream.

        async def trimmed() -> bool:
            return (await meta(redis, prefix)).get("trimmed_through") == positions[8]

        await eventually(trimmed, what="stream trimmed")
        assert [p for p, _ in await stream(redis, prefix)] == positions[9:]
        archive = f"{running.hub.settings.hub.base_url}/topics/dataset1/changelist-archive.xml"

        async def refused(topic: dict[str, Any]) -> dict[str, Any]:
            async with subscribed(running.push_url or "", [topic], wait=False) as sub:
                code, _ = await sub.ended()
                assert code == CloseCode.HISTORY_INSUFFICIENT == 4003
                [reply] = sub.messages
                assert sub.control("subscribed") == []
                return reply

        reply = await refused({"topic": "dataset1", "position": "0-0"})
        assert reply == {
            "type": "history-insufficient",
            "topic": "dataset1",
            "reason": "trimmed",
            "epoch": epoch,
            "oldest": positions[9],
            "after": positions[8],  # the last trimmed: everything after it is in the stream
            "after_time": format_w3c_datetime(parse_w3c_datetime(sent[8][2])),
            "archive": archive,
        }
        reply = await refused({"topic": "dataset1", "position": positions[7], "epoch": epoch})
        assert reply["reason"] == "trimmed" and reply["oldest"] == positions[9]
        # From a date whose changes were trimmed.
        reply = await refused({"topic": "dataset1", "since": "2000-01-01T00:00:00Z"})
        assert reply["reason"] == "trimmed" and reply["archive"] == archive
        # Epoch changed (whatever the position).
        reply = await refused({"topic": "dataset1", "position": positions[9], "epoch": "0" * 16})
        assert reply["reason"] == "epoch-changed"
        assert reply["epoch"] == epoch
        assert reply["oldest"] == positions[9]
        assert reply["archive"] == archive

        # The last trimmed position itself is fine: everything after it is still there.
        ok = {"topic": "dataset1", "position": positions[8], "epoch": epoch}
        async with subscribed(running.push_url, [ok]) as sub:
            await eventually(lambda: len(sub.changes()) == 1)
            assert sub.positions() == positions[9:]

        # The archive the reply names does hold the trimmed changes.
        archive_doc = parse_document((await http.get(archive)).content)
        assert len(archive_doc.entries) == 3

        # The client library raises a typed error carrying the reply.
        with pytest.raises(HistoryInsufficientError) as caught:
            async for _ in push_changes(
                running.push_url, [TopicRequest(topic="dataset1", position="0-0", epoch=epoch)]
            ):
                pass
        assert caught.value.code == 4003
        assert caught.value.info["oldest"] == positions[9]
        assert archive in str(caught.value)


async def test_epoch_mismatch_on_an_untrimmed_stream(
    hub: RunningHub, client: httpx.AsyncClient
) -> None:
    assert hub.push_url is not None
    receipt = await post(client, batch(Times(), "e", 2))
    request = {"topic": "dataset1", "position": receipt["first"], "epoch": "feedfacefeedface"}
    async with subscribed(hub.push_url, [request], wait=False) as sub:
        code, _ = await sub.ended()
    assert code == 4003
    [reply] = sub.messages
    assert reply["type"] == "history-insufficient"
    assert reply["reason"] == "epoch-changed"
    assert reply["epoch"] == receipt["epoch"]
    assert reply["oldest"] == receipt["first"]
    assert reply["archive"].endswith("/topics/dataset1/changelist-archive.xml")
    with pytest.raises(HistoryInsufficientError) as caught:
        async for _ in push_changes(
            hub.push_url,
            [TopicRequest(topic="dataset1", position=receipt["first"], epoch="feedfacefeedface")],
        ):
            pass
    assert caught.value.info["reason"] == "epoch-changed"


async def test_private_topics_need_a_token(redis_url: str, prefix: str) -> None:
    async with custom_hub(redis_url, prefix, _private) as (running, http):
        url = running.push_url
        assert url is not None
        # No token.
        code, reason, messages = await _refusal(url)
        assert code == CloseCode.UNAUTHORISED == 4001
        assert reason and "private" in reason
        [error] = messages
        assert error["type"] == "error" and error["error"] == "unauthorised"
        # A wrong token.
        code, _, messages = await _refusal(url, token="not-the-token")
        assert code == 4001
        assert messages[0]["error"] == "unauthorised"
        # The private topic in a subscription with a public one: all refused.
        code, _, messages = await _refusal(url, [{"topic": "dataset2"}, {"topic": "dataset1"}])
        assert code == 4001
        assert [m["type"] for m in messages] == ["error"]
        # A public topic needs no token.
        async with subscribed(url, [{"topic": "dataset2"}]) as public:
            assert public.control("subscribed")[0]["topic"] == "dataset2"
        # The right token.
        times = Times()
        async with subscribed(
            url, [{"topic": "dataset1"}, {"topic": "dataset2"}], token=SUBSCRIBER_TOKEN
        ) as sub:
            await post(http, batch(times, "secret", 2))
            await eventually(lambda: len(sub.changes()) == 2)
            assert [c["loc"] for c in sub.changes()] == [
                "http://example.com/secret/0",
                "http://example.com/secret/1",
            ]
        # The client library.
        with pytest.raises(RefusedError, match="unauthorised"):
            async for _ in push_changes(url, [TopicRequest(topic="dataset1")], token="wrong"):
                pass
        request = TopicRequest(topic="dataset1", position="0-0")
        got = await collect(url, [request], 2, token=SUBSCRIBER_TOKEN)
        assert [c.loc for c in got] == [
            "http://example.com/secret/0",
            "http://example.com/secret/1",
        ]


async def test_unknown_topic_and_protocol_errors(hub: RunningHub) -> None:
    url = hub.push_url
    assert url is not None
    code, reason, messages = await _refusal(url, [{"topic": "nope"}])
    assert code == CloseCode.UNKNOWN_TOPIC == 4004
    assert reason and "nope" in reason
    assert messages == [
        {"type": "error", "error": "unknown-topic", "message": reason},
    ]
    with pytest.raises(RefusedError, match="unknown-topic"):
        async for _ in push_changes(url, [TopicRequest(topic="nope")]):
            pass

    for raw in (
        "hello",
        '{"type": "subscribe"}',
        # A version this hub does not speak (it speaks 1 and 2), and framework frames asked
        # for in version 1.
        '{"type": "subscribe", "version": 3, "topics": [{"topic": "dataset1"}]}',
        '{"type": "subscribe", "version": 1, "framework": true, "topics": [{"topic": "dataset1"}]}',
        '{"type": "subscribe", "topics": [{"topic": "dataset1", "position": "soon"}]}',
    ):
        code, reason, messages = await _refusal(url, raw=raw)
        assert code == CloseCode.PROTOCOL_ERROR == 4000, raw
        assert reason, raw
        assert messages and messages[0]["type"] == "error", raw
        assert messages[0]["error"] == "protocol-error"


async def test_shutdown_closes_with_resume_positions(hub_factory: HubFactory) -> None:
    times = Times()
    items: list[Change | dict[str, Any]] = []

    async def library(url: str) -> PushError | None:
        try:
            async for item in push_changes(url, [TopicRequest(topic="dataset1")]):
                items.append(item)
        except PushError as exc:
            return exc
        return None

    async with (
        hub_factory() as running,
        httpx.AsyncClient(base_url=running.url, timeout=30) as http,
    ):
        assert running.push_url is not None
        receipt = await post(http, batch(times, "s", 3))
        ws = await connect(running.push_url, open_timeout=10)
        request = {
            "type": "subscribe",
            "topics": [{"topic": "dataset1", "position": "0-0"}, {"topic": "dataset2"}],
        }
        await ws.send(json.dumps(request))
        sub = Client(ws)
        other = asyncio.create_task(library(running.push_url))
        await eventually(lambda: len(sub.changes()) == 3 and len(items) == 1)
    # Leaving the block stopped the hub.
    try:
        code, reason = await sub.ended()
    finally:
        await ws.close()
    assert code == CloseCode.SHUTDOWN == 1001
    assert reason is not None
    assert json.loads(reason) == {"dataset1": receipt["last"], "dataset2": "0-0"}
    error = await other
    assert isinstance(error, PushError) and error.code == 1001
    assert items == [
        {
            "type": "subscribed",
            "topic": "dataset1",
            "epoch": receipt["epoch"],
            "position": receipt["last"],
        }
    ]


SUBSCRIBER_TOKEN = "token-of-mirror-1"


def _private(settings: Settings) -> Settings:
    return settings.model_copy(
        update={
            "topics": [Topic(name="dataset1", private=True), Topic(name="dataset2")],
            "subscribers": [
                Subscriber(
                    name="mirror-1",
                    token_sha256=hashlib.sha256(SUBSCRIBER_TOKEN.encode()).hexdigest(),
                    topics=["dataset1"],
                )
            ],
        }
    )


async def _refusal(
    url: str, topics: list[dict[str, Any]] | None = None, **options: Any
) -> tuple[int | None, str | None, list[dict[str, Any]]]:
    async with subscribed(url, topics, wait=False, **options) as sub:
        code, reason = await sub.ended()
    return code, reason, sub.messages
