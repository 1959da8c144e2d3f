"""``rs-subscribe watch`` as an operator runs it: the real console script in a subprocess,
against a real hub (in this test's event loop) given only the hub's base URL."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from rspush.hub.server import RunningHub, bind, running_hub
from rspush.hub.settings import Subscriber, Topic
from tests.support.fragments import Times as SharedTimes
from tests.support.fragments import auth, change_fragment
from tests.support.hubs import make_settings

RS_SUBSCRIBE = Path(sys.executable).parent / "rs-subscribe"
SUBSCRIBER_TOKEN = "token-of-mirror-1"
START_TIMEOUT_S = 20


def Times() -> SharedTimes:  # noqa: N802 - reads like the class it makes
    """Change times 250 ms apart: the watcher's lines show distinct, readable datetimes."""
    return SharedTimes(timedelta(milliseconds=250))


async def post(
    http: httpx.AsyncClient, changes: list[tuple[str, str, str]], body: bytes | None = None
) -> dict[str, Any]:
    reply = await http.post(
        "/topics/dataset1/changes", content=body or change_fragment(*changes), headers=auth()
    )
    assert reply.status_code == 202, reply.text
    receipt: dict[str, Any] = reply.json()
    return receipt


class Watch:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.stderr: list[str] = []

    async def subscribed(self) -> str:
        """Wait for the 'subscribed' note on stderr; return it."""
        assert self.process.stderr is not None
        async with asyncio.timeout(START_TIMEOUT_S):
            while True:
                line = (await self.process.stderr.readline()).decode()
                if not line:
                    pytest.fail(f"watch exited before subscribing: {''.join(self.stderr)}")
                self.stderr.append(line)
                if "subscribed to" in line:
                    return line

    async def lines(self, count: int, timeout: float = 10) -> list[dict[str, Any]]:
        assert self.process.stdout is not None
        lines = []
        async with asyncio.timeout(timeout):
            for _ in range(count):
                line = await self.process.stdout.readline()
                assert line.endswith(b"\n"), f"watch stopped: {''.join(self.stderr)}"
                lines.append(json.loads(line))
        return lines


@asynccontextmanager
async def watching(*args: str, env: dict[str, str] | None = None) -> AsyncIterator[Watch]:
    """``rs-subscribe watch ARGS`` until the block ends; then it is killed (it runs until the
    channel closes)."""
    process = await asyncio.create_subprocess_exec(
        RS_SUBSCRIBE,
        "watch",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    try:
        yield Watch(process)
    finally:
        if process.returncode is None:
            process.kill()
        await process.communicate()


async def run_watch(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """Run a watch that is expected to exit by itself: (exit status, stdout, stderr)."""
    process = await asyncio.create_subprocess_exec(
        RS_SUBSCRIBE,
        "watch",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    try:
        async with asyncio.timeout(START_TIMEOUT_S):
            out, err = await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


REQUIRED = {"topic", "epoch", "position", "loc", "change", "datetime"}


@pytest.mark.timeout(60)
async def test_watch_prints_live_changes(hub: RunningHub, client: httpx.AsyncClient) -> None:
    times = Times()
    async with watching(hub.url, "--topic", "dataset1") as watch:
        note = await watch.subscribed()
        assert "dataset1" in note
        sent = [
            ("http://example.com/a", "created", times.next()),
            ("http://example.com/b", "created", times.next()),
            ("http://example.com/a", "deleted", times.next()),
        ]
        receipts = [await post(client, [sent[0]]), await post(client, sent[1:])]
        lines = await watch.lines(3)
    for line in lines:
        assert line.keys() >= REQUIRED
        assert line["topic"] == "dataset1"
        assert line["epoch"] == receipts[0]["epoch"]
    assert [(x["loc"], x["change"], x["datetime"]) for x in lines] == sent
    assert [x["position"] for x in lines] == [
        receipts[0]["first"],
        receipts[1]["first"],
        receipts[1]["last"],
    ]
    assert lines[0]["length"] == len("http://example.com/a")
    assert lines[0]["type"] == "text/plain"


def rich_fragment(times: Times) -> tuple[bytes, list[str]]:
    """Changes with every optional attribute the JSON form carries."""
    locs = [f"http://example.com/rich/{i}" for i in range(4)]
    urls = []
    for i, loc in enumerate(locs):
        when = times.next(timedelta(milliseconds=1500))  # fractional seconds too
        urls.append(
            f"<url><loc>{loc}</loc><lastmod>{when}</lastmod>"
            f'<rs:md change="{"deleted" if i == 3 else "updated"}" datetime="{when}"'
            f' hash="md5:1584abdf8ebdc9802ac0c6a7402c03b6" length="{100 + i}"'
            f' type="text/html" encoding="gzip"/>'
            f'<rs:ln rel="duplicate" href="http://mirror.example.com/rich/{i}"'
            f' pri="{i + 1}"/></url>'
        )
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
        'xmlns:rs="http://www.openarchives.org/rs/terms/">'
        f'<rs:md capability="changelist"/>{"".join(urls)}</urlset>'
    ).encode()
    return body, locs


@pytest.mark.timeout(60)
async def test_watch_resumes_from_a_position_or_a_datetime(
    hub: RunningHub, client: httpx.AsyncClient
) -> None:
    times = Times()
    first = await post(client, [("http://example.com/first", "created", times.next())])
    body, locs = rich_fragment(times)
    receipt = await post(client, [], body=body)
    epoch = receipt["epoch"]

    # From the first change's position (exclusive): the four rich changes.
    async with watching(
        hub.url, "--topic", "dataset1", "--since", first["last"], "--epoch", epoch
    ) as watch:
        await watch.subscribed()
        as_json = await watch.lines(4)
    assert [x["loc"] for x in as_json] == locs
    assert as_json[0]["hash"] == "md5:1584abdf8ebdc9802ac0c6a7402c03b6"
    assert as_json[0]["lastmod"] == as_json[0]["datetime"]
    assert as_json[0]["encoding"] == "gzip"
    assert as_json[1]["links"] == [
        {"rel": "duplicate", "href": "http://mirror.example.com/rich/1", "pri": 2}
    ]
    assert as_json[-1]["position"] == receipt["last"]
    assert all(x.keys() >= REQUIRED for x in as_json)

    # The same through XML frames: the same lines.
    async with watching(
        hub.url,
        "--topic",
        "dataset1",
        "--since",
        first["last"],
        "--epoch",
        epoch,
        "--format",
        "xml",
    ) as watch:
        await watch.subscribed()
        as_xml = await watch.lines(4)
    assert as_xml == as_json

    # From a datetime (inclusive): the change at that time and everything after it.
    async with watching(hub.url, "--topic", "dataset1", "--since", as_json[2]["datetime"]) as w:
        await w.subscribed()
        since = await w.lines(2)
    assert since == as_json[2:]


async def test_watch_wrong_epoch_names_the_archive(
    hub: RunningHub, client: httpx.AsyncClient
) -> None:
    receipt = await post(client, [("http://example.com/x", "created", Times().next())])
    status, out, err = await run_watch(
        hub.url, "--topic", "dataset1", "--since", receipt["first"], "--epoch", "0" * 16
    )
    assert status == 3
    assert out == ""
    assert "history insufficient" in err
    assert "epoch-changed" in err
    assert f"{hub.hub.settings.hub.base_url}/topics/dataset1/changelist-archive.xml" in err


async def test_watch_usage_errors(hub: RunningHub) -> None:
    status, out, err = await run_watch(hub.url, "--topic", "nope")
    assert status == 2
    assert out == ""
    assert "no topic 'nope'" in err and "dataset1" in err and "dataset2" in err
    # Two topics and none chosen.
    status, _, err = await run_watch(hub.url)
    assert status == 2
    assert "--topic" in err
    status, _, err = await run_watch(hub.url, "--topic", "dataset1", "--format", "csv")
    assert status == 2
    status, _, err = await run_watch(hub.url, "--topic", "dataset1", "--since", "yesterday")
    assert status == 2
    assert "yesterday" in err


@pytest.mark.timeout(60)
async def test_watch_private_topic_needs_a_token(redis_url: str, prefix: str) -> None:
    sock = bind("127.0.0.1", 0)
    settings = make_settings(redis_url, prefix, f"http://127.0.0.1:{sock.getsockname()[1]}")
    settings = settings.model_copy(
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
    async with running_hub(settings, sock=sock) as running:
        # Without a subscriber's token the private topic is not even listed: discovery
        # fails (status 2) and says why it may be missing.
        status, out, err = await run_watch(running.url, "--topic", "dataset1")
        assert status == 2
        assert out == ""
        assert "no topic 'dataset1'" in err and "--token" in err
        status, _, err = await run_watch(running.url, "--topic", "dataset1", "--token", "bad")
        assert status == 2
        async with (
            httpx.AsyncClient(base_url=running.url, timeout=30) as http,
            watching(
                running.url,
                "--topic",
                "dataset1",
                env={"RSPUSH_SUBSCRIBER_TOKEN": SUBSCRIBER_TOKEN},
            ) as watch,
        ):
            await watch.subscribed()
            receipt = await post(http, [("http://example.com/p", "created", Times().next())])
            [line] = await watch.lines(1)
            assert line["position"] == receipt["last"]
