"""Push channel benchmark: fan-out, latency and memory of the WebSocket push.

    .venv/bin/python -m bench.bench_push [--subscribers 100,1000,5000] [--changes N] [--json FILE]

Starts a real hub (`rs-hub serve`, its own process, embedded valkey-server) on 127.0.0.1 and
a pool of client processes (``--client-procs``, default 2) holding the WebSocket clients
(``websockets.asyncio.client.connect``, no compression); this process posts changes over HTTP.

1. Fan-out, for each N in ``--subscribers``: N clients subscribe to one topic (format json);
   the changes are posted in fragments of ``--fragment`` changes, one POST after the other as
   fast as the hub accepts them. Delivered changes/s = changes received by all clients / wall
   time from the first POST to the last client holding every change. Beside it, in the same
   run and like for like, the raw baseline: a minimal ``websockets`` server (its own process,
   ``serve`` + ``broadcast()``) broadcasts the hub's own frame of one fragment (``--fragment``
   changes, captured at warm-up) to the same N clients, as many changes in all; raw
   changes/s the same way. Ratio: hub changes/s / raw changes/s (same frames, same clients:
   what the hub costs over the bare broadcast). Against other systems: ``bench.bench_peers``.
2. Latency: ``--latency-subscribers`` clients, ``--rate`` changes/s posted as 10 changes every
   10 ms with datetime = time of posting, for ``--latency-seconds``. Per received change:
   receive time - acceptance time (the millisecond part of its stream position, stamped by the
   Redis server's clock, the same machine clock as ``time.time()``), and receive time - the
   change's datetime (POST start to receive, end to end).
3. Memory: VmRSS of the hub process with 0 subscribers, then with ``--idle`` idle subscribed
   clients; KB per idle subscriber.

Every loop is bounded and every wait has a timeout; all servers bind 127.0.0.1 and are
stopped at the end. CPU seconds of every process (hub, valkey, clients, raw server, poster)
and of the whole machine are read from /proc over each phase, to show what limits each figure.

Measurement choices (see the code for why): the poster sets TCP_QUICKACK
(``harness.hub.Poster``); the hub's ``send_buffer_bytes`` is raised to 64 MiB
(``HUB_SEND_BUFFER``); clients connect at most 32 at a time per process
(``harness.clients.CONNECT_CONCURRENCY``). ``--phases latency`` (or any subset of
memory,fanout,latency) runs only some phases. To measure a patched hub without touching
the checkout, run with ``PYTHONPATH=<dir holding a patched rspush/>``: the hub process
(``rs-hub``) imports ``rspush.hub`` from there (the bench itself runs from the checkout).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import os
import platform
import resource
import sys
import tempfile
import time
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import connect
from websockets.version import version as websockets_version

from .fragments import change_fragment, w3c
from .harness.clients import CHANGE_MARK, ClientPool, merge
from .harness.hub import AUTH, Hub, Poster, add_hub_args, histogram, hub_args, metric, start_hub
from .harness.results import command_line, log, percentile, write_json
from .harness.results import quantiles as quantile_points
from .harness.system import Cpu, HelperProcess, Pacer, children, free_port, raise_nofile, rss_kb

RAW_WRITE_HIGH = 1024 * 1024  # the raw server waits while a write buffer is over this
HUB_SEND_BUFFER = 64 * 1024 * 1024
"""The hub's ``send_buffer_bytes``: a client process briefly behind is not closed as a slow
consumer mid-measurement, so the figure is the rate at which every change reaches every client
(slow-consumer closes are counted and reported anyway)."""
PHASE_TOPICS = ["warm", "idle", "latency"]
"""One topic per phase (plus ``fan{N}`` per N) keeps every topic's open Change List under its
rotation size, so rotation never runs during a measurement."""


# --- what is posted --------------------------------------------------------------------------


def fragment(entries: Iterable[tuple[int, str]]) -> bytes:
    """About 260 bytes of JSON per change once pushed."""
    return change_fragment(entries, distinct=10_000)


def fanout_bodies(total: int, per_fragment: int) -> list[bytes]:
    start = datetime.now(UTC) - timedelta(hours=1)
    step = timedelta(microseconds=10)
    return [
        fragment((n, w3c(start + step * n)) for n in range(first, min(total, first + per_fragment)))
        for first in range(0, total, per_fragment)
    ]


# --- the raw baseline server (its own process) ----------------------------------------------


async def raw_server(port: int, frame: bytes) -> None:
    """A minimal websockets server: register each client after its first message, then on
    command broadcast ``frame`` M times to all of them, waiting (like any sane server) while
    some connection's write buffer is over RAW_WRITE_HIGH. Commands: JSON lines on stdin."""
    from websockets.asyncio.server import broadcast, serve

    clients: set[Any] = set()

    async def handler(ws: Any) -> None:
        await ws.recv()
        clients.add(ws)
        try:
            await ws.wait_closed()
        finally:
            clients.discard(ws)

    def reply(**fields: Any) -> None:
        print(json.dumps(fields), flush=True)

    loop = asyncio.get_running_loop()
    async with serve(
        handler,
        "127.0.0.1",
        port,
        compression=None,
        max_size=64 * 1024,
        ping_interval=20,
        ping_timeout=20,
        backlog=1024,
    ):
        reply(ready=True)
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                return
            command = json.loads(line)
            if command["cmd"] == "quit":
                return
            if command["cmd"] == "wait":
                deadline = time.monotonic() + 60
                while len(clients) < command["n"] and time.monotonic() < deadline:
                    await asyncio.sleep(0.01)
                reply(n=len(clients))
            elif command["cmd"] == "broadcast":
                connections = list(clients)
                started = time.time()
                for i in range(command["frames"]):
                    broadcast(connections, frame, text=True)
                    if i % 4 == 3:
                        await asyncio.sleep(0)
                        while any(
                            c.transport is not None
                            and c.transport.get_write_buffer_size() > RAW_WRITE_HIGH
                            for c in connections
                        ):
                            await asyncio.sleep(0.001)
                reply(started=started, finished=time.time())


class RawServer(HelperProcess):
    """The raw baseline server in its own process (``--raw-server``)."""

    def __init__(self, port: int, frame_file: Path) -> None:
        self.port = port
        super().__init__(
            "bench.bench_push", "--raw-server", str(port), "--raw-frame", str(frame_file)
        )


# --- the measurements ------------------------------------------------------------------------


class Bench:
    def __init__(self, args: argparse.Namespace, hub: Hub, pool: ClientPool) -> None:
        self.args = args
        self.hub = hub
        self.pool = pool
        self.base = hub.base
        self.push_url = hub.push_url
        self.raw: RawServer | None = None
        self.http = httpx.AsyncClient(
            timeout=60, trust_env=False, limits=httpx.Limits(max_connections=4)
        )
        self.poster = Poster(hub.port, quickack=not args.plain_poster)

    def groups(self) -> dict[str, list[int]]:
        return {
            "hub": [self.hub.pid],
            "valkey": children(self.hub.pid),
            "clients": self.pool.pids,
            "raw server": [] if self.raw is None else [self.raw.process.pid],
            "bench (poster)": [os.getpid()],
        }

    async def post(self, topic: str, body: bytes) -> None:
        await self.poster.post(topic, body)

    async def warm_up(self) -> tuple[bytes, bytes, list[float]]:
        """One client: warms the hub and captures its one-change frame and its frame of one
        ``--fragment``-change POST. Then the round trip of 10-change POSTs with httpx, an
        ordinary client (see harness.hub.Poster)."""
        size = self.args.fragment
        async with connect(self.push_url, compression=None, proxy=None, max_size=None) as ws:
            await ws.send('{"type":"subscribe","topics":[{"topic":"warm"}]}')
            await ws.recv()
            await self.post("warm", fragment([(1, w3c(datetime.now(UTC)))]))
            async with asyncio.timeout(10):
                frame = await ws.recv(decode=False)
            now = datetime.now(UTC)
            await self.post("warm", fragment((2 + i, w3c(now)) for i in range(size)))
            async with asyncio.timeout(10):
                whole = await ws.recv(decode=False)
        assert frame.count(CHANGE_MARK) == 1, frame
        if whole.count(CHANGE_MARK) != size:
            raise RuntimeError(f"the hub split a {size}-change POST: use a smaller --fragment")
        httpx_ms = []
        for k in range(5):
            body = fragment((10 + 10 * k + i, w3c(datetime.now(UTC))) for i in range(10))
            started = time.perf_counter()
            reply = await self.http.post(
                f"{self.base}/topics/warm/changes", content=body, headers=AUTH
            )
            httpx_ms.append((time.perf_counter() - started) * 1000)
            if reply.status_code != 202:
                raise RuntimeError(f"post failed: {reply.status_code} {reply.text[:300]}")
        return bytes(frame), bytes(whole), sorted(httpx_ms)

    async def memory(self) -> dict[str, Any]:
        n = self.args.idle
        await asyncio.sleep(2)
        before = rss_kb(self.hub.pid)
        connect_s = await self.pool.connect(self.push_url, n, "idle")
        subscribed = await metric(self.http, self.base, "rspush_push_subscribers", "idle") or 0.0
        await asyncio.sleep(2)
        during = rss_kb(self.hub.pid)
        await self.pool.call("close", timeout=120)
        await asyncio.sleep(2)
        after = rss_kb(self.hub.pid)
        return {
            "subscribers": n,
            "hub_metric_subscribers": subscribed,
            "connect_seconds": connect_s,
            "rss_0_kb": before,
            "rss_idle_kb": during,
            "rss_after_close_kb": after,
            "kb_per_subscriber": (during - before) / n,
        }

    async def fanout_hub(self, n: int, changes: int) -> dict[str, Any]:
        topic = f"fan{n}"
        bodies = fanout_bodies(changes, self.args.fragment)
        connect_s = await self.pool.connect(self.push_url, n, topic)
        timeout = self.args.phase_timeout
        self.pool.send_all("receive", expected=changes, unit="changes", timeout=timeout)
        cpu = Cpu(self.groups())
        started = time.time()
        for body in bodies:
            await self.post(topic, body)
        posted = time.time()
        result = merge(await self.pool.results(timeout + 30))
        used = cpu.used()
        slow = await metric(self.http, self.base, "rspush_push_slow_closes_total", topic) or 0.0
        await self.pool.call("close", timeout=120)
        wall = (result["last_done"] or time.time()) - started
        return {
            "subscribers": n,
            "changes_posted": changes,
            "connect_seconds": connect_s,
            "post_seconds": posted - started,
            "ingest_changes_per_s": changes / (posted - started),
            "wall_seconds": wall,
            "delivered_changes": result["got"],
            "complete_clients": result["complete"],
            "changes_per_s": result["got"] / wall,
            "frames_per_s": result["frames"] / wall,
            "changes_per_frame": result["got"] / max(1, result["frames"]),
            "mb_per_s": result["bytes"] / wall / 1e6,
            "closes": result["closes"],
            "slow_consumer_closes": slow,
            "cpu_percent": used,
        }

    async def fanout_raw(self, n: int, frames: int, per_frame: int) -> dict[str, Any]:
        assert self.raw is not None
        url = f"ws://127.0.0.1:{self.raw.port}/"
        connect_s = await self.pool.connect(url, n, None)
        ready = await self.raw.ask(cmd="wait", n=n)
        if ready["n"] < n:
            raise RuntimeError(f"raw server sees {ready['n']} of {n} clients")
        timeout = self.args.phase_timeout
        expected = frames * per_frame
        self.pool.send_all("receive", expected=expected, unit="changes", timeout=timeout)
        cpu = Cpu(self.groups())
        sent = await self.raw.ask(cmd="broadcast", frames=frames)
        result = merge(await self.pool.results(timeout + 30))
        used = cpu.used()
        await self.pool.call("close", timeout=120)
        wall = (result["last_done"] or time.time()) - sent["started"]
        return {
            "subscribers": n,
            "frames_broadcast": frames,
            "changes_per_frame": per_frame,
            "connect_seconds": connect_s,
            "broadcast_seconds": sent["finished"] - sent["started"],
            "wall_seconds": wall,
            "delivered_changes": result["got"],
            "complete_clients": result["complete"],
            "changes_per_s": result["got"] / wall,
            "frames_per_s": result["frames"] / wall,
            "mb_per_s": result["bytes"] / wall / 1e6,
            "closes": result["closes"],
            "cpu_percent": used,
        }

    async def latency(self) -> dict[str, Any]:
        n = self.args.latency_subscribers
        per_post = 10
        interval = per_post / self.args.rate
        posts = round(self.args.latency_seconds / interval)
        await self.pool.connect(self.push_url, n, "latency")
        timeout = self.args.latency_seconds + 60
        expected = posts * per_post
        self.pool.send_all("receive", expected=expected, unit="record", timeout=timeout)
        cpu = Cpu(self.groups())
        post_ms = []
        pacer = Pacer(posts, interval)
        async for k in pacer.steps():
            now = datetime.now(UTC)
            t0 = time.perf_counter()
            await self.post(
                "latency", fragment((k * per_post + i, w3c(now)) for i in range(per_post))
            )
            post_ms.append((time.perf_counter() - t0) * 1000)
        rate = expected / (time.monotonic() - pacer.started)
        parts = await self.pool.results(timeout + 30)
        used = cpu.used()
        await self.pool.call("close", timeout=120)
        hub_lag = await histogram(self.http, self.base, "rspush_push_lag_seconds", "latency")
        spread = sorted(v for p in parts for v in p["spread_ms"])
        accept = sorted(v for p in parts for v in p["accept_ms"])
        e2e = sorted(v for p in parts for v in p["e2e_ms"])
        post_ms.sort()
        return {
            "subscribers": n,
            "changes_per_s_target": self.args.rate,
            "changes_per_s_posted": rate,
            "posts_late": pacer.late,
            "changes_posted": expected,
            "samples": len(accept),
            "complete_clients": sum(p["complete"] for p in parts),
            "changes_per_frame": len(accept) / max(1, sum(p["frames"] for p in parts)),
            "accept_to_receive_ms": quantiles(accept),
            "post_start_to_receive_ms": quantiles(e2e),
            "hub_lag_share_within_s": hub_lag,
            "client_spread_ms": {
                "p50": percentile(spread, 0.5),
                "p99": percentile(spread, 0.99),
            },
            "post_ms": {"p50": percentile(post_ms, 0.5), "p99": percentile(post_ms, 0.99)},
            "cpu_percent": used,
        }


def quantiles(ordered: list[float]) -> dict[str, float]:
    """p50 … p99.9, max, and the share over 25 ms (the p99 target) of sorted latencies."""
    over = len(ordered) - bisect.bisect_right(ordered, 25.0)
    summary = quantile_points(ordered, (0.5, 0.9, 0.99, 0.999))
    return summary | {"over_25ms": over / max(1, len(ordered))}


def changes_for(n: int, args: argparse.Namespace) -> int:
    fragment_size: int = args.fragment
    changes: int = min(args.changes, max(fragment_size, args.deliveries // n))
    return max(fragment_size, changes // fragment_size * fragment_size)


async def run(args: argparse.Namespace, pool: ClientPool, workdir: Path) -> dict[str, Any]:
    topics = [*PHASE_TOPICS, *(f"fan{n}" for n in args.subscribers)]
    hub = start_hub(
        workdir, topics, push={"send_buffer_bytes": HUB_SEND_BUFFER}, extra_args=hub_args(args)
    )
    bench = Bench(args, hub, pool)
    results: dict[str, Any] = {}
    try:
        frame, whole, httpx_ms = await bench.warm_up()
        results["httpx_post_10_changes_ms"] = httpx_ms
        frame_file = workdir / "frame.json"
        frame_file.write_bytes(whole)
        results["one_change_frame_bytes"] = len(frame)
        results["fragment_frame_bytes"] = len(whole)
        bench.raw = RawServer(free_port(), frame_file)
        if "memory" in args.phases:
            log("memory: %d idle subscribers", args.idle)
            results["memory"] = await bench.memory()
        results["fanout"] = []
        for n in args.subscribers if "fanout" in args.phases else []:
            changes = changes_for(n, args)
            log("fan-out hub: %d subscribers, %d changes", n, changes)
            hub_result = await bench.fanout_hub(n, changes)
            frames = changes // args.fragment  # as many changes as the hub run, same frames
            log("fan-out raw: %d subscribers, %d frames", n, frames)
            raw_result = await bench.fanout_raw(n, frames, args.fragment)
            results["fanout"].append(
                {
                    "subscribers": n,
                    "hub": hub_result,
                    "raw": raw_result,
                    "ratio": hub_result["changes_per_s"] / raw_result["changes_per_s"],
                }
            )
        if "latency" in args.phases:
            log("latency: %d subscribers, %d changes/s", args.latency_subscribers, args.rate)
            results["latency"] = await bench.latency()
        results["poster_retries"] = bench.poster.retries
    except BaseException:
        hub.print_log(60, skip=("connection open", "connection closed"))
        raise
    finally:
        await bench.http.aclose()
        await bench.poster.close()
        if bench.raw is not None:
            bench.raw.stop()
        hub.stop()
    return results


async def ingest_under_fanout(
    args: argparse.Namespace, pool: ClientPool, workdir: Path, workers: int
) -> dict[str, Any]:
    """Ingest while fan-out saturates, on a hub of ``workers`` processes: one poster feeds
    topic ``fan`` (``--changes`` in fragments of ``--fragment``, as fast as accepted) to
    ``--contention-subscribers`` clients, while a probe poster posts 10-change fragments to
    topic ``probe`` (no subscribers) back to back. Accepted POSTs/s of each over the window
    from the first POST to the last client holding every change."""
    directory = workdir / f"workers{workers}"
    directory.mkdir()
    hub = start_hub(
        directory,
        ["fan", "probe"],
        push={"send_buffer_bytes": HUB_SEND_BUFFER},
        extra_args=["--workers", str(workers)],
    )
    fan, probe = Poster(hub.port, quickack=True), Poster(hub.port, quickack=True)
    n, changes = args.contention_subscribers, args.changes
    bodies = fanout_bodies(changes, args.fragment)
    try:
        connect_s = await pool.connect(hub.push_url, n, "fan")
        timeout = args.phase_timeout
        pool.send_all("receive", expected=changes, unit="changes", timeout=timeout)
        done = asyncio.Event()
        probe_done: list[float] = []
        probe_ms: list[float] = []

        async def probing() -> None:
            k = 0
            while not done.is_set():
                now = w3c(datetime.now(UTC))
                body = fragment((k + i, now) for i in range(10))
                k += 10
                sent = time.perf_counter()
                await probe.post("probe", body)
                probe_ms.append((time.perf_counter() - sent) * 1000)
                probe_done.append(time.time())

        cpu = Cpu({"hub": [hub.pid, *children(hub.pid)], "clients": pool.pids})
        started = time.time()
        task = asyncio.create_task(probing())
        for body in bodies:
            await fan.post("fan", body)
        posted = time.time()
        result = merge(await pool.results(timeout + 30))
        done.set()
        await task
        used = cpu.used()
        await pool.call("close", timeout=120)
    except BaseException:
        hub.print_log(40, skip=("connection open", "connection closed"))
        raise
    finally:
        await fan.close()
        await probe.close()
        hub.stop()
    end = result["last_done"] or time.time()
    window = end - started
    probes = sum(1 for t in probe_done if t <= end)
    probe_ms.sort()
    return {
        "workers": workers,
        "subscribers": n,
        "connect_seconds": connect_s,
        "changes": changes,
        "window_seconds": window,
        "fan_posts_per_s": len(bodies) / (posted - started),
        "probe_posts_per_s": probes / window,
        "probe_ms": quantile_points(probe_ms),
        "delivered_changes_per_s": result["got"] / window,
        "complete_clients": result["complete"],
        "cpu_percent": used,
    }


def report_contention(rows: list[dict[str, Any]]) -> None:
    print(
        f"\nIngest while fan-out saturates ({rows[0]['subscribers']:,} subscribers, "
        f"{rows[0]['changes']:,} changes to them; probe: 10-change POSTs to a topic nobody "
        "follows):"
    )
    print(
        f"  {'workers':>7} {'fan POSTs/s':>12} {'probe POSTs/s':>14} {'probe p50':>10} "
        f"{'probe p99':>10} {'delivered/s':>12} {'complete':>9}"
    )
    for r in rows:
        q = r["probe_ms"]
        print(
            f"  {r['workers']:>7} {r['fan_posts_per_s']:>12,.0f} {r['probe_posts_per_s']:>14,.0f} "
            f"{q['p50']:>8.1f}ms {q['p99']:>8.1f}ms {r['delivered_changes_per_s']:>12,.0f} "
            f"{r['complete_clients']:>9}"
        )


# --- report ----------------------------------------------------------------------------------


def report(results: dict[str, Any]) -> None:
    env = results["environment"]
    print(f"command: {env['command']}")
    print(
        f"python {env['python']}, websockets {env['websockets']}, {env['cpus']} cpus, "
        f"RLIMIT_NOFILE {env['nofile']}, {env['client_processes']} client processes"
        + (f", PYTHONPATH={env['pythonpath']}" if env["pythonpath"] else "")
    )
    print(
        f"one-change frame: {results['one_change_frame_bytes']} bytes; "
        f"{env['fragment']}-change frame: {results['fragment_frame_bytes']} bytes"
    )
    httpx_ms = results["httpx_post_10_changes_ms"]
    print(
        f"POST of 10 changes with httpx: median {httpx_ms[len(httpx_ms) // 2]:.1f} ms; "
        "bench poster "
        + ("sets TCP_QUICKACK" if env["poster_quickack"] else "plain (--plain-poster)")
    )
    if results["poster_retries"]:
        print(f"poster retries (hub closed before answering): {results['poster_retries']}")
    checks: list[tuple[str, str, bool]] = []
    if results["fanout"]:
        report_fanout(results["fanout"], env)
    if "latency" in results:
        lat = results["latency"]
        report_latency(lat)
        p50, p99 = lat["accept_to_receive_ms"]["p50"], lat["accept_to_receive_ms"]["p99"]
        checks.append(("p50 <= 5 ms (acceptance -> receive)", f"{p50:.2f} ms", p50 <= 5))
        checks.append(("p99 <= 25 ms (acceptance -> receive)", f"{p99:.2f} ms", p99 <= 25))
    if "memory" in results:
        mem = results["memory"]
        print()
        print(
            f"Memory: hub RSS {mem['rss_0_kb'] / 1024:.1f} MB with 0 subscribers, "
            f"{mem['rss_idle_kb'] / 1024:.1f} MB with {mem['subscribers']:,} idle subscribers "
            f"-> {mem['kb_per_subscriber']:.1f} KB per subscriber "
            f"({mem['rss_after_close_kb'] / 1024:.1f} MB after they closed)"
        )
        per = mem["kb_per_subscriber"]
        checks.append(("<= 30 KB per idle subscriber", f"{per:.1f} KB", per <= 30))
    print()
    print("Targets:")
    for name, value, ok in checks:
        print(f"  {'met ' if ok else 'MISS'}  {name:<50} {value}")


def report_fanout(rows: list[dict[str, Any]], env: dict[str, Any]) -> None:
    print()
    print(
        f"Fan-out (one topic, json; hub: fragments of {env['fragment']} changes posted "
        "back to back; raw: the hub's frame of one fragment, broadcast)"
    )
    print(
        f"{'N':>6} {'changes':>8} {'hub changes/s':>14} {'hub frames/s':>13} {'ch/frame':>9} "
        f"{'ingest ch/s':>12} {'raw changes/s':>14} {'hub/raw':>8}"
    )
    for row in rows:
        hub, raw = row["hub"], row["raw"]
        print(
            f"{row['subscribers']:>6} {hub['changes_posted']:>8} {hub['changes_per_s']:>14,.0f} "
            f"{hub['frames_per_s']:>13,.0f} {hub['changes_per_frame']:>9.1f} "
            f"{hub['ingest_changes_per_s']:>12,.0f} {raw['changes_per_s']:>14,.0f} "
            f"{row['ratio']:>7.2f}x"
        )
    print(
        "  CPU % of one core during each run (hub | valkey | clients | raw server | poster | "
        f"machine of {env['cpus'] * 100} | softirq):"
    )
    for row in rows:
        for kind in ("hub", "raw"):
            used = row[kind]["cpu_percent"]
            extra = ""
            if kind == "hub":
                incomplete = row[kind]["subscribers"] - row[kind]["complete_clients"]
                extra = f"  incomplete clients {incomplete}, closes {row[kind]['closes'] or '-'}"
            print(
                f"  {row['subscribers']:>6} {kind:<4} "
                + " | ".join(f"{v:>5.0f}" for v in used.values())
                + f"  wall {row[kind]['wall_seconds']:.2f} s{extra}"
            )


def report_latency(lat: dict[str, Any]) -> None:
    print()
    print(
        f"Latency ({lat['subscribers']} subscribers, {lat['changes_per_s_posted']:,.0f} changes/s "
        f"posted as 10 per POST, {lat['samples']:,} received changes, "
        f"{lat['changes_per_frame']:.1f} changes/frame)"
    )
    for name, key in (
        ("acceptance -> receive", "accept_to_receive_ms"),
        ("POST start -> receive", "post_start_to_receive_ms"),
    ):
        q = lat[key]
        print(
            f"  {name:<22} p50 {q['p50']:6.2f}  p90 {q['p90']:6.2f}  p99 {q['p99']:6.2f}  "
            f"p99.9 {q['p99.9']:6.2f}  max {q['max']:7.2f} ms  (> 25 ms: {q['over_25ms']:.2%})"
        )
    print(
        f"  POST round trip        p50 {lat['post_ms']['p50']:6.2f}  "
        f"p99 {lat['post_ms']['p99']:6.2f} ms"
    )
    hub_lag = lat["hub_lag_share_within_s"]
    if hub_lag:
        print(
            "  hub acceptance -> broadcast (rspush_push_lag_seconds, per batch): "
            + ", ".join(
                f"<= {float(le) * 1000:g} ms {share:.1%}"
                for le, share in hub_lag.items()
                if le != "+Inf" and float(le) <= 0.05
            )
        )
    spread = lat["client_spread_ms"]
    print(
        f"  one frame, first to last client of a client process: p50 {spread['p50']:.2f} ms, "
        f"p99 {spread['p99']:.2f} ms (client-side share of the latency)"
    )
    print("  CPU %: " + ", ".join(f"{k} {v:.0f}" for k, v in lat["cpu_percent"].items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subscribers", default="100,1000,5000")
    parser.add_argument("--changes", type=int, default=20_000, help="changes posted per N (max)")
    parser.add_argument(
        "--deliveries",
        type=int,
        default=10_000_000,
        help="cap on N x changes per hub fan-out run (keeps large N short)",
    )
    parser.add_argument("--fragment", type=int, default=100, help="changes per POST (fan-out)")
    parser.add_argument("--idle", type=int, default=5000, help="idle subscribers (memory)")
    parser.add_argument("--latency-subscribers", type=int, default=100)
    parser.add_argument("--rate", type=int, default=1000, help="changes/s (latency)")
    parser.add_argument("--latency-seconds", type=float, default=10.0)
    parser.add_argument("--client-procs", type=int, default=2)
    parser.add_argument("--phases", default="memory,fanout,latency", help="a subset, in order")
    parser.add_argument("--phase-timeout", type=float, default=90.0)
    parser.add_argument(
        "--plain-poster",
        action="store_true",
        help="post without TCP_QUICKACK (each POST then waits ~40 ms for the hub's body)",
    )
    parser.add_argument(
        "--ingest-under-fanout",
        metavar="WORKERS",
        help="instead of the phases: ingest while fan-out saturates, on a hub started with "
        "each of these --workers counts in turn (e.g. 1,2)",
    )
    parser.add_argument("--contention-subscribers", type=int, default=1000)
    add_hub_args(parser)
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--raw-server", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--raw-frame", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()

    raise_nofile()
    if args.raw_server is not None:
        asyncio.run(raw_server(args.raw_server, args.raw_frame.read_bytes()))
        return
    args.subscribers = [int(n) for n in args.subscribers.split(",")]
    args.phases = set(args.phases.split(","))
    pool = ClientPool(args.client_procs)
    started = time.monotonic()
    if args.ingest_under_fanout:
        rows = []
        load = os.getloadavg()
        try:
            with tempfile.TemporaryDirectory(prefix="rspush-bench-push-") as tmp:
                for workers in (int(w) for w in args.ingest_under_fanout.split(",")):
                    log("ingest under fan-out: --workers %d", workers)
                    rows.append(asyncio.run(ingest_under_fanout(args, pool, Path(tmp), workers)))
        finally:
            pool.stop()
        print(command_line("bench.bench_push"))
        print(f"load {load[0]:.2f} -> {os.getloadavg()[0]:.2f}, {os.cpu_count()} cpus")
        report_contention(rows)
        if args.json:
            write_json(args.json, {"ingest_under_fanout": rows, "load": [load, os.getloadavg()]})
        return
    try:
        with tempfile.TemporaryDirectory(prefix="rspush-bench-push-") as tmp:
            results = asyncio.run(run(args, pool, Path(tmp)))
    finally:
        pool.stop()
    results["environment"] = {
        "command": command_line("bench.bench_push"),
        "python": platform.python_version(),
        "websockets": websockets_version,
        "cpus": os.cpu_count(),
        "nofile": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        "client_processes": args.client_procs,
        "fragment": args.fragment,
        "poster_quickack": not args.plain_poster,
        "pythonpath": os.environ.get("PYTHONPATH", ""),
        "hub_args": hub_args(args),
        "hub_send_buffer_bytes": HUB_SEND_BUFFER,
        "seconds": time.monotonic() - started,
    }
    report(results)
    print(f"\n(total {results['environment']['seconds']:.0f} s)")
    if args.json:
        write_json(args.json, results)


if __name__ == "__main__":
    main()
