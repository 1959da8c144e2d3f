"""Idempotency keys are scoped per Source and topic, and name one body: the same key with
another body is 422 (draft-ietf-httpapi-idempotency-key-header §2.7). ``rs-publish`` sends a
key derived from the body and retries lost answers, so a post the hub committed but whose
answer never arrived is written exactly once."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest
from redis.asyncio import Redis

from rspush.resourcesync import parse_document
from rspush.source.publish import MAX_RETRY_WAIT_S, backoff_s, derived_key
from tests.support.cli import RS_PUBLISH, run_script
from tests.support.edge import PRIVATE, PUBLIC, TOKEN_C, LossyProxy, edge_hub, stamped
from tests.support.fragments import TOKEN_A, Times, auth, change_fragment


async def stream_length(redis_url: str, prefix: str, topic: str) -> int:
    client = Redis.from_url(redis_url)
    try:
        return int(await client.xlen(f"{prefix}:{{{topic}}}:changes"))
    finally:
        await client.aclose()


def keyed(token: str, key: str) -> dict[str, str]:
    return {**auth(token), "Idempotency-Key": key}


async def test_keys_are_scoped_per_source_and_topic_and_name_one_body(
    redis_url: str, prefix: str
) -> None:
    times = Times()
    first = change_fragment(
        ("http://example.com/a1", "created", times.next()),
        ("http://example.com/a2", "created", times.next()),
    )
    async with edge_hub(redis_url, prefix) as (_, http):
        path = f"/topics/{PRIVATE}/changes"
        reply = await http.post(path, content=first, headers=keyed(TOKEN_A, "same-key"))
        assert reply.status_code == 202, reply.text
        receipt = reply.json()
        assert receipt["accepted"] == 2 and receipt["replayed"] is False

        # Another Source choosing the same key is another request: its change is written.
        theirs = change_fragment(("http://example.com/c1", "created", times.next()))
        reply = await http.post(path, content=theirs, headers=keyed(TOKEN_C, "same-key"))
        assert reply.status_code == 202, reply.text
        assert reply.json()["replayed"] is False and reply.json()["accepted"] == 1

        # The same Source, the same key, another body: refused, nothing written.
        other = change_fragment(("http://example.com/a3", "created", times.next()))
        reply = await http.post(path, content=other, headers=keyed(TOKEN_A, "same-key"))
        assert reply.status_code == 422, reply.text
        assert reply.json()["error"] == "idempotency-key-reused"
        assert await stream_length(redis_url, prefix, PRIVATE) == 3

        # The same body again: the first receipt.
        reply = await http.post(path, content=first, headers=keyed(TOKEN_A, "same-key"))
        assert reply.status_code == 202, reply.text
        assert reply.json() == {**receipt, "replayed": True}

        # The same Source and key on another topic: another request.
        public = change_fragment(("http://example.com/p1", "created", times.next()))
        reply = await http.post(
            f"/topics/{PUBLIC}/changes", content=public, headers=keyed(TOKEN_A, "same-key")
        )
        assert reply.status_code == 202, reply.text
        assert reply.json()["replayed"] is False
        assert await stream_length(redis_url, prefix, PRIVATE) == 3
        assert await stream_length(redis_url, prefix, PUBLIC) == 1


def test_the_derived_key_is_the_topic_and_body_and_a_valid_key() -> None:
    key = derived_key("dataset1", b"<urlset/>")
    assert key == derived_key("dataset1", b"<urlset/>")
    assert key != derived_key("dataset2", b"<urlset/>")
    assert key != derived_key("dataset1", b"<urlset />")
    assert len(key) <= 200 and key.isascii() and " " not in key


def test_backoff_doubles_is_capped_and_follows_retry_after() -> None:
    assert [backoff_s(n, 0.5) for n in range(4)] == [0.5, 1.0, 2.0, 4.0]
    assert backoff_s(30, 0.5) == MAX_RETRY_WAIT_S
    assert backoff_s(0, 0.5, "3") == 3.0
    assert backoff_s(0, 0.5, "3600") == MAX_RETRY_WAIT_S
    assert backoff_s(1, 0.5, "soon") == 1.0


async def publish(url: str, file: Path, topic: str, *extra: str) -> tuple[int, str, str]:
    return await run_script(
        RS_PUBLISH,
        str(file),
        "--hub",
        url,
        "--topic",
        topic,
        "--retry-wait",
        "0.05",
        *extra,
        env={**os.environ, "RSPUSH_TOKEN": TOKEN_A},
    )


@pytest.mark.timeout(90)
async def test_rs_publish_writes_a_post_whose_answer_was_lost_exactly_once(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    file = tmp_path / "changes.xml"
    # Hub-stamped times (no datetime): a re-post without the key would be new changes.
    file.write_bytes(stamped("http://example.com/x1", "http://example.com/x2"))
    async with (
        edge_hub(redis_url, prefix) as (running, http),
        LossyProxy(int(running.url.rsplit(":", 1)[1]), drop=1).running() as proxy,
    ):
        status, out, err = await publish(proxy.url, file, PUBLIC)
        assert status == 0, err
        assert proxy.dropped == 1 and proxy.connections == 2
        receipt = httpx.Response(200, content=out).json()
        # The first attempt was committed; its retry got the stored receipt.
        assert receipt["replayed"] is True and receipt["accepted"] == 2
        assert await stream_length(redis_url, prefix, PUBLIC) == 2
        listed = parse_document((await http.get(f"/topics/{PUBLIC}/changelist.xml")).content)
        assert [e.loc for e in listed.entries] == ["http://example.com/x1", "http://example.com/x2"]


@pytest.mark.timeout(90)
async def test_rs_publish_retries_a_503_and_gives_up_after_its_retries(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    times = Times()
    file = tmp_path / "changes.xml"
    file.write_bytes(change_fragment(("http://example.com/y1", "created", times.next())))
    async with edge_hub(redis_url, prefix) as (running, _):
        port = int(running.url.rsplit(":", 1)[1])
        async with LossyProxy(port, refuse=2).running() as proxy:
            status, out, err = await publish(proxy.url, file, PUBLIC)
            assert status == 0, err
            assert proxy.refused == 2
            assert httpx.Response(200, content=out).json()["replayed"] is False
        async with LossyProxy(port, refuse=10).running() as proxy:
            status, _, err = await publish(proxy.url, file, PUBLIC, "--retries", "2")
            assert status == 1 and "503" in err
            assert proxy.refused == 3
        assert await stream_length(redis_url, prefix, PUBLIC) == 1
