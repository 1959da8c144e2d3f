"""Bytes on the wire of the hub's pull documents, with and without gzip, and what gzip costs.

    .venv/bin/python -m bench.bench_pull [--open 1000] [--closed 4] [--list-entries 5000]
        [--polls 200] [--json FILE]

Starts a real hub (``rs-hub serve``, its own process, embedded valkey-server) on 127.0.0.1
with one topic whose Change Lists close every ``--list-entries`` changes; posts
``--closed`` x ``--list-entries`` changes (closed lists) and ``--open`` more (the open list),
each an ``updated`` with an md5 hash, a length and a type as a real Source sends them
(:mod:`bench.fragments`). Then, each figure beside its baseline measured in the same run:

1. **A poll**: GET of the open Change List, as an agent reads it each time it changed —
   bytes on the wire (``Content-Length`` of the answer, headers not counted) with
   ``Accept-Encoding: identity`` (the baseline) and ``gzip``.
2. **A full read**: every document an agent reads to catch up from nothing — Source
   Description, Capability List, Change List Archive, each closed list, the open list.
3. **Cost**: ``--polls`` GETs of the open list in a row, for each coding, twice: with the
   list unchanged (the hub serves the gzip it made for that version) and with one change
   posted before every GET (the hub builds and compresses every poll: the worst case).
   Per-request latency (median) and the hub's CPU seconds per request (from /proc).
4. **Levels**: the open list's and a closed list's bytes compressed in this process at
   zlib levels 1, 3, 6 and 9 — size ratio and CPU time (best of 5): how the defaults
   (``[compression] level = 1``, ``immutable_level = 6``) were chosen.

Wire bytes are read with ``aiter_raw`` (not decoded). The hub is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from rspush.resourcesync.w3cdt import format_w3c_datetime

from .fragments import change_fragment
from .harness.hub import AUTH, Hub, start_hub
from .harness.results import command_line, git_state, log, write_json
from .harness.system import cpu_s

TOPIC = "pull"


async def wire(client: httpx.AsyncClient, url: str, coding: str) -> tuple[int, bytes]:
    """(bytes on the wire, decoded body) of one GET with ``Accept-Encoding: coding``."""
    async with client.stream("GET", url, headers={"Accept-Encoding": coding}) as reply:
        if reply.status_code != 200:
            raise RuntimeError(f"GET {url}: {reply.status_code}")
        raw = b"".join([chunk async for chunk in reply.aiter_raw()])
        sent = reply.headers.get("content-encoding", "identity")
    body = gzip.decompress(raw) if sent == "gzip" else raw
    return len(raw), body


class Changes:
    """Change times one microsecond-step apart, an hour in the past; ``distinct`` URIs."""

    def __init__(self, distinct: int) -> None:
        self.start = datetime.now(UTC) - timedelta(hours=1)
        self.next = 0
        self.distinct = distinct

    def fragment(self, count: int) -> bytes:
        first, self.next = self.next, self.next + count
        step = timedelta(microseconds=10)
        return change_fragment(
            ((n, format_w3c_datetime(self.start + step * n)) for n in range(first, self.next)),
            distinct=self.distinct,
        )


async def post(client: httpx.AsyncClient, base: str, body: bytes) -> None:
    reply = await client.post(f"{base}/topics/{TOPIC}/changes", content=body, headers=AUTH)
    if reply.status_code != 202:
        raise RuntimeError(f"POST: {reply.status_code} {reply.text[:300]}")


async def polls(
    client: httpx.AsyncClient,
    hub: Hub,
    coding: str,
    count: int,
    changes: Changes | None,
) -> dict[str, float]:
    """``count`` GETs of the open list (one change posted before each when ``changes``)."""
    url = f"{hub.base}/topics/{TOPIC}/changelist.xml"
    latencies = []
    hub_cpu = 0.0
    sizes = []
    for _ in range(count):
        if changes is not None:
            await post(client, hub.base, changes.fragment(1))
        before = cpu_s(hub.pid)
        started = time.perf_counter()
        size, _ = await wire(client, url, coding)
        latencies.append(time.perf_counter() - started)
        hub_cpu += cpu_s(hub.pid) - before
        sizes.append(size)
    return {
        "median_ms": statistics.median(latencies) * 1e3,
        "hub_cpu_ms_per_request": hub_cpu / count * 1e3,
        "bytes": statistics.median(sizes),
    }


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    hub = start_hub(workdir, [TOPIC], limits={"changelist_max_entries": args.list_entries})
    try:
        async with httpx.AsyncClient(timeout=60, trust_env=False) as client:
            changes = Changes(args.distinct)
            for _ in range(args.closed):
                await post(client, hub.base, changes.fragment(args.list_entries))
            await post(client, hub.base, changes.fragment(args.open))
            topic = f"{hub.base}/topics/{TOPIC}"
            closed = [f"{topic}/changelists/{n}.xml" for n in range(args.closed)]
            deadline = time.monotonic() + 60
            while args.closed and (await client.get(closed[-1])).status_code != 200:
                if time.monotonic() > deadline:
                    raise RuntimeError("the hub did not close the lists in 60 s")
                await asyncio.sleep(0.1)
            full = [
                f"{hub.base}/.well-known/resourcesync",
                f"{topic}/capabilitylist.xml",
                f"{topic}/changelist-archive.xml",
                *closed,
                f"{topic}/changelist.xml",
            ]
            documents: dict[str, dict[str, int]] = {}
            bodies: dict[str, bytes] = {}
            for url in full:
                plain, body = await wire(client, url, "identity")
                bodies[url] = body
                packed, decoded = await wire(client, url, "gzip")
                if decoded != body:
                    raise RuntimeError(f"{url}: the gzip answer decodes to other bytes")
                documents[url.removeprefix(hub.base)] = {"identity": plain, "gzip": packed}
            open_list = documents[f"/topics/{TOPIC}/changelist.xml"]
            cost = {
                f"{state} {coding}": await polls(
                    client, hub, coding, args.polls, changes if state == "changing" else None
                )
                for state in ("unchanged", "changing")
                for coding in ("identity", "gzip")
            }
    finally:
        hub.stop()
    samples = {"open list": bodies[full[-1]]}
    if closed:
        samples[f"closed list ({args.list_entries:,})"] = bodies[closed[0]]
    levels = {name: by_level(body) for name, body in samples.items()}
    total = {c: sum(d[c] for d in documents.values()) for c in ("identity", "gzip")}
    return {
        "open_entries": args.open,
        "closed_lists": args.closed,
        "list_entries": args.list_entries,
        "poll": open_list,
        "poll_ratio": open_list["identity"] / open_list["gzip"],
        "full_read": total,
        "full_read_ratio": total["identity"] / total["gzip"],
        "documents": documents,
        "cost": cost,
        "levels": levels,
    }


def by_level(body: bytes, repeat: int = 5) -> dict[int, dict[str, float]]:
    """Size ratio and the best of ``repeat`` compression times per zlib level."""
    figures = {}
    for level in (1, 3, 6, 9):
        best = float("inf")
        for _ in range(repeat):
            started = time.process_time()
            packed = gzip.compress(body, compresslevel=level, mtime=0)
            best = min(best, time.process_time() - started)
        figures[level] = {"ratio": len(body) / len(packed), "cpu_ms": best * 1e3}
    return figures


def report(results: dict[str, Any], load: str) -> None:
    poll, full = results["poll"], results["full_read"]
    print(f"\ncommand: {command_line('bench.bench_pull')}")
    print(f"commit {git_state()}; load average {load}")
    print(
        f"\n1. A poll (open Change List, {results['open_entries']:,} entries): "
        f"identity {poll['identity']:,} B, gzip {poll['gzip']:,} B "
        f"= {results['poll_ratio']:.1f}x fewer bytes"
    )
    print(
        f"2. A full read ({results['closed_lists']} closed lists of "
        f"{results['list_entries']:,} + the open one + SD, Capability List, archive): "
        f"identity {full['identity']:,} B, gzip {full['gzip']:,} B "
        f"= {results['full_read_ratio']:.1f}x"
    )
    print("3. Cost per GET of the open list (median latency, hub CPU per request):")
    for name, figures in results["cost"].items():
        print(
            f"   {name:<20} {figures['median_ms']:7.2f} ms  "
            f"{figures['hub_cpu_ms_per_request']:6.2f} ms CPU  {figures['bytes']:>9,.0f} B"
        )
    print("4. zlib levels on the hub's bytes (size ratio, CPU ms, best of 5):")
    for name, levels in results["levels"].items():
        cells = "  ".join(
            f"{level}: {f['ratio']:.2f}x {f['cpu_ms']:.1f} ms" for level, f in levels.items()
        )
        print(f"   {name:<22} {cells}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--open", type=int, default=1000, help="changes in the open list")
    parser.add_argument("--closed", type=int, default=4, help="closed Change Lists")
    parser.add_argument("--list-entries", type=int, default=5000, help="entries per closed list")
    parser.add_argument("--distinct", type=int, default=10_000, help="distinct URIs")
    parser.add_argument("--polls", type=int, default=200, help="GETs per cost figure")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rspush-bench-pull-") as tmp:
        results = asyncio.run(run(args, Path(tmp)))
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    results["load_average"] = load
    report(results, load)
    if args.json:
        write_json(args.json, results)
    log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
