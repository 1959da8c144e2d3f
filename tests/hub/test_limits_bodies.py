"""Authenticated abuse of the ingest endpoints: bodies that never end, more big bodies at once
than the memory budget holds, huge fragments, and values the schemas refuse. Real sockets and
a real hub on loopback; every refusal writes nothing."""

from __future__ import annotations

import asyncio
import contextlib
import resource
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from bench.harness.hub import AUTH as HUB_AUTH
from bench.harness.hub import hub_config
from bench.harness.system import free_port, stop_process
from rspush.hub.server import RunningHub
from tests.support.fragments import TOKEN_A, auth, change_fragment, iso
from tests.support.hubs import HubFactory
from tests.support.rejections import Clock, Unchanged, seeded
from tests.support.sockets import close_stream
from tests.support.waiting import TIMEOUT_SCALE

BODY_TIMEOUT_S = 1.0
HEALTHZ_BOUND_S = 0.25


def address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


def head(length: int | None = None, *, chunked: bool = False) -> bytes:
    lines = [
        "POST /topics/dataset1/changes HTTP/1.1",
        "Host: x",
        f"Authorization: Bearer {TOKEN_A}",
        "Content-Type: application/xml",
    ]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    if chunked:
        lines.append("Transfer-Encoding: chunked")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def response_and_close(reader: asyncio.StreamReader) -> bytes:
    """What the server sent before closing. A server that closes while the client is still
    sending resets the connection (RFC 9293 §3.6.1), which may cut the response short."""
    received = b""
    try:
        while chunk := await reader.read(65536):
            received += chunk
    except ConnectionResetError:
        pass
    return received


@asynccontextmanager
async def seeded_client(running: RunningHub) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=running.url, timeout=30) as client:
        await seeded(client, Clock())
        yield client


@pytest.mark.timeout(60)
async def test_a_content_length_lie_is_cut_at_the_body_deadline(
    hub_factory: HubFactory, redis_url: str, prefix: str
) -> None:
    async with (
        hub_factory(body_timeout_s=BODY_TIMEOUT_S) as running,
        seeded_client(running),
        Unchanged(redis_url, prefix),
    ):
        reader, writer = await asyncio.open_connection(*address(running.url))
        try:
            writer.write(head(100_000) + b"<?xml version='1.0'?><urlset")
            started = time.monotonic()
            async with asyncio.timeout(BODY_TIMEOUT_S + 3 * TIMEOUT_SCALE):
                received = await response_and_close(reader)
            assert time.monotonic() - started >= BODY_TIMEOUT_S * 0.9
        finally:
            await close_stream(writer)
        assert received.startswith(b"HTTP/1.1 408 "), received[:200]
        assert b'"error":"body-timeout"' in received


@pytest.mark.timeout(60)
async def test_an_endless_chunked_body_is_cut_at_the_body_deadline(
    hub_factory: HubFactory, redis_url: str, prefix: str
) -> None:
    async with (
        hub_factory(body_timeout_s=BODY_TIMEOUT_S) as running,
        seeded_client(running),
        Unchanged(redis_url, prefix),
    ):
        reader, writer = await asyncio.open_connection(*address(running.url))

        async def endless() -> None:
            writer.write(head(chunked=True))
            try:
                while True:  # a 64-byte chunk every 20 ms: never idle, never done
                    writer.write(b"40\r\n" + b"x" * 64 + b"\r\n")
                    await writer.drain()
                    await asyncio.sleep(0.02)
            except (ConnectionError, OSError):
                return

        sender = asyncio.create_task(endless())
        try:
            async with asyncio.timeout(BODY_TIMEOUT_S + 3 * TIMEOUT_SCALE):
                received = await response_and_close(reader)
        finally:
            sender.cancel()
            await asyncio.gather(sender, return_exceptions=True)
            await close_stream(writer)
        # Closed at the deadline; the 408 arrives unless the close reset the connection.
        assert received == b"" or received.startswith(b"HTTP/1.1 408 "), received[:200]


@pytest.mark.timeout(90)
async def test_concurrent_big_bodies_stay_within_the_budget(
    hub_factory: HubFactory, redis_url: str, prefix: str
) -> None:
    size = 900_000
    async with hub_factory(
        max_body_bytes=1_000_000,
        body_budget_bytes=2_000_000,
        body_timeout_s=30,
        keepalive_timeout_s=1,
    ) as running:
        budget = running.hub.body_budget
        async with seeded_client(running), Unchanged(redis_url, prefix):
            opened = [await asyncio.open_connection(*address(running.url)) for _ in range(8)]
            replies = [asyncio.create_task(response_and_close(r)) for r, _ in opened]
            try:
                # Eight declare 900 kB each: the hub reserves a declared length before reading
                # the body, and only two fit in 2 MB.
                for _, writer in opened:
                    writer.write(head(size))
                async with asyncio.timeout(10 * TIMEOUT_SCALE):
                    while sum(task.done() for task in replies) < 6:
                        await asyncio.wait(replies, return_when=asyncio.FIRST_COMPLETED)
                refused = [task.result() for task in replies if task.done()]
                assert len(refused) == 6
                assert all(r.startswith(b"HTTP/1.1 503 ") for r in refused), refused[0][:200]
                assert all(b"retry-after: 1" in r.lower() for r in refused)
                assert budget.held == 2 * size
                admitted = [i for i, task in enumerate(replies) if not task.done()]
                for i in admitted:  # they finish their bodies: not XML, so 400
                    opened[i][1].write(b"<" * size)
                async with asyncio.timeout(10 * TIMEOUT_SCALE):
                    finished = await asyncio.gather(*(replies[i] for i in admitted))
                assert all(f.startswith(b"HTTP/1.1 400 ") for f in finished), finished
            finally:
                for task in replies:
                    task.cancel()
                await asyncio.gather(*replies, return_exceptions=True)
                for _, writer in opened:
                    writer.close()
                    with contextlib.suppress(OSError):
                        await writer.wait_closed()
            assert budget.peak <= budget.limit == 2_000_000
            assert budget.held == 0


@pytest.mark.timeout(60)
async def test_chunked_bodies_count_against_the_budget_as_they_arrive(
    hub_factory: HubFactory,
) -> None:
    async with hub_factory(
        max_body_bytes=1_000_000, body_budget_bytes=1_000_000, body_timeout_s=30
    ) as running:
        budget = running.hub.body_budget
        opened = [await asyncio.open_connection(*address(running.url)) for _ in range(3)]
        chunk = b"<" * 400_000
        try:
            for _, writer in opened:
                writer.write(head(chunked=True) + b"%x\r\n" % len(chunk) + chunk + b"\r\n")
            # 3 x 400 kB do not fit in 1 MB: one of them is refused (and closed).
            replies = [asyncio.create_task(response_and_close(r)) for r, _ in opened]
            try:
                async with asyncio.timeout(10 * TIMEOUT_SCALE):
                    done, _ = await asyncio.wait(replies, return_when=asyncio.FIRST_COMPLETED)
                (reply,) = [task.result() for task in done]
                assert reply == b"" or reply.startswith(b"HTTP/1.1 503 "), reply[:200]
                async with asyncio.timeout(10 * TIMEOUT_SCALE):
                    while budget.held != 2 * len(chunk):  # the other two read on
                        await asyncio.sleep(0.01)
                assert budget.peak <= budget.limit
            finally:
                for task in replies:
                    task.cancel()
                await asyncio.gather(*replies, return_exceptions=True)
        finally:
            for _, writer in opened:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()


def big_fragment(entries: int) -> bytes:
    start = datetime.now(UTC) - timedelta(minutes=4)
    return change_fragment(
        *[
            (f"http://example.com/big/{i}", "created", iso(start + timedelta(milliseconds=i)))
            for i in range(entries)
        ]
    )


@contextmanager
def hub_process(
    workdir: Path,
    topic: str,
    *,
    limits: dict[str, float] | None = None,
    open_files: int | None = None,
) -> Iterator[str]:
    """``rs-hub serve`` in its own process (embedded server under ``workdir``), optionally
    with a lower open-file limit; its URL. Its stderr goes to ``workdir/hub.log``."""
    port, push_port = free_port(), free_port()
    config = workdir / "hub.toml"
    config.write_text(hub_config(port, push_port, [topic], limits=limits))
    rs_hub = Path(sys.executable).parent / "rs-hub"

    def limit_open_files() -> None:
        if open_files is not None:
            _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, hard))

    with (workdir / "hub.log").open("wb") as log:
        process = subprocess.Popen(
            [str(rs_hub), "serve", "--config", str(config), "--port", str(port)]
            + ["--data-dir", str(workdir / "data")],
            stdout=subprocess.DEVNULL,
            stderr=log,
            preexec_fn=limit_open_files,
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30 * TIMEOUT_SCALE
        while True:
            assert process.poll() is None, "the hub exited during startup"
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base}/readyz", timeout=1, trust_env=False).status_code == 200:
                    break
            assert time.monotonic() < deadline, "the hub did not get ready"
            time.sleep(0.05)
        yield base
    finally:
        stop_process(process)


@pytest.mark.timeout(120)
async def test_healthz_answers_during_a_10000_entry_post(tmp_path: Path) -> None:
    """The hub in its own process (``rs-hub serve``), as deployed: a prober sharing the hub's
    event loop could not see the loop blocked (it would be blocked with it)."""
    body = big_fragment(10_000)
    latencies: list[float] = []
    with hub_process(tmp_path, "t1") as base:
        async with (
            httpx.AsyncClient(base_url=base, timeout=60, trust_env=False) as poster,
            httpx.AsyncClient(base_url=base, timeout=60, trust_env=False) as prober,
        ):
            await prober.get("/healthz")  # connected before the post starts
            post = asyncio.create_task(
                poster.post("/topics/t1/changes", content=body, headers=HUB_AUTH)
            )
            while not post.done():
                started = time.perf_counter()
                reply = await prober.get("/healthz")
                latencies.append(time.perf_counter() - started)
                assert reply.status_code == 200
                await asyncio.sleep(0.005)
            reply = await post
    assert reply.status_code == 202, reply.text
    assert reply.json()["accepted"] == 10_000
    worst = max(latencies)
    print(f"healthz during a 10,000-entry post: {len(latencies)} probes, worst {worst:.3f} s")
    assert worst < HEALTHZ_BOUND_S * TIMEOUT_SCALE, worst


def fragment_with(*, loc: str = "http://example.com/ok", md: str = "", ln: str = "") -> bytes:
    when = iso(datetime.now(UTC) - timedelta(minutes=1))
    good = "".join(
        f'<url><loc>http://example.com/good{i}</loc><rs:md change="created" datetime="{when}"/>'
        "</url>"
        for i in range(2)
    )
    odd = f'<url><loc>{loc}</loc><rs:md change="updated" datetime="{when}" {md}/>{ln}</url>'
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
        'xmlns:rs="http://www.openarchives.org/rs/terms/">'
        f'<rs:md capability="changelist"/>{good}{odd}</urlset>'
    ).encode()


@pytest.mark.parametrize(
    ("fragment", "rule"),
    [
        (fragment_with(loc="http://a.b"), "loc-uri"),
        (fragment_with(loc="http://example.com/" + "x" * 2030), "loc-uri"),
        (fragment_with(loc="/a/relative/resource"), "loc-uri"),
        (fragment_with(loc="not a uri at all"), "loc-uri"),
        (fragment_with(md='type="application/vnd.ms-excel"'), "type-syntax"),
        (fragment_with(ln='<rs:ln rel="alternate" href="other.html"/>'), "link-uri"),
        (fragment_with(ln='<rs:ln rel="Not A Rel" href="http://example.com/x"/>'), "rel-syntax"),
        (fragment_with(md='hash="md5:"'), "hash-syntax"),
        (fragment_with(md='modified="2024-13-01"'), "datetime-syntax"),
    ],
)
async def test_values_the_schemas_refuse_are_400_with_rule_and_entry(
    client: httpx.AsyncClient, redis_url: str, prefix: str, fragment: bytes, rule: str
) -> None:
    await seeded(client, Clock())
    async with Unchanged(redis_url, prefix):
        reply = await client.post("/topics/dataset1/changes", content=fragment, headers=auth())
    assert reply.status_code == 400, reply.text
    body = reply.json()
    assert body["error"] == "invalid-document"
    assert [(v["rule"], v["entry"]) for v in body["violations"]] == [(rule, 2)]


@pytest.mark.timeout(60)
async def test_a_body_nobody_reads_is_cut_too(hub_factory: HubFactory) -> None:
    """A post refused before its body is read (here: no token) leaves the client sending;
    the connection's own deadline ends it."""
    async with hub_factory(body_timeout_s=BODY_TIMEOUT_S) as running:
        reader, writer = await asyncio.open_connection(*address(running.url))
        try:
            writer.write(
                b"POST /topics/dataset1/changes HTTP/1.1\r\nHost: x\r\n"
                b"Content-Length: 100000\r\n\r\n<urlset"
            )
            head_ = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10 * TIMEOUT_SCALE)
            assert head_.startswith(b"HTTP/1.1 401 ")

            async def trickle() -> None:  # never idle, so no keep-alive timeout applies
                with contextlib.suppress(ConnectionError, OSError):
                    while True:
                        writer.write(b"x")
                        await writer.drain()
                        await asyncio.sleep(0.05)

            sender = asyncio.create_task(trickle())
            try:
                async with asyncio.timeout(BODY_TIMEOUT_S + 2 + 3 * TIMEOUT_SCALE):
                    await response_and_close(reader)
            finally:
                sender.cancel()
                await asyncio.gather(sender, return_exceptions=True)
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


@pytest.mark.timeout(120)
async def test_an_fd_flood_is_refused_and_the_hub_recovers(tmp_path: Path) -> None:
    """1,100 idle connections against a hub limited to 1,024 open files: the ones over its
    connection cap are refused at once, the rest closed at the head deadline; /healthz answers
    again right after, and the log does not fill with descriptor errors."""
    header_timeout_s = 2.0
    with hub_process(
        tmp_path, "t1", limits={"header_timeout_s": header_timeout_s}, open_files=1024
    ) as base:
        host, port = address(base)
        opened = []
        try:
            for _ in range(1100):
                opened.append(await asyncio.open_connection(host, port))
            started = time.monotonic()
            async with httpx.AsyncClient(base_url=base, timeout=5, trust_env=False) as client:
                deadline = started + header_timeout_s + 10 * TIMEOUT_SCALE
                while True:
                    with contextlib.suppress(httpx.HTTPError):
                        if (await client.get("/healthz")).status_code == 200:
                            break
                    assert time.monotonic() < deadline, "/healthz never answered again"
                    await asyncio.sleep(0.1)
                recovered = time.monotonic() - started
                # Ingest works too.
                reply = await client.post(
                    "/topics/t1/changes", content=big_fragment(3), headers=HUB_AUTH
                )
                assert reply.status_code == 202, reply.text
        finally:
            for _, writer in opened:
                writer.close()
            for _, writer in opened:
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
    log = (tmp_path / "hub.log").read_text(errors="replace")
    print(f"/healthz answered {recovered:.2f} s after the flood; hub log {len(log)} bytes")
    assert log.count("Too many open files") <= 10, log[-2000:]
    assert len(log) < 100_000
