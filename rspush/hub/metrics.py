"""Prometheus metrics of one hub process, in a registry of its own (no global state)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest


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
        )
        self.rotations = Counter(
            "rspush_rotations",
            "Change Lists closed by this process",
            ["topic"],
            registry=self.registry,
        )

        self.subscribers = Gauge(
            "rspush_push_subscribers",
            "Connected push subscribers per topic (this process)",
            ["topic"],
            registry=self.registry,
        )
        self.push_connections = Gauge(
            "rspush_push_connections",
            "Sockets this process holds on the push port, counted from accept (handshaking, "
            "replaying and live ones alike)",
            registry=self.registry,
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
            "Acceptance (stream id time) to send, per batch",
            ["topic"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
            registry=self.registry,
        )

        self.websub_subscriptions = Gauge(
            "rspush_websub_subscriptions",
            "Verified WebSub subscriptions (all processes: read from the store)",
            registry=self.registry,
        )
        self.websub_delivering = Gauge(
            "rspush_websub_delivering",
            "WebSub subscriptions this process delivers (holds the lease of)",
            registry=self.registry,
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

    def sent(self, topic: str, subscribers: int, changes: int, lag_s: float) -> None:
        self.frames_sent.labels(topic).inc(subscribers)
        self.changes_sent.labels(topic).inc(subscribers * changes)
        self.push_lag.labels(topic).observe(max(lag_s, 0.0))

    def render(self) -> bytes:
        return generate_latest(self.registry)
