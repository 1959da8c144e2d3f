"""A real hub for the benchmarks: ``rs-hub serve`` in its own process (embedded valkey-server)
on 127.0.0.1, its Prometheus metrics, and a poster for its ingest endpoint."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

from .system import free_port, raise_nofile, stop_process, wait_until

TOKEN = "bench-token"
"""The bearer token of the one Source, ``bench``, allowed to post to every topic."""
AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/xml"}
LIMITS: dict[str, float] = {
    "changelist_max_entries": 50_000,
    "changelist_max_age_s": 86_400,
    "max_entries_per_request": 50_000,
    "max_body_bytes": 50 * 1024 * 1024,
}
"""The hub's ``[limits]`` unless a benchmark says otherwise: one Change List holds up to
50,000 changes and is never closed by age during a run; one POST may carry 50 MB."""


def toml_value(value: object) -> str:
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string for the names and URLs used here
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return str(value)


def hub_config(
    port: int,
    push_port: int,
    topics: list[str],
    *,
    limits: Mapping[str, float] | None = None,
    push: Mapping[str, float] | None = None,
    settings: Mapping[str, float] | None = None,
    sections: Mapping[str, Mapping[str, object]] | None = None,
) -> str:
    """The TOML configuration of a benchmark hub: ``topics``, the ``bench`` Source allowed on
    all of them, :data:`LIMITS` updated with ``limits``, ``[push]`` on ``push_port`` with
    ``push``, top-level ``settings`` (e.g. ``rotation_interval_s``) and more tables
    (``sections``: e.g. ``{"websub": {...}}``)."""
    lines = [f"{key} = {toml_value(value)}" for key, value in (settings or {}).items()]
    lines += ["[hub]", f"base_url = {toml_value(f'http://127.0.0.1:{port}')}"]
    for name in topics:
        lines += ["[[topics]]", f"name = {toml_value(name)}"]
    lines += [
        "[[sources]]",
        'name = "bench"',
        f'token_sha256 = "{hashlib.sha256(TOKEN.encode()).hexdigest()}"',
        f"topics = {toml_value(topics)}",
        "[limits]",
    ]
    lines += [
        f"{key} = {toml_value(value)}" for key, value in (LIMITS | dict(limits or {})).items()
    ]
    lines += ["[push]", f"port = {push_port}"]
    lines += [f"{key} = {toml_value(value)}" for key, value in (push or {}).items()]
    for table, values in (sections or {}).items():
        lines += [f"[{table}]", *(f"{k} = {toml_value(v)}" for k, v in values.items())]
    return "\n".join(lines) + "\n"


def add_hub_args(parser: argparse.ArgumentParser) -> None:
    """``--hub-args "…"``: words passed to ``rs-hub serve`` as they are, so a benchmark can
    be re-run with any hub option (a process model, a setting) without changing it. Read
    them with :func:`hub_args`."""
    parser.add_argument(
        "--hub-args",
        default="",
        metavar="ARGS",
        help='extra arguments for "rs-hub serve", as one string (e.g. "--workers 2")',
    )


def hub_args(args: argparse.Namespace) -> list[str]:
    return shlex.split(args.hub_args)


@dataclass
class Hub:
    """A running ``rs-hub serve``; its stderr goes to ``workdir/hub.log``."""

    process: subprocess.Popen[bytes]
    workdir: Path
    port: int
    push_port: int

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def push_url(self) -> str:
        return f"ws://127.0.0.1:{self.push_port}/"

    @property
    def log(self) -> Path:
        return self.workdir / "hub.log"

    def print_log(self, count: int, *, skip: tuple[str, ...] = ()) -> None:
        """The last ``count`` lines of its log on stderr, leaving out lines ending with any
        of ``skip``."""
        if not self.log.exists():
            return
        lines = [
            line
            for line in self.log.read_text(errors="replace").splitlines()
            if not (skip and line.endswith(skip))
        ]
        print(f"hub log (last {count} lines):\n" + "\n".join(lines[-count:]), file=sys.stderr)

    def stop(self) -> None:
        stop_process(self.process)


def start_hub(
    workdir: Path,
    topics: Iterable[str],
    *,
    limits: Mapping[str, float] | None = None,
    push: Mapping[str, float] | None = None,
    settings: Mapping[str, float] | None = None,
    extra_args: Iterable[str] = (),
    extra_toml: str = "",
    sections: Mapping[str, Mapping[str, object]] | None = None,
) -> Hub:
    """Start ``rs-hub serve`` (data under ``workdir/data``) on free ports and wait until it
    answers ``/readyz`` (30 s at most); ``extra_args`` go on its command line (e.g.
    ``--workers 2``), ``extra_toml`` is appended to the configuration (e.g. ``[[bridges]]``
    tables). See :func:`hub_config` for the rest."""
    port, push_port = free_port(), free_port()
    config = workdir / "hub.toml"
    text = hub_config(
        port,
        push_port,
        list(topics),
        limits=limits,
        push=push,
        settings=settings,
        sections=sections,
    )
    text += extra_toml
    config.write_text(text)
    command = [str(Path(sys.executable).parent / "rs-hub"), "serve", "--config", str(config)]
    process = subprocess.Popen(
        [*command, "--port", str(port), "--data-dir", str(workdir / "data"), *extra_args],
        stdout=subprocess.DEVNULL,
        stderr=(workdir / "hub.log").open("wb"),
        preexec_fn=raise_nofile,
    )
    hub = Hub(process, workdir, port, push_port)

    def ready() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"hub exited during startup: {hub.log.read_text()}")
        with contextlib.suppress(httpx.HTTPError):
            reply = httpx.get(f"{hub.base}/readyz", timeout=1, trust_env=False)
            return reply.status_code == 200
        return False

    try:
        wait_until(ready, "the hub to be ready", 30)
    except BaseException:
        hub.stop()
        raise
    return hub


# --- metrics ---------------------------------------------------------------------------------


async def metric(client: httpx.AsyncClient, base: str, name: str, topic: str) -> float | None:
    """The value of a per-topic metric (``None`` if the hub does not export it yet)."""
    text = (await client.get(f"{base}/metrics")).text
    prefix = f'{name}{{topic="{topic}"}} '
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line[len(prefix) :])
    return None


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


def histogram_quantile(shares: dict[str, float], q: float) -> float:
    """The ``q`` quantile (0 < q <= 1) of a histogram given as :func:`histogram` returns it,
    read linearly between the bounds of the bucket it falls in, from 0 for the first, as
    Prometheus' ``histogram_quantile`` reads it; NaN when the histogram is empty or the
    quantile lies in the ``+Inf`` bucket (where Prometheus answers the highest finite bound,
    which would pass a value off as measured)."""
    bounds = sorted((float(le), share) for le, share in shares.items() if le != "+Inf")
    below, below_share = 0.0, 0.0
    for bound, share in bounds:
        if share >= q:
            if share == below_share:
                return bound
            return below + (bound - below) * (q - below_share) / (share - below_share)
        below, below_share = bound, share
    return float("nan")


# --- posting ---------------------------------------------------------------------------------


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
        self.auth = "".join(f"{name}: {value}\r\n" for name, value in AUTH.items())

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
