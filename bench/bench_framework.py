"""Benchmark of framework notifications' costs in the hub, on an embedded valkey.

Run from the repository root::

    .venv/bin/python -m bench.bench_framework [--rotations 300] [--rounds 50]

- the rotation script with and without its framework events (two ``XADD`` in the same
  script): the median time of one ``close_list`` call each way, interleaved call by call,
  and their ratio;
- reading every topic's new framework events when there are none, for 10, 100 and 1,000
  topics: one multi-key ``XREAD`` (what a push process on a single server issues, blocking)
  against one pipelined round of ``XRANGE`` per topic (what it does on a Redis Cluster),
  each as a ratio to a ``PING`` measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from rspush.hub.embedded import EmbeddedRedis
from rspush.hub.store import ClosedList, RotationAnnouncement, TopicStore
from rspush.protocol import ZERO

ANNOUNCEMENT = RotationAnnouncement(
    10_000, "http://h/t/changelists/0.xml", "http://h/t/changelist.xml", "http://h/t/index.xml"
)


async def _rotation(store: TopicStore, redis: Redis, topic: str, framework: bool) -> float:
    meta = store.keys(topic).meta
    await redis.hset(meta, mapping={"open_start": "0-0", "open_count": 1, "open_from": 1})
    assert await store.acquire_lease(topic, "tok", 60_000)
    started = time.perf_counter()
    outcome = await store.close_list(
        topic,
        token="tok",
        expected_open_start="0-0",
        closed=ClosedList(0, 1, 2, "1-0", "1-0", 1),
        xml=b"<urlset/>" * 100,
        now_us=3,
        framework=ANNOUNCEMENT if framework else None,
    )
    elapsed = time.perf_counter() - started
    assert outcome == "ok", outcome
    return elapsed


async def _median(call: Callable[[], Awaitable[object]], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        await call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


async def run(url: str, rotations: int, rounds: int) -> None:
    redis = Redis.from_url(url)
    store = TopicStore(redis, prefix="bench")
    try:
        without, with_events = [], []
        for n in range(rotations):
            without.append(await _rotation(store, redis, f"plain{n}", False))
            with_events.append(await _rotation(store, redis, f"framework{n}", True))
        plain, framework = statistics.median(without), statistics.median(with_events)
        print(
            f"rotation script: {plain * 1e6:.0f} us without events, {framework * 1e6:.0f} us "
            f"with them: ratio {framework / plain:.2f}"
        )
        ping = await _median(redis.ping, rounds * 4)
        print(f"PING: {ping * 1e6:.0f} us")
        for topics in (10, 100, 1000):
            after = {f"t{n}": ZERO for n in range(topics)}
            streams: Any = {store.keys(t).framework: "0-0" for t in after}
            xread = await _median(functools.partial(redis.xread, streams, count=100), rounds)
            piped = await _median(
                functools.partial(store.framework_events_after_each, after, count=100), rounds
            )
            print(
                f"{topics} idle topics: one XREAD {xread * 1e3:.2f} ms ({xread / ping:.0f} x "
                f"PING), pipelined XRANGE {piped * 1e3:.2f} ms ({piped / ping:.0f} x PING)"
            )
    finally:
        await redis.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rotations", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder, EmbeddedRedis(Path(folder)) as server:
        asyncio.run(run(server.url, args.rotations, args.rounds))


if __name__ == "__main__":
    main()
