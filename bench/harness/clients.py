"""Processes holding the WebSocket push clients of a benchmark: a :class:`ClientPool` forks
``processes`` workers (:class:`ClientWorker`), shares the clients out among them and runs
commands on all of them at once (connect, receive, close) over pipes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import time
import traceback
from array import array
from collections import Counter
from multiprocessing.connection import Connection as Pipe
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from .system import raise_nofile

CHANGE_MARK = b'{"position":"'
"""Starts every change of a JSON frame: counting it counts the changes of a frame."""
# Per client process. The hub answers a subscribe with Redis reads on its shared client, whose
# pool holds 100 connections (one per topic busy in XREAD BLOCK): more than about 90
# subscribes in flight at once fail with 1011 (MaxConnectionsError), so connect in small waves.
CONNECT_CONCURRENCY = 32


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
    """The ``receive`` summaries of every client process, as one."""
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
