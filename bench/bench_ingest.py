"""Hub ingest against a minimal Python path, and the latency of small publish calls.

    .venv/bin/python -m bench.bench_ingest [--posters 4] [--fragments 40] [--entries 1000]
        [--rate 1000] [--latency-seconds 10] [--workers N] [--json FILE]

Starts a real hub (``rs-hub serve``, its own process, embedded valkey-server) on 127.0.0.1,
then in this process, in the same run:

1. the minimal Python path, the floor any ingest in Python can reach: for every fragment,
   ``lxml.etree.fromstring``, one pass over its ``<url>`` elements building what the hub
   stores per change (the entry's XML, the Resource List entry's XML, a change JSON), then
   one pipelined round trip of ``XADD`` + ``HSET`` per change into the hub's own valkey
   (other keys). It checks nothing (no validation, no idempotency, no duplicate or
   backwards-time check): the hub does all that on top, so the ratio says what those cost;
2. the hub's ingest: ``--posters`` concurrent HTTP clients (one Source per topic, raw
   keep-alive POSTs, ``harness.hub.Poster``) post the same fragments; changes/s accepted =
   total changes / wall time. Headline: hub changes/s / minimal path changes/s;
3. publish calls: one client posts 10-change fragments at ``--rate`` changes/s (one POST
   every 10 ms at 1,000/s) for ``--latency-seconds``, then as many back to back; for each,
   p50/p99/max of the POST round trip and the CPU the hub's processes (workers and
   valkey-server) spent per call (nothing subscribes: the two differ in their pace alone).

All servers bind 127.0.0.1 and are stopped at the end; every wait is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import lxml
import redis
from lxml import etree

from .fragments import change_fragment, w3c
from .harness.hub import Hub, Poster, start_hub
from .harness.results import command_line, git_state, log, quantiles, write_json
from .harness.system import Cpu, children, cpu_s, descendants

SITEMAP = "{http://www.sitemaps.org/schemas/sitemap/0.9}"
RS = "{http://www.openarchives.org/rs/terms/}"


def fragment(start: datetime, index: int, count: int) -> bytes:
    numbers = range(index * count, (index + 1) * count)
    step = timedelta(milliseconds=1)
    return change_fragment(((n, w3c(start + step * n)) for n in numbers), distinct=50_000)


# --- the minimal Python path -----------------------------------------------------------------


def minimal_records(body: bytes) -> list[tuple[str, str, bytes, bytes, str]]:
    """(time, loc, entry XML, state XML, change JSON) per ``<url>``: one parse, one pass."""
    root = etree.fromstring(body)
    records = []
    for url in root.iterchildren(f"{SITEMAP}url"):
        loc = url.findtext(f"{SITEMAP}loc") or ""
        md = url.find(f"{RS}md")
        attrib = dict(md.attrib) if md is not None else {}
        when = attrib.get("datetime", "")
        change = attrib.get("change", "updated")
        entry_xml = etree.tostring(url)
        if md is not None:
            md.attrib.pop("change", None)
            md.attrib.pop("datetime", None)
        lastmod = etree.Element(f"{SITEMAP}lastmod")
        lastmod.text = when
        url.insert(1, lastmod)
        state_xml = etree.tostring(url)
        change_json = json.dumps({"loc": loc, "change": change, **attrib}, separators=(",", ":"))
        records.append((when, loc, entry_xml, state_xml, change_json))
    return records


def minimal_path(client: redis.Redis, bodies: list[bytes], prefix: str) -> float:
    """Seconds to parse, build and write every body (one pipelined round trip per body)."""
    started = time.perf_counter()
    for index, body in enumerate(bodies):
        topic = f"{prefix}{index % 4}"
        pipe = client.pipeline(transaction=False)
        for when, loc, entry_xml, state_xml, change_json in minimal_records(body):
            pipe.xadd(
                f"{topic}:s", {"t": when, "loc": loc, "ch": "u", "x": entry_xml, "j": change_json}
            )
            pipe.hset(f"{topic}:st", loc, state_xml)
        pipe.execute()
    return time.perf_counter() - started


# --- the hub ---------------------------------------------------------------------------------


async def hub_ingest(hub: Hub, bodies: list[bytes], posters: int) -> float:
    """Poster p posts bodies p, p+P… to topic bench{p}, in order; the posters run at once."""

    async def poster(number: int) -> None:
        client = Poster(hub.port, quickack=True)
        try:
            for body in bodies[number::posters]:
                await client.post(f"bench{number}", body)
        finally:
            await client.close()

    started = time.perf_counter()
    await asyncio.gather(*(poster(p) for p in range(posters)))
    return time.perf_counter() - started


class PublishCalls:
    """10-change POSTs on one keep-alive connection, each round trip timed, and the CPU the
    hub's processes (its workers and its valkey-server) spent on them."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.client = Poster(hub.port, quickack=True)
        self.n = 0

    async def post(self) -> float:
        """One call; its round trip in ms. The fragment is built before the clock starts."""
        now = datetime.now(UTC)
        body = change_fragment(((self.n + i, w3c(now)) for i in range(10)), distinct=50_000)
        self.n += 10
        sent = time.perf_counter()
        await self.client.post("latency", body)
        return (time.perf_counter() - sent) * 1000

    def cpu_s(self) -> float:
        return sum(cpu_s(pid) for pid in [self.hub.pid, *descendants(self.hub.pid)])

    async def paced(self, rate: int, seconds: float) -> tuple[list[float], float]:
        """At ``rate`` changes/s on a fixed schedule for ``seconds``: the round trips (ms,
        sorted) and the hub's CPU ms per call."""
        interval = 10 / rate
        latencies: list[float] = []
        used = self.cpu_s()
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            latencies.append(await self.post())
            due = started + len(latencies) * interval
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
        return sorted(latencies), (self.cpu_s() - used) * 1000 / max(1, len(latencies))

    async def back_to_back(self, calls: int) -> tuple[list[float], float]:
        """``calls`` calls, each sent as soon as the last is answered: the same figures."""
        used = self.cpu_s()
        latencies = [await self.post() for _ in range(calls)]
        return sorted(latencies), (self.cpu_s() - used) * 1000 / max(1, calls)

    async def close(self) -> None:
        await self.client.close()


async def publish_calls(hub: Hub, rate: int, seconds: float) -> dict[str, Any]:
    """The paced calls, then as many back to back: the same work done by a hub woken every
    few milliseconds and by one kept busy. (The paced window is longer, so the little the
    hub spends idle, a few ms of CPU per second, is charged to its calls.)"""
    calls = PublishCalls(hub)
    try:
        paced, paced_cpu = await calls.paced(rate, seconds)
        busy, busy_cpu = await calls.back_to_back(len(paced))
    finally:
        await calls.close()
    return {
        "paced_ms": paced,
        "paced_cpu_ms_per_call": paced_cpu,
        "back_to_back_ms": busy,
        "back_to_back_cpu_ms_per_call": busy_cpu,
    }


@contextlib.contextmanager
def profiled(hub: Hub, target: Path | None) -> Iterator[None]:
    """py-spy sampling the hub process (and its workers) while the block runs."""
    if target is None:
        yield
        return
    spy = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "py-spy"),
            "record",
            "--pid",
            str(hub.pid),
            "--subprocesses",
            "--format",
            "raw",
            "--rate",
            "200",
            "--output",
            str(target),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1)  # py-spy attaches
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posters", type=int, default=4)
    parser.add_argument("--fragments", type=int, default=40)
    parser.add_argument("--entries", type=int, default=1000)
    parser.add_argument("--rate", type=int, default=1000, help="changes/s of the publish calls")
    parser.add_argument("--latency-seconds", type=float, default=10.0)
    parser.add_argument("--workers", type=int, help="rs-hub serve --workers (default: its own)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--profile",
        type=Path,
        help="record the hub's ingest phase with py-spy (pip install py-spy) into this file "
        "(collapsed stacks, one line per stack: flamegraph.pl or speedscope read it)",
    )
    args = parser.parse_args()

    start = datetime(2026, 1, 1, tzinfo=UTC)
    bodies = [fragment(start, i, args.entries) for i in range(args.fragments)]
    total = args.fragments * args.entries
    topics = [f"bench{p}" for p in range(args.posters)] + ["latency"]
    extra = [] if args.workers is None else ["--workers", str(args.workers)]
    load_before = os.getloadavg()

    with tempfile.TemporaryDirectory(prefix="rspush-bench-") as tmp:
        hub = start_hub(Path(tmp), topics, extra_args=extra)
        try:
            socket_path = Path(tmp) / "data" / "redis" / "valkey.sock"
            client = redis.Redis(unix_socket_path=str(socket_path))
            minimal_path(client, bodies[: max(1, len(bodies) // 10)], "warm")  # warm-up
            log("minimal path: %d changes", total)
            minimal_s = minimal_path(client, bodies, "minimal")
            client.close()
            log("hub ingest: %d changes, %d posters", total, args.posters)
            groups = {"hub": [hub.pid, *children(hub.pid)]}
            cpu = Cpu(groups)
            with profiled(hub, args.profile):
                hub_s = asyncio.run(hub_ingest(hub, bodies, args.posters))
            used = cpu.used()
            log("publish calls: %d changes/s for %.0f s", args.rate, args.latency_seconds)
            calls = asyncio.run(publish_calls(hub, args.rate, args.latency_seconds))
            latencies = calls["paced_ms"]
        except BaseException:
            hub.print_log(40)
            raise
        finally:
            hub.stop()

    results: dict[str, Any] = {
        "command": command_line("bench.bench_ingest"),
        "checkout": git_state(),
        "python": platform.python_version(),
        "lxml": ".".join(map(str, lxml.etree.LXML_VERSION)),
        "cpus": os.cpu_count(),
        "load_before": load_before,
        "load_after": os.getloadavg(),
        "changes": total,
        "fragment_entries": args.entries,
        "posters": args.posters,
        "workers": args.workers,
        "minimal_changes_per_s": total / minimal_s,
        "hub_changes_per_s": total / hub_s,
        "ratio": (total / hub_s) / (total / minimal_s),
        "hub_cpu_percent": used,
        "publish_rate": args.rate,
        "publish_calls": len(latencies),
        "publish_ms": quantiles(latencies),
        "publish_mean_ms": statistics.fmean(latencies) if latencies else float("nan"),
        "publish_hub_cpu_ms_per_call": calls["paced_cpu_ms_per_call"],
        "back_to_back_ms": quantiles(calls["back_to_back_ms"]),
        "back_to_back_hub_cpu_ms_per_call": calls["back_to_back_cpu_ms_per_call"],
    }
    print(f"{results['command']}  ({results['checkout']})")
    print(
        f"python {results['python']}, lxml {results['lxml']}, {results['cpus']} cpus, "
        f"load {load_before[0]:.2f} -> {results['load_after'][0]:.2f}"
    )
    print(
        f"{total} changes in {args.fragments} fragments of {args.entries}, {args.posters} posters"
    )
    print(f"  minimal Python path  {results['minimal_changes_per_s']:>10,.0f} changes/s")
    print(
        f"  hub ingest (HTTP)    {results['hub_changes_per_s']:>10,.0f} changes/s"
        f"   = {results['ratio']:.2f} x the minimal path"
    )
    q = results["publish_ms"]
    print(
        f"  publish calls, 10 changes at {args.rate}/s ({len(latencies)} calls): "
        f"p50 {q['p50']:.2f} ms, p99 {q['p99']:.2f} ms, max {q['max']:.2f} ms; "
        f"hub CPU {results['publish_hub_cpu_ms_per_call']:.2f} ms per call"
    )
    q = results["back_to_back_ms"]
    print(
        f"  the same number back to back:            "
        f"p50 {q['p50']:.2f} ms, p99 {q['p99']:.2f} ms, max {q['max']:.2f} ms; "
        f"hub CPU {results['back_to_back_hub_cpu_ms_per_call']:.2f} ms per call"
    )
    if args.json:
        write_json(args.json, results)


if __name__ == "__main__":
    main()
