"""Running bridges inside a hub process: one task per configured bridge.

Each round of a bridge's task: take (or renew) the bridge's lease (one hub process runs a
given bridge at a time: ``lua/lease.lua`` on the topic's ``bridge:lease`` key), read the
checkpoint, call the bridge's ``step`` (bounded by the HTTP timeouts), then append its
changes with the new checkpoint in one atomic script call that checks the checkpoint is still
the one read (:meth:`.service.IngestService.bridged`). So a crash between reading the remote
and committing re-reads the remote; a crash after committing resumes after it; two processes
racing on an expired lease commit the step once.

Errors are counted and shown (status page, ``/metrics``, the log), never fatal: the bridge
waits (exponential backoff with full jitter, or the remote's ``Retry-After`` when longer) and
tries again from the same checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rspush.resourcesync.w3cdt import format_w3c_datetime

from ..errors import HubError
from ..metrics import HubMetrics
from ..rotation import cancel_and_wait
from ..scripts import CheckpointSet
from ..service import IngestService
from ..settings import BridgeConfig
from ..store import StaleCheckpoint, TopicStore
from .base import Bridge, BridgeError, RemoteRegression, bridge_kind
from .http import BridgeHttp

log = logging.getLogger("rspush.hub.bridges")

BACKOFF_INITIAL_S = 1.0
LEASE_POLL_S = 1.0
"""How often a process without the lease checks whether it expired."""
MAX_ERROR_CHARS = 300


def backoff_delay(
    attempts: int,
    *,
    initial: float,
    maximum: float,
    retry_after_s: float | None = None,
    rng: random.Random | None = None,
) -> float:
    """The wait after ``attempts`` (1-based) failures in a row: full jitter over an
    exponential ceiling ("Exponential Backoff and Jitter", AWS Architecture Blog, 2015), and
    never less than the remote's ``Retry-After`` (RFC 9110 §10.2.3), capped at ``maximum``."""
    ceiling = min(maximum, initial * 2 ** min(max(attempts - 1, 0), 60))
    delay = (rng or random).uniform(ceiling / 2, ceiling)
    if retry_after_s is not None:
        delay = max(delay, min(retry_after_s, maximum))
    return delay


@dataclass
class BridgeFigures:
    """What the status page and the log say about one bridge (kept in Redis too)."""

    steps: int = 0
    changes: int = 0
    errors: int = 0
    failures_in_a_row: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class StoreTopicView:
    def __init__(self, store: TopicStore, topic: str) -> None:
        self.store = store
        self.topic = topic

    async def uris(self) -> set[str]:
        return await self.store.state_uris(self.topic)


def _now() -> datetime:
    return datetime.now(UTC)


class BridgeRunner:
    """One bridge's task."""

    def __init__(
        self,
        config: BridgeConfig,
        service: IngestService,
        store: TopicStore,
        metrics: HubMetrics,
        *,
        lease_ttl_s: float,
        token: str,
        bridge: Bridge | None = None,
        clock: Callable[[], datetime] = _now,
    ) -> None:
        self.config = config
        self.topic = config.topic
        self.service = service
        self.store = store
        self.metrics = metrics
        self.lease_ttl_ms = int(lease_ttl_s * 1000)
        self.token = token
        self.clock = clock
        self.http: BridgeHttp | None = None
        if bridge is None:
            self.http = BridgeHttp(timeout_s=config.timeout_s, max_bytes=config.max_bytes)
            bridge = bridge_kind(config.kind)(config, self.http)
        if hasattr(bridge, "topic_view"):
            bridge.topic_view = StoreTopicView(store, config.topic)
        self.bridge = bridge
        self.figures = BridgeFigures()
        self._stop = asyncio.Event()

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._stop.wait()

    async def run(self) -> None:
        while not self._stop.is_set():
            try:
                delay = await self.round()
            except Exception:  # a transient store failure: try again later
                log.exception("bridge %s: round failed", self.topic)
                delay = LEASE_POLL_S
            await self._sleep(delay)

    async def round(self) -> float:
        """One lease check and step; returns how long to wait before the next."""
        if not await self.store.acquire_bridge_lease(self.topic, self.token, self.lease_ttl_ms):
            return LEASE_POLL_S
        state = await self.store.bridge_state(self.topic)
        stepping = asyncio.Event()
        keeper = asyncio.create_task(
            self._keep_lease(stepping), name=f"rspush-bridge-lease-{self.topic}"
        )
        try:
            step = await self.bridge.step(state.checkpoint)
        except BridgeError as exc:
            reason = "regression" if isinstance(exc, RemoteRegression) else "remote"
            return await self._failed(reason, str(exc), exc.retry_after_s)
        except Exception as exc:
            log.exception("bridge %s: step failed", self.topic)
            return await self._failed("internal", type(exc).__name__, None)
        finally:
            stepping.set()
            await cancel_and_wait(keeper)
        if step is None:
            await self._succeeded(0)
            return self.config.interval_s
        # The commit checks the checkpoint; renewing first keeps the lease ours meanwhile.
        if not await self.store.acquire_bridge_lease(self.topic, self.token, self.lease_ttl_ms):
            return LEASE_POLL_S
        try:
            receipt = await self.service.bridged(
                self.topic,
                step.changes,
                checkpoint=CheckpointSet(state.checkpoint, step.checkpoint),
                baseline=step.baseline,
                at=step.at,
                max_entries=self.config.max_changes_per_step,
            )
        except StaleCheckpoint:
            log.info("bridge %s: another process committed this step first", self.topic)
            return 0.0
        except HubError as exc:
            return await self._failed("rejected", f"{exc.code}: {exc}", None)
        for note in step.notes:
            log.warning("bridge %s: %s", self.topic, note)
        for regression in step.regressions:
            await self._failed("regression", regression, None)
        accepted = int(receipt.get("accepted") or receipt.get("seeded") or 0)
        self.figures.steps += 1
        self.metrics.bridge_steps.labels(self.topic).inc()
        self.metrics.bridge_changes.labels(self.topic).inc(accepted)
        await self._succeeded(accepted, notes=step.notes)
        return 0.0 if step.more else self.config.interval_s

    async def _keep_lease(self, done: asyncio.Event) -> None:
        """Renew the lease while a step waits on the remote (which may take the HTTP timeouts,
        longer than the lease): another process would only redo the step's reading.

        The flag, not only cancellation, ends it: a cancellation landing inside a redis-py
        command can come out as a connection error (see :func:`..rotation.cancel_and_wait`)."""
        while not done.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.lease_ttl_ms / 3000):
                    await done.wait()
            if done.is_set():
                return
            with contextlib.suppress(Exception):
                await self.store.acquire_bridge_lease(self.topic, self.token, self.lease_ttl_ms)

    async def _succeeded(self, accepted: int, *, notes: list[str] | None = None) -> None:
        now = self.clock()
        self.figures.failures_in_a_row = 0
        self.figures.changes += accepted
        self.metrics.bridge_last_success.labels(self.topic).set(now.timestamp())
        fields: dict[str, str | int | float] = {
            "kind": self.config.kind,
            "last_success": format_w3c_datetime(now),
        }
        synced = getattr(self.bridge, "synced_through", None)
        if isinstance(synced, datetime):
            lag = max((now - synced).total_seconds(), 0.0)
            self.metrics.bridge_lag.labels(self.topic).set(lag)
            fields["synced_through"] = format_w3c_datetime(synced)
            fields["lag_s"] = round(lag, 3)
        if notes:
            fields["last_note"] = notes[-1][:MAX_ERROR_CHARS]
        await self.store.set_bridge_status(self.topic, fields)
        if accepted:
            await self.store.incr_bridge_status(self.topic, "changes", accepted)

    async def _failed(self, reason: str, message: str, retry_after_s: float | None) -> float:
        self.figures.errors += 1
        self.figures.failures_in_a_row += 1
        self.metrics.bridge_errors.labels(self.topic, reason).inc()
        log.warning("bridge %s: %s error: %s", self.topic, reason, message)
        with contextlib.suppress(Exception):
            await self.store.set_bridge_status(
                self.topic,
                {
                    "kind": self.config.kind,
                    "last_error": f"{reason}: {message}"[:MAX_ERROR_CHARS],
                    "last_error_at": format_w3c_datetime(self.clock()),
                },
            )
            await self.store.incr_bridge_status(self.topic, f"errors_{reason}", 1)
        return backoff_delay(
            self.figures.failures_in_a_row,
            initial=BACKOFF_INITIAL_S,
            maximum=self.config.backoff_max_s,
            retry_after_s=retry_after_s,
        )

    def stop(self) -> None:
        self._stop.set()

    async def aclose(self) -> None:
        if self.http is not None:
            await self.http.aclose()


class Bridges:
    """Every bridge of one hub process."""

    def __init__(
        self,
        configs: list[BridgeConfig],
        service: IngestService,
        store: TopicStore,
        metrics: HubMetrics,
        *,
        lease_ttl_s: float,
    ) -> None:
        self.token = secrets.token_hex(16)
        self.store = store
        metrics.declare_bridges([c.topic for c in configs])
        self.runners = [
            BridgeRunner(c, service, store, metrics, lease_ttl_s=lease_ttl_s, token=self.token)
            for c in configs
        ]
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(r.run(), name=f"rspush-bridge-{r.topic}") for r in self.runners
        ]

    async def stop(self) -> None:
        for runner in self.runners:
            runner.stop()
        for task in self._tasks:
            await cancel_and_wait(task)
        self._tasks = []
        started = time.monotonic()
        for runner in self.runners:
            await runner.aclose()
            # Best effort: an unreleased lease expires by itself.
            with contextlib.suppress(Exception):
                async with asyncio.timeout(max(1.0 - (time.monotonic() - started), 0.1)):
                    await self.store.release_bridge_lease(runner.topic, self.token)
