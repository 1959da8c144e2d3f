"""Deadlines: a Source that trickles (a byte a second) fails the transfer with a timeout reason
instead of holding the agent, and SIGTERM during such a transfer ends ``rs-subscribe run``
within about a second — download cancelled, temp file deleted, checkpoint committed, exit 0.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from rspush.remote.deadlines import TransferLimits
from rspush.remote.reader import DocumentReader
from rspush.subscriber.agent import Agent
from rspush.subscriber.errors import SourceError
from tests.support.agents import mirror_files
from tests.support.cli import applied, running, status_of
from tests.support.raw_servers import RawServer, trickle
from tests.support.static_source import (
    T0,
    StaticSource,
    capability_list,
    config_for,
    listed,
    running_source,
    urlset,
)
from tests.support.waiting import TIMEOUT_SCALE

SLOW_BODY = b"s" * 600
"""At a byte a second: ten minutes, far past any deadline the tests set or wait for."""


def serve_with_a_slow_resource(source: StaticSource, slow_url: str) -> dict[str, bytes]:
    """A Resource List of two resources on the Source and one on the trickling server;
    returns the two fast ones, by mirror path."""
    fast = {"/a.txt": b"alpha", "/b.txt": b"bravo"}
    for path, content in fast.items():
        source.put(path, content)
    entries = "".join(listed(source, p, c, T0) for p, c in fast.items())
    entries += f'<url><loc>{slow_url}/slow.bin</loc><rs:md length="{len(SLOW_BODY)}"/></url>'
    capability_list(source, {"resourcelist": "/resourcelist.xml"})
    source.put_document("/resourcelist.xml", urlset("resourcelist", entries, at=T0))
    return fast


def part_files(dest: Path) -> list[Path]:
    return list((dest / ".rs-subscribe").rglob("*.part"))


async def test_a_trickling_resource_fails_with_a_timeout_reason_within_its_deadline(
    tmp_path: Path,
) -> None:
    slow = RawServer(trickle(SLOW_BODY, interval=1.0))
    async with running_source() as source, slow.running() as slow_url:
        fast = serve_with_a_slow_resource(source, slow_url)
        dest = tmp_path / "mirror"
        grace, rate = 1.0, 100.0
        config = config_for(source, dest, transfer_grace=grace, min_rate=rate)
        config.maps.append((slow_url + "/", "slow"))
        events: list[dict[str, Any]] = []
        agent = Agent(config, events=events.append)
        started = time.monotonic()
        async with asyncio.timeout(30 * TIMEOUT_SCALE):
            await agent.run(baseline_only=True)
        elapsed = time.monotonic() - started
    [failed] = [e for e in events if e["event"] == "failed"]
    assert failed["uri"] == f"{slow_url}/slow.bin"
    assert "timed out" in failed["reason"] and "bytes/s" in failed["reason"]
    # A byte a second falls behind 100 bytes/s as soon as the grace is over: the transfer
    # ends then, not after its 600 bytes — and it is not tried again at once.
    assert elapsed < (grace + 3) * TIMEOUT_SCALE, elapsed
    assert slow.requests == 1
    assert mirror_files(dest) == fast
    assert part_files(dest) == []


@pytest.mark.parametrize(
    ("limits", "reason"),
    [
        (TransferLimits(grace=0.5, min_rate=100.0), "bytes/s"),
        (TransferLimits(grace=30.0, min_rate=0.5, total=1.0), "not complete after 1 s"),
    ],
)
async def test_a_trickling_document_is_a_transient_source_error(
    limits: TransferLimits, reason: str
) -> None:
    slow = RawServer(trickle(b"<urlset>" + b" " * 600, interval=1.0))
    async with slow.running() as slow_url, httpx.AsyncClient() as client:
        reader = DocumentReader(client, limits=limits)
        started = time.monotonic()
        with pytest.raises(SourceError, match=reason) as caught:
            async with asyncio.timeout(30 * TIMEOUT_SCALE):
                await reader.get(slow_url + "/changelist.xml")
        assert time.monotonic() - started < 4 * TIMEOUT_SCALE
    assert caught.value.transient


async def test_stop_while_a_document_trickles_returns_within_the_grace(tmp_path: Path) -> None:
    slow = RawServer(trickle(b"<urlset>" + b" " * 600, interval=1.0))
    async with running_source() as source, slow.running() as slow_url:
        entry = (
            f'<url><loc>{slow_url}/resourcelist.xml</loc><rs:md capability="resourcelist"/></url>'
        )
        source.put_document("/capabilitylist.xml", urlset("capabilitylist", entry))
        agent = Agent(config_for(source, tmp_path / "mirror"))
        task = asyncio.create_task(agent.run())
        try:
            async with asyncio.timeout(20 * TIMEOUT_SCALE):
                while slow.requests == 0:
                    await asyncio.sleep(0.02)
            started = time.monotonic()
            agent.stop()
            async with asyncio.timeout(10 * TIMEOUT_SCALE):
                await task
            assert time.monotonic() - started < 2 * TIMEOUT_SCALE
        finally:
            task.cancel()


async def test_sigterm_during_a_trickling_baseline_exits_0_within_2_s(tmp_path: Path) -> None:
    slow = RawServer(trickle(SLOW_BODY, interval=1.0))
    dest = tmp_path / "mirror"
    state = dest / ".rs-subscribe" / "state.sqlite"
    async with running_source() as source, slow.running() as slow_url:
        fast = serve_with_a_slow_resource(source, slow_url)
        args = [
            source.uri("/capabilitylist.xml"),
            "--dest",
            str(dest),
            "--map",
            f"{source.url}/=",
            "--map",
            f"{slow_url}/=slow",
            "--poll-interval",
            "0.1",
        ]
        async with running(tmp_path, *args) as agent:
            await agent.until(
                lambda: len(applied(agent.events, "baseline")) == len(fast) and slow.requests == 1,
                "the fast resources applied while the slow one trickles",
            )
            assert part_files(dest), "the slow download is in flight"
            started = time.monotonic()
            code = await agent.stop(signal.SIGTERM, timeout=10)
            elapsed = time.monotonic() - started
            assert code == 0, agent.log
            assert elapsed < 2 * TIMEOUT_SCALE, f"{elapsed:.1f} s to stop:\n{agent.log}"
    # The checkpoint is consistent: the baseline is not complete (the next run starts it
    # again), the two applied resources are recorded, and nothing half-downloaded is left.
    row = await status_of(state)
    assert row["baseline_at"] is None
    assert row["resources"] == len(fast)
    assert row["recent_failures"] == []
    assert part_files(dest) == []
    assert mirror_files(dest) == fast
