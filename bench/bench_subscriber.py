"""Destination agent benchmark: ``rs-subscribe``'s agent against a real hub and a real origin.

    .venv/bin/python -m bench.bench_subscriber [--rate 200] [--seconds 10]
        [--catchup-changes 50000] [--resources 5000] [--json FILE]

Starts a real hub (``rs-hub serve``, its own process, embedded valkey-server, Change Lists
closed every ``--list-entries`` changes, stream retention 0) and a loopback HTTP origin (its
own process: a Starlette app on uvicorn that serves what the bench PUTs), both on 127.0.0.1.
The agent (:class:`rspush.subscriber.agent.Agent`), the poster and every baseline run in this
process, on one event loop. Three figures, each beside a baseline measured in the same run:

1. **Change -> file latency over push.** The agent follows topic ``latency`` by push. Every
   resource measured is its own (``/live/<k>``), written once at the origin before any change
   is posted, so no change is ever superseded by a later write and the figures do not depend
   on the poster keeping up. Changes fall due at ``--rate`` per second for ``--seconds``,
   open loop (on schedule whatever the POSTs do); the POSTs go one after the other (the hub
   takes a topic's change times in forward order only), each with the changes due by then,
   at most ``--max-per-post`` (default 1: the agent then gets changes no faster than one
   POST after another, and its figure is per change, not the queue of a burst). A POST's
   start is its changes' clock start and datetime; how long a change waited for it is the
   queue delay, reported apart. Agent latency =
   arrival of the agent's ``applied`` event (the file renamed into the mirror, the checkpoint
   committed) - clock start. Baseline: a bare :func:`rspush.subscriber.push.push_changes`
   client on the same topic, same loop: push receive - clock start. The difference per change
   is what the agent adds (fetch + verify + write + checkpoint). Cross-checks: at every
   ``--sample-every``-th event the callback reads the file back (it must hold the new bytes);
   for the same changes a task polls the file on disk every 0.5 ms and records when the new
   bytes appear (independent of the callback). Outcomes are counted apart: applied, failed
   (events), superseded (mirror), POST errors, not posted / not pushed / unfinished once
   ``--drain`` seconds have passed; the phase fails (with those counts) only if no change was
   applied.
2. **Archive catch-up rate,** metadata-only (``fetch=False`` with the ``NullApplier``). Topic
   ``catchup``: one change, an agent baseline (its checkpoint ends there), then
   ``--catchup-changes`` more changes go into closed Change Lists (plus ``--catchup-open`` in
   the open list) and the hub trims its stream. The agent started again asks the push
   channel to resume, is told history is insufficient, and catches up from the Change List
   Archive: the figure is changes/s over its ``catch-up`` phase. Baseline: the same list
   bytes (GET from the hub) parsed with ``rspush.resourcesync.parse_document`` and with bare
   ``lxml.etree.fromstring`` (median of 3). Also in CPU seconds of this process (the agent's
   run vs the parse), which a busy machine disturbs less than wall time. The agent has an
   event sink counting events, unless ``--catchup-quiet`` (as ``rs-subscribe`` without
   ``--events``).
3. **Baseline rate** from the origin: ``--resources`` resources of ``--size`` bytes, seeded
   on the hub as a Resource List (``POST /topics/baseline/baseline``); an agent baselines
   into an empty mirror (``run(baseline_only=True)``) with each ``--concurrency``. Baseline:
   a bare ``httpx.AsyncClient`` GETting the same URLs with the same number of workers (no
   verify, no write). Figure: resources/s over the agent's ``baseline`` phase (Resource List
   in hand -> last file written and committed).

CPU seconds of this process, the hub, its valkey-server and the origin are read from /proc
over each phase. ``--profile DIR`` writes cProfile stats of the agent's catch-up and baseline
runs there (their figures are then marked as profiled). ``--phases`` runs a subset. All
servers bind 127.0.0.1 and are stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import hashlib
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import lxml
from lxml import etree

from rspush.protocol import TopicRequest
from rspush.resourcesync import parse_document
from rspush.resourcesync.w3cdt import format_w3c_datetime, parse_w3c_datetime
from rspush.subscriber.agent import Agent, AgentConfig
from rspush.subscriber.appliers import NullApplier
from rspush.subscriber.push import Change, PushError, push_changes

from .fragments import change_fragment, changes, resource_list
from .harness.agent import agent_running
from .harness.hub import AUTH, Hub, add_hub_args, hub_args, metric, start_hub
from .harness.results import command_line, git_state, log, percentile, write_json
from .harness.results import quantiles as quantile_points
from .harness.system import Cpu, HelperProcess, children, until

TOPICS = ("latency", "catchup", "baseline")
CATCHUP_URIS = "http://example.com/"  # change_fragment's locs; metadata-only, never fetched
Key = tuple[str, datetime]
"""A change: (URI, change time). Every change the bench posts has its own."""


def quantiles(values: Iterable[float]) -> dict[str, float]:
    """Count, p50, p90, p99 and max of latencies in any order."""
    ordered = sorted(values)
    return {"n": len(ordered)} | quantile_points(ordered)


def content(name: str, size: int) -> bytes:
    """``size`` deterministic bytes that start with ``name`` (each name its own bytes)."""
    head = (name + "\n").encode()
    filler = hashlib.sha256(head).hexdigest().encode()
    body = head + filler * (size // len(filler) + 1)
    return body[:size]


# --- the origin (its own process) ------------------------------------------------------------


async def serve_origin() -> None:
    """GET serves what was PUT (or seeded); ``POST /_seed?prefix=p&n=N&size=S`` serves
    ``content(f"/p/{i}", S)`` at ``/p/{i}`` for i < N. Prints its port as one JSON line, stops
    at end of stdin."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    from rspush.hub.server import bind

    served: dict[str, bytes] = {}

    async def resource(request: Request) -> Response:
        path = request.scope["path"]
        if request.method == "PUT":
            served[path] = await request.body()
            return Response(status_code=204)
        body = served.get(path)
        if body is None:
            return Response(b"not found\n", status_code=404, media_type="text/plain")
        return Response(body, media_type="application/octet-stream")

    async def seed(request: Request) -> Response:
        prefix, size = request.query_params["prefix"], int(request.query_params["size"])
        for i in range(int(request.query_params["n"])):
            served[f"/{prefix}/{i}"] = content(f"/{prefix}/{i}", size)
        return Response(status_code=204)

    app = Starlette(
        routes=[
            Route("/_seed", seed, methods=["POST"]),
            Route("/{path:path}", resource, methods=["GET", "PUT"]),
        ]
    )
    sock = bind("127.0.0.1", 0)  # IPPROTO_TCP: asyncio sets TCP_NODELAY on its connections
    config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            task.result()
            return
        await asyncio.sleep(0.01)
    print(json.dumps({"port": sock.getsockname()[1]}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    server.should_exit = True
    await task


class OriginProcess(HelperProcess):
    """The origin in its own process (``--origin``)."""

    def __init__(self) -> None:
        super().__init__("bench.bench_subscriber", "--origin")
        self.url = f"http://127.0.0.1:{self.ready['port']}"


# --- the hub (its own process) ---------------------------------------------------------------


def run_hub(workdir: Path, args: argparse.Namespace) -> Hub:
    """Change Lists close every ``--list-entries`` changes and the stream keeps nothing
    already in a closed list (retention 0), so the catch-up phase finds its history in the
    archive only."""
    return start_hub(
        workdir,
        TOPICS,
        limits={"changelist_max_entries": args.list_entries, "retention_s": 0},
        settings={"rotation_interval_s": 0.2},
        extra_args=hub_args(args),
    )


# --- measuring -------------------------------------------------------------------------------


@dataclass
class TimedPhase:
    """A :class:`rspush.subscriber.progress.Phase` that only records when it ran and its count."""

    name: str
    started: float = field(default_factory=time.perf_counter)
    ended: float | None = None
    done: int = 0

    def advance(self, count: int = 1) -> None:
        self.done += count

    def close(self) -> None:
        self.ended = time.perf_counter()

    @property
    def seconds(self) -> float:
        assert self.ended is not None, f"phase {self.name} did not end"
        return self.ended - self.started


class TimingReporter:
    def __init__(self) -> None:
        self.phases: list[TimedPhase] = []

    def phase(self, name: str, total: int | None) -> TimedPhase:
        self.phases.append(TimedPhase(name))
        return self.phases[-1]

    def last(self, name: str) -> TimedPhase | None:
        return next((p for p in reversed(self.phases) if p.name == name), None)


@dataclass
class Env:
    args: argparse.Namespace
    workdir: Path
    hub_url: str
    push_url: str
    origin: OriginProcess
    http: httpx.AsyncClient
    pids: dict[str, list[int]]

    async def post(self, topic: str, body: bytes, kind: str = "changes") -> dict[str, Any]:
        reply = await self.http.post(f"{self.hub_url}/topics/{topic}/{kind}", content=body)
        if reply.status_code != 202:
            raise RuntimeError(f"POST {topic}/{kind}: {reply.status_code} {reply.text[:300]}")
        receipt: dict[str, Any] = reply.json()
        return receipt

    async def metric(self, name: str, topic: str) -> float | None:
        return await metric(self.http, self.hub_url, name, topic)

    def config(self, topic: str, dest: str, **options: Any) -> AgentConfig:
        options.setdefault("maps", [(self.origin.url + "/", "")])
        return AgentConfig(
            source_url=self.hub_url, dest=self.workdir / dest, topic=topic, **options
        )


# --- 1. change -> file latency over push -----------------------------------------------------


class Publisher:
    """POSTs of changes, each for a resource of its own that the origin already serves: a
    change can never be superseded by a later write of the same resource, so what is measured
    does not depend on the POSTs keeping up. The hub takes a topic's change times in forward
    order only, so the POSTs go one after the other, each with the changes due by then, at
    most ``--max-per-post`` (default 1). A POST's start is its changes' datetime and clock
    start."""

    def __init__(self, env: Env, topic: str) -> None:
        self.env = env
        self.topic = topic
        self.last = datetime.now(UTC) - timedelta(seconds=1)
        self.started: dict[Key, float] = {}
        self.post_ms: list[float] = []
        self.per_post: list[int] = []
        self.errors = Counter[str]()

    def key(self, path: str) -> Key:
        """The change of ``path`` about to be posted: a datetime of its own, now."""
        self.last = max(datetime.now(UTC), self.last + timedelta(microseconds=1))
        return (self.env.origin.url + path, self.last)

    async def post(self, batch: list[tuple[Key, bytes]]) -> None:
        """POST the changes of ``batch``; a failure is counted, not raised."""
        fragment = changes((uri, "created", when, body) for (uri, when), body in batch)
        started = time.perf_counter()
        for key, _ in batch:
            self.started[key] = started
        try:
            await self.env.post(self.topic, fragment)
        except (RuntimeError, httpx.HTTPError) as exc:
            self.errors[f"{type(exc).__name__}: {str(exc)[:120]}"] += len(batch)
            return
        self.post_ms.append((time.perf_counter() - started) * 1000)
        self.per_post.append(len(batch))


async def latency_phase(env: Env) -> dict[str, Any]:
    """See the module's docstring (1.). Never waits longer than ``--drain`` seconds after the
    last POST: what has not arrived by then is counted as unfinished, beside the figures of
    what did."""
    args = env.args
    topic = "latency"
    config = env.config(topic, "latency-mirror", concurrency=args.latency_concurrency)
    dest = config.dest
    count = round(args.rate * args.seconds)
    # Every resource is written once at the origin, before any change is posted.
    for prefix, n in (("warm", args.warm_up), ("live", count)):
        reply = await env.http.post(
            f"{env.origin.url}/_seed", params={"prefix": prefix, "n": n, "size": args.size}
        )
        reply.raise_for_status()
    applied: dict[Key, float] = {}
    failed: dict[Key, str] = {}
    pushed: dict[Key, float] = {}
    samples: dict[Key, bytes] = {}
    read_back = Counter[str]()
    other_events = Counter[str]()

    def on_event(event: dict[str, Any]) -> None:
        now = time.perf_counter()
        kind, channel = event["event"], event.get("channel", "")
        key = (event.get("uri", ""), parse_w3c_datetime(event["time"])) if "time" in event else None
        if kind == "failed" and key is not None:
            failed[key] = str(event.get("reason", ""))
        if kind != "applied" or channel != "push" or key is None:
            other_events[f"{kind} {channel}".strip()] += 1
            return
        applied[key] = now
        expected = samples.get(key)
        if expected is not None:
            path = dest / urlsplit(event["uri"]).path.lstrip("/")
            read_back["right" if path.read_bytes() == expected else "wrong"] += 1

    async def bare_client(subscribed: asyncio.Event) -> None:
        async for item in push_changes(env.push_url, [TopicRequest(topic=topic)]):
            if isinstance(item, Change):
                now = time.perf_counter()
                pushed[(item.loc, parse_w3c_datetime(item.datetime))] = now
            elif item.get("type") == "subscribed":
                subscribed.set()

    disk_seen: dict[Key, float] = {}

    async def watch_disk(key: Key, path: Path, expected: bytes, deadline: float) -> None:
        """Independent of the callback: poll the file until it holds the new bytes, every
        0.5 ms for its first 100 ms, then every 5 ms (when the agent falls behind, hundreds of
        watchers polling at 0.5 ms would take the CPU it needs to catch up)."""
        first = time.perf_counter()
        while (now := time.perf_counter()) < deadline:
            with contextlib.suppress(FileNotFoundError):
                if path.read_bytes() == expected:
                    disk_seen[key] = time.perf_counter()
                    return
            await asyncio.sleep(0.0005 if now - first < 0.1 else 0.005)

    tasks: set[asyncio.Task[None]] = set()

    def spawn(work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    agent = Agent(config, events=on_event, reporter=TimingReporter())
    publisher = Publisher(env, topic)
    measured: list[Key] = []
    queue_ms: list[float] = []
    unposted = 0
    late = 0
    drain_timed_out = False
    async with agent_running(agent) as task:
        await until(lambda: agent.channel == "push" or task.done(), "the push session", 60)
        if task.done():
            task.result()
        subscribed = asyncio.Event()
        bare = asyncio.create_task(bare_client(subscribed))
        try:
            async with asyncio.timeout(30):
                await subscribed.wait()
            # Warm-up: connections (hub, origin) open, code paths hot; not counted.
            warm = []
            for i in range(args.warm_up):
                path = f"/warm/{i}"
                warm.append(publisher.key(path))
                await publisher.post([(warm[-1], content(path, args.size))])
            await until(
                lambda: all(k in applied or k in failed for k in warm), "the warm-up changes", 30
            )
            publisher.post_ms.clear()
            cpu = Cpu(env.pids, machine=False)
            loop = asyncio.get_running_loop()
            due: asyncio.Queue[tuple[int, float]] = asyncio.Queue()

            async def send() -> None:
                """POST the changes due, one POST after the other; how long a change waited
                for the POST before it (the poster behind) is its queue delay."""
                while True:
                    items = [await due.get()]
                    while not due.empty() and len(items) < args.max_per_post:
                        items.append(due.get_nowait())
                    batch = []
                    for k, when in items:
                        queue_ms.append((loop.time() - when) * 1000)
                        path = f"/live/{k}"
                        body = content(path, args.size)
                        key = publisher.key(path)
                        measured.append(key)
                        batch.append((key, body))
                        if k % args.sample_every == 0:
                            samples[key] = body
                            deadline = time.perf_counter() + args.seconds + args.drain + 5
                            spawn(watch_disk(key, dest / path.lstrip("/"), body, deadline))
                    await publisher.post(batch)
                    for _ in items:
                        due.task_done()

            spawn(send())
            start = loop.time() + 0.05
            for k in range(count):
                # Open loop: a change falls due on schedule whether or not the POSTs keep up.
                delay = start + k / args.rate - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                else:
                    late += 1
                due.put_nowait((k, loop.time()))
            try:
                async with asyncio.timeout(args.drain):
                    await due.join()
            except TimeoutError:
                drain_timed_out = True
            posted_rate = len(measured) / (loop.time() - start)
            try:
                await until(
                    lambda: all((k in applied or k in failed) and k in pushed for k in measured),
                    "every change applied (or failed) and pushed",
                    args.drain,
                )
            except RuntimeError:
                drain_timed_out = True
            unposted = due.qsize()
            used = cpu.used()
        finally:
            bare.cancel()
            with contextlib.suppress(asyncio.CancelledError, PushError):
                await bare
            for pending in list(tasks):
                pending.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    stats = agent.mirror.stats if agent.mirror else Counter()
    started = publisher.started
    done = [k for k in measured if k in applied and k in started]
    both = [k for k in done if k in pushed]
    agent_ms = [(applied[k] - started[k]) * 1000 for k in done]
    bare_ms = [(pushed[k] - started[k]) * 1000 for k in measured if k in pushed and k in started]
    added_ms = [(applied[k] - pushed[k]) * 1000 for k in both]
    sampled = [k for k in samples if k in disk_seen and k in applied]
    disk_ms = [(disk_seen[k] - started[k]) * 1000 for k in sampled]
    disk_minus_event = [(disk_seen[k] - applied[k]) * 1000 for k in sampled]
    outcome = {
        "applied": len(done),
        "failed": sum(k in failed for k in measured),
        "superseded": stats.get("superseded", 0),
        "post_errors": dict(publisher.errors),
        "not_posted": unposted,
        "not_pushed": sum(k not in pushed for k in measured),
        "unfinished": sum(k not in applied and k not in failed for k in measured),
        "drain_timed_out_after_s": args.drain if drain_timed_out else None,
        "failure_reasons": dict(Counter(failed[k] for k in measured if k in failed).most_common(3)),
    }
    if not done:
        raise RuntimeError(f"latency: no change applied over push; outcome {outcome}")
    return {
        "changes": len(measured),
        "outcome": outcome,
        "rate_target": args.rate,
        "rate_posted": posted_rate,
        "due_late": late,
        "queue_ms": quantiles(queue_ms),
        "post_ms": quantiles(publisher.post_ms),
        "posts": len(publisher.post_ms),
        "changes_per_post_max": max(publisher.per_post, default=0),
        "bare_push_ms": quantiles(bare_ms),
        "agent_applied_ms": quantiles(agent_ms),
        "agent_added_ms": quantiles(added_ms),
        "agent_over_bare_p50": percentile(sorted(agent_ms), 0.5) / percentile(sorted(bare_ms), 0.5),
        "sample_disk_ms": quantiles(disk_ms),
        "sample_event_ms": quantiles((applied[k] - started[k]) * 1000 for k in sampled),
        "sample_disk_minus_event_ms": quantiles(disk_minus_event),
        "read_back_at_event": dict(read_back),
        "other_events": dict(other_events),
        "mirror_stats": dict(stats),
        "cpu_percent": used,
    }


# --- 2. archive catch-up (metadata-only) -----------------------------------------------------


async def catchup_phase(env: Env) -> dict[str, Any]:
    args = env.args
    topic = "catchup"
    total = args.catchup_changes + args.catchup_open
    closed = total // args.list_entries
    open_count = total - closed * args.list_entries
    start = datetime.now(UTC) - timedelta(hours=1)
    step = timedelta(microseconds=10)

    def fragment(first: int, last: int) -> bytes:
        return change_fragment(
            ((n, format_w3c_datetime(start + step * n)) for n in range(first, last)),
            distinct=args.catchup_distinct,
        )

    config = env.config(topic, "catchup-mirror", fetch=False, maps=[(CATCHUP_URIS, "")])
    # Change 0, then a baseline: the checkpoint's watermark is change 0's time. (With no
    # change before the baseline the first list's `from` would be after the baseline's `at`
    # and the agent would not catch up from the archive at all: see "Catch-up" in
    # docs/subscriber.md.)
    await env.post(topic, fragment(0, 1))
    await Agent(config, applier=NullApplier(), reporter=TimingReporter()).run(baseline_only=True)
    log("catch-up: posting %d changes", total - 1)
    for first in range(1, total, args.catchup_fragment):
        await env.post(topic, fragment(first, min(total, first + args.catchup_fragment)))
    lists = [f"{env.hub_url}/topics/{topic}/changelists/{n}.xml" for n in range(closed)]

    async def rotated() -> bool:
        last = await env.http.get(lists[-1]) if lists else None
        length = await env.metric("rspush_stream_length", topic)
        return (last is None or last.status_code == 200) and length == open_count

    deadline = time.monotonic() + 120
    while not await rotated():
        if time.monotonic() > deadline:
            raise RuntimeError("the hub did not close and trim the catch-up lists in 120 s")
        await asyncio.sleep(0.1)

    # The timed run: the agent resumes from change 0's time.
    reporter = TimingReporter()
    events = Counter[str]()

    def on_event(event: dict[str, Any]) -> None:
        events[f"{event['event']} {event.get('channel', '')}".strip()] += 1

    sink = None if args.catchup_quiet else on_event
    agent = Agent(config, applier=NullApplier(), events=sink, reporter=reporter)
    profile = cProfile.Profile() if args.profile else None
    log("catch-up: agent run%s", " (profiled)" if profile else "")
    gc.collect()
    cpu = Cpu(env.pids, machine=False)
    started = time.perf_counter()
    cpu_started = time.process_time()
    if profile is not None:
        profile.enable()
    async with agent_running(agent) as task:

        def caught_up() -> bool:
            phase = reporter.last("catch-up")
            return task.done() or (
                phase is not None and phase.ended is not None and agent.channel == "push"
            )

        await until(caught_up, "the catch-up", 300)
        if task.done():
            task.result()
    agent_cpu_s = time.process_time() - cpu_started
    if profile is not None:
        profile.disable()
        profile.dump_stats(args.profile / "catchup.prof")
    used = cpu.used()
    phase = reporter.last("catch-up")
    assert phase is not None and phase.ended is not None
    last_time = start + step * (total - 1)
    assert agent.mirror is not None
    watermark = agent.mirror.watermark.last_time
    if watermark != last_time or agent.rebaselines:
        raise RuntimeError(f"catch-up ended at {watermark}, not {last_time}")

    # Baseline: the same bytes, parsed bare.
    bodies = [(await env.http.get(url)).content for url in lists]
    bodies.append((await env.http.get(f"{env.hub_url}/topics/{topic}/changelist.xml")).content)
    parse_s, parse_cpu_s = timed_median(lambda: [parse_document(b) for b in bodies], args.repeat)
    lxml_s, _ = timed_median(lambda: [etree.fromstring(b) for b in bodies], args.repeat)
    changes = phase.done
    return {
        "profiled": profile is not None,
        "closed_lists": closed,
        "list_entries": args.list_entries,
        "changes_in_closed_lists": closed * args.list_entries,
        "changes_in_open_list": open_count,
        "distinct_uris": args.catchup_distinct,
        "bytes": sum(len(b) for b in bodies),
        "changes_submitted": changes,
        "events": dict(events),
        "mirror_stats": dict(agent.mirror.stats),
        "catchup_seconds": phase.seconds,
        "run_start_to_catchup_end_seconds": phase.seconds + (phase.started - started),
        "changes_per_s": changes / phase.seconds,
        "parse_document_seconds": parse_s,
        "parse_document_changes_per_s": changes / parse_s,
        "lxml_seconds": lxml_s,
        "lxml_changes_per_s": changes / lxml_s,
        "over_parse_document": phase.seconds / parse_s,
        "listened": not args.catchup_quiet,
        "agent_cpu_seconds": agent_cpu_s,
        "parse_document_cpu_seconds": parse_cpu_s,
        "cpu_over_parse_document": agent_cpu_s / parse_cpu_s,
        "over_lxml": phase.seconds / lxml_s,
        "cpu_percent": used,
    }


def timed_median(work: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Median wall seconds and median CPU seconds (this process) of ``repeat`` runs."""
    times, cpu = [], []
    for _ in range(repeat):
        gc.collect()
        started, cpu_started = time.perf_counter(), time.process_time()
        work()
        times.append(time.perf_counter() - started)
        cpu.append(time.process_time() - cpu_started)
    return statistics.median(times), statistics.median(cpu)


# --- 3. baseline from the origin -------------------------------------------------------------


async def bare_fetch(
    urls: list[str], concurrency: int, limits: httpx.Limits | None = None
) -> tuple[float, int]:
    """GET every URL with ``concurrency`` workers on one httpx client — by default with
    httpx's default limits, as the agent's client has; returns (seconds, bytes)."""
    pending = iter(urls)
    got = 0

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal got
        for url in pending:
            reply = await client.get(url)
            reply.raise_for_status()
            got += len(reply.content)

    async with httpx.AsyncClient(timeout=30, limits=limits or httpx.Limits()) as client:
        started = time.perf_counter()
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
        return time.perf_counter() - started, got


async def baseline_phase(env: Env) -> dict[str, Any]:
    args = env.args
    topic = "baseline"
    n, size = args.resources, args.size
    reply = await env.http.post(
        f"{env.origin.url}/_seed", params={"prefix": "bl", "n": n, "size": size}
    )
    reply.raise_for_status()
    paths = [f"/bl/{i}" for i in range(n)]
    urls = [env.origin.url + path for path in paths]
    at = datetime.now(UTC)
    listing = resource_list(((env.origin.url + p, content(p, size)) for p in paths), at)
    await env.post(topic, listing, kind="baseline")
    rows = []
    for concurrency in args.concurrency:
        log("baseline: %d resources, concurrency %d", n, concurrency)
        cpu = Cpu(env.pids, machine=False)
        bare_s, got = await bare_fetch(urls, concurrency)
        bare_cpu = cpu.used()
        if got != n * size:
            raise RuntimeError(f"bare fetch got {got} bytes, not {n * size}")
        # Information: httpx keeps at most 20 idle connections by default; with more workers
        # than that, connections are closed and opened again all the time.
        pool = httpx.Limits(max_connections=None, max_keepalive_connections=concurrency)
        pooled_s, _ = await bare_fetch(urls, concurrency, pool)
        config = env.config(topic, f"baseline-mirror-{concurrency}", concurrency=concurrency)
        reporter = TimingReporter()
        failed = Counter[str]()

        def on_event(event: dict[str, Any], failed: Counter[str] = failed) -> None:
            if event["event"] != "applied":
                failed[event["event"]] += 1

        agent = Agent(config, events=on_event, reporter=reporter)
        gc.collect()
        cpu = Cpu(env.pids, machine=False)
        profile = cProfile.Profile() if args.profile else None
        started = time.perf_counter()
        if profile is not None:
            profile.enable()
        await agent.run(baseline_only=True)
        if profile is not None:
            profile.disable()
            profile.dump_stats(args.profile / f"baseline-{concurrency}.prof")
        run_s = time.perf_counter() - started
        agent_cpu = cpu.used()
        phase = reporter.last("baseline")
        assert phase is not None
        wrong = sum(
            (config.dest / p.lstrip("/")).read_bytes() != content(p, size)
            for p in paths
            if (config.dest / p.lstrip("/")).exists()
        )
        files = sum(1 for p in paths if (config.dest / p.lstrip("/")).exists())
        if failed or wrong or files != n:
            raise RuntimeError(f"baseline: {files} files, {wrong} wrong, events {dict(failed)}")
        rows.append(
            {
                "concurrency": concurrency,
                "bare_seconds": bare_s,
                "bare_per_s": n / bare_s,
                "bare_keepalive_pool_per_s": n / pooled_s,
                "profiled": profile is not None,
                "agent_phase_seconds": phase.seconds,
                "agent_run_seconds": run_s,
                "agent_per_s": n / phase.seconds,
                "agent_over_bare": phase.seconds / bare_s,
                "bare_cpu_percent": bare_cpu,
                "agent_cpu_percent": agent_cpu,
            }
        )
    return {"resources": n, "size": size, "rows": rows}


# --- running and reporting -------------------------------------------------------------------


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    origin = OriginProcess()
    hub = None
    results: dict[str, Any] = {}
    try:
        hub = run_hub(workdir, args)
        pids = {"bench": [os.getpid()], "hub": [hub.pid], "origin": [origin.process.pid]}
        for pid in children(hub.pid)[:1]:  # the embedded valkey-server
            pids["valkey"] = [pid]
        async with httpx.AsyncClient(timeout=120, headers=AUTH) as http:
            env = Env(args, workdir, hub.base, hub.push_url, origin, http, pids)
            if "latency" in args.phases:
                log("latency: %d changes/s for %.0f s", args.rate, args.seconds)
                results["latency"] = await latency_phase(env)
            if "catchup" in args.phases:
                results["catchup"] = await catchup_phase(env)
            if "baseline" in args.phases:
                results["baseline"] = await baseline_phase(env)
    except BaseException:
        if hub is not None:
            hub.print_log(40)
        raise
    finally:
        origin.stop()
        if hub is not None:
            hub.stop()
    return results


def cpu_line(used: dict[str, float]) -> str:
    return ", ".join(f"{name} {value:.0f}" for name, value in used.items())


def ms(q: dict[str, float]) -> str:
    return (
        f"p50 {q['p50']:6.2f}  p90 {q['p90']:6.2f}  p99 {q['p99']:6.2f}  max {q['max']:7.2f} ms"
        f"  (n={q['n']})"
    )


def report(results: dict[str, Any]) -> None:
    env = results["environment"]
    print(f"command: {env['command']}")
    print(
        f"python {env['python']}, lxml {env['lxml']}, {env['cpus']} cpus, "
        f"load average {env['loadavg']}, commit {env['commit']}"
    )
    if "latency" in results:
        lat = results["latency"]
        print()
        print(
            f"1. Change -> file over push: {lat['changes']:,} changes in {lat['posts']:,} "
            f"POSTs (at most {lat['changes_per_post_max']} a POST) at "
            f"{lat['rate_posted']:.0f}/s (target {lat['rate_target']}; "
            f"queue delay before the POST p50 {lat['queue_ms']['p50']:.2f}, "
            f"p99 {lat['queue_ms']['p99']:.2f} ms)"
        )
        print(f"   bare push client (baseline)   {ms(lat['bare_push_ms'])}")
        print(f"   agent, file applied           {ms(lat['agent_applied_ms'])}")
        print(f"   added by the agent (per chg)  {ms(lat['agent_added_ms'])}")
        print(f"   agent / bare push, p50        {lat['agent_over_bare_p50']:.2f}x")
        print(
            f"   sample: file seen on disk     {ms(lat['sample_disk_ms'])}; "
            f"disk - event p50 {lat['sample_disk_minus_event_ms']['p50']:.2f} ms"
        )
        out = lat["outcome"]
        print(
            f"   outcome: {out['applied']:,} applied, {out['failed']} failed, "
            f"{out['superseded']} superseded, {out['unfinished']} unfinished"
            + (f" after {out['drain_timed_out_after_s']:.0f} s" if out["unfinished"] else "")
            + f", {out['not_posted']} not posted, {out['not_pushed']} not pushed, "
            + f"POST errors {out['post_errors'] or '-'}"
            + (f"; failures {out['failure_reasons']}" if out["failure_reasons"] else "")
        )
        print(
            f"   read back at the event: {lat['read_back_at_event']}; POST round trip "
            f"p50 {lat['post_ms']['p50']:.2f} ms; other events {lat['other_events'] or '-'}"
        )
        print(f"   CPU % of a core: {cpu_line(lat['cpu_percent'])}")
    if "catchup" in results:
        cu = results["catchup"]
        print()
        print(
            f"2. Archive catch-up, metadata-only{' (PROFILED)' if cu['profiled'] else ''}: "
            f"{cu['changes_submitted']:,} changes ({cu['closed_lists']} closed lists of "
            f"{cu['list_entries']:,} + {cu['changes_in_open_list']:,} open, "
            f"{cu['distinct_uris']:,} URIs, {cu['bytes'] / 1e6:.1f} MB)"
        )
        print(f"   bare lxml.etree.fromstring    {cu['lxml_changes_per_s']:>10,.0f} changes/s")
        print(f"   resourcesync.parse_document   {cu['parse_document_changes_per_s']:>10,.0f}")
        print(
            f"   agent catch-up                {cu['changes_per_s']:>10,.0f}   "
            f"= {cu['over_parse_document']:.1f}x parse_document time, "
            f"{cu['over_lxml']:.1f}x lxml time ({cu['catchup_seconds']:.2f} s; "
            f"{cu['run_start_to_catchup_end_seconds']:.2f} s from agent start)"
        )
        print(
            f"   CPU seconds: agent run {cu['agent_cpu_seconds']:.2f}, parse_document "
            f"{cu['parse_document_cpu_seconds']:.2f} = {cu['cpu_over_parse_document']:.1f}x "
            f"({'an event sink listening' if cu['listened'] else 'no event sink'})"
        )
        print(f"   events {cu['events']}; mirror {cu['mirror_stats']}")
        print(f"   CPU % of a core: {cpu_line(cu['cpu_percent'])}")
    if "baseline" in results:
        bl = results["baseline"]
        print()
        print(f"3. Baseline from the origin: {bl['resources']:,} resources of {bl['size']} bytes")
        print(
            f"   {'conc':>4} {'bare GET/s':>11} {'agent/s':>9} {'time ratio':>11}  "
            f"{'bare, keep-alive pool = conc':>28}  CPU % (agent run)"
        )
        for row in bl["rows"]:
            print(
                f"   {row['concurrency']:>4} {row['bare_per_s']:>11,.0f} "
                f"{row['agent_per_s']:>9,.0f} {row['agent_over_bare']:>10.2f}x  "
                f"{row['bare_keepalive_pool_per_s']:>28,.0f}  "
                f"{cpu_line(row['agent_cpu_percent'])}{' PROFILED' if row['profiled'] else ''}"
            )
        print("   CPU % (bare run): " + cpu_line(bl["rows"][0]["bare_cpu_percent"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phases", default="latency,catchup,baseline")
    parser.add_argument("--rate", type=float, default=200, help="changes/s (latency)")
    parser.add_argument("--seconds", type=float, default=10, help="latency run length")
    parser.add_argument(
        "--max-per-post",
        type=int,
        default=1,
        help="latency: changes one POST may carry when several are due (the poster behind)",
    )
    parser.add_argument(
        "--drain",
        type=float,
        default=30,
        help="latency: seconds to wait after the last POST for what is still on its way",
    )
    parser.add_argument("--latency-concurrency", type=int, default=8)
    parser.add_argument("--sample-every", type=int, default=10, help="disk cross-check")
    parser.add_argument("--warm-up", type=int, default=50, help="changes before measuring")
    parser.add_argument("--catchup-changes", type=int, default=50_000, help="in closed lists")
    parser.add_argument("--catchup-open", type=int, default=1000, help="in the open list")
    parser.add_argument("--catchup-distinct", type=int, default=10_000, help="distinct URIs")
    parser.add_argument("--catchup-fragment", type=int, default=5000, help="changes per POST")
    parser.add_argument("--list-entries", type=int, default=5000, help="changelist_max_entries")
    parser.add_argument("--repeat", type=int, default=3, help="bare parse runs (median)")
    parser.add_argument(
        "--catchup-quiet",
        action="store_true",
        help="catch up with no event sink (as rs-subscribe without --events)",
    )
    parser.add_argument("--resources", type=int, default=5000, help="baseline resources")
    parser.add_argument("--size", type=int, default=1024, help="bytes per resource")
    parser.add_argument("--concurrency", default="8,32", help="baseline concurrency values")
    parser.add_argument(
        "--profile", type=Path, help="write cProfile stats of the agent runs into this directory"
    )
    add_hub_args(parser)
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--origin", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.origin:
        asyncio.run(serve_origin())
        return
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    args.phases = set(args.phases.split(","))
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    logging.getLogger("rs_subscribe").setLevel(logging.ERROR)  # expected warnings: catch-up
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="rspush-bench-subscriber-") as tmp:
        results = asyncio.run(run(args, Path(tmp)))
    results["environment"] = {
        "command": command_line("bench.bench_subscriber"),
        "python": platform.python_version(),
        "lxml": ".".join(map(str, lxml.etree.LXML_VERSION)),
        "cpus": os.cpu_count(),
        "loadavg": " ".join(f"{v:.2f}" for v in os.getloadavg()),
        "commit": git_state(),
        "seconds": time.monotonic() - started,
    }
    report(results)
    print(f"\n(total {results['environment']['seconds']:.0f} s)")
    if args.json:
        write_json(args.json, results)


if __name__ == "__main__":
    main()
