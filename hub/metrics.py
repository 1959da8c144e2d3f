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

    def render(self) -> bytes:
        return generate_latest(self.registry)
