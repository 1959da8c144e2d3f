"""The bridge framework on the real store: a step's changes and its checkpoint are one atomic
write, a stale checkpoint writes nothing, no-op changes are dropped and change types follow
the topic's state; the runner backs off after errors and records what it did."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
import redis.asyncio

from rspush.hub.bridges.base import BridgeError, BridgeStep
from rspush.hub.bridges.runner import BridgeRunner, backoff_delay
from rspush.hub.metrics import HubMetrics
from rspush.hub.scripts import CheckpointSet
from rspush.hub.service import IngestService
from rspush.hub.settings import BridgeConfig, Settings, Topic
from rspush.hub.store import StaleCheckpoint, TopicStore
from rspush.resourcesync import Entry, Metadata
from rspush.resourcesync.w3cdt import to_us
from tests.support.waiting import eventually

T = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def entry(loc: str, second: int, change: str | None = None, extra: str = "") -> Entry:
    when = T.replace(second=second)
    md = Metadata(change=change, datetime=when)
    lastmod = None if change == "deleted" else when
    return Entry(loc=loc + extra, lastmod=lastmod, md=md)


@pytest.fixture
async def service(redis_url: str, prefix: str) -> AsyncIterator[IngestService]:
    settings = Settings(
        topics=[Topic(name="repo")],
        bridges=[BridgeConfig(topic="repo", kind="oai-pmh", url="http://127.0.0.1:1/oai")],
        redis_url=redis_url,
        redis_prefix=prefix,
    )
    client = redis.asyncio.Redis.from_url(redis_url)
    store = TopicStore(client, prefix=prefix)
    await store.ensure_topic("repo", now_us=to_us(T))
    yield IngestService(settings, store, HubMetrics(), clock=lambda: T.replace(hour=13))
    await client.aclose()


async def stream(service: IngestService) -> list[tuple[str, str]]:
    from rspush.protocol import ZERO

    rows = await service.store.entries_after("repo", ZERO)
    return [(r.loc, r.change) for r in rows]


async def test_changes_and_checkpoint_are_one_step(service: IngestService) -> None:
    receipt = await service.bridged(
        "repo",
        [entry("http://rp.example/a", 1), entry("http://rp.example/b", 2)],
        checkpoint=CheckpointSet(None, '{"n":1}'),
        max_entries=100,
    )
    assert receipt["accepted"] == 2
    assert (await service.store.bridge_state("repo")).checkpoint == '{"n":1}'
    # A second runner that read the old checkpoint writes nothing.
    with pytest.raises(StaleCheckpoint):
        await service.bridged(
            "repo",
            [entry("http://rp.example/c", 3)],
            checkpoint=CheckpointSet(None, '{"n":1}'),
            max_entries=100,
        )
    assert await stream(service) == [
        ("http://rp.example/a", "created"),
        ("http://rp.example/b", "created"),
    ]
    assert (await service.store.bridge_state("repo")).checkpoint == '{"n":1}'


async def test_no_ops_are_dropped_and_types_follow_the_state(service: IngestService) -> None:
    await service.bridged(
        "repo",
        [entry("http://rp.example/a", 1), entry("http://rp.example/b", 2)],
        checkpoint=CheckpointSet(None, "1"),
        max_entries=100,
    )
    # Re-read overlap: a and b unchanged (dropped), b changed later (updated), c new
    # (created), d deleted but never held (dropped), a deleted (kept).
    receipt = await service.bridged(
        "repo",
        [
            entry("http://rp.example/a", 1),
            entry("http://rp.example/b", 2),
            entry("http://rp.example/b", 4),
            entry("http://rp.example/c", 5),
            entry("http://rp.example/d", 6, "deleted"),
            entry("http://rp.example/a", 7, "deleted"),
        ],
        checkpoint=CheckpointSet("1", "2"),
        max_entries=100,
    )
    assert receipt["accepted"] == 3
    assert await stream(service) == [
        ("http://rp.example/a", "created"),
        ("http://rp.example/b", "created"),
        ("http://rp.example/b", "updated"),
        ("http://rp.example/c", "created"),
        ("http://rp.example/a", "deleted"),
    ]
    # A step of no-ops only moves the checkpoint.
    receipt = await service.bridged(
        "repo",
        [entry("http://rp.example/c", 5)],
        checkpoint=CheckpointSet("2", "3"),
        max_entries=100,
    )
    assert receipt["accepted"] == 0
    assert (await service.store.bridge_state("repo")).checkpoint == "3"


async def test_a_baseline_seeds_with_its_checkpoint(service: IngestService) -> None:
    receipt = await service.bridged(
        "repo",
        [Entry(loc="http://rp.example/a", lastmod=T), Entry(loc="http://rp.example/b", lastmod=T)],
        checkpoint=CheckpointSet(None, "b"),
        baseline=True,
        max_entries=100,
    )
    assert receipt["seeded"] == 2
    _, state = await service.store.state("repo")
    assert sorted(state) == ["http://rp.example/a", "http://rp.example/b"]
    assert (await service.store.bridge_state("repo")).checkpoint == "b"


async def test_a_baseline_from_a_checkpoint_that_moved_writes_nothing(
    service: IngestService,
) -> None:
    first = CheckpointSet(None, "b")
    seed = [Entry(loc="http://rp.example/a", lastmod=T)]
    await service.bridged("repo", seed, checkpoint=first, baseline=True, max_entries=100)
    # A second runner that read no checkpoint yet: its baseline is refused, nothing written.
    with pytest.raises(StaleCheckpoint):
        await service.bridged(
            "repo",
            [Entry(loc="http://rp.example/z", lastmod=T)],
            checkpoint=first,
            baseline=True,
            max_entries=100,
        )
    _, state = await service.store.state("repo")
    assert sorted(state) == ["http://rp.example/a"]
    assert (await service.store.bridge_state("repo")).checkpoint == "b"


class Scripted:
    """A bridge kind that plays a list of outcomes (steps, None, or errors to raise)."""

    def __init__(self, outcomes: list[object]) -> None:
        self.outcomes = outcomes
        self.seen: list[str | None] = []
        self.synced_through: datetime | None = None

    async def step(self, checkpoint: str | None) -> BridgeStep | None:
        self.seen.append(checkpoint)
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        self.synced_through = T
        return outcome  # type: ignore[return-value]


async def test_the_runner_commits_retries_and_reports(service: IngestService) -> None:
    config = service.settings.bridges[0]
    bridge = Scripted(
        [
            BridgeStep([entry("http://rp.example/a", 1)], json.dumps({"p": 1}), more=True),
            BridgeError("remote: HTTP 503", retry_after_s=7),
            BridgeStep([entry("http://rp.example/b", 2)], json.dumps({"p": 2})),
            None,
        ]
    )
    runner = BridgeRunner(
        config,
        service,
        service.store,
        service.metrics,
        lease_ttl_s=5,
        token="me",
        bridge=bridge,
        clock=lambda: T.replace(hour=14),
    )
    assert await runner.round() == 0.0  # more: at once
    assert await runner.round() >= 7  # Retry-After honoured
    assert await runner.round() == config.interval_s
    assert await runner.round() == config.interval_s  # nothing new
    assert bridge.seen == [None, '{"p": 1}', '{"p": 1}', '{"p": 2}']
    status = (await service.store.bridge_state("repo")).status
    assert status["changes"] == "2"
    assert status["errors_remote"] == "1"
    assert status["lag_s"] == "7200.0"
    assert "503" in status["last_error"]
    # Another process does not run a bridge whose lease is held.
    other = BridgeRunner(
        config,
        service,
        service.store,
        service.metrics,
        lease_ttl_s=5,
        token="other",
        bridge=Scripted([]),
    )
    assert await other.round() > 0


def test_backoff_grows_with_jitter_and_caps() -> None:
    delays = [backoff_delay(n, initial=1, maximum=60) for n in range(1, 12)]
    assert 0.5 <= delays[0] <= 1
    assert all(d <= 60 for d in delays)
    assert delays[-1] >= 30
    assert backoff_delay(1, initial=1, maximum=60, retry_after_s=120) == 60


class Slow:
    """A bridge whose step outlasts the lease (a slow remote)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.synced_through: datetime | None = None

    async def step(self, checkpoint: str | None) -> BridgeStep | None:
        await asyncio.sleep(self.seconds)
        return None


async def test_the_lease_is_kept_while_a_step_waits(service: IngestService) -> None:
    config = service.settings.bridges[0]
    runner = BridgeRunner(
        config,
        service,
        service.store,
        service.metrics,
        lease_ttl_s=0.3,
        token="slow",
        bridge=Slow(1.5),
    )
    step = asyncio.create_task(runner.round())
    lease = service.store.keys("repo").bridge_lease

    async def taken() -> bool:
        return await service.store.redis.get(lease) == b"slow"

    await eventually(taken, what="the runner's lease")
    # Held all along, for twice the lease's lifetime: another process never gets it.
    held_until = time.monotonic() + 0.6
    while time.monotonic() < held_until:
        assert not await service.store.acquire_bridge_lease("repo", "other", 300)
        await asyncio.sleep(0.02)
    assert not step.done()
    assert await step == config.interval_s
