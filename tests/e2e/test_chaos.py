"""Chaos: the whole system on loopback, real processes, faults at random moments.

Two ``rs-hub serve`` processes share one Redis-compatible server (an embedded valkey-server
this test starts, ``appendfsync always``). In front of them two small TCP proxies stand in
for a load balancer: one for HTTP (the hubs' ``[hub] base_url``), one for push (their
``[push] url``), each connecting a client to whichever hub accepts. A loopback origin serves
the resources; a poster changes them and posts the changes (retrying with an
``Idempotency-Key`` until acknowledged); three ``rs-subscribe run`` processes mirror the
topic.

A seeded RNG (the seed is printed; ``RSPUSH_CHAOS_SEED`` replays it) picks, again and again,
one or two faults at once, holds them for a moment and recovers:

- SIGKILL a hub, then start it again on the same ports;
- SIGKILL the Redis server, then start it again on the same data dir (its AOF);
- SIGKILL an agent, then start it again (it resumes from its checkpoint);
- cut the push proxy (every connection dropped, new ones refused), then restore it.

The harness never restarts a process that died on its own: an agent or hub that exits
without being killed fails the test at once, with its log. At the end every mirror equals
the origin (within a deadline) and the Change Lists (archive, closed lists, open list) hold
every acknowledged change exactly once, in acknowledgement order.

``RSPUSH_CHAOS_SECONDS`` sets how long faults are injected (default 45);
``RSPUSH_CHAOS_FAULTS`` which kinds (default ``hub,redis,agent,push``) and
``RSPUSH_CHAOS_AGENTS`` how many agents (default 3; 0 tests the hub side alone), to narrow a
replay.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from rspush.hub.embedded import EmbeddedRedis
from rspush.resourcesync import parse_w3c_datetime
from tests.support.agents import mirror_files
from tests.support.origin import Announced, Origin, running_origin
from tests.support.processes import SOURCE_TOKEN, HubProcess, write_config
from tests.support.served_lists import served_change_lists
from tests.support.waiting import TIMEOUT_SCALE

pytestmark = [
    pytest.mark.chaos,
    pytest.mark.timeout(300),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux process control"),
]

CHAOS_S = float(os.environ.get("RSPUSH_CHAOS_SECONDS", "45"))
FAULTS = os.environ.get("RSPUSH_CHAOS_FAULTS", "hub,redis,agent,push").split(",")
CONVERGE_S = 90.0
"""After the last fault is recovered, every mirror equals the origin within this."""
AGENTS = int(os.environ.get("RSPUSH_CHAOS_AGENTS", "3"))
PATHS = 24
"""The origin's resource paths the poster creates, updates and deletes."""
CHANGELIST_MAX_ENTRIES = 20
"""Small: lists close (and are archived) many times during a run."""
TOPIC = "dataset1"
RS_SUBSCRIBE = Path(sys.executable).parent / "rs-subscribe"
BOX = ("│", "╭", "╰")


# --- a TCP proxy that can be cut ------------------------------------------------------------


class Proxy:
    """A load balancer's stand-in: each accepted connection goes to the first upstream port
    (round-robin start) that accepts. :meth:`cut` drops every connection and refuses new
    ones until :meth:`restore`."""

    def __init__(self, upstreams: list[int]) -> None:
        self.upstreams = upstreams
        self.port = 0
        self.is_cut = False
        self._next = 0
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def cut(self) -> None:
        self.is_cut = True
        for writer in list(self._writers):
            writer.transport.abort()

    def restore(self) -> None:
        self.is_cut = False

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.is_cut:
            writer.transport.abort()
            return
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        start, self._next = self._next, self._next + 1
        for i in range(len(self.upstreams)):
            port = self.upstreams[(start + i) % len(self.upstreams)]
            with contextlib.suppress(OSError):
                upstream = await asyncio.open_connection("127.0.0.1", port)
                break
        if upstream is None or self.is_cut:
            writer.transport.abort()
            if upstream is not None:
                upstream[1].transport.abort()
            return
        up_reader, up_writer = upstream
        self._writers |= {writer, up_writer}
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        finally:
            self._writers -= {writer, up_writer}

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            writer.transport.abort()  # the other side broke: so does this one
        else:
            writer.close()  # an orderly end: flush what is buffered, then close
        finally:
            self._tasks.discard(task)


# --- the processes -----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class AgentProcess:
    """``rs-subscribe run`` into ``dest``; its output appended to ``log_path``."""

    def __init__(self, name: str, workdir: Path, args: list[str]) -> None:
        self.name = name
        self.dest = workdir / name
        self.log_path = workdir / f"{name}.log"
        self.args = args
        self.process: subprocess.Popen[bytes] | None = None
        self.killed = False
        """Set by the harness before it kills: any other exit is a death of its own."""
        self.starts = 0

    def start(self) -> None:
        self.killed = False
        self.starts += 1
        with self.log_path.open("ab") as log:
            log.write(f"--- start {self.starts} ---\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                [
                    str(RS_SUBSCRIBE),
                    "run",
                    *self.args,
                    "--dest",
                    str(self.dest),
                    "--events",
                    str(self.dest.parent / f"{self.name}.events.jsonl"),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )

    def kill(self) -> None:
        assert self.process is not None
        self.killed = True
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def died_on_its_own(self) -> int | None:
        if self.process is None or self.killed:
            return None
        return self.process.poll()

    def log_tail(self, lines: int = 40) -> str:
        """The end of its log, without the frames of a traceback (boxes drawn by rich): the
        log lines and the exception chain."""
        text = self.log_path.read_text(encoding="utf-8", errors="replace")
        kept = [line for line in text.splitlines() if not line.lstrip().startswith(BOX)]
        return "\n".join(kept[-lines:]) + f"\n(full log: {self.log_path})"


@dataclass
class Tally:
    hub_kills: int = 0
    redis_kills: int = 0
    agent_kills: int = 0
    push_cuts: int = 0
    posts: int = 0
    post_retries: int = 0
    changes: int = 0
    events: list[str] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"hub kills {self.hub_kills}, Redis kills {self.redis_kills}, agent kills "
            f"{self.agent_kills}, push cuts {self.push_cuts}; {self.posts} posts "
            f"({self.changes} changes, {self.post_retries} retries)"
        )


class Harness:
    def __init__(self, workdir: Path, seed: int, origin: Origin) -> None:
        self.workdir = workdir
        self.rng = random.Random(seed)
        """The faults: the same sequence for the same seed (their timing varies)."""
        self.changes_rng = random.Random(seed + 1)
        """The poster's changes: the same sequence for the same seed."""
        self.seed = seed
        self.origin = origin
        self.tally = Tally()
        self.redis_dir = workdir / "redis"
        self.redis: EmbeddedRedis | None = None
        self.hub_ports = [free_port() for _ in range(2)]
        self.push_ports = [free_port() for _ in range(2)]
        self.http_proxy = Proxy(self.hub_ports)
        self.push_proxy = Proxy(self.push_ports)
        self.hubs: list[HubProcess] = []
        self.hub_killed: list[bool] = []
        self.agents: list[AgentProcess] = []
        self.acknowledged: list[tuple[str, str, str]] = []
        """(loc, change, datetime) of every acknowledged change, in acknowledgement order."""

    @property
    def base_url(self) -> str:
        return f"http://{self.http_proxy.url}"

    # --- checks -----------------------------------------------------------------------------

    def check(self) -> None:
        """Fail at once if a process died without the harness killing it."""
        for agent in self.agents:
            code = agent.died_on_its_own()
            if code is not None:
                raise AssertionError(
                    f"[seed {self.seed}] agent {agent.name} exited {code} on its own "
                    f"(start {agent.starts}); events so far: {self.tally.events[-8:]}\n"
                    f"its log:\n{agent.log_tail()}"
                )
        for index, hub in enumerate(self.hubs):
            code = hub.exited() if not self.hub_killed[index] else None
            if code is not None:
                raise AssertionError(
                    f"[seed {self.seed}] hub {index} exited {code} on its own; "
                    f"its log:\n{hub.log[-6000:]}"
                )

    async def until(self, done: Callable[[], bool], what: str, timeout: float = 30) -> None:
        """Wait for ``done``, checking the processes meanwhile; fail after ``timeout``
        (scaled) seconds naming ``what``."""
        deadline = time.monotonic() + timeout * TIMEOUT_SCALE
        while not done():
            self.check()
            if time.monotonic() > deadline:
                raise AssertionError(f"[seed {self.seed}] timed out waiting for {what}")
            await asyncio.sleep(0.05)

    async def sleep(self, seconds: float) -> None:
        """Sleep, checking the processes meanwhile."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self.check()
            await asyncio.sleep(min(0.05, left))
        self.check()

    # --- Redis, hubs, agents ------------------------------------------------------------------

    async def start_redis(self) -> None:
        self.redis = EmbeddedRedis(self.redis_dir, appendfsync="always")
        self.redis.spawn()  # on the loop's thread: its parent-death signal follows it
        await asyncio.to_thread(self.redis.wait_ready)

    async def kill_redis(self) -> None:
        assert self.redis is not None
        await asyncio.to_thread(self.redis.kill)
        self.tally.redis_kills += 1

    async def start_hub(self, index: int) -> None:
        assert self.redis is not None
        if index == len(self.hubs):
            config = write_config(
                self.workdir / f"hub{index}.toml",
                port=self.hub_ports[index],
                push_port=self.push_ports[index],
                base_url=self.base_url,
                push_url=f"ws://{self.push_proxy.url}/",
                redis_url=self.redis.url,
                max_entries=CHANGELIST_MAX_ENTRIES,
            )
            self.hubs.append(HubProcess(self.workdir / f"hub{index}.log", "--config", config))
            self.hub_killed.append(False)
        hub = self.hubs[index]
        hub.start()
        await asyncio.to_thread(hub.wait_serving)
        self.hub_killed[index] = False

    async def kill_hub(self, index: int) -> None:
        self.hub_killed[index] = True
        await asyncio.to_thread(self.hubs[index].kill)
        self.tally.hub_kills += 1

    def add_agent(self, index: int) -> AgentProcess:
        args = [
            self.base_url,
            "--topic",
            TOPIC,
            "--map",
            f"{self.origin.url}/=",
            "--poll-interval",
            "0.5",
        ]
        agent = AgentProcess(f"agent{index}", self.workdir, args)
        self.agents.append(agent)
        agent.start()
        return agent

    async def kill_agent(self, agent: AgentProcess) -> None:
        await asyncio.to_thread(agent.kill)
        self.tally.agent_kills += 1

    # --- the poster ---------------------------------------------------------------------------

    async def poster(self, stop: asyncio.Event) -> None:
        """Change the origin and post the changes, one fragment at a time, each retried (same
        body, same Idempotency-Key) until acknowledged; until ``stop``."""
        async with httpx.AsyncClient(base_url=self.base_url, timeout=10) as http:
            while not stop.is_set():
                entries = self._next_changes()
                body = fragment(entries)
                key = uuid.uuid4().hex
                while True:
                    try:
                        reply = await http.post(
                            f"/topics/{TOPIC}/changes",
                            content=body,
                            headers={
                                "Authorization": f"Bearer {SOURCE_TOKEN}",
                                "Content-Type": "application/xml",
                                "Idempotency-Key": key,
                            },
                        )
                    except httpx.HTTPError:
                        reply = None
                    if reply is not None and reply.status_code == 202:
                        break
                    if reply is not None and reply.status_code not in (502, 503, 504):
                        raise AssertionError(f"post refused: {reply.status_code} {reply.text}")
                    self.tally.post_retries += 1
                    await asyncio.sleep(0.1)
                self.acknowledged += [(e.loc, e.change, e.datetime or "") for e in entries]
                self.tally.posts += 1
                self.tally.changes += len(entries)
                await asyncio.sleep(self.changes_rng.uniform(0.02, 0.3))

    def _next_changes(self) -> list[Announced]:
        """1-4 changes of distinct paths, applied to the origin now."""
        entries = []
        rng = self.changes_rng
        for number in rng.sample(range(PATHS), rng.randint(1, 4)):
            path = f"/r/{number % 4}/{number}.txt"
            exists = path in self.origin.resources
            if exists and rng.random() < 0.25:
                self.origin.delete(path)
                entries.append(Announced(self.origin.uri(path), "deleted", None, self._when()))
                continue
            content = f"{path} {rng.getrandbits(64):x}\n".encode() * rng.randint(1, 50)
            self.origin.put(path, content)
            change = "updated" if exists else "created"
            entries.append(Announced(self.origin.uri(path), change, content, self._when()))
        return entries

    def _when(self) -> str:
        return self.origin.clock.next()

    # --- faults ---------------------------------------------------------------------------

    async def chaos(self, seconds: float) -> None:
        """Inject faults until ``seconds`` have passed; every fault is recovered on return."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            await self.sleep(self.rng.uniform(0.5, 3.0))
            kinds = self.rng.sample(FAULTS, min(len(FAULTS), self.rng.choice([1, 1, 2])))
            await self.fault(kinds, hold=self.rng.uniform(0.2, 3.0))

    async def fault(self, kinds: list[str], hold: float) -> None:
        hubs = self.rng.sample(range(len(self.hubs)), self.rng.choice([1, 1, 2]))
        agent = self.rng.choice(self.agents) if self.agents else None
        self.tally.events.append(f"{time.monotonic():.1f} {kinds} hold {hold:.1f}s")
        for kind in kinds:
            if kind == "hub":
                for index in hubs:
                    await self.kill_hub(index)
            elif kind == "redis":
                await self.kill_redis()
            elif kind == "agent" and agent is not None:
                await self.kill_agent(agent)
            else:
                self.push_proxy.cut()
                self.tally.push_cuts += 1
        await self.sleep(hold)
        # Redis first (a hub needs it to start); the rest in a random order.
        if "redis" in kinds:
            await self.start_redis()
        for kind in self.rng.sample(kinds, len(kinds)):
            if kind == "hub":
                for index in hubs:
                    await self.start_hub(index)
            elif kind == "agent" and agent is not None:
                agent.start()
            elif kind == "push":
                self.push_proxy.restore()

    # --- the end ------------------------------------------------------------------------------

    async def converged(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout * TIMEOUT_SCALE
        while True:
            self.check()
            differing = [
                a.name for a in self.agents if mirror_files(a.dest) != self.origin.resources
            ]
            if not differing:
                return
            if time.monotonic() > deadline:
                details = "\n".join(
                    f"{name}: {describe(self.origin, self.workdir / name)}" for name in differing
                )
                raise AssertionError(
                    f"[seed {self.seed}] mirrors differ from the origin {timeout} s after the "
                    f"last fault:\n{details}"
                )
            await asyncio.sleep(0.1)

    async def listed_changes(self, hub_url: str) -> list[tuple[str, str, str]]:
        """Every change of the closed lists (archive order) and the open list, with no gap
        between two lists."""
        docs = await served_change_lists(hub_url, TOPIC)
        for before, after in zip(docs, docs[1:], strict=False):
            assert before.md.until == after.md.from_, "the Change Lists leave a gap"
        return [
            (e.loc, str(e.md.change), e.md.datetime.isoformat() if e.md.datetime else "")
            for d in docs
            for e in d.entries
            if e.md is not None
        ]

    async def close(self) -> None:
        for agent in self.agents:
            if agent.process is not None and agent.process.poll() is None:
                agent.killed = True
                agent.process.kill()
                agent.process.wait(30)
        for index, hub in enumerate(self.hubs):
            self.hub_killed[index] = True
            await asyncio.to_thread(hub.kill)
        await self.http_proxy.close()
        await self.push_proxy.close()
        if self.redis is not None:
            await asyncio.to_thread(self.redis.stop)


def fragment(entries: list[Announced]) -> bytes:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'
        ' xmlns:rs="http://www.openarchives.org/rs/terms/">'
        f'<rs:md capability="changelist"/>{"".join(e.xml() for e in entries)}</urlset>'
    ).encode()


def describe(origin: Origin, dest: Path) -> str:
    mine, theirs = mirror_files(dest), origin.resources
    return (
        f"missing {sorted(set(theirs) - set(mine))}, extra {sorted(set(mine) - set(theirs))}, "
        f"different {sorted(k for k in mine if k in theirs and mine[k] != theirs[k])}"
    )


def normalised(changes: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    return [
        (loc, change, parse_w3c_datetime(when).isoformat() if when else "")
        for loc, change, when in changes
    ]


async def test_chaos(tmp_path: Path) -> None:
    seed = int(os.environ.get("RSPUSH_CHAOS_SEED") or random.SystemRandom().getrandbits(32))
    print(f"chaos seed {seed} (replay: RSPUSH_CHAOS_SEED={seed})")
    started = time.monotonic()
    async with running_origin() as origin:
        harness = Harness(tmp_path, seed, origin)
        try:
            await harness.http_proxy.start()
            await harness.push_proxy.start()
            await harness.start_redis()
            for index in range(2):
                await harness.start_hub(index)
            stop_posting = asyncio.Event()
            poster = asyncio.create_task(harness.poster(stop_posting), name="poster")
            try:
                await harness.until(  # a few changes before the agents' baseline
                    lambda: len(harness.acknowledged) >= 10, "the first changes acknowledged"
                )
                for index in range(AGENTS):
                    harness.add_agent(index)
                await harness.chaos(CHAOS_S)
            except BaseException:
                # A fault may still be on (Redis down): the poster would retry forever.
                poster.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await poster
                raise
            stop_posting.set()
            async with asyncio.timeout(60 * TIMEOUT_SCALE):
                await poster  # its last fragment, retried until acknowledged
            chaos_done = time.monotonic()
            await harness.converged(CONVERGE_S)
            converge_s = time.monotonic() - chaos_done

            expected = normalised(harness.acknowledged)
            for port in harness.hub_ports:  # each hub, directly
                url = f"http://127.0.0.1:{port}"
                listed = normalised(await harness.listed_changes(url))
                assert len(listed) == len(expected), (len(listed), len(expected), seed)
                assert listed == expected, f"[seed {seed}] the Change Lists differ"
            # The agents stop cleanly (checkpoint committed) once things are quiet.
            for agent in harness.agents:
                assert agent.process is not None
                agent.killed = True
                agent.process.send_signal(signal.SIGTERM)
                code = await asyncio.to_thread(agent.process.wait, 30 * TIMEOUT_SCALE)
                assert code == 0, f"{agent.name} exited {code}:\n{agent.log_tail()}"
        finally:
            await harness.close()
    summary = {
        "seed": seed,
        "seconds": round(time.monotonic() - started, 1),
        "converged_after_s": round(converge_s, 1),
        **{k: v for k, v in vars(harness.tally).items() if k != "events"},
    }
    print("chaos:", json.dumps(summary))
