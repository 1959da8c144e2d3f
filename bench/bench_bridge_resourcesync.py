"""ResourceSync bridge benchmark: a hub following a large pull-only Source.

    .venv/bin/python -m bench.bench_bridge_resourcesync [--changes 200000]
        [--list-entries 10000] [--step-entries 10000] [--interval 2] [--latency-changes 20]
        [--phases bridge,hub,latency] [--json FILE]

The Source is written into a temporary directory — a Capability List, a Resource List, a
Change List Archive naming ``--changes / --list-entries`` closed Change Lists, an open
Change List — and served by a static file server (Python's ``http.server`` with an ``ETag``
and ``304`` for ``If-None-Match``; its own process, 127.0.0.1). Files are replaced
atomically (rename), as a Source publishing static files would. Three phases, each beside a
baseline measured in the same run:

1. **bridge** — catch-up of the bridge alone
   (:class:`rspush.hub.bridges.resourcesync.ResourceSyncBridge`, stepped as the runner steps
   it, nothing appended): records/s, beside the **bare parse rate** of the same list bytes
   (:func:`rspush.resourcesync.parse_document` from memory, median of 3).
2. **hub** — the same catch-up through a real hub (``rs-hub serve``, its own process,
   embedded valkey-server, ``[[bridges]]`` with ``max_changes_per_step = --step-entries``):
   from the hub answering ``/readyz`` to the topic holding ``--changes`` changes (its stream
   length on ``/status``): records/s, the steps appended with their checkpoints in Redis
   included.
3. **latency** — at ``--interval`` seconds: ``--latency-changes`` changes made on the Source
   at random moments (a new version of a resource and the open Change List rewritten).
   Bridge latency = arrival of the change at a push client of the hub's topic - the moment
   the Source's files were replaced. Baseline: the same Destination polling the Source
   directly at the same interval (a conditional GET of the open Change List every
   ``--interval`` s, as ``rs-subscribe`` polls a Source without push): detection - the same
   moment.

CPU seconds of the processes are read from /proc; the load average is printed beside every
figure (a shared machine: compare ratios, not absolute rates). ``--serve DIR`` is the
static server's own entry point.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.server
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from rspush.hub.bridges.http import BridgeHttp
from rspush.hub.bridges.resourcesync import ResourceSyncBridge
from rspush.hub.settings import BridgeConfig
from rspush.protocol import TopicRequest
from rspush.resourcesync import Document, Entry, Metadata, parse_document, serialise
from rspush.resourcesync.models import Link
from rspush.subscriber.push import Change, push_changes

from .harness.hub import Hub, hub_config
from .harness.results import command_line, git_state, log, percentile, write_json
from .harness.system import cpu_s, free_port, raise_nofile, stop_process, wait_until

T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(days=2)
TOPIC = "rs"


# --- the Source ------------------------------------------------------------------------------


def replace_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (a reader sees the old or the new file)."""
    partial = path.with_suffix(".partial")
    partial.write_bytes(data)
    os.replace(partial, path)


class Source:
    """The Source's documents under ``root``, served at ``base``."""

    def __init__(self, root: Path, base: str) -> None:
        self.root = root
        self.base = base
        self.up = (Link(rel="up", href=f"{base}/capabilitylist.xml"),)
        self.open: list[Entry] = []
        self.open_from = T0
        self.moment = T0

    def doc(self, capability: str, entries: list[Entry], **md: Any) -> bytes:
        return serialise(
            Document(
                md=Metadata.model_validate({"capability": capability, **md}),
                links=self.up,
                entries=tuple(entries),
            )
        )

    def write(self, changes: int, per_list: int) -> list[Path]:
        """Resource List, closed lists of ``per_list`` changes, archive, empty open list,
        Capability List; the closed lists' paths."""
        resources = [
            Entry(loc=f"{self.base}/r/{n}", lastmod=T0, md=Metadata(length=10)) for n in range(100)
        ]
        replace_file(self.root / "resourcelist.xml", self.doc("resourcelist", resources, at=T0))
        lists: list[Path] = []
        listed: list[Entry] = []
        for number in range(0, changes, per_list):
            start = self.moment
            entries = []
            for n in range(number, min(number + per_list, changes)):
                self.moment += timedelta(microseconds=100)
                entries.append(
                    Entry(
                        loc=f"{self.base}/r/{n % 5000}",
                        md=Metadata(
                            change="updated", datetime=self.moment, length=n, hash=f"md5:{n:032x}"
                        ),
                    )
                )
            self.moment += timedelta(microseconds=100)
            path = self.root / f"changelist-{len(lists):05d}.xml"
            interval = {"from": start, "until": self.moment}
            path.write_bytes(self.doc("changelist", entries, **interval))
            lists.append(path)
            listed.append(
                Entry(loc=f"{self.base}/{path.name}", md=Metadata.model_validate(interval))
            )
        replace_file(self.root / "changelist-archive.xml", self.doc("changelist-archive", listed))
        self.open_from = self.moment
        self.write_open()
        capabilities = [
            Entry(loc=f"{self.base}/{name}.xml", md=Metadata(capability=name))
            for name in ("resourcelist", "changelist", "changelist-archive")
        ]
        replace_file(self.root / "capabilitylist.xml", self.doc("capabilitylist", capabilities))
        return lists

    def write_open(self) -> None:
        replace_file(
            self.root / "changelist.xml",
            self.doc("changelist", self.open, **{"from": self.open_from}),
        )

    def change(self, name: str) -> float:
        """One change, now: a resource's new version in the open list; when it was served."""
        self.moment = max(self.moment + timedelta(microseconds=1), datetime.now(UTC))
        self.open.append(
            Entry(loc=f"{self.base}/{name}", md=Metadata(change="updated", datetime=self.moment))
        )
        self.write_open()
        return time.monotonic()


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Static files with an ETag (size and mtime in ns) and ``304`` for ``If-None-Match``."""

    def send_head(self):  # type: ignore[no-untyped-def]
        path = Path(self.translate_path(self.path))
        with contextlib.suppress(OSError):
            info = path.stat()
            etag = f'"{info.st_size:x}-{info.st_mtime_ns:x}"'
            if self.headers.get("If-None-Match") == etag:
                self.send_response(304)
                self.send_header("ETag", etag)
                self.end_headers()
                return None
            self._etag = etag
        return super().send_head()

    def end_headers(self) -> None:
        etag = getattr(self, "_etag", None)
        if etag is not None:
            self.send_header("ETag", etag)
            self._etag = None
        super().end_headers()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


def serve(directory: str, port: int) -> None:
    handler = lambda *a: _Handler(*a, directory=directory)  # noqa: E731
    with http.server.ThreadingHTTPServer(("127.0.0.1", port), handler) as server:
        server.serve_forever()


def start_server(root: Path, port: int) -> subprocess.Popen[bytes]:
    server = subprocess.Popen(
        [sys.executable, "-m", "bench.bench_bridge_resourcesync", "--serve", str(root), str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_until(lambda: _answers(port), "the static server", 10)
    return server


def _answers(port: int) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(f"http://127.0.0.1:{port}/capabilitylist.xml", timeout=1).is_success
    return False


# --- phase 1: the bridge alone -------------------------------------------------------------


def parse_rate(lists: list[Path], entries: int, repeat: int = 3) -> float:
    """Entries/s of parsing the list bytes (already read) with the one hardened parser."""
    blobs = [path.read_bytes() for path in lists]
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        for blob in blobs:
            parse_document(blob)
        times.append(time.perf_counter() - started)
    return entries / statistics.median(times)


async def bridge_catch_up(url: str, step_entries: int) -> dict[str, Any]:
    config = BridgeConfig(
        topic="bench", kind="resourcesync", url=url, max_changes_per_step=step_entries
    )
    http_ = BridgeHttp(timeout_s=config.timeout_s, max_bytes=config.max_bytes)
    bridge = ResourceSyncBridge(config, http_)
    checkpoint: str | None = None
    changes = steps = 0
    started = time.perf_counter()
    cpu = time.process_time()
    try:
        while True:
            step = await bridge.step(checkpoint)
            if step is None:
                break
            steps += 1
            if not step.baseline:
                changes += len(step.changes)
            checkpoint = step.checkpoint
            if not step.more:
                break
    finally:
        await http_.aclose()
    elapsed = time.perf_counter() - started
    return {
        "changes": changes,
        "steps": steps,
        "seconds": round(elapsed, 3),
        "records_per_s": round(changes / elapsed),
        "cpu_s": round(time.process_time() - cpu, 2),
        "requests": bridge.requests,
        "not_modified": bridge.not_modified,
    }


# --- phase 2 and 3: through a hub ------------------------------------------------------------


def start_bridge_hub(workdir: Path, url: str, interval: float, step_entries: int) -> Hub:
    """``rs-hub serve`` with one bridged topic (no Source may post to it)."""
    workdir.mkdir(parents=True, exist_ok=True)
    port, push_port = free_port(), free_port()
    text = hub_config(port, push_port, ["unused"], settings={"rotation_interval_s": 0.5})
    text += (
        f'[[topics]]\nname = "{TOPIC}"\n[[bridges]]\ntopic = "{TOPIC}"\nkind = "resourcesync"\n'
        f'url = "{url}"\ninterval_s = {interval}\nmax_changes_per_step = {step_entries}\n'
    )
    config = workdir / "hub.toml"
    config.write_text(text)
    command = [str(Path(sys.executable).parent / "rs-hub"), "serve", "--config", str(config)]
    process = subprocess.Popen(
        [*command, "--port", str(port), "--data-dir", str(workdir / "data")],
        stdout=subprocess.DEVNULL,
        stderr=(workdir / "hub.log").open("wb"),
        preexec_fn=raise_nofile,
    )
    return Hub(process, workdir, port, push_port)


async def bridged(client: httpx.AsyncClient, hub: Hub) -> int:
    """The changes the topic holds (its stream's length on ``/status``). Not the
    ``rspush_bridge_changes_total`` counter: a step whose commit reached Redis but whose
    answer timed out is committed (the retry finds the checkpoint moved) yet not counted."""
    with contextlib.suppress(httpx.HTTPError, ValueError, KeyError, TypeError):
        reply = await client.get(f"{hub.base}/status", headers={"Accept": "application/json"})
        for topic in reply.json()["topics"]:
            if topic["name"] == TOPIC:
                return int(topic["stream_length"] or 0)
    return 0


async def hub_catch_up(hub: Hub, changes: int, timeout: float) -> dict[str, Any]:
    """From the hub's start (its bridge starts with it) to every change appended; the rate
    counts from when it answers ``/readyz`` (startup, valkey included, left out)."""
    started = time.perf_counter()
    ready: float | None = None
    async with httpx.AsyncClient(timeout=10, trust_env=False) as client:
        deadline = time.monotonic() + timeout
        while True:
            if ready is None:
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(f"{hub.base}/readyz")).status_code == 200:
                        ready = time.perf_counter()
            elif await bridged(client, hub) >= changes:
                break
            if hub.process.poll() is not None or time.monotonic() > deadline:
                hub.print_log(30)
                raise RuntimeError("the hub did not catch up")
            await asyncio.sleep(0.02)
    done = time.perf_counter()
    return {
        "startup_s": round(ready - started, 3),
        "seconds": round(done - ready, 3),
        "records_per_s": round(changes / (done - ready)),
    }


async def latency(source: Source, hub: Hub, interval: float, count: int) -> dict[str, Any]:
    """Changes at random moments; when a push client of the hub and a direct poller of the
    Source see each."""
    made: dict[str, float] = {}
    pushed: dict[str, float] = {}
    polled: dict[str, float] = {}
    subscribed = asyncio.Event()

    async def push_client() -> None:
        async for item in push_changes(hub.push_url, [TopicRequest(topic=TOPIC)]):
            if isinstance(item, Change):
                pushed.setdefault(item.loc, time.monotonic())
            else:
                subscribed.set()

    async def poller() -> None:
        url = f"{source.base}/changelist.xml"
        etag: str | None = None
        async with httpx.AsyncClient(timeout=10, trust_env=False) as client:
            while True:
                reply = await client.get(url, headers={"If-None-Match": etag} if etag else {})
                if reply.status_code == 200:
                    etag = reply.headers.get("etag")
                    now = time.monotonic()
                    for entry in parse_document(reply.content).entries:
                        polled.setdefault(entry.loc, now)
                await asyncio.sleep(interval)

    tasks = [asyncio.create_task(push_client()), asyncio.create_task(poller())]
    try:
        await asyncio.wait_for(subscribed.wait(), 30)
        rng = random.Random(1)
        for n in range(count):
            await asyncio.sleep(rng.uniform(0.5, 1.5) * interval)
            name = f"latency/{n}"
            made[f"{source.base}/{name}"] = source.change(name)
        deadline = time.monotonic() + 3 * interval + 30
        while not (set(made) <= set(pushed) and set(made) <= set(polled)):
            if time.monotonic() > deadline:
                hub.print_log(30)
                raise RuntimeError(f"changes not seen: {set(made) - set(pushed)}")
            await asyncio.sleep(0.05)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def quantiles(seen: dict[str, float]) -> dict[str, float]:
        lags = sorted((seen[uri] - made[uri]) * 1000 for uri in made)
        return {
            "p50_ms": round(percentile(lags, 0.5), 1),
            "p90_ms": round(percentile(lags, 0.9), 1),
            "max_ms": round(lags[-1], 1),
        }

    return {"changes": count, "bridge": quantiles(pushed), "direct_poll": quantiles(polled)}


# --- the run -------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    phases = set(args.phases.split(","))
    results: dict[str, Any] = {
        "command": command_line("bench.bench_bridge_resourcesync"),
        "checkout": git_state(),
    }
    with tempfile.TemporaryDirectory(prefix="bench-bridge-rs-") as tmp:
        root = Path(tmp) / "source"
        root.mkdir()
        port = free_port()
        source = Source(root, f"http://127.0.0.1:{port}")
        log("writing %s changes in lists of %s", args.changes, args.list_entries)
        lists = source.write(args.changes, args.list_entries)
        results["lists"] = len(lists)
        results["list_bytes"] = sum(p.stat().st_size for p in lists)
        server = start_server(root, port)
        capability_list = f"{source.base}/capabilitylist.xml"
        try:
            if "bridge" in phases:
                results["load_bridge"] = [round(v, 2) for v in os.getloadavg()]
                log("bare parse of the same lists")
                parsed = parse_rate(lists, args.changes)
                log("bridge catch-up (no hub)")
                catch = asyncio.run(bridge_catch_up(capability_list, args.step_entries))
                assert catch["changes"] == args.changes, catch
                results["bridge"] = catch
                results["bare_parse_records_per_s"] = round(parsed)
                results["bridge_over_parse"] = round(catch["records_per_s"] / parsed, 3)
                log("bridge alone: %s; bare parse %s records/s", catch, round(parsed))
            if phases & {"hub", "latency"}:
                results["load_hub"] = [round(v, 2) for v in os.getloadavg()]
                log("hub catch-up")
                hub = start_bridge_hub(
                    Path(tmp) / "hub", capability_list, args.interval, args.step_entries
                )
                cpu = {"hub": cpu_s(hub.pid), "server": cpu_s(server.pid)}
                try:
                    through = asyncio.run(hub_catch_up(hub, args.changes, args.timeout))
                    through["hub_cpu_s"] = round(cpu_s(hub.pid) - cpu["hub"], 2)
                    through["server_cpu_s"] = round(cpu_s(server.pid) - cpu["server"], 2)
                    results["hub"] = through
                    log("through the hub: %s", through)
                    if "bridge" in results:
                        results["hub_over_bridge"] = round(
                            through["records_per_s"] / results["bridge"]["records_per_s"], 3
                        )
                    if "latency" in phases:
                        results["load_latency"] = [round(v, 2) for v in os.getloadavg()]
                        log("latency at a %s s poll interval", args.interval)
                        results["latency"] = asyncio.run(
                            latency(source, hub, args.interval, args.latency_changes)
                        )
                        results["latency"]["interval_s"] = args.interval
                finally:
                    hub.stop()
        finally:
            stop_process(server)
    results["load_after"] = [round(v, 2) for v in os.getloadavg()]
    return results


def report(results: dict[str, Any]) -> None:
    size = f"{results['lists']} lists, {results['list_bytes'] / 1e6:.1f} MB"
    if "bridge" in results:
        catch = results["bridge"]
        print(
            f"bridge alone: {catch['changes']:,} changes ({size}) at "
            f"{catch['records_per_s']:,} records/s ({catch['seconds']} s, {catch['steps']} "
            f"steps, {catch['requests']} GETs, {catch['not_modified']} 304) | bare parse of "
            f"the same lists {results['bare_parse_records_per_s']:,} records/s | ratio "
            f"{results['bridge_over_parse']} | load {results['load_bridge']}"
        )
    if "hub" in results:
        hub = results["hub"]
        print(
            f"through the hub: {hub['records_per_s']:,} records/s ({hub['seconds']} s after a "
            f"{hub['startup_s']} s startup; hub CPU "
            f"{hub['hub_cpu_s']} s) | over the bridge alone: {results.get('hub_over_bridge')} "
            f"| load {results['load_hub']}"
        )
    if "latency" in results:
        lat = results["latency"]
        print(
            f"latency at a {lat['interval_s']} s interval, {lat['changes']} changes: bridge + "
            f"push p50 {lat['bridge']['p50_ms']} ms p90 {lat['bridge']['p90_ms']} ms | direct "
            f"poll p50 {lat['direct_poll']['p50_ms']} ms p90 {lat['direct_poll']['p90_ms']} ms "
            f"| load {results['load_latency']}"
        )
    print(f"load after: {results['load_after']}")


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--serve":
        serve(sys.argv[2], int(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=200_000, help="changes in the archive")
    parser.add_argument("--list-entries", type=int, default=10_000, help="entries per list")
    parser.add_argument(
        "--step-entries", type=int, default=10_000, help="max_changes_per_step of the bridge"
    )
    parser.add_argument("--interval", type=float, default=2.0, help="poll interval (s)")
    parser.add_argument("--latency-changes", type=int, default=20, help="changes timed")
    parser.add_argument("--timeout", type=float, default=900, help="catch-up deadline (s)")
    parser.add_argument("--phases", default="bridge,hub,latency", help="phases to run")
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args()
    results = run(args)
    report(results)
    if args.json:
        write_json(args.json, results)


if __name__ == "__main__":
    main()
