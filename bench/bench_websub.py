"""WebSub delivery benchmark: deliveries/s to many callbacks, and latency beside the
WebSocket push path, measured in the same run.

    .venv/bin/python -m bench.bench_websub [--subscribers 100,1000] [--changes N] [--json FILE]

Starts a real hub (``rs-hub serve``, its own process, embedded valkey-server) on 127.0.0.1
with ``[websub] callback_allow = ["127.0.0.1/32"]``, and ``--receiver-procs`` receiver
processes (``bench.harness.websub_receiver``: a small asyncio HTTP/1.1 server each, keep-alive,
any number of callback paths). Subscriptions are real WebSub subscriptions: a form POSTed to
``/hub``, verified by the hub with a GET the receiver answers.

1. Fan-out, for each N in ``--subscribers``: N callbacks subscribe to one topic; ``--changes``
   changes are posted in fragments of ``--fragment``, one POST after the other. Delivered
   changes/s = N x changes / wall time from the first POST to the last callback holding every
   change; notification POSTs/s the same way (the hub batches changes per notification).
2. Latency: ``--latency-subscribers`` callbacks, ``--rate`` changes/s posted as 10 changes
   every 10 ms with datetime = time of posting, for ``--latency-seconds``: per change,
   receipt time - its datetime (POST start to callback). Then the same load and measure on
   the WebSocket push path (``bench.bench_push``'s latency phase, ``--latency-subscribers``
   WebSocket clients in ``--client-procs`` processes) on the same hub, one after the other.
   The hub's own acceptance -> 2xx histogram (``rspush_websub_lag_seconds``) is reported too.

CPU of every process group and of the machine is read from /proc over each phase. Every wait
has a timeout; all servers bind 127.0.0.1 and are stopped at the end.
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

import httpx

from .bench_push import Bench as PushBench
from .bench_push import quantiles
from .fragments import change_fragment, w3c
from .harness.clients import ClientPool
from .harness.hub import Hub, Poster, add_hub_args, histogram, hub_args, start_hub
from .harness.results import command_line, log, write_json
from .harness.system import Cpu, HelperProcess, Pacer, children, raise_nofile

WEBSUB = {
    "callback_allow": ["127.0.0.1/32"],
    # Every receiver is on 127.0.0.1: one callback host for the hub's per-host bound.
    "per_host_concurrency": 256,
    "max_deliveries": 1024,
    "max_subscriptions_per_host": 10_000,
}


class Receivers:
    def __init__(self, processes: int) -> None:
        self.helpers = [HelperProcess("bench.harness.websub_receiver") for _ in range(processes)]
        self.ports = [int(h.ready["port"]) for h in self.helpers]

    def callbacks(self, name: str, n: int) -> list[str]:
        return [f"http://127.0.0.1:{self.ports[i % len(self.ports)]}/{name}/{i}" for i in range(n)]

    async def stats(self) -> list[dict[str, Any]]:
        return list(await asyncio.gather(*(h.ask(cmd="stats") for h in self.helpers)))

    async def samples(self) -> list[float]:
        parts = await asyncio.gather(*(h.ask(cmd="samples") for h in self.helpers))
        return sorted(v for p in parts for v in p["latency_ms"])

    async def reset(self) -> None:
        await asyncio.gather(*(h.ask(cmd="reset") for h in self.helpers))

    @property
    def pids(self) -> list[int]:
        return [h.process.pid for h in self.helpers]

    def stop(self) -> None:
        for helper in self.helpers:
            helper.stop()


class Bench:
    def __init__(self, args: argparse.Namespace, hub: Hub, receivers: Receivers) -> None:
        self.args = args
        self.hub = hub
        self.receivers = receivers
        self.http = httpx.AsyncClient(
            timeout=60, trust_env=False, limits=httpx.Limits(max_connections=64)
        )
        self.poster = Poster(hub.port, quickack=True)

    def groups(self) -> dict[str, list[int]]:
        return {
            "hub": [self.hub.pid],
            "valkey": children(self.hub.pid),
            "receivers": self.receivers.pids,
            "bench (poster)": [os.getpid()],
        }

    async def gauge(self, name: str) -> float:
        for line in (await self.http.get(f"{self.hub.base}/metrics")).text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return 0.0

    async def subscribe(self, topic: str, callbacks: list[str]) -> float:
        """Subscribe every callback; wait until the hub delivers to all. Seconds taken."""
        started = time.monotonic()
        before = await self.gauge("rspush_websub_subscriptions")
        slots = asyncio.Semaphore(32)

        async def one(callback: str) -> None:
            form = {
                "hub.mode": "subscribe",
                "hub.topic": f"{self.hub.base}/topics/{topic}",
                "hub.callback": callback,
            }
            async with slots:
                for attempt in (1, 2, 3):
                    try:
                        response = await self.http.post(f"{self.hub.base}/hub", data=form)
                        break
                    except httpx.TransportError:
                        # a keep-alive connection the hub closed as idle: send again
                        if attempt == 3:
                            raise
            if response.status_code != 202:
                raise RuntimeError(f"subscribe: {response.status_code} {response.text[:200]}")

        target = before + len(callbacks)
        deadline = time.monotonic() + self.args.phase_timeout
        # A verification can fail on a loaded machine (its GET times out): the subscriber's
        # remedy is to subscribe again, which re-verifies (a renewal for those already in).
        while True:
            await asyncio.gather(*(one(c) for c in callbacks))
            settle = time.monotonic() + 15
            while time.monotonic() < settle:
                if (
                    await self.gauge("rspush_websub_subscriptions") >= target
                    and await self.gauge("rspush_websub_delivering") >= target
                ):
                    return time.monotonic() - started
                await asyncio.sleep(0.2)
            if time.monotonic() > deadline:
                raise RuntimeError("timed out waiting for the subscriptions")
            log("  subscriptions not all verified yet: subscribing again")

    async def fanout(self, n: int) -> dict[str, Any]:
        topic = f"fan{n}"
        subscribe_s = await self.subscribe(topic, self.receivers.callbacks(topic, n))
        await self.receivers.reset()
        changes = self.args.changes
        start = datetime.now(UTC) - timedelta(hours=1)
        bodies = [
            change_fragment(
                (
                    (k, w3c(start + timedelta(microseconds=10 * k)))
                    for k in range(i, min(i + self.args.fragment, changes))
                ),
                distinct=10_000,
            )
            for i in range(0, changes, self.args.fragment)
        ]
        cpu = Cpu(self.groups())
        started = time.time()
        for body in bodies:
            await self.poster.post(topic, body)
        posted = time.time()
        expected = n * changes
        deadline = time.monotonic() + self.args.phase_timeout
        while True:
            parts = await self.receivers.stats()
            got = sum(p["changes"] for p in parts)
            if got >= expected:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"fan-out {n}: {got} of {expected} changes delivered")
            await asyncio.sleep(0.05)
        last = max(p["last"] for p in parts)
        used = cpu.used()
        wall = last - started
        posts = sum(p["posts"] for p in parts)
        return {
            "subscribers": n,
            "changes": changes,
            "subscribe_s": subscribe_s,
            "post_s": posted - started,
            "wall_s": wall,
            "changes_per_s": expected / wall,
            "notifications_per_s": posts / wall,
            "changes_per_notification": expected / max(1, posts),
            "cpu_percent": used,
        }

    async def latency(self) -> dict[str, Any]:
        n = self.args.latency_subscribers
        topic = "hooklatency"
        await self.subscribe(topic, self.receivers.callbacks(topic, n))
        await self.receivers.reset()
        per_post = 10
        interval = per_post / self.args.rate
        posts = round(self.args.latency_seconds / interval)
        cpu = Cpu(self.groups())
        pacer = Pacer(posts, interval)
        async for k in pacer.steps():
            now = w3c(datetime.now(UTC))
            body = change_fragment(
                ((k * per_post + i, now) for i in range(per_post)), distinct=10_000
            )
            await self.poster.post(topic, body)
        rate = posts * per_post / (time.monotonic() - pacer.started)
        expected = n * posts * per_post
        # Bounded: a hub that cannot keep up reports what arrived within the drain time.
        deadline = time.monotonic() + self.args.latency_drain
        while True:
            parts = await self.receivers.stats()
            got = sum(p["changes"] for p in parts)
            if got >= expected or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        used = cpu.used()
        samples = await self.receivers.samples()
        hub_lag = await histogram(self.http, self.hub.base, "rspush_websub_lag_seconds", topic)
        return {
            "subscribers": n,
            "changes_per_s_target": self.args.rate,
            "changes_per_s_posted": rate,
            "posts_late": pacer.late,
            "changes_expected": expected,
            "changes_received": got,
            "changes_per_notification": got / max(1, sum(p["posts"] for p in parts)),
            "post_start_to_receive_ms": quantiles(samples),
            "hub_lag_share_within_s": hub_lag,
            "cpu_percent": used,
        }

    async def close(self) -> None:
        await self.http.aclose()
        await self.poster.close()


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    topics = [*(f"fan{n}" for n in args.subscribers), "hooklatency", "latency", "warm"]
    hub = start_hub(workdir, topics, sections={"websub": WEBSUB}, extra_args=hub_args(args))
    receivers = Receivers(args.receiver_procs)
    bench = Bench(args, hub, receivers)
    results: dict[str, Any] = {"fanout": []}
    try:
        for n in args.subscribers:
            log("fan-out: %d callbacks, %d changes", n, args.changes)
            results["fanout"].append(await bench.fanout(n))
        log("latency (WebSub): %d callbacks, %d changes/s", args.latency_subscribers, args.rate)
        results["latency_websub"] = await bench.latency()
        pool = ClientPool(args.client_procs)
        try:
            push_args = argparse.Namespace(
                latency_subscribers=args.latency_subscribers,
                rate=args.rate,
                latency_seconds=args.latency_seconds,
                plain_poster=False,
            )
            push = PushBench(push_args, hub, pool)
            log(
                "latency (WebSocket): %d clients, %d changes/s", args.latency_subscribers, args.rate
            )
            try:
                results["latency_websocket"] = await push.latency()
            finally:
                await push.http.aclose()
                await push.poster.close()
        finally:
            pool.stop()
    except BaseException:
        hub.print_log(40)
        raise
    finally:
        await bench.close()
        receivers.stop()
        hub.stop()
    return results


def report(results: dict[str, Any]) -> None:
    env = results["environment"]
    print(f"command: {env['command']}")
    print(f"python {env['python']}, {env['cpus']} cpus, load before: {env['load_before']}")
    print()
    print("Fan-out (WebSub, one topic, N callbacks on loopback):")
    print("      N   changes   changes/s delivered   notifications/s   changes/notif   CPU %")
    for row in results["fanout"]:
        cpu = ", ".join(f"{k} {v}" for k, v in row["cpu_percent"].items())
        print(
            f"  {row['subscribers']:>5} {row['changes']:>9} {row['changes_per_s']:>21,.0f}"
            f" {row['notifications_per_s']:>17,.0f} {row['changes_per_notification']:>15.1f}"
            f"   {cpu}"
        )
    hook, ws = results["latency_websub"], results["latency_websocket"]
    print()
    print(
        f"Latency at {hook['subscribers']} subscribers x {hook['changes_per_s_target']} "
        "changes/s (POST start -> receipt, ms):"
    )
    for name, row in (("WebSub", hook), ("WebSocket", ws)):
        q = row["post_start_to_receive_ms"]
        print(f"  {name:<10} p50 {q['p50']:8.2f}  p90 {q['p90']:8.2f}  p99 {q['p99']:8.2f}")
    q = ws["accept_to_receive_ms"]
    print(f"  WebSocket acceptance -> receive: p50 {q['p50']:.2f}, p99 {q['p99']:.2f} ms")
    print(
        f"  WebSub: {hook['changes_received']:,} of {hook['changes_expected']:,} changes, "
        f"{hook['changes_per_notification']:.1f} per notification; hub lag (acceptance -> 2xx) "
        f"share within 0.05 s: {hook['hub_lag_share_within_s'].get('0.05', float('nan')):.3f}"
    )
    ratio = hook["post_start_to_receive_ms"]["p50"] / ws["post_start_to_receive_ms"]["p50"]
    print(f"  p50 ratio WebSub / WebSocket: {ratio:.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subscribers", default="100,1000")
    parser.add_argument("--changes", type=int, default=2000, help="changes posted per N")
    parser.add_argument("--fragment", type=int, default=100, help="changes per POST (fan-out)")
    parser.add_argument("--latency-subscribers", type=int, default=100)
    parser.add_argument("--rate", type=int, default=1000, help="changes/s (latency)")
    parser.add_argument("--latency-seconds", type=float, default=10.0)
    parser.add_argument(
        "--latency-drain", type=float, default=60.0, help="seconds to wait for the last changes"
    )
    parser.add_argument("--receiver-procs", type=int, default=2)
    parser.add_argument("--client-procs", type=int, default=2)
    parser.add_argument("--phase-timeout", type=float, default=180.0)
    parser.add_argument("--json", type=Path, help="also write the results here")
    add_hub_args(parser)
    args = parser.parse_args()
    raise_nofile()
    args.subscribers = [int(n) for n in args.subscribers.split(",")]
    load_before = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rspush-bench-websub-") as tmp:
        results = asyncio.run(run(args, Path(tmp)))
    results["environment"] = {
        "command": command_line("bench.bench_websub"),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_before": load_before,
        "load_after": " ".join(Path("/proc/loadavg").read_text().split()[:3]),
        "seconds": time.monotonic() - started,
    }
    report(results)
    print(
        f"\n(total {results['environment']['seconds']:.0f} s, load after: "
        f"{results['environment']['load_after']})"
    )
    if args.json:
        write_json(args.json, results)


if __name__ == "__main__":
    main()
