"""``rs-hub serve --workers N``: one hub as several processes on one Redis, so that ingest and
WebSocket fan-out never share an event loop (or a CPU).

The parent holds what there is one of: the data dir's lock, the embedded server, the two
listening sockets. It spawns the workers (fresh interpreters, ``multiprocessing`` "spawn"),
each inheriting one listening socket and serving one role (:func:`worker_roles`):

- ``http`` workers serve the HTTP port — ingest, documents, rotation (the rotation lease
  already lets several processes share it), metrics and status;
- ``push`` workers serve the WebSocket push port, each with its own feeds.

Processes sharing a listening socket each ``accept`` on it; the kernel hands every new
connection to one of them. Every process reads and writes only Redis, so a subscriber
resumes on any push worker exactly as on any hub process (docs/protocol.md).

Lifetime: a worker gets SIGTERM when the parent dies (``PR_SET_PDEATHSIG``), so no worker
outlives it. SIGINT/SIGTERM to the parent stop every worker (each closes its connections as
a single-process hub does), then the embedded server. A worker that dies while the hub runs
is restarted in its role (the others keep serving); more than :data:`MAX_RESTARTS` deaths in
:data:`RESTART_WINDOW_S` mean something is wrong with every start: the parent stops the hub
and exits with status 1.

Metrics: with workers, ``prometheus_client``'s multiprocess mode — every worker writes its
series to files in one directory the parent makes (``PROMETHEUS_MULTIPROC_DIR``), and
``/metrics`` on any HTTP worker adds them up (gauges of connections and subscribers are
summed over the live workers). Log lines name their worker (``worker 1 push``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import tempfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Event
from typing import Any

from .advertise import Announcement, advertised, is_wildcard, reachable_host, url_host
from .metrics import MULTIPROC_ENV
from .settings import Settings

log = logging.getLogger("rspush.hub")

STARTUP_TIMEOUT_S = 60.0
"""Every worker serves within this, or the hub stops (a worker imports the whole hub)."""
STOP_TIMEOUT_S = 15.0
"""A worker asked to stop has this long (its connections close in ``close_timeout_s``)."""
MAX_RESTARTS = 5
RESTART_WINDOW_S = 60.0
POLL_S = 0.2


def default_workers() -> int:
    """One process per CPU this process may run on (its affinity mask, e.g. a container's
    cpuset; ``os.cpu_count()`` where the OS has no such mask)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def worker_roles(workers: int, *, push: bool) -> list[str]:
    """The role of each of ``workers`` processes: half of them (at least one) serve push when
    it is enabled, the rest HTTP (at least one). One process serves both."""
    if workers <= 1:
        return ["both"]
    if not push:
        return ["http"] * workers
    pushers = max(1, workers // 2)
    return ["http"] * (workers - pushers) + ["push"] * pushers


@dataclass
class RestartBudget:
    """At most ``limit`` restarts within any ``window_s``."""

    limit: int = MAX_RESTARTS
    window_s: float = RESTART_WINDOW_S
    times: deque[float] = field(default_factory=deque)

    def allow(self, now: float) -> bool:
        while self.times and now - self.times[0] > self.window_s:
            self.times.popleft()
        if len(self.times) >= self.limit:
            return False
        self.times.append(now)
        return True


class WorkerDied(Exception):
    """Workers kept dying: the hub stopped."""


@dataclass(frozen=True)
class WorkerSpec:
    """What one worker process needs (pickled to it)."""

    index: int
    role: str
    settings: Settings
    sock: socket.socket
    parent: int
    log_level: int
    ready: Event


def announcement(
    settings: Settings, sock: socket.socket, push: socket.socket | None
) -> Announcement:
    """What the parent prints: where the workers listen and the URLs the documents name."""
    host, port = sock.getsockname()[:2]
    shown = reachable_host(host)
    push_port = None if push is None else push.getsockname()[1]
    named = advertised(settings, host, port, push_port)
    return Announcement(
        http=f"http://{url_host(shown)}:{port}",
        push=None if push_port is None else f"ws://{url_host(shown)}:{push_port}/",
        base_url=named.hub.base_url,
        push_url=named.push.url if push_port is not None else None,
        wildcard=is_wildcard(host),
        base_url_configured="base_url" in settings.hub.model_fields_set,
    )


def _log_format(spec: WorkerSpec) -> str:
    return f"%(asctime)s %(levelname)s worker {spec.index} {spec.role} %(name)s: %(message)s"


def worker_main(spec: WorkerSpec) -> None:
    """A worker process: serve its role until SIGINT/SIGTERM or the parent's death."""
    from .embedded import die_with_parent

    die_with_parent(spec.parent)
    logging.basicConfig(level=spec.log_level, format=_log_format(spec))
    logging.getLogger("websockets").setLevel(max(spec.log_level, logging.WARNING))
    asyncio.run(_serve_role(spec))


async def _serve_role(spec: WorkerSpec) -> None:
    from .server import running_hub, running_push

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    settings = spec.settings
    if spec.role == "push":
        async with running_push(settings, spec.sock, deliver_websub=True) as running:
            spec.ready.set()
            # Multiprocess metrics cannot call back into this process: count now and then.
            while not stop.is_set():
                running.metrics.push_connections.set(running.push.connections)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(1.0):
                        await stop.wait()
        return
    # WebSub deliveries run in the push workers when there are some (worker_roles), so a
    # burst of callbacks never slows the event loops that take ingest.
    async with running_hub(
        settings, sock=spec.sock, serve_push=False, deliver_websub=not settings.push.enabled
    ):
        spec.ready.set()
        await stop.wait()


class Workers:
    """The parent's side: spawn, watch, restart, stop."""

    def __init__(
        self,
        settings: Settings,
        count: int,
        sock: socket.socket,
        push_sock: socket.socket | None,
    ) -> None:
        self.context = multiprocessing.get_context("spawn")
        # The workers' settings: URLs fixed from the parent's sockets, the push port the
        # one actually bound (port 0 included), Redis the one the parent started.
        host, port = sock.getsockname()[:2]
        push_port = None if push_sock is None else push_sock.getsockname()[1]
        named = advertised(settings, host, port, push_port)
        if push_port is not None:
            named = named.model_copy(
                update={"push": named.push.model_copy(update={"port": push_port})}
            )
        # A plain Settings (the TOML-reading class load_settings makes cannot be pickled).
        self.settings = Settings.model_validate(named.model_dump())
        self.roles = worker_roles(count, push=push_sock is not None)
        self.sockets = {"http": sock, "push": push_sock}
        self.processes: list[BaseProcess | None] = [None] * len(self.roles)
        # Held while the worker lives: a worker unpickles its event after it starts, and an
        # event the parent dropped is gone by then.
        self.ready: list[Event | None] = [None] * len(self.roles)
        self.budget = RestartBudget()
        self.metrics_dir = tempfile.mkdtemp(prefix="rspush-metrics-")
        self.restarts = 0

    def _spawn(self, index: int) -> tuple[BaseProcess, Event]:
        role = self.roles[index]
        sock = self.sockets[role]
        assert sock is not None
        ready = self.context.Event()
        spec = WorkerSpec(
            index=index,
            role=role,
            settings=self.settings,
            sock=sock,
            parent=os.getpid(),
            log_level=logging.getLogger().getEffectiveLevel(),
            ready=ready,
        )
        process = self.context.Process(
            target=worker_main, args=(spec,), name=f"rs-hub worker {index} {role}", daemon=False
        )
        process.start()
        self.processes[index] = process
        self.ready[index] = ready
        log.info("worker %d (%s) started: pid %s", index, role, process.pid)
        return process, ready

    async def start(self) -> None:
        """Spawn every worker; return once all serve (WorkerDied if one exits first)."""
        os.environ[MULTIPROC_ENV] = self.metrics_dir  # inherited by the spawned workers
        pending = [self._spawn(i) for i in range(len(self.roles))]
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not all(ready.is_set() for _, ready in pending):
            for process, _ in pending:
                if process.exitcode is not None:
                    raise WorkerDied(f"{process.name} exited during startup")
            if time.monotonic() > deadline:
                raise WorkerDied("workers did not start in time")
            await asyncio.sleep(POLL_S)

    async def supervise(self, stop: asyncio.Event, tick: Callable[[], Any] | None = None) -> None:
        """Until ``stop``: restart a worker that exits (within the budget)."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(POLL_S):
                    await stop.wait()
            if stop.is_set():
                return
            for index, process in enumerate(self.processes):
                if process is None or process.exitcode is None:
                    continue
                self._forget(process)
                log.error(
                    "worker %d (%s) exited with status %s",
                    index,
                    self.roles[index],
                    process.exitcode,
                )
                if not self.budget.allow(time.monotonic()):
                    raise WorkerDied(
                        f"workers exited more than {self.budget.limit} times in "
                        f"{self.budget.window_s:.0f} s"
                    )
                self.restarts += 1
                self._spawn(index)
            if tick is not None:
                await tick()

    def _forget(self, process: BaseProcess) -> None:
        from prometheus_client import multiprocess

        if process.pid is not None:
            multiprocess.mark_process_dead(process.pid, self.metrics_dir)  # type: ignore[no-untyped-call]

    async def stop(self) -> None:
        """SIGTERM every worker, wait, SIGKILL the ones still there; drop the metrics files."""
        live = [p for p in self.processes if p is not None and p.exitcode is None]
        for process in live:
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while any(p.exitcode is None for p in live) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for process in live:
            if process.exitcode is None:
                log.error("%s did not stop in time; killing it", process.name)
                process.kill()
                await asyncio.to_thread(process.join, 5)
        os.environ.pop(MULTIPROC_ENV, None)
        shutil.rmtree(self.metrics_dir, ignore_errors=True)
