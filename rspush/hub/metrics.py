"""Prometheus metrics of one hub process, in a registry of its own (no global state).

Under ``rs-hub serve --workers`` (``PROMETHEUS_MULTIPROC_DIR`` set by the parent before the
workers start) every worker writes its values to files there, and :meth:`HubMetrics.render`
adds up all workers' (``prometheus_client`` multiprocess mode): counters and histograms are
summed, the connection and subscriber gauges over the live workers, the stream length is the
most recent value written."""

from __future__ import annotations

import os

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
# Fine below 10 ms: a batch reaches its subscribers in a few milliseconds on a quiet hub, and
# coarser buckets would hide where that time goes (quantiles are read between bucket bounds).
LAG_BUCKETS = (
    0.0005, 0.001, 0.0015, 0.002, 0.003, 0.004, 0.005, 0.0075, 0.01,
    0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
)  # fmt: skip
WRITE_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.004, 0.005,
    0.0075, 0.01, 0.025, 0.05, 0.1, 0.25,
)  # fmt: skip


class HubMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.accepted = Counter(
            "rspush_accepted_changes",
            "Changes accepted into a topic's stream",
            ["topic"],
            registry=self.registry,
        )
        self.rejected = Counter(
            "rspush_rejected_requests",
            "Ingest requests rejected, by reason",
            ["reason"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "rspush_request_seconds",
            "HTTP request latency",
            ["route"],
            registry=self.registry,
        )
        self.stream_length = Gauge(
            "rspush_stream_length",
            "Entries in a topic's Redis stream",
            ["topic"],
            registry=self.registry,
            multiprocess_mode="mostrecent",
        )
        self.rotations = Counter(
            "rspush_rotations",
            "Change Lists closed by this process",
            ["topic"],
            registry=self.registry,
        )

        self.subscribers = Gauge(
            "rspush_push_subscribers",
            "Connected push subscribers per topic (this process; all workers with --workers)",
            ["topic"],
            registry=self.registry,
            multiprocess_mode="livesum",
        )
        self.push_connections = Gauge(
            "rspush_push_connections",
            "Sockets this process holds on the push port, counted from accept (handshaking, "
            "replaying and live ones alike)",
            registry=self.registry,
            multiprocess_mode="livesum",
        )
        self.changes_sent = Counter(
            "rspush_push_changes_sent",
            "Changes broadcast live (one per change per subscriber; replays not counted)",
            ["topic"],
            registry=self.registry,
        )
        self.frames_sent = Counter(
            "rspush_push_frames_sent",
            "Live push frames (one per batch per subscriber; replays not counted)",
            ["topic"],
            registry=self.registry,
        )
        self.slow_closes = Counter(
            "rspush_push_slow_consumer_closes",
            "Push connections closed as slow consumers",
            ["topic"],
            registry=self.registry,
        )
        self.push_lag = Histogram(
            "rspush_push_lag_seconds",
            "Acceptance (stream id time, whole milliseconds) to the push worker handing the "
            "batch out (before encoding and writing it), per batch",
            ["topic"],
            buckets=LAG_BUCKETS,
            registry=self.registry,
        )
        self.push_write = Histogram(
            "rspush_push_write_seconds",
            "Writing one batch to every live subscriber of the topic in this process (one "
            "socket write per frame per subscriber; the encoding and framing before it not "
            "counted), per batch",
            ["topic"],
            buckets=WRITE_BUCKETS,
            registry=self.registry,
        )

        self.bridge_changes = Counter(
            "rspush_bridge_changes",
            "Changes a bridge appended to its topic (this process)",
            ["topic"],
            registry=self.registry,
        )
        self.bridge_steps = Counter(
            "rspush_bridge_steps",
            "Bridge steps committed (changes and checkpoint together; this process)",
            ["topic"],
            registry=self.registry,
        )
        self.bridge_errors = Counter(
            "rspush_bridge_errors",
            "Bridge steps that failed, by reason: remote (the remote failed or timed out), "
            "regression (the remote went back in time or lost history), rejected (the hub "
            "refused the changes), internal",
            ["topic", "reason"],
            registry=self.registry,
        )
        self.bridge_last_success = Gauge(
            "rspush_bridge_last_success_timestamp_seconds",
            "When a bridge last read its remote without error (Unix time)",
            ["topic"],
            registry=self.registry,
            multiprocess_mode="mostrecent",  # one worker runs a bridge at a time
        )
        self.bridge_lag = Gauge(
            "rspush_bridge_lag_seconds",
            "How far behind the remote a bridge is: now minus the remote time through which "
            "every change is bridged",
            ["topic"],
            registry=self.registry,
            multiprocess_mode="mostrecent",  # one worker runs a bridge at a time
        )

        self.websub_subscriptions = Gauge(
            "rspush_websub_subscriptions",
            "Verified WebSub subscriptions (all processes: read from the store)",
            registry=self.registry,
            multiprocess_mode="mostrecent",
        )
        self.websub_delivering = Gauge(
            "rspush_websub_delivering",
            "WebSub subscriptions delivered (held under their lease; all workers with --workers)",
            registry=self.registry,
            multiprocess_mode="livesum",
        )
        self.websub_verifications = Counter(
            "rspush_websub_verifications",
            "WebSub subscription requests by mode and outcome (verified, refused by the "
            "callback, denied, failed)",
            ["mode", "outcome"],
            registry=self.registry,
        )
        self.websub_deliveries = Counter(
            "rspush_websub_deliveries",
            "Notification POSTs to callbacks, by outcome (ok: a 2xx)",
            ["outcome"],
            registry=self.registry,
        )
        self.websub_changes = Counter(
            "rspush_websub_delivered_changes",
            "Changes delivered to callbacks with a 2xx (one per change per subscription)",
            ["topic"],
            registry=self.registry,
        )
        self.websub_lag = Histogram(
            "rspush_websub_lag_seconds",
            "Acceptance (stream id time) of a notification's last change to its 2xx",
            ["topic"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
            registry=self.registry,
        )
        self.websub_history_moved = Counter(
            "rspush_websub_history_moved",
            "History-moved notifications: a subscription fell behind the stream's retention",
            ["topic"],
            registry=self.registry,
        )
        self.websub_removed = Counter(
            "rspush_websub_removed",
            "WebSub subscriptions removed by the hub, by reason (expired, retries-exhausted, "
            "not-allowed)",
            ["reason"],
            registry=self.registry,
        )

    def declare_bridges(self, topics: list[str]) -> None:
        for topic in topics:
            self.bridge_changes.labels(topic)
            self.bridge_steps.labels(topic)
            for reason in ("remote", "regression", "rejected", "internal"):
                self.bridge_errors.labels(topic, reason)

    def declare_topics(self, topics: list[str]) -> None:
        """Export every per-topic series from the start (at 0), not from its first event."""
        for topic in topics:
            self.accepted.labels(topic)
            self.rotations.labels(topic)
            self.subscribers.labels(topic).set(0)
            self.changes_sent.labels(topic)
            self.frames_sent.labels(topic)
            self.slow_closes.labels(topic)
            self.websub_changes.labels(topic)
        for outcome in ("ok", "failed"):
            self.websub_deliveries.labels(outcome)

    def sent(
        self, topic: str, subscribers: int, changes: int, lag_s: float, write_s: float
    ) -> None:
        self.frames_sent.labels(topic).inc(subscribers)
        self.changes_sent.labels(topic).inc(subscribers * changes)
        self.push_lag.labels(topic).observe(max(lag_s, 0.0))
        self.push_write.labels(topic).observe(write_s)

    def view(self) -> CollectorRegistry:
        """What ``/metrics`` and ``/status`` read: this process's registry, or under
        ``--workers`` the sum over every worker's."""
        shared = os.environ.get(MULTIPROC_ENV)
        if not shared:
            return self.registry
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=shared)  # type: ignore[no-untyped-call]
        return registry

    def render(self) -> bytes:
        return generate_latest(self.view())
