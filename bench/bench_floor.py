"""The machine's own floors under the latency figures: what any server on it pays, whatever
its language, before doing any work.

    .venv/bin/python -m bench.bench_floor [--exchanges 2000] [--gap-ms 10] [--sockets 100]
        [--json FILE]

Plain processes and loopback TCP sockets, no hub:

1. **exchanges**: a small message sent and answered, timed by the sender, over a chain of
   processes: 2 hops (a client and a server: how a publish to NATS or Socket.IO travels)
   and 4 hops (client -> relay -> server -> relay -> client: how a post to the hub travels,
   the hub's store being the server). Back to back, and then paced ``--gap-ms`` apart, as
   the latency phase of ``bench.bench_peers`` publishes (a process that has slept must be
   woken, on a virtual machine by the host);
2. **sends**: one 1.5 KB message written to each of ``--sockets`` connections in turn (their
   readers spread over two processes), timed by the writer: the floor of one push batch's
   writes (``rspush_push_write_seconds``), one ``send`` per subscriber.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import selectors
import socket
import time
from collections.abc import Callable
from typing import Any

from .harness.results import command_line, git_state, log, quantiles, write_json

MESSAGE = b"x" * 100
FRAME = b"y" * 1500
READERS = 2


def _listener() -> socket.socket:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    server.bind(("127.0.0.1", 0))
    server.listen(256)
    return server


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _accept(server: socket.socket) -> socket.socket:
    server.settimeout(30)
    sock, _ = server.accept()
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _echo(server: socket.socket) -> None:
    """The last process of a chain: answers every message; ends when the peer closes."""
    sock = _accept(server)
    while data := sock.recv(65536):
        sock.sendall(data)


def _relay(server: socket.socket, port: int) -> None:
    """A process in the middle of a chain: passes each message on and its answer back."""
    upstream = _accept(server)
    downstream = _connect(port)
    while data := upstream.recv(65536):
        downstream.sendall(data)
        upstream.sendall(downstream.recv(65536))
    downstream.close()


def _reader(port: int, count: int) -> None:
    """Holds ``count`` connections and reads whatever arrives; ends when they close."""
    socks = [_connect(port) for _ in range(count)]
    selector = selectors.DefaultSelector()
    for sock in socks:
        selector.register(sock, selectors.EVENT_READ)
    while socks:
        for key, _ in selector.select(timeout=30):
            if not key.fileobj.recv(65536):  # type: ignore[union-attr]
                selector.unregister(key.fileobj)
                socks.remove(key.fileobj)  # type: ignore[arg-type]


def _timed(times: int, gap_s: float, once: Callable[[], None]) -> dict[str, float]:
    spent = []
    for _ in range(times):
        if gap_s:
            time.sleep(gap_s)
        started = time.perf_counter()
        once()
        spent.append((time.perf_counter() - started) * 1e6)
    return quantiles(sorted(spent))


def exchanges(hops: int, times: int, gap_s: float) -> dict[str, float]:
    """Quantiles (µs) of a message's round trip over ``hops`` hops (2 or 4)."""
    context = multiprocessing.get_context("fork")
    server = _listener()
    processes = [context.Process(target=_echo, args=(server,), daemon=True)]
    first = server
    if hops == 4:
        first = _listener()
        port = server.getsockname()[1]
        processes.append(context.Process(target=_relay, args=(first, port), daemon=True))
    for process in processes:
        process.start()
    try:
        sock = _connect(first.getsockname()[1])
    except BaseException:
        _stop(processes)
        raise

    def once() -> None:
        sock.sendall(MESSAGE)
        got = 0
        while got < len(MESSAGE):
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("the other end of the chain closed")
            got += len(chunk)

    try:
        _timed(min(200, times), 0, once)  # warm-up
        return _timed(times, gap_s, once)
    finally:
        sock.close()
        _stop(processes)
        server.close()
        first.close()


def sends(count: int, times: int, gap_s: float) -> dict[str, float]:
    """Quantiles (µs) of writing one frame to each of ``count`` connections in turn."""
    context = multiprocessing.get_context("fork")
    server = _listener()
    port = server.getsockname()[1]
    readers = [
        context.Process(target=_reader, args=(port, count // READERS), daemon=True)
        for _ in range(READERS)
    ]
    for reader in readers:
        reader.start()
    socks: list[socket.socket] = []

    def once() -> None:
        for sock in socks:
            sock.send(FRAME)

    try:
        socks.extend(_accept(server) for _ in range(count // READERS * READERS))
        return _timed(times, gap_s, once)
    finally:
        for sock in socks:
            sock.close()
        _stop(readers)
        server.close()


def _stop(processes: list[multiprocessing.process.BaseProcess]) -> None:
    """Each process has ended by itself (its sockets closed) or is ended: none outlives the
    bench."""
    for process in processes:
        process.join(10)
        if process.is_alive():
            process.kill()
            process.join(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--exchanges", type=int, default=2000, help="per chain and pace")
    parser.add_argument("--gap-ms", type=float, default=10.0, help="pause before each, paced")
    parser.add_argument("--sockets", type=int, default=100, help="connections written to")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    load_before = os.getloadavg()
    gap_s = args.gap_ms / 1000
    figures: dict[str, Any] = {}
    for hops in (2, 4):
        for name, gap in (("back to back", 0.0), (f"{args.gap_ms:g} ms apart", gap_s)):
            log("exchanges: %d hops, %s", hops, name)
            figures[f"exchange {hops} hops, {name}"] = exchanges(hops, args.exchanges, gap)
    log("sends: %d connections", args.sockets)
    sockets = args.sockets // READERS * READERS
    figures[f"{sockets} sends, {args.gap_ms:g} ms apart"] = sends(
        args.sockets, max(100, args.exchanges // 10), gap_s
    )
    load = f"load {load_before[0]:.2f} -> {os.getloadavg()[0]:.2f}"
    print(f"{command_line('bench.bench_floor')}  ({git_state()}; {os.cpu_count()} cpus; {load})")
    print(f"{'(µs)':<32} {'p50':>8} {'p90':>8} {'p99':>8}")
    for name, q in figures.items():
        print(f"{name:<32} {q['p50']:8.0f} {q['p90']:8.0f} {q['p99']:8.0f}")
    if args.json:
        write_json(
            args.json,
            {
                "command": command_line("bench.bench_floor"),
                "commit": git_state(),
                "python": platform.python_version(),
                "cpus": os.cpu_count(),
                "load": load,
                "figures_us": figures,
            },
        )


if __name__ == "__main__":
    main()
