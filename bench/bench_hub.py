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
import hashlib
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import lxml
from lxml import etree

from .fragments import change_fragment

TOKEN = "bench-token"


def fragment(start: datetime, index: int, count: int, step: timedelta) -> bytes:
    numbers = range(index * count, (index + 1) * count)
    return change_fragment(
        ((n, (start + step * n).strftime("%Y-%m-%dT%H:%M:%S.%fZ")) for n in numbers),
        distinct=50_000,
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_hub(workdir: Path, port: int, topic_names: list[str]) -> subprocess.Popen[bytes]:
    config = workdir / "hub.toml"
    topics = "".join(f'[[topics]]\nname = "{name}"\n' for name in topic_names)
    names = ", ".join(f'"{name}"' for name in topic_names)
    config.write_text(
        f"""
[hub]
base_url = "http://127.0.0.1:{port}"
{topics}
[[sources]]
name = "bench"
token_sha256 = "{hashlib.sha256(TOKEN.encode()).hexdigest()}"
topics = [{names}]
[limits]
changelist_max_entries = 50000
changelist_max_age_s = 86400
max_entries_per_request = 50000
max_body_bytes = 52428800
"""
    )
    hub = Path(sys.executable).parent / "rs-hub"
    process = subprocess.Popen(
        [
            str(hub),
            "serve",
            "--config",
            str(config),
            "--port",
            str(port),
            "--data-dir",
            str(workdir / "data"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        if process.poll() is not None:
            raise RuntimeError("hub exited during startup")
        time.sleep(0.05)
    process.terminate()
    raise RuntimeError("hub not ready after 30 s")


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
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/xml"}

    async def poster(client: httpx.AsyncClient, number: int) -> None:
        for body in bodies[number::posters]:
            started = time.perf_counter()
            reply = await client.post(
                f"{base}/topics/bench{number}/changes", content=body, headers=headers
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
                headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/xml"},
            )
            if reply.status_code != 202:
                raise RuntimeError(f"fill failed: {reply.status_code} {reply.text[:300]}")


def wait_for(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=30) as client:
        while client.get(url).status_code != 200:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not appear")
            time.sleep(0.1)


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
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()

    start = datetime(2026, 1, 1, tzinfo=UTC)
    bodies = [
        fragment(start, i, args.entries, timedelta(milliseconds=1)) for i in range(args.fragments)
    ]
    total = args.fragments * args.entries
    parse_s = bare_parse(bodies, args.repeat)

    with tempfile.TemporaryDirectory(prefix="rspush-bench-") as tmp:
        port = free_port()
        hub = start_hub(Path(tmp), port, [f"bench{p}" for p in range(args.posters)])
        base = f"http://127.0.0.1:{port}"
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
            hub.terminate()
            hub.wait(timeout=30)

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
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
