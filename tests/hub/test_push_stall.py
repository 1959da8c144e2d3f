"""The push endpoint under a stall attack (docs/protocol.md, "Limits and slow consumers"):
a hub in a child process (``rs-hub serve``, so its memory is its own), a topic with enough
history to make every replay large, 200 WebSocket clients with tiny receive buffers that
subscribe — half replaying from ``0-0``, half live — and never read, while a Source keeps
posting and a few healthy subscribers measure acceptance-to-receipt latency.

Asserted: the hub's RSS stays under a stated bound, every stalled client is closed as a slow
consumer (4002) within a deadline with a resume map that loses nothing, the subscriber gauge
counted the stalled clients, and the healthy subscribers' p99 latency stays under a bound.
The figures are printed (``pytest -s``).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from rspush.hub.auth import token_sha256
from rspush.resourcesync.w3cdt import format_w3c_datetime
from tests.support.fragments import TOKEN_A, auth, change_fragment
from tests.support.waiting import TIMEOUT_SCALE, eventually

HISTORY = 10_000
STALLED = 200
HEALTHY = 4
SEND_BUFFER = 64 * 1024
STALL_TIMEOUT_S = 3.0
# Long enough for every stalled client to read up to its close frame once the test lets it.
CLOSE_TIMEOUT_S = 30.0
PADDING = "p" * 100
POST_EVERY_S = 0.1
POST_CHANGES = 200
# Healthy subscribers' p99 acceptance-to-receipt latency (200-change posts). Measured ~40 ms
# p50 and ~60 ms p99 without the attack, ~125 ms p99 with it on a shared 2-core machine; an
# unbounded hub took p99 past 400 ms. Scaled on slow machines.
P99_BOUND_MS = 250 * TIMEOUT_SCALE

CONFIG = """
redis_url = "{redis_url}"
redis_prefix = "{prefix}"
host = "127.0.0.1"
port = 0

[hub]
base_url = "http://127.0.0.1:9"

[push]
port = 0
send_buffer_bytes = {send_buffer}
stall_timeout_s = {stall}
close_timeout_s = {close}
max_connections_per_address = 1000
socket_send_buffer_bytes = {send_buffer}
open_timeout_s = {open_timeout}

[limits]
max_entries_per_request = {history}
changelist_max_entries = 1000

[[topics]]
name = "dataset1"

[[sources]]
name = "a"
token_sha256 = "{token}"
topics = ["dataset1"]
"""
SERVING = r"serving \S+ on (http://127\.0\.0\.1:\d+), push on (ws://127\.0\.0\.1:\d+/)"


def rs_hub() -> list[str]:
    script = Path(sys.executable).parent / "rs-hub"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from rspush.hub.cli import app; app()"]


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def metric(text: str, name: str) -> float:
    found = re.search(rf'^{name}\{{topic="dataset1"\}} (\S+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


@asynccontextmanager
async def child_hub(
    redis_url: str,
    prefix: str,
    tmp: Path,
    *,
    fd_limit: int | None = None,
    open_timeout_s: float = 10.0,
) -> AsyncIterator[tuple[int, str, str]]:
    """``rs-hub serve`` in a child process, with at most ``fd_limit`` open descriptors:
    (pid, HTTP URL, push URL)."""
    config = tmp / "hub.toml"
    config.write_text(
        CONFIG.format(
            redis_url=redis_url,
            prefix=prefix,
            send_buffer=SEND_BUFFER,
            stall=STALL_TIMEOUT_S,
            close=CLOSE_TIMEOUT_S,
            history=max(HISTORY, POST_CHANGES),
            token=token_sha256(TOKEN_A),
            open_timeout=open_timeout_s,
        )
    )
    limit = [] if fd_limit is None else ["sh", "-c", f'ulimit -n {fd_limit} && exec "$@"', "sh"]
    log_path = tmp / "child.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("RSPUSH_")}
    with log_path.open("wb") as log:
        child = subprocess.Popen(
            # One process: its RSS and descriptors are the hub's whole.
            [*limit, *rs_hub(), "serve", "--config", str(config), "--workers", "1"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            env=env,
        )
    try:

        async def serving() -> bool:
            assert child.poll() is None, log_path.read_text()
            return re.search(SERVING, log_path.read_text()) is not None

        await eventually(serving, timeout=30, what="the child hub to start")
        found = re.search(SERVING, log_path.read_text())
        assert found is not None
        yield child.pid, found.group(1), found.group(2)
    finally:
        child.terminate()
        try:
            child.wait(timeout=20)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(timeout=10)


class Times:
    def __init__(self) -> None:
        self.now = datetime.now(UTC) - timedelta(hours=1)

    def next(self) -> str:
        self.now += timedelta(microseconds=10)
        return format_w3c_datetime(self.now)


def changes(times: Times, name: str, count: int) -> list[tuple[str, str, str]]:
    return [
        (f"http://example.com/{PADDING}/{name}/{i}", "created", times.next()) for i in range(count)
    ]


async def stalled_client(url: str, position: str | None) -> ClientConnection:
    """Handshake and subscribe with a tiny receive buffer, then stop reading."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    host, port = url.removeprefix("ws://").strip("/").split(":")
    await asyncio.get_running_loop().sock_connect(sock, (host, int(port)))
    ws = await connect(url, sock=sock, max_size=None, compression=None, open_timeout=30)
    assert ws.transport is not None
    ws.transport.pause_reading()
    topic: dict[str, Any] = {"topic": "dataset1"}
    if position is not None:
        topic["position"] = position
    await ws.send(json.dumps({"type": "subscribe", "version": 1, "topics": [topic]}))
    return ws


async def read_to_end(ws: ClientConnection) -> tuple[int | None, str | None, str | None]:
    """Read everything queued, then the close: (code, reason, last position received)."""
    last = None
    try:
        async for raw in ws:
            message = json.loads(raw)
            if message["type"] == "changes":
                last = message["changes"][-1]["position"]
    except ConnectionClosed:
        pass
    return ws.close_code, ws.close_reason, last


@pytest.mark.timeout(110)
async def test_stalled_clients_are_bounded_and_closed(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    # The clients' loop measures latency: without debug mode's per-callback bookkeeping.
    asyncio.get_running_loop().set_debug(False)
    async with (
        child_hub(redis_url, prefix, tmp_path) as (pid, http_url, push_url),
        httpx.AsyncClient(base_url=http_url, timeout=30) as http,
    ):
        times = Times()
        reply = await http.post(
            "/topics/dataset1/changes",
            content=change_fragment(*changes(times, "history", HISTORY)),
            headers=auth(),
        )
        assert reply.status_code == 202, reply.text

        # The history is published as Change Lists of 1,000 (one rotation each) before the
        # attack starts: that work is the hub's, not the attack's.
        async def rotated() -> bool:
            text = (await http.get("/metrics")).text
            return metric(text, "rspush_rotations_total") >= HISTORY // 1000

        await eventually(rotated, timeout=60, what="the history's Change Lists")
        rss_before = rss_bytes(pid)

        # Healthy subscribers: acceptance (the position's milliseconds) to receipt.
        latencies: list[float] = []

        async def healthy() -> None:
            async with connect(push_url, max_size=None, compression=None) as ws:
                await ws.send(
                    json.dumps(
                        {"type": "subscribe", "version": 1, "topics": [{"topic": "dataset1"}]}
                    )
                )
                async for raw in ws:
                    message = json.loads(raw)
                    if message["type"] == "changes" and not stop.is_set():
                        now_ms = time.time() * 1000
                        for change in message["changes"]:
                            latencies.append(now_ms - int(change["position"].split("-")[0]))

        stop = asyncio.Event()
        healthy_tasks = [asyncio.create_task(healthy()) for _ in range(HEALTHY)]
        posted = 0
        post_times: list[float] = []

        async def source() -> None:
            nonlocal posted
            while not stop.is_set():
                fragment = change_fragment(*changes(times, f"live{posted}", POST_CHANGES))
                began = time.monotonic()
                reply = await http.post(
                    "/topics/dataset1/changes", content=fragment, headers=auth()
                )
                post_times.append(time.monotonic() - began)
                assert reply.status_code == 202, reply.text
                posted += 1
                await asyncio.sleep(POST_EVERY_S)  # the Source's pace, not a wait

        peak_rss = rss_before
        peak_gauge = 0.0
        slow_closes = 0.0
        gauge_now = 0.0

        async def sample() -> None:
            nonlocal peak_rss, peak_gauge, slow_closes, gauge_now
            while True:
                peak_rss = max(peak_rss, rss_bytes(pid))
                text = (await http.get("/metrics")).text
                gauge_now = metric(text, "rspush_push_subscribers")
                peak_gauge = max(peak_gauge, gauge_now)
                slow_closes = metric(text, "rspush_push_slow_consumer_closes_total")
                await asyncio.sleep(0.1)  # sampling period

        def state() -> str:
            return (
                f"closes {slow_closes:.0f}, gauge now {gauge_now:.0f} (peak {peak_gauge:.0f}), "
                f"{posted} posts, RSS {rss_bytes(pid) / 2**20:.0f} MiB"
            )

        sampler = asyncio.create_task(sample())
        poster = asyncio.create_task(source())
        try:
            await eventually(lambda: _true(peak_gauge >= HEALTHY), what="healthy subscribers")
            started = time.monotonic()
            # In waves of 20 every 0.1 s (a 2-second ramp), the pace of a modest botnet.
            clients = []
            for wave in range(0, STALLED, 20):
                clients += await asyncio.gather(
                    *(
                        stalled_client(push_url, "0-0" if i % 2 == 0 else None)
                        for i in range(wave, min(wave + 20, STALLED))
                    )
                )
                await asyncio.sleep(0.1)  # the attacker's pace
            deadline = time.monotonic() + 40 * TIMEOUT_SCALE
            while slow_closes < STALLED:
                assert time.monotonic() < deadline, f"not all stalled clients closed: {state()}"
                await asyncio.sleep(0.05)  # polling the sampler's figures
            closed_after = time.monotonic() - started
            stop.set()
            await poster
            # Now they read: each gets what was queued for it, then its 4002 close frame.
            for ws in clients:
                assert ws.transport is not None
                ws.transport.resume_reading()
            async with asyncio.timeout(60):
                ends = await asyncio.gather(*(read_to_end(ws) for ws in clients))
        finally:
            stop.set()
            sampler.cancel()
            for task in healthy_tasks:
                task.cancel()
            await asyncio.gather(poster, sampler, *healthy_tasks, return_exceptions=True)
        rss_after = rss_bytes(pid)

    codes = [code for code, _, _ in ends]
    resumed = [json.loads(reason or "{}").get("dataset1") == last for _, reason, last in ends]
    latencies.sort()
    p99 = latencies[int(len(latencies) * 0.99)] if latencies else float("inf")
    mib = 1024 * 1024
    # Per stalled connection the hub holds at most its send buffer plus one frame (a frame is
    # no larger than the send buffer) plus the replay page it is sending, encoded (1,000
    # changes of ~250 bytes); plus the connection's own objects. Bound: 200 x (2 x 64 KiB +
    # 256 KiB + 128 KiB) = 100 MiB over the RSS before the attack.
    bound = STALLED * (2 * SEND_BUFFER + 384 * 1024)
    print(
        f"\nstall suite: RSS before {rss_before / mib:.0f} MiB, peak {peak_rss / mib:.0f} MiB, "
        f"after {rss_after / mib:.0f} MiB (bound +{bound / mib:.0f} MiB); "
        f"{int(slow_closes)} slow-consumer closes in {closed_after:.1f} s; "
        f"peak subscriber gauge {peak_gauge:.0f}; close codes {dict(Counter(codes))}; "
        f"resume map = last received: {sum(resumed)}/{STALLED}; "
        f"healthy p50 {statistics.median(latencies):.1f} ms p99 {p99:.1f} ms "
        f"over {len(latencies)} receipts; {posted} posts during the attack "
        f"(median {statistics.median(post_times) * 1000:.0f} ms)"
    )
    assert peak_rss - rss_before < bound
    assert closed_after < 20 * TIMEOUT_SCALE
    assert codes == [4002] * STALLED
    assert all(resumed)
    # Replaying subscribers count too: live ones alone (and the healthy) cannot reach this.
    assert peak_gauge > HEALTHY + STALLED // 2
    assert p99 < P99_BOUND_MS


def _true(value: bool) -> Any:
    async def holds() -> bool:
        return value

    return holds()


@pytest.mark.timeout(90)
async def test_idle_sockets_past_the_descriptor_limit_do_not_starve_the_hub(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    """A hub allowed 400 descriptors (so at most 300 push sockets) and 600 idle sockets on
    its push port: it holds at most its cap, refuses the rest at once with 503, keeps serving
    HTTP, drops the idle ones after the handshake timeout, then accepts subscribers again;
    and it does not flood its log."""
    async with (
        child_hub(redis_url, prefix, tmp_path, fd_limit=400, open_timeout_s=3.0) as (
            pid,
            http_url,
            push_url,
        ),
        httpx.AsyncClient(base_url=http_url, timeout=10) as http,
    ):
        host, port = push_url.removeprefix("ws://").strip("/").split(":")
        loop = asyncio.get_running_loop()
        idle: list[socket.socket] = []
        try:
            for _ in range(600):
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.setblocking(False)
                await loop.sock_connect(sock, (host, int(port)))
                idle.append(sock)
            descriptors = len(os.listdir(f"/proc/{pid}/fd"))
            assert descriptors < 400, descriptors
            assert (await http.get("/healthz")).status_code == 200
            refused = 0
            for sock in idle:
                try:
                    answer = sock.recv(64)
                except BlockingIOError:
                    continue
                refused += answer.startswith(b"HTTP/1.1 503 ")
            assert refused >= 600 - 300, refused

            async def subscribes() -> bool:
                try:
                    async with connect(push_url, open_timeout=5) as ws:
                        await ws.send(
                            json.dumps(
                                {
                                    "type": "subscribe",
                                    "version": 1,
                                    "topics": [{"topic": "dataset1"}],
                                }
                            )
                        )
                        return json.loads(await ws.recv())["type"] == "subscribed"
                except (OSError, InvalidStatus):
                    return False

            # The idle ones are dropped after the 3 s handshake timeout: room again.
            await eventually(subscribes, timeout=20, what="a subscriber accepted again")
        finally:
            for sock in idle:
                sock.close()
        log_lines = (tmp_path / "child.log").read_text().splitlines()
        assert len(log_lines) < 50, log_lines[-20:]
