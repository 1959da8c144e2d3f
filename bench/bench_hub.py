"""Hub ingest and serving benchmark.

    .venv/bin/python -m bench.bench_hub [--posters 4] [--fragments 60] [--entries 1000]

Starts a real hub (`rs-hub serve`, its own process, embedded valkey-server) on 127.0.0.1,
then in this process:

1. the baseline: bare ``lxml.etree.fromstring`` of every fragment that will be posted;
2. ingest: ``--posters`` concurrent HTTP clients — one Source per topic, as a hub serving
   several Sources sees them — post ``--fragments`` fragments of ``--entries`` changes in all;
   changes/s accepted = total changes / wall time;
3. serving: GET of the open Change List and of the Resource List once they hold 50,000
   entries (first GET after a change, then a conditional GET answered 304).

The figure is ingest changes/s beside the bare parse rate of the same bytes. All servers bind
127.0.0.1 and are stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import lxml
from lxml import etree

from .fragments import change_fragment, w3c
from .harness.hub import AUTH, add_hub_args, hub_args, start_hub
from .harness.results import write_json
from .harness.system import wait_until


def fragment(start: datetime, index: int, count: int, step: timedelta) -> bytes:
    numbers = range(index * count, (index + 1) * count)
    return change_fragment(
        ((n, w3c(start + step * n)) for n in numbers),
        distinct=50_000,
    )


def bare_parse(bodies: list[bytes], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        for body in bodies:
            etree.fromstring(body)
        best = min(best, time.perf_counter() - started)
    return best


async def ingest(base: str, bodies: list[bytes], posters: int) -> tuple[float, list[float]]:
    """Poster p posts bodies p, p+P, p+2P… to topic bench{p}, in order (so its own change
    times increase); the posters run concurrently."""
    latencies: list[float] = []

    async def poster(client: httpx.AsyncClient, number: int) -> None:
        for body in bodies[number::posters]:
            started = time.perf_counter()
            reply = await client.post(
                f"{base}/topics/bench{number}/changes", content=body, headers=AUTH
            )
            latencies.append(time.perf_counter() - started)
            if reply.status_code != 202:
                raise RuntimeError(f"post failed: {reply.status_code} {reply.text[:300]}")

    limits = httpx.Limits(max_connections=posters)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        started = time.perf_counter()
        await asyncio.gather(*(poster(client, p) for p in range(posters)))
        return time.perf_counter() - started, latencies


def ingest_fill(base: str, start: datetime, total: int, *, offset: int = 0) -> None:
    """Post ``total`` more changes to topic bench0 (later times than everything before)."""
    with httpx.Client(timeout=120) as client:
        later = start + timedelta(days=1 + offset)
        for first in range(0, total, 10_000):
            count = min(10_000, total - first)
            body = fragment(
                later + timedelta(milliseconds=first), 0, count, timedelta(milliseconds=1)
            )
            reply = client.post(
                f"{base}/topics/bench0/changes",
                content=body,
                headers=AUTH,
            )
            if reply.status_code != 202:
                raise RuntimeError(f"fill failed: {reply.status_code} {reply.text[:300]}")


def wait_for(url: str, timeout: float = 60) -> None:
    with httpx.Client(timeout=30) as client:
        wait_until(lambda: client.get(url).status_code == 200, url, timeout, interval=0.1)


def serve_times(url: str, repeat: int) -> dict[str, float]:
    with httpx.Client(timeout=120) as client:
        full = []
        size = 0
        etag = ""
        for _ in range(repeat):
            started = time.perf_counter()
            reply = client.get(url)
            full.append(time.perf_counter() - started)
            size = len(reply.content)
            etag = reply.headers.get("etag", "")
        conditional = []
        for _ in range(repeat):
            started = time.perf_counter()
            reply = client.get(url, headers={"If-None-Match": etag})
            conditional.append(time.perf_counter() - started)
            assert reply.status_code == 304, reply.status_code
    return {
        "bytes": size,
        "first_get_ms": full[0] * 1000,
        "get_best_ms": min(full) * 1000,
        "get_median_ms": statistics.median(full) * 1000,
        "conditional_median_ms": statistics.median(conditional) * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posters", type=int, default=4)
    parser.add_argument("--fragments", type=int, default=50)
    parser.add_argument("--entries", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    add_hub_args(parser)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()

    start = datetime(2026, 1, 1, tzinfo=UTC)
    bodies = [
        fragment(start, i, args.entries, timedelta(milliseconds=1)) for i in range(args.fragments)
    ]
    total = args.fragments * args.entries
    parse_s = bare_parse(bodies, args.repeat)

    with tempfile.TemporaryDirectory(prefix="rspush-bench-") as tmp:
        hub = start_hub(
            Path(tmp), [f"bench{p}" for p in range(args.posters)], extra_args=hub_args(args)
        )
        base = hub.base
        try:
            wall, latencies = asyncio.run(ingest(base, bodies, args.posters))
            # Serving figures on topic bench0: top it up to 50,000 changes, which closes its
            # first Change List at exactly 50,000 (stored bytes), then 49,999 more for an open
            # list (built from the stream on request). Its state then holds 50,000 URIs.
            have = len(bodies[0 :: args.posters]) * args.entries
            ingest_fill(base, start, 50_000 - have)
            wait_for(f"{base}/topics/bench0/changelists/0.xml")
            ingest_fill(base, start, 49_999, offset=1)
            closed = serve_times(f"{base}/topics/bench0/changelists/0.xml", args.repeat)
            cl = serve_times(f"{base}/topics/bench0/changelist.xml", args.repeat)
            rl = serve_times(f"{base}/topics/bench0/resourcelist.xml", args.repeat)
        finally:
            hub.stop()

    results = {
        "python": platform.python_version(),
        "lxml": ".".join(map(str, lxml.etree.LXML_VERSION)),
        "cpus": os.cpu_count(),
        "changes": total,
        "fragment_entries": args.entries,
        "posters": args.posters,
        "bare_parse_changes_per_s": total / parse_s,
        "ingest_changes_per_s": total / wall,
        "ingest_vs_bare_parse": (total / wall) / (total / parse_s),
        "post_latency_median_ms": statistics.median(latencies) * 1000,
        "post_latency_max_ms": max(latencies) * 1000,
        "serve_closed_changelist_50k": closed,
        "serve_open_changelist_49999": cl,
        "serve_resourcelist_50k": rl,
    }
    print(f"python {results['python']}, lxml {results['lxml']}, {results['cpus']} cpus")
    print(
        f"{total} changes in {args.fragments} fragments of {args.entries}, "
        f"{args.posters} concurrent posters"
    )
    print(f"  bare lxml parse      {results['bare_parse_changes_per_s']:>12,.0f} changes/s")
    print(
        f"  hub ingest (HTTP)    {results['ingest_changes_per_s']:>12,.0f} changes/s"
        f"   = {results['ingest_vs_bare_parse']:.3f} x bare parse"
    )
    print(
        f"  POST latency         median {results['post_latency_median_ms']:.1f} ms, "
        f"max {results['post_latency_max_ms']:.1f} ms"
    )
    for name, served in (
        ("closed Change List, 50,000", closed),
        ("open Change List, 49,999", cl),
        ("Resource List, 50,000", rl),
    ):
        print(
            f"  GET {name} ({served['bytes'] / 1e6:.1f} MB): "
            f"first {served['first_get_ms']:.0f} ms, best {served['get_best_ms']:.0f} ms, "
            f"median {served['get_median_ms']:.0f} ms, "
            f"304 median {served['conditional_median_ms']:.1f} ms"
        )
    if args.json:
        write_json(args.json, results)


if __name__ == "__main__":
    main()
