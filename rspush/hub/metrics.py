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
        )
        self.bridge_lag = Gauge(
            "rspush_bridge_lag_seconds",
            "How far behind the remote a bridge is: now minus the remote time through which "
            "every change is bridged",
            ["topic"],
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

    def sent(self, topic: str, subscribers: int, changes: int, lag_s: float) -> None:
        self.frames_sent.labels(topic).inc(subscribers)
        self.changes_sent.labels(topic).inc(subscribers * changes)
        self.push_lag.labels(topic).observe(max(lag_s, 0.0))

    def render(self) -> bytes:
        return generate_latest(self.registry)
