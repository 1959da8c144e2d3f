"""rspush beside the peers users would pick instead: Socket.IO, NATS core, NATS JetStream.

    bench/peers/setup                                   # once: Node packages, nats-server
    .venv/bin/python -m bench.bench_peers [--quick] [--runs 3] [--systems rspush,socketio,…]
        [--hub-args "--workers 2"] [--json FILE]

The same Node client code and process layout for every system: ``--client-procs`` client
processes (bench/peers/node/clients.js: ``ws`` for rspush, ``socket.io-client``, ``nats``)
hold the subscribers, one publisher process (bench/peers/node/publisher.js) publishes, and
this process only orchestrates. rspush's publisher POSTs Change List fragments as a Source
does; the peers' publishes carry the same changes as the JSON frame an rspush subscriber
gets. Each server is started fresh for each run (``--runs``, default 3; the figures are
medians) and every system runs once per round before the next round starts, so machine
load falls on all of them alike. The systems:

- **rspush**: ``rs-hub serve`` (embedded valkey-server), one topic per phase; ``--hub-args``
  go to ``rs-hub serve`` as they are.
- **socketio**: Socket.IO 4.8 (bench/peers/node/socketio-server.js) with the Redis Streams
  adapter on the valkey-server the hub embeds (unix socket, appendonly, fsync every second:
  as the hub runs it) and connection-state recovery on; a room per topic; the publisher
  emits with an acknowledgement.
- **nats**: nats-server, core subjects, publish + flush.
- **jetstream**: nats-server with JetStream (file storage); one stream ``bench.>``; a durable
  pull consumer per subscriber (explicit acks); publish awaits the PubAck.

Phases, per run: warm-up (not counted); idle memory (``--idle`` subscribers connected and
idle: server RSS delta / N, from /proc, the embedded valkey-server left out); fan-out (N in
``--subscribers`` x changes per message in ``--per-message``: publishes back to back, each
call awaited; deliveries/s = changes received by all subscribers / first publish to last
subscriber complete); latency (first 300 publish calls of 10 changes back to back to a topic
nobody follows, the publish path alone; then ``--latency-subscribers`` subscribers,
``--rate`` changes/s as 10 per publish, paced: acceptance -> receive and publish-call start
-> receive per change, and the publish call itself). Acceptance: rspush the stream position
(stamped by valkey at acceptance, in whole milliseconds), JetStream the time the server stored
the message; Socket.IO and NATS core have no acceptance point, so their acceptance is the
publish-call start. For rspush the report adds the hub's own share of acceptance -> receive,
from its histograms (``rspush_push_lag_seconds``, ``rspush_push_write_seconds``).

A system whose software is missing is skipped with the reason (run bench/peers/setup); a run
that fails is reported with its error and the others go on. Everything binds 127.0.0.1, every
wait is bounded and every process is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shlex
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from .harness.hub import (
    TOKEN,
    add_hub_args,
    histogram,
    histogram_quantile,
    hub_args,
    start_hub,
)
from .harness.results import command_line, git_state, log, median, table, write_json
from .harness.results import quantiles as quantile_points
from .harness.system import (
    ROOT,
    Cpu,
    JsonLinesProcess,
    descendants,
    free_port,
    stop_process,
    tree_rss_kb,
    wait_until,
)

SYSTEMS = ("rspush", "socketio", "nats", "jetstream")
PEERS_DIR = ROOT / "bench" / "peers"
NODE_DIR = PEERS_DIR / "node"
STREAM = "BENCH"
"""The JetStream stream holding every ``bench.<topic>`` subject."""
HUB_SEND_BUFFER = 64 * 1024 * 1024
"""The hub's ``send_buffer_bytes``, as bench_push sets it: a client process briefly behind is
not closed as a slow consumer mid-measurement."""
EMBEDDED_NAMES = ("valkey-server", "redis-server")
"""Left out of a server's RSS: the hub's embedded store (Socket.IO's valkey is its own process
and not counted either)."""
PER_PUBLISH = 10
"""Changes per publish in the latency phase."""
BACK_TO_BACK = 300
"""Publish calls made back to back before the paced ones of the latency phase."""


# --- the systems under test ------------------------------------------------------------------


@dataclass
class Running:
    """A system under test, started: where its clients and its publisher connect, the process
    whose tree is its server (for RSS and CPU), and how to stop it."""

    client_url: str
    publish_url: str
    pid: int
    stop: Callable[[], None]
    stream: str | None = None


def missing(system: str) -> str | None:
    """Why ``system`` cannot run here, or None."""
    if shutil.which("node") is None:
        return "node not found (install Node.js 18+, then run bench/peers/setup)"
    if not (NODE_DIR / "node_modules").is_dir():
        return "Node packages not installed (run bench/peers/setup)"
    if system in ("nats", "jetstream") and shutil.which("nats-server") is None:
        return "nats-server not found (run bench/peers/setup)"
    return None


def wait_port(port: int, process: subprocess.Popen[bytes], what: str) -> None:
    def listening() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited during startup")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            return False

    wait_until(listening, what, 30)


def start_rspush(workdir: Path, topics: list[str], hub_args: list[str]) -> Running:
    hub = start_hub(
        workdir, topics, push={"send_buffer_bytes": HUB_SEND_BUFFER}, extra_args=hub_args
    )
    return Running(hub.push_url, hub.base, hub.pid, hub.stop)


def start_socketio(workdir: Path) -> Running:
    from rspush.hub.embedded import server_binary

    data = workdir / "valkey"
    data.mkdir()
    sock = data / "valkey.sock"
    valkey = subprocess.Popen(
        [
            str(server_binary()),
            *("--port", "0", "--unixsocket", str(sock), "--unixsocketperm", "700"),
            *("--dir", str(data), "--appendonly", "yes", "--appendfsync", "everysec"),
            *("--save", "", "--daemonize", "no", "--logfile", str(data / "valkey.log")),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    server: subprocess.Popen[bytes] | None = None
    try:
        wait_until(sock.exists, "valkey-server's socket", 30)
        port = free_port()
        server = subprocess.Popen(
            ["node", str(NODE_DIR / "socketio-server.js"), str(port), str(sock)],
            cwd=NODE_DIR,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=(workdir / "socketio.log").open("wb"),
        )
        wait_port(port, server, "the Socket.IO server")
    except BaseException:
        if server is not None:
            stop_process(server, timeout=10)
        stop_process(valkey, timeout=10)
        raise

    def stop() -> None:
        assert server is not None
        stop_process(server, timeout=10)
        stop_process(valkey, timeout=10)

    url = f"http://127.0.0.1:{port}"
    return Running(url, url, server.pid, stop)


def start_nats(workdir: Path, jetstream: bool) -> Running:
    port = free_port()
    command = ["nats-server", "-a", "127.0.0.1", "-p", str(port)]
    if jetstream:
        command += ["-js", "-sd", str(workdir / "jetstream")]
    server = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=(workdir / "nats.log").open("wb"),
    )
    try:
        wait_port(port, server, "nats-server")
    except BaseException:
        stop_process(server, timeout=10)
        raise
    url = f"nats://127.0.0.1:{port}"
    return Running(
        url,
        url,
        server.pid,
        lambda: stop_process(server, timeout=10),
        STREAM if jetstream else None,
    )


# --- the Node processes ----------------------------------------------------------------------


class NodeProcess(JsonLinesProcess):
    def __init__(self, script: str) -> None:
        super().__init__(["node", str(NODE_DIR / script)], script, cwd=NODE_DIR)


class Clients:
    """``processes`` client processes; subscribers are shared out among them."""

    def __init__(self, processes: int) -> None:
        self.workers: list[NodeProcess] = []
        try:
            for _ in range(processes):
                self.workers.append(NodeProcess("clients.js"))
        except BaseException:
            self.stop()
            raise

    @property
    def pids(self) -> list[int]:
        return [w.process.pid for w in self.workers]

    async def all(self, commands: list[dict[str, Any]], timeout: float) -> list[dict[str, Any]]:
        try:
            async with asyncio.timeout(timeout):
                return list(
                    await asyncio.gather(
                        *(w.ask(**c) for w, c in zip(self.workers, commands, strict=True))
                    )
                )
        except TimeoutError:
            what = commands[0]["cmd"]
            raise TimeoutError(
                f"the client processes did not answer {what} in {timeout:.0f} s"
            ) from None

    async def connect(self, running: Running, system: str, n: int, topic: str) -> None:
        k = len(self.workers)
        shares = [n // k + (i < n % k) for i in range(k)]
        common = {"cmd": "connect", "system": system, "url": running.client_url, "topic": topic}
        if running.stream:
            common["stream"] = running.stream
        await self.all([common | {"n": s} for s in shares], 180)

    async def arm(self, expected: int, record: bool = False) -> None:
        command = {"cmd": "arm", "expected": expected, "record": record}
        await self.all([command] * len(self.workers), 30)

    async def collect(self, timeout: float) -> dict[str, Any]:
        parts = await self.all(
            [{"cmd": "collect", "timeout": timeout}] * len(self.workers), timeout + 60
        )
        done = [p["last_done"] for p in parts if p["last_done"] is not None]
        merged: dict[str, Any] = {
            "clients": sum(p["clients"] for p in parts),
            "complete": sum(p["complete"] for p in parts),
            "got": sum(p["got"] for p in parts),
            "frames": sum(p["frames"] for p in parts),
            "closed": sum(p["closed"] for p in parts),
            "last_done": max(done) if done else None,
            "client_cpu_s": sum(p["cpu_s"] for p in parts),
        }
        if "accept_ms" in parts[0]:
            merged["accept_ms"] = sorted(v for p in parts for v in p["accept_ms"])
            merged["e2e_ms"] = sorted(v for p in parts for v in p["e2e_ms"])
        return merged

    async def close(self) -> None:
        await self.all([{"cmd": "close"}] * len(self.workers), 120)

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop(timeout=20)


# --- one run of one system -------------------------------------------------------------------


@dataclass
class Run:
    args: argparse.Namespace
    system: str
    running: Running
    clients: Clients
    publisher: NodeProcess
    figures: dict[str, Any] = field(default_factory=dict)

    def server_pids(self) -> list[int]:
        return [self.running.pid, *descendants(self.running.pid)]

    def cpu(self) -> Cpu:
        return Cpu(
            {
                "server": self.server_pids(),
                "clients": self.clients.pids,
                "publisher": [self.publisher.process.pid],
            }
        )

    def rss_kb(self) -> int:
        return tree_rss_kb(self.running.pid, exclude=EMBEDDED_NAMES)

    async def publish(self, **command: Any) -> dict[str, Any]:
        timeout = self.args.phase_timeout + 60
        try:
            async with asyncio.timeout(timeout):
                return await self.publisher.ask(**command)
        except TimeoutError:
            raise TimeoutError(
                f"the publisher did not finish {command['cmd']} in {timeout:.0f} s"
            ) from None

    async def warm_up(self) -> None:
        messages = min(50, self.args.messages)
        await self.clients.connect(self.running, self.system, 10, "warm")
        await self.clients.arm(messages * 10)
        await self.publish(cmd="burst", topic="warm", messages=messages, per=10)
        result = await self.clients.collect(self.args.phase_timeout)
        await self.clients.close()
        if result["complete"] != result["clients"]:
            raise RuntimeError(f"warm-up: {result['complete']} of {result['clients']} complete")

    async def memory(self) -> dict[str, Any]:
        n = self.args.idle
        await asyncio.sleep(1)
        before = self.rss_kb()
        await self.clients.connect(self.running, self.system, n, "idle")
        await asyncio.sleep(2)
        during = self.rss_kb()
        await self.clients.close()
        return {
            "subscribers": n,
            "rss_before_kb": before,
            "rss_idle_kb": during,
            "kb_per_connection": (during - before) / n,
        }

    async def fanout(self, n: int, per: int) -> dict[str, Any]:
        topic = f"fan{n}x{per}"
        args = self.args
        messages = max(10, min(args.changes // per, args.messages, args.deliveries // (n * per)))
        expected = messages * per
        await self.clients.connect(self.running, self.system, n, topic)
        await self.clients.arm(expected)
        cpu = self.cpu()
        sent = await self.publish(cmd="burst", topic=topic, messages=messages, per=per)
        result = await self.clients.collect(self.args.phase_timeout)
        used = cpu.used()
        await self.clients.close()
        end = result["last_done"] if result["complete"] == n else time.time()
        wall = end - sent["started"]
        return {
            "subscribers": n,
            "changes_per_message": per,
            "messages": messages,
            "publish_seconds": sent["finished"] - sent["started"],
            "wall_seconds": wall,
            "complete_clients": result["complete"],
            "delivered_changes": result["got"],
            "deliveries_per_s": result["got"] / wall,
            "messages_per_s_received": result["frames"] / wall,
            "cpu_percent": used,
        }

    async def hub_anatomy(self) -> dict[str, Any]:
        """Two parts of rspush's acceptance -> receive, from the hub's own histograms (per
        batch of the latency topic, read between bucket bounds): acceptance to the push worker
        handing the batch out (``rspush_push_lag_seconds``; acceptance is the stream id's whole
        millisecond, so this includes up to 1 ms of that rounding), and the socket writes of
        the batch to every subscriber, to the last (``rspush_push_write_seconds``). Not in
        either: encoding and framing the batch, the event loop, the kernel and the clients."""
        figures: dict[str, Any] = {}
        async with httpx.AsyncClient(timeout=10, trust_env=False) as client:
            for key, name in (
                ("hub_lag_ms", "rspush_push_lag_seconds"),
                ("hub_write_ms", "rspush_push_write_seconds"),
            ):
                shares = await histogram(client, self.running.publish_url, name, "latency")
                figures[key] = {
                    f"p{round(q * 100)}": histogram_quantile(shares, q) * 1000 for q in (0.5, 0.99)
                }
        return figures

    async def back_to_back(self) -> dict[str, float]:
        """Publish calls of ``PER_PUBLISH`` changes one after the other to a topic nobody
        follows: the publish path alone, kept busy. (The paced calls below differ in two
        ways: ~10 ms apart, and while the server fans each one out to the subscribers.)"""
        messages = min(BACK_TO_BACK, self.args.messages)
        sent = await self.publish(cmd="burst", topic="calls", messages=messages, per=PER_PUBLISH)
        return quantile_points(sorted(sent["call_ms"]))

    async def latency(self) -> dict[str, Any]:
        back_to_back = await self.back_to_back()
        n = self.args.latency_subscribers
        messages = max(1, round(self.args.latency_seconds * self.args.rate / PER_PUBLISH))
        expected = messages * PER_PUBLISH
        await self.clients.connect(self.running, self.system, n, "latency")
        await self.clients.arm(expected, record=True)
        cpu = self.cpu()
        sent = await self.publish(
            cmd="paced", topic="latency", messages=messages, per=PER_PUBLISH, rate=self.args.rate
        )
        result = await self.clients.collect(self.args.phase_timeout)
        used = cpu.used()
        await self.clients.close()
        calls = sorted(sent["call_ms"])
        anatomy = await self.hub_anatomy() if self.system == "rspush" else {}
        return {
            **anatomy,
            "subscribers": n,
            "changes_per_s_target": self.args.rate,
            "changes_per_s_published": sent["rate"],
            "publishes_late": sent["late"],
            "complete_clients": result["complete"],
            "samples": len(result["accept_ms"]),
            "expected_samples": expected * n,
            "accept_to_receive_ms": quantile_points(result["accept_ms"]),
            "publish_to_receive_ms": quantile_points(result["e2e_ms"]),
            "publish_call_ms": quantile_points(calls),
            "publish_call_back_to_back_ms": back_to_back,
            "cpu_percent": used,
        }


def topics(args: argparse.Namespace) -> list[str]:
    fans = [f"fan{n}x{per}" for n in args.subscribers for per in args.per_message]
    return ["warm", "idle", "calls", "latency", *fans]


async def one_run(args: argparse.Namespace, system: str, workdir: Path) -> dict[str, Any]:
    """Every phase on one fresh server. A phase that fails (e.g. a timeout on a machine too
    busy for it) is recorded in ``errors`` with its name; the Node processes are started
    again (their command streams may be out of step) and the next phase goes on."""
    if system == "rspush":
        running = start_rspush(workdir, topics(args), args.hub_args)
    elif system == "socketio":
        running = start_socketio(workdir)
    else:
        running = start_nats(workdir, jetstream=system == "jetstream")
    run: Run | None = None

    async def start_processes() -> Run:
        clients = Clients(args.client_procs)
        try:
            publisher = NodeProcess("publisher.js")
        except BaseException:
            clients.stop()
            raise
        started = Run(args, system, running, clients, publisher)
        try:
            await asyncio.wait_for(
                publisher.ask(
                    cmd="setup",
                    system=system,
                    url=running.publish_url,
                    token=TOKEN,
                    stream=running.stream or STREAM,
                ),
                30,
            )
        except BaseException:
            stop_processes(started)
            raise
        return started

    def stop_processes(stopping: Run) -> None:
        stopping.publisher.stop(timeout=20)
        stopping.clients.stop()

    figures: dict[str, Any] = {"errors": []}
    phases: list[tuple[str, Callable[[Run], Awaitable[Any]], Callable[[Any], None]]] = []
    if "memory" in args.phases:
        phases.append(("memory", Run.memory, lambda v: figures.__setitem__("memory", v)))
    if "fanout" in args.phases:
        figures["fanout"] = []
        for n in args.subscribers:
            for per in args.per_message:

                async def fan(r: Run, n: int = n, per: int = per) -> Any:
                    log("  %s fan-out: %d subscribers, %d changes per message", system, n, per)
                    return await r.fanout(n, per)

                phases.append((f"fan-out N={n} x{per}", fan, figures["fanout"].append))
    if "latency" in args.phases:
        phases.append(("latency", Run.latency, lambda v: figures.__setitem__("latency", v)))
    try:
        run = await start_processes()
        await run.warm_up()
        for name, phase, keep in phases:
            try:
                keep(await phase(run))
            except Exception as exc:  # recorded with the phase's name; the others go on
                log("  %s %s failed: %s: %s", system, name, type(exc).__name__, exc)
                figures["errors"].append(f"{name}: {type(exc).__name__}: {exc}")
                stop_processes(run)
                run = None
                run = await start_processes()
        return figures
    finally:
        if run is not None:
            stop_processes(run)
        running.stop()


async def run_all(args: argparse.Namespace) -> dict[str, Any]:
    skipped = {s: reason for s in args.systems if (reason := missing(s)) is not None}
    for system, reason in skipped.items():
        log("skipping %s: %s", system, reason)
    systems = [s for s in args.systems if s not in skipped]
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
    for k in range(args.runs):
        for system in systems:
            log("run %d/%d: %s", k + 1, args.runs, system)
            with tempfile.TemporaryDirectory(prefix=f"rspush-bench-peers-{system}-") as tmp:
                try:
                    runs[system].append(await one_run(args, system, Path(tmp)))
                except Exception as exc:  # reported with its reason; the other runs go on
                    log("  %s failed: %s", system, exc)
                    runs[system].append({"error": f"{type(exc).__name__}: {exc}"})
    return {"skipped": skipped, "runs": runs}


# --- the figures -----------------------------------------------------------------------------


def metrics(args: argparse.Namespace) -> list[tuple[str, str, bool]]:
    """(key, label, higher is better) of every figure reported per system."""
    rows: list[tuple[str, str, bool]] = []
    for per in args.per_message:
        for n in args.subscribers:
            rows.append((f"deliveries_n{n}_x{per}", f"deliveries/s, N={n}, {per}/msg", True))
    rows += [
        ("accept_p50", "accept->receive p50 ms", False),
        ("accept_p99", "accept->receive p99 ms", False),
        ("e2e_p50", "publish->receive p50 ms", False),
        ("e2e_p99", "publish->receive p99 ms", False),
        ("publish_call_p50", "publish call p50 ms", False),
        ("publish_b2b_p50", "publish call p50 ms, back to back", False),
        ("idle_kb", f"idle KB/connection, N={args.idle}", False),
    ]
    return rows


def flatten(figures: dict[str, Any]) -> dict[str, float]:
    """One run's figures as {metric key: value}."""
    flat: dict[str, float] = {}
    for row in figures.get("fanout", []):
        complete = row["complete_clients"] == row["subscribers"]
        key = f"deliveries_n{row['subscribers']}_x{row['changes_per_message']}"
        flat[key] = row["deliveries_per_s"] if complete else float("nan")
    if "latency" in figures:
        lat = figures["latency"]
        flat["accept_p50"] = lat["accept_to_receive_ms"]["p50"]
        flat["accept_p99"] = lat["accept_to_receive_ms"]["p99"]
        flat["e2e_p50"] = lat["publish_to_receive_ms"]["p50"]
        flat["e2e_p99"] = lat["publish_to_receive_ms"]["p99"]
        flat["publish_call_p50"] = lat["publish_call_ms"]["p50"]
        flat["publish_b2b_p50"] = lat["publish_call_back_to_back_ms"]["p50"]
    if "memory" in figures:
        flat["idle_kb"] = figures["memory"]["kb_per_connection"]
    return flat


def summarise(args: argparse.Namespace, outcome: dict[str, Any]) -> dict[str, Any]:
    """Per system and metric: the median over the runs that produced it; and rspush/peer."""
    medians: dict[str, dict[str, float]] = {}
    for system, runs in outcome["runs"].items():
        flats = [flatten(r) for r in runs if "error" not in r]
        medians[system] = {
            key: median([f.get(key, float("nan")) for f in flats]) for key, _, _ in metrics(args)
        }
    ratios: dict[str, dict[str, float]] = {}
    if "rspush" in medians:
        for peer in (s for s in medians if s != "rspush"):
            ratios[peer] = {
                key: medians["rspush"][key] / value if value else float("nan")
                for key, value in medians[peer].items()
            }
    return {"median": medians, "rspush_over_peer": ratios}


def number(value: float) -> str:
    if value != value:
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}"


def report(args: argparse.Namespace, results: dict[str, Any]) -> str:
    env = results["environment"]
    summary = results["summary"]
    systems = list(summary["median"])
    peers = list(summary["rspush_over_peer"])
    header = ["", *systems, *(f"rspush/{p}" for p in peers), ""]
    rows = []
    for key, label, higher in metrics(args):
        cells = [label, *(number(summary["median"][s][key]) for s in systems)]
        cells += [f"{summary['rspush_over_peer'][p][key]:.2f}x" for p in peers]
        cells.append("higher is better" if higher else "lower is better")
        rows.append(cells)
    lines = [
        f"command: {env['command']}",
        f"commit {env['commit']}, python {env['python']}, node {env['node']}, "
        f"{env['nats_server']}, {env['cpus']} cpus, load average before {env['load_before']}, "
        f"after {env['load_after']}",
        f"median of {args.runs} run(s), each server fresh per run; "
        f"{args.client_procs} client processes, 1 publisher process"
        + (f"; hub args: {shlex.join(args.hub_args)}" if args.hub_args else ""),
        "",
        table(header, rows),
    ]
    anatomy = [
        run["latency"]
        for run in results["runs"].get("rspush", [])
        if "hub_write_ms" in run.get("latency", {})
    ]
    if anatomy:
        lag = [a["hub_lag_ms"] for a in anatomy]
        write = [a["hub_write_ms"] for a in anatomy]
        lines.append(
            "rspush hub, per batch of the latency phase (median of runs; histogram buckets): "
            f"acceptance -> hand-out p50 {median([x['p50'] for x in lag]):.2f} / "
            f"p99 {median([x['p99'] for x in lag]):.2f} ms, writing it to every subscriber "
            f"p50 {median([x['p50'] for x in write]):.2f} / "
            f"p99 {median([x['p99'] for x in write]):.2f} ms"
        )
    for system, reason in results["skipped"].items():
        lines.append(f"skipped {system}: {reason}")
    for system, runs in results["runs"].items():
        for k, run in enumerate(runs):
            if "error" in run:
                lines.append(f"{system} run {k + 1} failed: {run['error']}")
            for error in run.get("errors", []):
                lines.append(f"{system} run {k + 1}, {error}")
    return "\n".join(lines)


def tool_version(command: list[str]) -> str:
    try:
        found = subprocess.run(command, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "none"
    return (found.stdout or found.stderr).strip()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").splitlines()[0],
        epilog="Install the peers first with bench/peers/setup; a missing one is skipped.",
    )
    parser.add_argument(
        "--systems", default=",".join(SYSTEMS), help="a subset of " + ",".join(SYSTEMS)
    )
    parser.add_argument("--runs", type=int, help="fresh servers per system (median); default 3")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="1 run, N=50,500, fewer changes, 3 s of latency, 200 idle connections",
    )
    parser.add_argument("--subscribers", help="N for fan-out; default 100,1000")
    parser.add_argument("--per-message", default="1,100", help="changes per message (fan-out)")
    parser.add_argument("--changes", type=int, help="changes per fan-out run (max)")
    parser.add_argument("--messages", type=int, help="messages per fan-out run (max)")
    parser.add_argument(
        "--deliveries", type=int, help="cap on N x changes per fan-out run (keeps large N short)"
    )
    parser.add_argument("--idle", type=int, help="idle connections (memory); default 1000")
    parser.add_argument("--latency-subscribers", type=int, default=100)
    parser.add_argument("--rate", type=int, default=1000, help="changes/s (latency)")
    parser.add_argument("--latency-seconds", type=float, help="default 10")
    parser.add_argument("--client-procs", type=int, default=2)
    parser.add_argument("--phases", default="memory,fanout,latency", help="a subset")
    parser.add_argument("--phase-timeout", type=float, default=90.0)
    add_hub_args(parser)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    quick = args.quick
    defaults = {
        "runs": 1 if quick else 3,
        "subscribers": "50,500" if quick else "100,1000",
        "changes": 4_000 if quick else 20_000,
        "messages": 400 if quick else 2_000,
        "deliveries": 500_000 if quick else 10_000_000,
        "idle": 200 if quick else 1000,
        "latency_seconds": 3.0 if quick else 10.0,
    }
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    args.systems = [s for s in args.systems.split(",") if s]
    unknown = set(args.systems) - set(SYSTEMS)
    if unknown:
        parser.error(f"unknown systems: {', '.join(sorted(unknown))}")
    args.subscribers = [int(n) for n in str(args.subscribers).split(",")]
    args.per_message = [int(n) for n in args.per_message.split(",")]
    args.phases = set(args.phases.split(","))
    args.hub_args = hub_args(args)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    started = time.monotonic()
    load_before = " ".join(f"{v:.2f}" for v in os.getloadavg())
    outcome = asyncio.run(run_all(args))
    results: dict[str, Any] = {
        "environment": {
            "command": command_line("bench.bench_peers"),
            "commit": git_state(),
            "python": platform.python_version(),
            "node": tool_version(["node", "--version"]),
            "nats_server": tool_version(["nats-server", "--version"]),
            "cpus": os.cpu_count(),
            "load_before": load_before,
            "load_after": " ".join(f"{v:.2f}" for v in os.getloadavg()),
            "hub_args": args.hub_args,
            "seconds": time.monotonic() - started,
        },
        "skipped": outcome["skipped"],
        "runs": outcome["runs"],
    }
    results["summary"] = summarise(args, outcome)
    print(report(args, results))
    print(f"\n(total {results['environment']['seconds']:.0f} s)")
    if args.json:
        write_json(args.json, results)


if __name__ == "__main__":
    main()
