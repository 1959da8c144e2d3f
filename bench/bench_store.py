"""The store's two hot calls alone, on the embedded valkey-server: the append script, and the
read of a Change List's entries a rotation (and the open list) makes.

    .venv/bin/python -m bench.bench_store [--batches 1,10,100,1000] [--calls 300]
        [--entries 1000,10000] [--rounds 30] [--json FILE]

No hub, no HTTP: a fresh ``valkey-server`` (the binary the hub embeds; AOF on, fsync every
second, as the hub runs it) and this process only, so the figures move little with the load
of the machine:

1. **append**: ``--calls`` appends of ``--batches``-change fragments (the records a real post
   plans, from ``bench.fragments``) through ``TopicStore.append``; per call, the script's own
   time inside the server (``INFO commandstats``, ``usec_per_call`` of ``EVALSHA``), the
   round trip seen by the client, and the client's CPU to build the call's arguments;
2. **list read**: a topic holding ``--entries`` changes read ``--rounds`` times as the full
   stream read (``open_entries``: one decoded row per change) and as the lean read the
   rotation and the open Change List use (``listed``: the entries' XML as one string); the
   client's CPU and wall time per read, and their ratio in the same run.

Run it from another checkout (``PYTHONPATH=<that tree>``) to compare the store of two trees:
both halves use only ``TopicStore`` and ``scripts.append_call``; the lean read is skipped
where the tree has none.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from rspush.hub import scripts
from rspush.hub.embedded import EmbeddedRedis
from rspush.hub.ingest import IngestPlan, parse_fragment, plan_changes
from rspush.hub.keys import TopicKeys
from rspush.hub.store import TopicStore

from .fragments import change_fragment, w3c
from .harness.results import command_line, git_state, log, write_json

START = datetime(2026, 1, 1, tzinfo=UTC)
PREFIX = "bench"


def plans(batch: int, calls: int, offset: int) -> list[IngestPlan]:
    """``calls`` plans of ``batch`` changes each, in time order, as the hub plans a post."""
    out = []
    now = datetime.now(UTC)
    for call in range(calls):
        first = offset + call * batch
        body = change_fragment(
            ((n, w3c(START + timedelta(milliseconds=n))) for n in range(first, first + batch)),
            distinct=50_000,
        )
        document = parse_fragment(body, max_bytes=1 << 30)
        out.append(
            plan_changes(document, now=now, max_entries=1 << 20, future_tolerance=timedelta(0))
        )
    return out


async def append_figures(redis: Redis, batch: int, calls: int) -> dict[str, float]:
    store = TopicStore(redis, prefix=PREFIX)
    topic = f"append{batch}"
    batches = plans(batch, calls + 10, 0)
    for plan in batches[:10]:  # warm-up: the script loaded, the keys created
        await store.append(topic, plan, now_us=0, idempotency_key=None, idempotency_ttl_s=60)
    started_cpu = time.process_time()
    for plan in batches[10:]:
        scripts.append_call(
            TopicKeys(PREFIX, topic),
            plan,
            idempotency_key=None,
            idempotency_ttl_s=60,
            epoch_candidate="e",
            now_us=0,
        )
    pack_us = (time.process_time() - started_cpu) / calls * 1e6
    await redis.config_resetstat()
    started = time.perf_counter()
    for plan in batches[10:]:
        await store.append(topic, plan, now_us=0, idempotency_key=None, idempotency_ttl_s=60)
    wall_us = (time.perf_counter() - started) / calls * 1e6
    stats: Any = await redis.info("commandstats")
    script = stats["cmdstat_evalsha"]
    assert script["calls"] == calls, script
    return {
        "changes": batch,
        "script_us": float(script["usec_per_call"]),
        "round_trip_us": wall_us,
        "build_call_cpu_us": pack_us,
    }


async def read_figures(redis: Redis, entries: int, rounds: int) -> dict[str, Any]:
    store = TopicStore(redis, prefix=PREFIX)
    topic = f"read{entries}"
    for plan in plans(1000, -(-entries // 1000), 10_000_000):
        await store.append(topic, plan, now_us=0, idempotency_key=None, idempotency_ttl_s=60)
    meta = await store.meta(topic)
    result: dict[str, Any] = {"entries": entries}
    readers = {"full": lambda: store.open_entries(topic, meta.open_start, limit=entries)}
    if hasattr(store, "listed"):
        readers["lean"] = lambda: store.listed(topic, meta.open_start, limit=entries)
    for name, read in readers.items():
        await read()
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(rounds):
            await read()
        result[f"{name}_cpu_ms"] = (time.process_time() - cpu) / rounds * 1000
        result[f"{name}_wall_ms"] = (time.perf_counter() - wall) / rounds * 1000
    if "lean" in readers:
        result["cpu_ratio"] = result["full_cpu_ms"] / result["lean_cpu_ms"]
    return result


async def run(url: str, args: argparse.Namespace) -> dict[str, Any]:
    redis = Redis.from_url(url)
    try:
        appends = []
        for batch in args.batches:
            log("append: %d calls of %d changes", args.calls, batch)
            appends.append(await append_figures(redis, batch, args.calls))
        reads = []
        for entries in args.entries:
            log("list read: %d entries, %d rounds", entries, args.rounds)
            reads.append(await read_figures(redis, entries, args.rounds))
        return {"append": appends, "read": reads}
    finally:
        await redis.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--batches", default="1,10,100,1000", help="changes per append")
    parser.add_argument("--calls", type=int, default=300, help="appends per batch size")
    parser.add_argument("--entries", default="1000,10000", help="entries per list read")
    parser.add_argument("--rounds", type=int, default=30, help="reads per size")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    args.batches = [int(n) for n in args.batches.split(",")]
    args.entries = [int(n) for n in args.entries.split(",")]
    load_before = os.getloadavg()
    with (
        tempfile.TemporaryDirectory(prefix="rspush-bench-store-") as folder,
        EmbeddedRedis(Path(folder)) as server,
    ):
        figures = asyncio.run(run(server.url, args))
    results = {
        "command": command_line("bench.bench_store"),
        "checkout": git_state(),
        "python": platform.python_version(),
        "load_before": load_before,
        "load_after": os.getloadavg(),
        **figures,
    }
    print(f"{results['command']}  ({results['checkout']})")
    print(f"load {load_before[0]:.2f} -> {results['load_after'][0]:.2f}")
    print("append            script in valkey   round trip   build the call (client CPU)")
    for row in figures["append"]:
        print(
            f"  {row['changes']:>5} changes  {row['script_us']:>12,.0f} us"
            f"  {row['round_trip_us']:>9,.0f} us  {row['build_call_cpu_us']:>12,.0f} us"
        )
    print("list read         full rows: CPU / wall     lean: CPU / wall     CPU ratio")
    for row in figures["read"]:
        lean = (
            f"{row['lean_cpu_ms']:>7.2f} / {row['lean_wall_ms']:.2f} ms  {row['cpu_ratio']:>8.1f}x"
            if "lean_cpu_ms" in row
            else "      (none in this tree)"
        )
        print(
            f"  {row['entries']:>6} entries  {row['full_cpu_ms']:>7.2f} / "
            f"{row['full_wall_ms']:.2f} ms  {lean}"
        )
    if args.json:
        write_json(args.json, results)


if __name__ == "__main__":
    main()
