"""A light WebSub callback receiver for the benchmarks, in its own process:
``python -m bench.harness.websub_receiver`` serves HTTP/1.1 (keep-alive) on 127.0.0.1, a free
port, for any number of callback paths. A GET with ``hub.challenge`` is answered with the
challenge (verification of intent); a POST (a notification) with 204 once counted: changes
(``<loc>`` elements) per path, and per change the time from its ``datetime`` (set by the
poster to when it posted) to the receipt.

Spoken to in JSON lines (:class:`harness.system.HelperProcess`): ready ``{"port"}``; commands
``{"cmd": "stats"}`` (totals since the last reset), ``{"cmd": "samples"}`` (the latency
samples) and ``{"cmd": "reset"}``.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from collections import Counter
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

DATETIME = re.compile(rb'datetime="([^"]+)"')


class Receiver:
    def __init__(self) -> None:
        self.changes: Counter[str] = Counter()
        self.posts = 0
        self.latency_ms: list[float] = []
        self.first = self.last = 0.0
        self._times: dict[bytes, float] = {}

    def _epoch(self, text: bytes) -> float:
        value = self._times.get(text)
        if value is None:
            value = datetime.fromisoformat(text.decode().replace("Z", "+00:00")).timestamp()
            if len(self._times) > 100_000:
                self._times.clear()
            self._times[text] = value
        return value

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, target, _ = lines[0].split(" ", 2)
                length = 0
                for line in lines[1:]:
                    if line.lower().startswith("content-length:"):
                        length = int(line.split(":", 1)[1])
                body = await reader.readexactly(length) if length else b""
                if method == "GET":
                    query = parse_qs(urlsplit(target).query)
                    reply = query.get("hub.challenge", [""])[0].encode()
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                        + f"Content-Length: {len(reply)}\r\n\r\n".encode()
                        + reply
                    )
                else:
                    now = time.time()
                    self.posts += 1
                    self.changes[urlsplit(target).path] += body.count(b"<loc>")
                    if not self.first:
                        self.first = now
                    self.last = now
                    self.latency_ms += [
                        (now - self._epoch(m)) * 1000 for m in DATETIME.findall(body)
                    ]
                    writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()

    def stats(self) -> dict[str, Any]:
        return {
            "posts": self.posts,
            "changes": sum(self.changes.values()),
            "paths": len(self.changes),
            "first": self.first,
            "last": self.last,
        }

    def reset(self) -> None:
        self.changes.clear()
        self.posts = 0
        self.latency_ms = []
        self.first = self.last = 0.0


async def main() -> None:
    receiver = Receiver()
    server = await asyncio.start_server(receiver.handle, "127.0.0.1", 0, backlog=4096)
    port = server.sockets[0].getsockname()[1]
    print(json.dumps({"port": port}), flush=True)
    while True:
        line = await asyncio.to_thread(sys.stdin.readline)
        if not line:
            break
        command = json.loads(line)
        if command["cmd"] == "stats":
            print(json.dumps(receiver.stats()), flush=True)
        elif command["cmd"] == "samples":
            print(json.dumps({"latency_ms": receiver.latency_ms}), flush=True)
        elif command["cmd"] == "reset":
            receiver.reset()
            print("{}", flush=True)
    server.close()


if __name__ == "__main__":
    asyncio.run(main())
