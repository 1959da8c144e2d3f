"""ResourceSync bridge benchmark: following a large pull-only Source.

    .venv/bin/python -m bench.bench_bridge_resourcesync [--changes 200000]
        [--list-entries 10000] [--step-entries 1000] [--json FILE]

Writes a Source into a temporary directory — a Capability List, a Resource List, a Change
List Archive naming ``--changes / --list-entries`` closed Change Lists, an empty open Change
List — and serves it with Python's own static file server (``http.server``, its own process,
127.0.0.1; ``Last-Modified`` and ``304`` for ``If-Modified-Since``).

**Catch-up throughput:** :class:`rspush.hub.bridges.resourcesync.ResourceSyncBridge` from the
Capability List, stepped as the framework steps it (``more`` → at once) until it has
republished every change: records/s over the whole catch-up (HTTP, parse, placing, checkpoint
JSON). Baseline in the same run: the bare parse rate of the same list bytes
(:func:`rspush.resourcesync.parse_document`, read from disk, median of 3), i.e. what the
bridge costs beyond reading the documents.

CPU seconds of this process and the server are read from /proc. The load average is printed
beside the figures (a shared machine: compare ratios, not absolute rates).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rspush.hub.bridges.http import BridgeHttp
from rspush.hub.bridges.resourcesync import ResourceSyncBridge
from rspush.hub.settings import BridgeConfig
from rspush.resourcesync import Document, Entry, Metadata, parse_document, serialise
from rspush.resourcesync.models import Link

from .harness.results import command_line, git_state, log, write_json
from .harness.system import cpu_s, free_port, stop_process, wait_until

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def write_source(root: Path, base: str, changes: int, per_list: int) -> list[Path]:
    """The Source's documents under ``root``; the closed Change Lists' paths."""
    up = (Link(rel="up", href=f"{base}/capabilitylist.xml"),)

    def doc(capability: str, entries: list[Entry], root_tag: str = "urlset", **md: Any) -> bytes:
        return serialise(
            Document(
                root=root_tag,  # type: ignore[arg-type]
                md=Metadata(capability=capability, **md),
                links=up,
                entries=tuple(entries),
            )
        )

    resources = [
        Entry(loc=f"{base}/r/{n}", lastmod=T0, md=Metadata(length=10, hash=f"md5:{n:032x}"))
        for n in range(100)
    ]
    (root / "resourcelist.xml").write_bytes(doc("resourcelist", resources, at=T0))
    lists: list[Path] = []
    listed: list[Entry] = []
    moment = T0
    for number in range(0, changes, per_list):
        start = moment
        entries = []
        for n in range(number, min(number + per_list, changes)):
            moment += timedelta(milliseconds=1)
            entries.append(
                Entry(
                    loc=f"{base}/r/{n % 5000}",
                    md=Metadata(change="updated", datetime=moment, length=n, hash=f"md5:{n:032x}"),
                )
            )
        moment += timedelta(milliseconds=1)
        path = root / f"changelist-{len(lists):05d}.xml"
        path.write_bytes(doc("changelist", entries, **{"from": start, "until": moment}))
        lists.append(path)
        listed.append(
            Entry(
                loc=f"{base}/{path.name}",
                md=Metadata.model_validate({"from": start, "until": moment}),
            )
        )
    (root / "changelist-archive.xml").write_bytes(doc("changelist-archive", listed))
    (root / "changelist.xml").write_bytes(doc("changelist", [], **{"from": moment}))
    capabilities = [
        Entry(loc=f"{base}/{name}.xml", md=Metadata(capability=capability))
        for name, capability in (
            ("resourcelist", "resourcelist"),
            ("changelist", "changelist"),
            ("changelist-archive", "changelist-archive"),
        )
    ]
    (root / "capabilitylist.xml").write_bytes(doc("capabilitylist", capabilities))
    return lists


def parse_rate(lists: list[Path], entries: int, repeat: int = 3) -> float:
    """Entries/s of parsing the list bytes (already read) with the one hardened parser."""
    blobs = [path.read_bytes() for path in lists]
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        for blob in blobs:
            parse_document(blob)
        times.append(time.perf_counter() - started)
    return entries / sorted(times)[len(times) // 2]


async def catch_up(url: str, step_entries: int) -> dict[str, Any]:
    config = BridgeConfig(
        topic="bench", kind="resourcesync", url=url, max_changes_per_step=step_entries
    )
    http = BridgeHttp(timeout_s=config.timeout_s, max_bytes=config.max_bytes)
    bridge = ResourceSyncBridge(config, http)
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
        await http.aclose()
    elapsed = time.perf_counter() - started
    return {
        "changes": changes,
        "steps": steps,
        "seconds": round(elapsed, 3),
        "records_per_s": round(changes / elapsed),
        "cpu_s": round(time.process_time() - cpu, 2),
        "requests": bridge.reader.requests,
        "not_modified": bridge.reader.not_modified,
        "problems": bridge.problems,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-bridge-rs-") as tmp:
        root = Path(tmp)
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        log("writing %s changes in lists of %s", args.changes, args.list_entries)
        lists = write_source(root, base, args.changes, args.list_entries)
        size = sum(p.stat().st_size for p in lists)
        server = subprocess.Popen(
            [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
            cwd=root,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_until(lambda: _answers(port), "the static server", 10)
            load = os.getloadavg()
            log("parsing the same lists (baseline)")
            parsed = parse_rate(lists, args.changes)
            log("bridge catch-up")
            server_cpu = cpu_s(server.pid)
            result = asyncio.run(catch_up(f"{base}/capabilitylist.xml", args.step_entries))
            result["server_cpu_s"] = round(cpu_s(server.pid) - server_cpu, 2)
        finally:
            stop_process(server)
    assert result["changes"] == args.changes, result
    return {
        "command": command_line("bench.bench_bridge_resourcesync"),
        "checkout": git_state(),
        "load_before": [round(v, 2) for v in load],
        "load_after": [round(v, 2) for v in os.getloadavg()],
        "lists": len(lists),
        "list_bytes": size,
        "catch_up": result,
        "bare_parse_records_per_s": round(parsed),
        "ratio": round(result["records_per_s"] / parsed, 3),
    }


def _answers(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--changes", type=int, default=200_000, help="changes in the archive")
    parser.add_argument("--list-entries", type=int, default=10_000, help="entries per list")
    parser.add_argument(
        "--step-entries", type=int, default=1000, help="entries one bridge step returns"
    )
    parser.add_argument("--json", help="write the results to this file")
    args = parser.parse_args()
    results = run(args)
    catch = results["catch_up"]
    print(
        f"catch-up of {catch['changes']:,} changes in {results['lists']} lists "
        f"({results['list_bytes'] / 1e6:.1f} MB): {catch['records_per_s']:,} records/s "
        f"({catch['seconds']} s, {catch['steps']} steps, {catch['requests']} GETs, "
        f"{catch['not_modified']} 304) | bare parse of the same lists: "
        f"{results['bare_parse_records_per_s']:,} records/s | ratio {results['ratio']} | "
        f"load {results['load_before']} -> {results['load_after']}"
    )
    if args.json:
        write_json(args.json, results)


if __name__ == "__main__":
    main()
