"""File-tree bridge benchmark: a file written at the origin → the same file applied at an
``rs-subscribe`` Destination, through ``rs-publish watch`` and a hub (push), beside the same
Destination agent polling a plain ResourceSync Source in the same run.

    .venv/bin/python -m bench.bench_filetree [--files 300] [--rate 10] [--quiet 0.2]
        [--poll-interval 1.0] [--json FILE]

Processes, all on 127.0.0.1: a real hub (``rs-hub serve``, embedded valkey-server);
``rs-publish watch`` on the tree ``push/`` (``--quiet`` seconds of quiet before a file is
published); two static web servers (``python -m http.server``), one serving ``push/``, one
serving ``plain/``. In this process, on one event loop: two Destination agents
(:class:`rspush.subscriber.agent.Agent`, what ``rs-subscribe run`` runs) and the writer.

- **Bridge**: the agent follows the hub's topic by push; the files it fetches come from the
  ``push/`` server.
- **Plain Source (baseline)**: ``plain/`` is a ResourceSync Source as a static site is one: a
  Capability List, a Resource List (empty, at the start) and one Change List regenerated
  (written whole, then renamed into place) after every file written, listing every change
  so far with its length and md5. The agent polls it every ``--poll-interval`` seconds.

The writer writes ``--files`` new files of ``--size`` bytes at ``--rate`` files/s, each to
``push/`` and to ``plain/`` (then the Change List), and takes the time after the ``plain/``
write. Latency = the agent's ``applied`` event (the file renamed into its mirror, the
checkpoint committed) - the write. p50/p90/p99/max per Destination. The bridge's latency
includes ``--quiet`` by design (a file is published once it has been stable that long).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rspush.resourcesync.w3cdt import format_w3c_datetime
from rspush.subscriber.agent import Agent, AgentConfig

from .harness.agent import agent_running
from .harness.hub import TOKEN, start_hub
from .harness.results import command_line, git_state, log, quantiles, write_json
from .harness.system import free_port, stop_process, until, wait_until

TOPIC = "files"
NS = (
    'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
    'xmlns:rs="http://www.openarchives.org/rs/terms/"'
)


def static_server(root: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``python -m http.server`` serving ``root`` on a free loopback port."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/"

    def ready() -> bool:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
            return True
        return False

    wait_until(ready, "the static server", 30)
    return process, url


class PlainSource:
    """A static ResourceSync Source in ``root`` served at ``url``: its documents rewritten
    as files are added."""

    def __init__(self, root: Path, url: str) -> None:
        self.root = root
        self.url = url
        self.start = format_w3c_datetime(datetime.now(UTC))
        self.entries: list[str] = []
        self._write("capabilitylist.xml", self._urlset("capabilitylist", self._capabilities()))
        self._write("resourcelist.xml", self._urlset("resourcelist", "", at=self.start))
        self._write("changelist.xml", self._urlset("changelist", "", from_=self.start))

    def _capabilities(self) -> str:
        return "".join(
            f'<url><loc>{self.url}{name}.xml</loc><rs:md capability="{name}"/></url>'
            for name in ("resourcelist", "changelist")
        )

    @staticmethod
    def _urlset(capability: str, entries: str, **attributes: str) -> bytes:
        extra = "".join(f' {k.rstrip("_")}="{v}"' for k, v in attributes.items())
        return (
            f'<?xml version="1.0" encoding="UTF-8"?><urlset {NS}>'
            f'<rs:md capability="{capability}"{extra}/>{entries}</urlset>'
        ).encode()

    def _write(self, name: str, content: bytes) -> None:
        temp = self.root / f".{name}.new"
        temp.write_bytes(content)
        temp.rename(self.root / name)  # a poller never reads half a document

    def added(self, name: str, content: bytes) -> None:
        when = format_w3c_datetime(datetime.now(UTC))
        md5 = hashlib.md5(content).hexdigest()
        self.entries.append(
            f'<url><loc>{self.url}{name}</loc><rs:md change="created" datetime="{when}" '
            f'length="{len(content)}" hash="md5:{md5}"/></url>'
        )
        body = self._urlset("changelist", "".join(self.entries), from_=self.start)
        self._write("changelist.xml", body)


async def until_or_report(predicate: Any, what: str, timeout: float, **report: Any) -> None:
    try:
        await until(predicate, what, timeout)
    except RuntimeError:
        for name, value in report.items():
            log("%s: %s", name, value() if callable(value) else value)
        raise


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    push_tree, plain_tree = workdir / "push", workdir / "plain"
    push_tree.mkdir()
    plain_tree.mkdir()
    (workdir / "hub").mkdir()
    hub = start_hub(workdir / "hub", [TOPIC])
    servers = []
    publisher: subprocess.Popen[bytes] | None = None
    try:
        push_server, push_url = static_server(push_tree)
        plain_server, plain_url = static_server(plain_tree)
        servers += [push_server, plain_server]
        plain = PlainSource(plain_tree, plain_url)
        publisher = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "rs-publish"),
                "watch",
                str(push_tree),
                "--base-url",
                push_url,
                "--hub",
                hub.base,
                "--topic",
                TOPIC,
                "--quiet",
                str(args.quiet),
                "--state",
                str(workdir / "publish.sqlite"),
            ],  # fmt: skip
            env={**os.environ, "RSPUSH_TOKEN": TOKEN},
            stdout=subprocess.DEVNULL,
            stderr=(workdir / "publish.log").open("wb"),
        )
        wait_until(
            lambda: "watching" in (workdir / "publish.log").read_text(), "rs-publish watch", 30
        )
        written: dict[str, float] = {}
        applied: dict[str, dict[str, float]] = {"bridge": {}, "plain": {}}

        def sink(name: str, base: str) -> Any:
            def on_event(event: dict[str, Any]) -> None:
                if event.get("event") == "applied" and event["uri"].startswith(base):
                    applied[name].setdefault(event["uri"][len(base) :], time.time())

            return on_event

        bridge = Agent(
            AgentConfig(
                source_url=hub.base, topic=TOPIC, dest=workdir / "mirror-bridge",
                maps=[(push_url, "")],
            ),
            events=sink("bridge", push_url),
        )  # fmt: skip
        polling = Agent(
            AgentConfig(
                source_url=plain_url + "capabilitylist.xml", dest=workdir / "mirror-plain",
                maps=[(plain_url, "")], poll_interval=args.poll_interval,
            ),
            events=sink("plain", plain_url),
        )  # fmt: skip
        async with agent_running(bridge) as one, agent_running(polling) as two:

            def write(name: str, content: bytes) -> None:
                (push_tree / name).write_bytes(content)
                (plain_tree / name).write_bytes(content)
                plain.added(name, content)
                written[name] = time.time()

            # Warm-up, not counted: both Destinations have one file through their path.
            write("warm-up.bin", os.urandom(args.size))
            await until(
                lambda: (
                    all("warm-up.bin" in a for a in applied.values()) or one.done() or two.done()
                ),
                "the warm-up file at both Destinations",
                60,
            )
            for task in (one, two):
                if task.done():
                    task.result()
            load_before = os.getloadavg()
            loop = asyncio.get_running_loop()
            start = loop.time() + 0.05
            names = [f"f{k:05d}.bin" for k in range(args.files)]
            for k, name in enumerate(names):
                delay = start + k / args.rate - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                write(name, os.urandom(args.size))
            await until_or_report(
                lambda: all(all(n in a for n in names) for a in applied.values()),
                "every file at both Destinations",
                120,
                missing=lambda: {k: sum(n not in a for n in names) for k, a in applied.items()},
                publisher=lambda: (workdir / "publish.log").read_text()[-3000:],
            )
            load_after = os.getloadavg()
        results: dict[str, Any] = {
            "command": command_line("bench.bench_filetree"),
            "checkout": git_state(),
            "files": args.files,
            "rate_per_s": args.rate,
            "size_bytes": args.size,
            "quiet_s": args.quiet,
            "poll_interval_s": args.poll_interval,
            "load_before": load_before,
            "load_after": load_after,
            "cpus": os.cpu_count(),
        }
        for name, seen in applied.items():
            lat = sorted((seen[n] - written[n]) * 1000 for n in names)
            results[f"{name}_latency_ms"] = {k: round(v, 1) for k, v in quantiles(lat).items()}
        return results
    finally:
        if publisher is not None:
            stop_process(publisher)
        for server in servers:
            stop_process(server)
        hub.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=300, help="files written (measured)")
    parser.add_argument("--rate", type=float, default=10, help="files written per second")
    parser.add_argument("--size", type=int, default=4096, help="bytes per file")
    parser.add_argument("--quiet", type=float, default=0.2, help="rs-publish watch --quiet")
    parser.add_argument(
        "--poll-interval", type=float, default=1.0, help="the plain Source's poll interval"
    )
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-filetree-") as tmp:
        results = asyncio.run(run(args, Path(tmp)))
    log("done")
    write_json("-", results)
    if args.json:
        write_json(args.json, results)


if __name__ == "__main__":
    main()
