"""Push channel benchmark (issue 4): fan-out, latency and memory of the WebSocket push.

    .venv/bin/python -m bench.bench_push [--subscribers 100,1000,5000] [--changes N] [--json FILE]

Starts a real hub (`rs-hub serve`, its own process, embedded valkey-server) on 127.0.0.1 and
a pool of client processes (``--client-procs``, default 2) holding the WebSocket clients
(``websockets.asyncio.client.connect``, no compression); this process posts changes over HTTP.

1. Fan-out, for each N in ``--subscribers``: N clients subscribe to one topic (format json);
   the changes are posted in fragments of ``--fragment`` changes, one POST after the other as
   fast as the hub accepts them. Delivered changes/s = changes received by all clients / wall
   time from the first POST to the last client holding every change. Beside it, in the same
   run, the raw baseline: a minimal ``websockets`` server (its own process, ``serve`` +
   ``broadcast()``) broadcasts frames of one change each (the hub's own one-change frame,
   captured at warm-up) to the same N clients; raw frames/s the same way. Headline ratio:
   hub delivered changes/s / raw broadcast frames/s.
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

Measurement choices (see the functions for why): the poster sets TCP_QUICKACK (``Poster``);
the hub's ``send_buffer_bytes`` is raised to 64 MiB (``write_config``); clients connect at
most 32 at a time per process (``CONNECT_CONCURRENCY``). ``--phases latency`` (or any subset
of memory,fanout,latency) runs only some phases. To measure a patched hub without touching
the checkout, run with ``PYTHONPATH=<dir holding a patched hub/>``: the hub process
(``rs-hub``) imports ``hub`` from there (the bench itself runs from the checkout).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import hashlib
import json
import multiprocessing
import os
import platform
import resource
import shlex
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from array import array
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from multiprocessing.connection import Connection as Pipe
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed
from websockets.version import version as websockets_version

from .fragments import change_fragment

TOKEN = "bench-token"
ROOT = Path(__file__).resolve().parents[1]
CHANGE_MARK = b'{"position":"'
CLK_TCK = os.sysconf("SC_CLK_TCK")
# Per client process. The hub answers a subscribe with Redis reads on its shared client, whose
# pool holds 100 connections (one per topic busy in XREAD BLOCK): more than about 90
# subscribes in flight at once fail with 1011 (MaxConnectionsError), so connect in small waves.
CONNECT_CONCURRENCY = 32
RAW_WRITE_HIGH = 1024 * 1024  # the raw server waits while a write buffer is over this
HUB_SEND_BUFFER = 64 * 1024 * 1024  # see write_config: no slow-consumer close mid-measurement


# --- process helpers -------------------------------------------------------------------------


def raise_nofile() -> None:
    """Soft fd limit up to the hard limit (5,000 sockets need more than the usual 1,024)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (0 once it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def percentile(ordered: list[float] | array[float], q: float) -> float:
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# --- what is posted --------------------------------------------------------------------------


def w3c(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


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


# --- the hub ---------------------------------------------------------------------------------


def write_config(path: Path, http_port: int, push_port: int, topics: list[str]) -> None:
    """One topic per phase keeps every topic's open Change List under its rotation size, so
    rotation never runs during a measurement. ``send_buffer_bytes`` is raised so that a client
    process briefly behind is not closed as a slow consumer mid-measurement: the figure is
    the rate at which every change reaches every client (slow-consumer closes are counted and
    reported anyway)."""
    path.write_text(
        f"""
[hub]
base_url = "http://127.0.0.1:{http_port}"
{"".join(f'[[topics]]{chr(10)}name = "{name}"{chr(10)}' for name in topics)}
[[sources]]
name = "bench"
token_sha256 = "{hashlib.sha256(TOKEN.encode()).hexdigest()}"
topics = [{", ".join(f'"{name}"' for name in topics)}]
[limits]
changelist_max_entries = 50000
changelist_max_age_s = 86400
max_entries_per_request = 50000
max_body_bytes = 52428800
[push]
port = {push_port}
send_buffer_bytes = {HUB_SEND_BUFFER}
"""
    )


def start_hub(workdir: Path, http_port: int, push_port: int, topics: list[str]) -> Any:
    config = workdir / "hub.toml"
    write_config(config, http_port, push_port, topics)
    hub = Path(sys.executable).parent / "rs-hub"
    command = [str(hub), "serve", "--config", str(config), "--port", str(http_port)]
    process = subprocess.Popen(
        [*command, "--data-dir", str(workdir / "data")],
        stdout=subprocess.DEVNULL,
        stderr=(workdir / "hub.log").open("wb"),
        preexec_fn=raise_nofile,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            reply = httpx.get(f"http://127.0.0.1:{http_port}/readyz", timeout=1, trust_env=False)
            if reply.status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        if process.poll() is not None:
            raise RuntimeError(f"hub exited during startup: {(workdir / 'hub.log').read_text()}")
        time.sleep(0.05)
    process.terminate()
    raise RuntimeError("hub not ready after 30 s")


def stop_process(process: Any, timeout: float = 30) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


async def histogram(
    client: httpx.AsyncClient, base: str, name: str, topic: str
) -> dict[str, float]:
    """Cumulative share of observations per bucket of a Prometheus histogram."""
    counts: dict[str, float] = {}
    for line in (await client.get(f"{base}/metrics")).text.splitlines():
        if line.startswith(name + "_bucket{") and f'topic="{topic}"' in line:
            le = line.split('le="', 1)[1].split('"', 1)[0]
            counts[le] = float(line.rsplit(" ", 1)[1])
    total = counts.get("+Inf", 0.0)
    return {le: count / total for le, count in counts.items()} if total else {}


async def metric(client: httpx.AsyncClient, base: str, name: str, topic: str) -> float:
    text = (await client.get(f"{base}/metrics")).text
    prefix = f'{name}{{topic="{topic}"}} '
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line[len(prefix) :])
    return 0.0


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


class RawServer:
    def __init__(self, port: int, frame_file: Path) -> None:
        self.port = port
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.bench_push", "--raw-server", str(port)]
            + ["--raw-frame", str(frame_file)],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            preexec_fn=raise_nofile,
        )
        self.ask_blocking(None)

    def ask_blocking(self, command: dict[str, Any] | None) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        if command is not None:
            self.process.stdin.write(json.dumps(command) + "\n")
            self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("raw server exited")
        return dict(json.loads(line))

    async def ask(self, **command: Any) -> dict[str, Any]:
        return await asyncio.to_thread(self.ask_blocking, command)

    def stop(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            assert self.process.stdin is not None
            self.process.stdin.write('{"cmd": "quit"}\n')
            self.process.stdin.flush()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


# --- client processes ------------------------------------------------------------------------


class ClientWorker:
    """One client process: holds its share of the WebSocket clients and runs commands from
    the bench (connect, receive, close) on its own event loop."""

    def __init__(self, pipe: Pipe) -> None:
        self.pipe = pipe
        self.connections: list[ClientConnection] = []

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            command, arguments = await loop.run_in_executor(None, self.pipe.recv)
            if command == "quit":
                await self.close()
                return
            try:
                result = await getattr(self, command)(**arguments)
                self.pipe.send(("ok", result))
            except Exception:
                self.pipe.send(("error", traceback.format_exc()))

    async def connect(self, url: str, n: int, topic: str | None) -> dict[str, Any]:
        limit = asyncio.Semaphore(CONNECT_CONCURRENCY)
        message = json.dumps(
            {"type": "subscribe", "version": 1, "format": "json", "topics": [{"topic": topic}]}
        )

        async def one() -> ClientConnection:
            async with limit:
                ws = await connect(
                    url,
                    compression=None,
                    proxy=None,
                    max_size=None,
                    max_queue=256,
                    ping_interval=None,  # the server pings; clients answer automatically
                    open_timeout=60,
                    close_timeout=5,
                )
                await ws.send(message)
                if topic is not None:
                    async with asyncio.timeout(30):
                        reply = await ws.recv(decode=False)
                    if b'"subscribed"' not in reply:
                        raise RuntimeError(f"not subscribed: {reply[:200]!r}")
                return ws

        started = time.monotonic()
        self.connections += await asyncio.gather(*(one() for _ in range(n)))
        return {"n": len(self.connections), "seconds": time.monotonic() - started}

    async def receive(self, expected: int, unit: str, timeout: float) -> dict[str, Any]:
        """Every client reads until it holds ``expected`` changes (unit "changes") or frames
        ("frames"); "record" also keeps (receive time, frame) for the latency figures."""
        count_changes = unit in ("changes", "record")
        record = unit == "record"
        deadline = asyncio.get_running_loop().time() + timeout
        cpu_started = time.process_time()

        async def consume(ws: ClientConnection) -> dict[str, Any]:
            got = frames = size = 0
            log: list[tuple[float, bytes]] = []
            done = None
            close = None
            try:
                async with asyncio.timeout_at(deadline):
                    while got < expected:
                        data = await ws.recv(decode=False)
                        if record:
                            log.append((time.time(), data))
                        frames += 1
                        size += len(data)
                        got += data.count(CHANGE_MARK) if count_changes else 1
                done = time.time()
            except TimeoutError:
                pass
            except ConnectionClosed:
                close = ws.close_code
            return {"got": got, "frames": frames, "bytes": size, "done": done, "close": close} | (
                {"log": log} if record else {}
            )

        results = await asyncio.gather(*(consume(ws) for ws in self.connections))
        summary: dict[str, Any] = {
            "clients": len(results),
            "complete": sum(r["done"] is not None for r in results),
            "got": sum(r["got"] for r in results),
            "frames": sum(r["frames"] for r in results),
            "bytes": sum(r["bytes"] for r in results),
            "last_done": max((r["done"] for r in results if r["done"] is not None), default=None),
            "first_done": min((r["done"] for r in results if r["done"] is not None), default=None),
            "closes": dict(Counter(r["close"] for r in results if r["close"] is not None)),
            "cpu_s": time.process_time() - cpu_started,
        }
        if record:
            summary |= lags([entry for r in results for entry in r["log"]])
        return summary

    async def close(self) -> dict[str, Any]:
        connections, self.connections = self.connections, []

        async def one(ws: ClientConnection) -> None:
            with contextlib.suppress(Exception):
                await ws.close()

        limit = 500
        for first in range(0, len(connections), limit):
            await asyncio.gather(*(one(ws) for ws in connections[first : first + limit]))
        return {"closed": len(connections)}


def lags(log: list[tuple[float, bytes]]) -> dict[str, Any]:
    """Per received change, in ms: receive - acceptance (position ms), receive - datetime.
    Every client of a process gets the same frames: each distinct frame is parsed once."""
    from rspush.resourcesync.w3cdt import parse_w3c_datetime

    parsed: dict[bytes, list[tuple[float, float]]] = {}
    accept = array("d")
    end_to_end = array("d")
    first_last: dict[bytes, list[float]] = {}
    for received, data in log:
        seen = first_last.setdefault(data, [received, received])
        seen[0], seen[1] = min(seen[0], received), max(seen[1], received)
        changes = parsed.get(data)
        if changes is None:
            frame = json.loads(data)
            changes = [
                (
                    int(c["position"].split("-")[0]) / 1000,
                    parse_w3c_datetime(c["datetime"]).timestamp(),
                )
                for c in frame["changes"]
            ]
            parsed[data] = changes
        for accepted, posted in changes:
            accept.append((received - accepted) * 1000)
            end_to_end.append((received - posted) * 1000)
    # How long one frame takes to reach all the clients of this process: their share.
    spread = array("d", ((last - first) * 1000 for first, last in first_last.values()))
    return {"accept_ms": accept, "e2e_ms": end_to_end, "spread_ms": spread}


def worker_main(pipe: Pipe) -> None:
    raise_nofile()
    asyncio.run(ClientWorker(pipe).serve())


class ClientPool:
    def __init__(self, processes: int) -> None:
        context = multiprocessing.get_context("fork")  # before any loop or thread exists
        self.pipes: list[Pipe] = []
        self.processes = []
        for _ in range(processes):
            ours, theirs = context.Pipe()
            process = context.Process(target=worker_main, args=(theirs,), daemon=True)
            process.start()
            self.pipes.append(ours)
            self.processes.append(process)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes if p.pid is not None]

    def shares(self, n: int) -> list[int]:
        k = len(self.pipes)
        return [n // k + (i < n % k) for i in range(k)]

    def send_all(self, command: str, **arguments: Any) -> None:
        self.send(command, [arguments] * len(self.pipes))

    def send(self, command: str, per_worker: list[dict[str, Any]]) -> None:
        for pipe, arguments in zip(self.pipes, per_worker, strict=True):
            pipe.send((command, arguments))

    async def results(self, timeout: float) -> list[dict[str, Any]]:
        def collect(pipe: Pipe) -> Any:
            if not pipe.poll(timeout):
                raise TimeoutError(f"client process silent for {timeout:.0f} s")
            status, value = pipe.recv()
            if status != "ok":
                raise RuntimeError(f"client process failed:\n{value}")
            return value

        return list(await asyncio.gather(*(asyncio.to_thread(collect, p) for p in self.pipes)))

    async def call(self, command: str, timeout: float, **arguments: Any) -> list[dict[str, Any]]:
        self.send_all(command, **arguments)
        return await self.results(timeout)

    async def connect(self, url: str, n: int, topic: str | None) -> float:
        started = time.monotonic()
        self.send("connect", [{"url": url, "n": s, "topic": topic} for s in self.shares(n)])
        await self.results(timeout=120)
        return time.monotonic() - started

    def stop(self) -> None:
        for pipe in self.pipes:
            with contextlib.suppress(OSError):
                pipe.send(("quit", {}))
        for process in self.processes:
            process.join(timeout=20)
            if process.is_alive():
                process.kill()
                process.join(timeout=5)


def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    closes: Counter[int] = Counter()
    for part in parts:
        closes.update(part["closes"])
    return {
        "clients": sum(p["clients"] for p in parts),
        "complete": sum(p["complete"] for p in parts),
        "got": sum(p["got"] for p in parts),
        "frames": sum(p["frames"] for p in parts),
        "bytes": sum(p["bytes"] for p in parts),
        "last_done": max((p["last_done"] for p in parts if p["last_done"]), default=None),
        "closes": dict(closes),
        "client_cpu_s": sum(p["cpu_s"] for p in parts),
    }


# --- the measurements ------------------------------------------------------------------------


def machine_busy_s() -> tuple[float, float]:
    """(busy, softirq) CPU seconds of the whole machine, all cores, from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return (sum(values[:8]) - idle) / CLK_TCK, values[6] / CLK_TCK


class Cpu:
    """CPU seconds of every process of the run over one phase, as a share of one core; plus
    the whole machine's busy time (``machine``, out of 100 x cores) and its softirq share
    (loopback TCP processing, partly charged to no process of ours)."""

    def __init__(self, groups: dict[str, list[int]]) -> None:
        self.groups = groups
        self.before = {name: sum(cpu_s(p) for p in pids) for name, pids in groups.items()}
        self.machine = machine_busy_s()
        self.started = time.monotonic()

    def used(self) -> dict[str, float]:
        wall = time.monotonic() - self.started
        used = {
            name: round(100 * (sum(cpu_s(p) for p in pids) - self.before[name]) / wall, 1)
            for name, pids in self.groups.items()
        }
        busy, softirq = machine_busy_s()
        used["machine"] = round(100 * (busy - self.machine[0]) / wall, 1)
        used["softirq"] = round(100 * (softirq - self.machine[1]) / wall, 1)
        return used


class Poster:
    """HTTP/1.1 POSTs on one keep-alive connection, each request in one write.

    The hub's listening sockets are made with ``socket.socket(family, SOCK_STREAM)`` (proto
    0), so asyncio does not set TCP_NODELAY on the connections it accepts: the hub writes a
    response's headers and body as two segments and Nagle holds the body until the client's
    delayed ACK of the headers, about 40 ms later. An ordinary client (httpx) then waits
    ~44 ms per POST whatever its size (the warm-up measures it). With ``quickack`` this poster
    sets TCP_QUICKACK before each response so the hub's ingest and push paths, not that stall,
    set the pace; the stall is reported beside the figures."""

    def __init__(self, port: int, *, quickack: bool) -> None:
        self.port = port
        self.quickack = quickack and hasattr(socket, "TCP_QUICKACK")
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.used = 0.0
        self.posts = 0
        self.retries: list[str] = []
        self.auth = f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/xml\r\n"

    def _ack_now(self) -> None:
        if self.quickack and self.writer is not None:
            sock = self.writer.get_extra_info("socket")
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)

    async def post(self, topic: str, body: bytes) -> None:
        """POST; if the hub closed the connection before answering (0 bytes back), reconnect
        and send once more (counted in ``retries`` and reported: a retried fragment may have
        been accepted twice, which only moves the counts by one fragment)."""
        for attempt in (1, 2):
            try:
                await self._post(topic, body)
                return
            except (asyncio.IncompleteReadError, ConnectionResetError) as exc:
                await self.close()
                if attempt == 2 or (isinstance(exc, asyncio.IncompleteReadError) and exc.partial):
                    raise
                self.retries.append(
                    f"{self.posts} posts on the connection, last answer "
                    f"{time.monotonic() - self.used:.3f} s before"
                )

    async def _post(self, topic: str, body: bytes) -> None:
        if self.writer is not None and time.monotonic() - self.used > 2:
            await self.close()  # uvicorn closes keep-alive connections idle for 5 s
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
            self.posts = 0
        assert self.reader is not None
        head = (
            f"POST /topics/{topic}/changes HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
            f"{self.auth}Content-Length: {len(body)}\r\n\r\n"
        )
        self.writer.write(head.encode() + body)
        self._ack_now()
        async with asyncio.timeout(60):
            raw = await self.reader.readuntil(b"\r\n\r\n")
            self._ack_now()
            lines = raw.decode("latin-1").split("\r\n")
            length = next(
                int(line.split(":", 1)[1])
                for line in lines
                if line.lower().startswith("content-length:")
            )
            reply = await self.reader.readexactly(length)
        self.used = time.monotonic()
        self.posts += 1
        status = int(lines[0].split()[1])
        if status != 202:
            raise RuntimeError(f"post failed: {status} {reply[:300]!r}")

    async def close(self) -> None:
        writer, self.writer, self.reader = self.writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


class Bench:
    def __init__(self, args: argparse.Namespace, hub: Any, pool: ClientPool, base: str) -> None:
        self.args = args
        self.hub = hub
        self.pool = pool
        self.base = base
        self.push_url = ""
        self.raw: RawServer | None = None
        self.http = httpx.AsyncClient(
            timeout=60, trust_env=False, limits=httpx.Limits(max_connections=4)
        )
        self.headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/xml"}
        self.poster = Poster(int(base.rsplit(":", 1)[1]), quickack=not args.plain_poster)

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

    async def warm_up(self) -> tuple[bytes, list[float]]:
        """One client, one change: warms the hub and captures its one-change frame. Then the
        round trip of 10-change POSTs with httpx, an ordinary client (see Poster)."""
        async with connect(self.push_url, compression=None, proxy=None) as ws:
            await ws.send('{"type":"subscribe","topics":[{"topic":"warm"}]}')
            await ws.recv()
            await self.post("warm", fragment([(1, w3c(datetime.now(UTC)))]))
            async with asyncio.timeout(10):
                frame = await ws.recv(decode=False)
        assert frame.count(CHANGE_MARK) == 1, frame
        httpx_ms = []
        for k in range(5):
            body = fragment((10 + 10 * k + i, w3c(datetime.now(UTC))) for i in range(10))
            started = time.perf_counter()
            reply = await self.http.post(
                f"{self.base}/topics/warm/changes", content=body, headers=self.headers
            )
            httpx_ms.append((time.perf_counter() - started) * 1000)
            if reply.status_code != 202:
                raise RuntimeError(f"post failed: {reply.status_code} {reply.text[:300]}")
        return bytes(frame), sorted(httpx_ms)

    async def memory(self) -> dict[str, Any]:
        n = self.args.idle
        await asyncio.sleep(2)
        before = rss_kb(self.hub.pid)
        connect_s = await self.pool.connect(self.push_url, n, "idle")
        subscribed = await metric(self.http, self.base, "rspush_push_subscribers", "idle")
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
        slow = await metric(self.http, self.base, "rspush_push_slow_closes_total", topic)
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

    async def fanout_raw(self, n: int, frames: int) -> dict[str, Any]:
        assert self.raw is not None
        url = f"ws://127.0.0.1:{self.raw.port}/"
        connect_s = await self.pool.connect(url, n, None)
        ready = await self.raw.ask(cmd="wait", n=n)
        if ready["n"] < n:
            raise RuntimeError(f"raw server sees {ready['n']} of {n} clients")
        timeout = self.args.phase_timeout
        self.pool.send_all("receive", expected=frames, unit="frames", timeout=timeout)
        cpu = Cpu(self.groups())
        sent = await self.raw.ask(cmd="broadcast", frames=frames)
        result = merge(await self.pool.results(timeout + 30))
        used = cpu.used()
        await self.pool.call("close", timeout=120)
        wall = (result["last_done"] or time.time()) - sent["started"]
        return {
            "subscribers": n,
            "frames_broadcast": frames,
            "connect_seconds": connect_s,
            "broadcast_seconds": sent["finished"] - sent["started"],
            "wall_seconds": wall,
            "delivered_frames": result["got"],
            "complete_clients": result["complete"],
            "frames_per_s": result["got"] / wall,
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
        late = 0
        started = time.monotonic() + 0.05
        for k in range(posts):
            delay = started + k * interval - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                late += 1
            now = datetime.now(UTC)
            t0 = time.perf_counter()
            await self.post(
                "latency", fragment((k * per_post + i, w3c(now)) for i in range(per_post))
            )
            post_ms.append((time.perf_counter() - t0) * 1000)
        rate = expected / (time.monotonic() - started)
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
            "posts_late": late,
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
    over = len(ordered) - bisect.bisect_right(ordered, 25.0)
    return {
        "p50": percentile(ordered, 0.50),
        "p90": percentile(ordered, 0.90),
        "p99": percentile(ordered, 0.99),
        "p99.9": percentile(ordered, 0.999),
        "max": ordered[-1] if ordered else float("nan"),
        "over_25ms": over / max(1, len(ordered)),
    }


def changes_for(n: int, args: argparse.Namespace) -> int:
    fragment_size: int = args.fragment
    changes: int = min(args.changes, max(fragment_size, args.deliveries // n))
    return max(fragment_size, changes // fragment_size * fragment_size)


def frames_for(n: int, args: argparse.Namespace) -> int:
    frames: int = min(args.raw_frames, args.raw_deliveries // n)
    return max(20, frames)


async def run(args: argparse.Namespace, pool: ClientPool, workdir: Path) -> dict[str, Any]:
    http_port, push_port, raw_port = free_port(), free_port(), free_port()
    topics = ["warm", "idle", "latency", *(f"fan{n}" for n in args.subscribers)]
    hub = start_hub(workdir, http_port, push_port, topics)
    bench = Bench(args, hub, pool, f"http://127.0.0.1:{http_port}")
    bench.push_url = f"ws://127.0.0.1:{push_port}/"
    results: dict[str, Any] = {}
    try:
        frame, httpx_ms = await bench.warm_up()
        results["httpx_post_10_changes_ms"] = httpx_ms
        frame_file = workdir / "frame.json"
        frame_file.write_bytes(frame)
        results["one_change_frame_bytes"] = len(frame)
        bench.raw = RawServer(raw_port, frame_file)
        if "memory" in args.phases:
            log("memory: %d idle subscribers", args.idle)
            results["memory"] = await bench.memory()
        results["fanout"] = []
        for n in args.subscribers if "fanout" in args.phases else []:
            changes = changes_for(n, args)
            log("fan-out hub: %d subscribers, %d changes", n, changes)
            hub_result = await bench.fanout_hub(n, changes)
            frames = frames_for(n, args)
            log("fan-out raw: %d subscribers, %d frames", n, frames)
            raw_result = await bench.fanout_raw(n, frames)
            results["fanout"].append(
                {
                    "subscribers": n,
                    "hub": hub_result,
                    "raw": raw_result,
                    "ratio": hub_result["changes_per_s"] / raw_result["frames_per_s"],
                }
            )
        if "latency" in args.phases:
            log("latency: %d subscribers, %d changes/s", args.latency_subscribers, args.rate)
            results["latency"] = await bench.latency()
        results["poster_retries"] = bench.poster.retries
    except BaseException:
        lines = (workdir / "hub.log").read_text(errors="replace").splitlines()
        lines = [
            line for line in lines if not line.endswith(("connection open", "connection closed"))
        ]
        print("hub log (last 60 lines):\n" + "\n".join(lines[-60:]), file=sys.stderr)
        raise
    finally:
        await bench.http.aclose()
        await bench.poster.close()
        if bench.raw is not None:
            bench.raw.stop()
        stop_process(hub)
    return results


def log(message: str, *values: Any) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] " + message % values, file=sys.stderr, flush=True)


# --- report ----------------------------------------------------------------------------------


def report(results: dict[str, Any]) -> None:
    env = results["environment"]
    print(f"command: {env['command']}")
    print(
        f"python {env['python']}, websockets {env['websockets']}, {env['cpus']} cpus, "
        f"RLIMIT_NOFILE {env['nofile']}, {env['client_processes']} client processes"
        + (f", PYTHONPATH={env['pythonpath']}" if env["pythonpath"] else "")
    )
    print(f"one-change frame: {results['one_change_frame_bytes']} bytes")
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
        worst = min(row["ratio"] for row in results["fanout"])
        checks.append(
            ("delivered changes/s >= 3x raw frames/s (worst N)", f"{worst:.1f}x", worst >= 3)
        )
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
        "back to back)"
    )
    print(
        f"{'N':>6} {'changes':>8} {'hub changes/s':>14} {'hub frames/s':>13} {'ch/frame':>9} "
        f"{'ingest ch/s':>12} {'raw frames/s':>13} {'ratio':>7}"
    )
    for row in rows:
        hub, raw = row["hub"], row["raw"]
        print(
            f"{row['subscribers']:>6} {hub['changes_posted']:>8} {hub['changes_per_s']:>14,.0f} "
            f"{hub['frames_per_s']:>13,.0f} {hub['changes_per_frame']:>9.1f} "
            f"{hub['ingest_changes_per_s']:>12,.0f} {raw['frames_per_s']:>13,.0f} "
            f"{row['ratio']:>6.1f}x"
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
    parser.add_argument("--raw-frames", type=int, default=20_000, help="raw frames per N (max)")
    parser.add_argument("--raw-deliveries", type=int, default=1_000_000)
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
    try:
        with tempfile.TemporaryDirectory(prefix="rspush-bench-push-") as tmp:
            results = asyncio.run(run(args, pool, Path(tmp)))
    finally:
        pool.stop()
    results["environment"] = {
        "command": shlex.join([".venv/bin/python", "-m", "bench.bench_push", *sys.argv[1:]]),
        "python": platform.python_version(),
        "websockets": websockets_version,
        "cpus": os.cpu_count(),
        "nofile": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        "client_processes": args.client_procs,
        "fragment": args.fragment,
        "poster_quickack": not args.plain_poster,
        "pythonpath": os.environ.get("PYTHONPATH", ""),
        "hub_send_buffer_bytes": HUB_SEND_BUFFER,
        "seconds": time.monotonic() - started,
    }
    report(results)
    print(f"\n(total {results['environment']['seconds']:.0f} s)")
    if args.json:
        for part in ("accept_ms", "e2e_ms", "spread_ms"):
            results["latency"].pop(part, None)
        args.json.write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()
