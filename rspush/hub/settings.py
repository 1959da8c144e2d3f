"""Hub configuration: one pydantic-settings object, from a TOML file and ``RSPUSH_*`` env vars.

Precedence, highest first: command-line options (applied by the CLI), environment variables
(``RSPUSH_HUB__BASE_URL``, ``RSPUSH_REDIS_URL``, …; nested fields use ``__``), the TOML file,
the defaults below. Limits are named constants, each overridable here.

Why one module of this size: it is the whole configuration file's schema, one section a
class, so every option, its default and its bound are found in one place.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

DEFAULT_MAX_BODY_BYTES = 10 * 1024 * 1024
DEFAULT_MAX_ENTRIES_PER_REQUEST = 10_000
DEFAULT_CHANGELIST_MAX_ENTRIES = 10_000
DEFAULT_CHANGELIST_MAX_AGE_S = 24 * 3600
DEFAULT_RETENTION_S = 7 * 24 * 3600
DEFAULT_FUTURE_TOLERANCE_S = 300
DEFAULT_IDEMPOTENCY_TTL_S = 24 * 3600
DEFAULT_BODY_BUDGET_BYTES = 64 * 1024 * 1024
DEFAULT_BODY_TIMEOUT_S = 30.0
DEFAULT_HEADER_TIMEOUT_S = 10.0
DEFAULT_KEEPALIVE_TIMEOUT_S = 5
DEFAULT_MAX_CONNECTIONS = 1000
DEFAULT_FRAMEWORK_RESOURCELIST_INTERVAL_S = 60.0
DEFAULT_FRAMEWORK_MAX_EVENTS = 10_000
DEFAULT_FRAMEWORK_PUSH_INTERVAL_S = 0.25

DEFAULT_GZIP_LEVEL = 1
DEFAULT_GZIP_IMMUTABLE_LEVEL = 6
DEFAULT_GZIP_CACHE_BYTES = 64 * 1024 * 1024
DEFAULT_LEASE_S = 10 * 24 * 3600
DEFAULT_LEASE_MIN_S = 300
DEFAULT_LEASE_MAX_S = 2_678_400

_TOPIC_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


class HubSection(BaseModel):
    base_url: str = "http://127.0.0.1:8080"
    """How documents name the hub: the public URL Destinations reach it at."""
    description: str | None = None
    """Optional URL of a document describing the Source (describedby link)."""
    metrics_token_sha256: str | None = None
    """When set, ``/metrics`` needs ``Authorization: Bearer <token>`` with this token's
    SHA-256 (like Sources' tokens, never stored in clear)."""

    @field_validator("metrics_token_sha256")
    @classmethod
    def _metrics_hex(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip().lower()
        if not _SHA256_HEX.fullmatch(value):
            raise ValueError("metrics_token_sha256 must be 64 hex digits (see `rs-hub token new`)")
        return value

    @field_validator("base_url")
    @classmethod
    def _no_trailing_slash(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("base_url must be an http(s) URL")
        return value.rstrip("/")


class Topic(BaseModel):
    """One topic = one set of resources = one Capability List."""

    name: str
    description: str | None = None
    private: bool = False

    @field_validator("name")
    @classmethod
    def _valid_name(cls, value: str) -> str:
        if not _TOPIC_NAME.fullmatch(value):
            raise ValueError(
                f"topic name {value!r}: use 1-64 letters, digits, '.', '_' or '-', "
                "starting with a letter or digit"
            )
        return value


class _TokenHolder(BaseModel):
    name: str
    token_sha256: str
    topics: list[str]

    @field_validator("token_sha256")
    @classmethod
    def _hex(cls, value: str) -> str:
        value = value.strip().lower()
        if not _SHA256_HEX.fullmatch(value):
            raise ValueError("token_sha256 must be 64 hex digits (see `rs-hub token new`)")
        return value


class Source(_TokenHolder):
    """A Source allowed to post changes to some topics with a bearer token."""


class Subscriber(_TokenHolder):
    """A Destination allowed to subscribe to private topics with a bearer token."""


class Push(BaseModel):
    """The WebSocket push channel (docs/protocol.md)."""

    enabled: bool = True
    port: int = Field(8081, ge=0, le=65535)
    """Where the push endpoint listens (on the hub's host); 0 picks a free port."""
    url: str | None = None
    """How documents name the endpoint (default: ws://<base_url host>:<port>/)."""
    send_buffer_bytes: int = Field(1024 * 1024, ge=4096)
    """Per-connection bound: past it the client is closed as a slow consumer."""
    max_pending_batches: int = Field(10_000, ge=1)
    """Live batches queued for a connection while its replay runs."""
    ping_interval_s: float = Field(20.0, gt=0)
    ping_timeout_s: float = Field(20.0, gt=0)
    replay_concurrency: int = Field(64, ge=1)
    """Replay pages read from Redis and encoded at once in one process (the rest wait): a
    bound on replay memory (each page at most 1,000 changes, a few hundred KiB) that a burst
    of subscriptions does not queue behind (at 4, 1,000 clients subscribing while changes
    arrived replayed one after another and fell ever further behind: bench_push, N=1,000)."""
    stall_timeout_s: float = Field(10.0, gt=0)
    """How long a replay send may wait for a full send buffer to drain before the client is
    closed as a slow consumer (live sends never wait: a full buffer closes at once)."""
    close_timeout_s: float = Field(5.0, gt=0)
    """How long a slow consumer has to read up to its close frame before its TCP connection
    is dropped."""
    open_timeout_s: float = Field(10.0, gt=0)
    """Bound on the WebSocket opening handshake (idle and slowloris sockets)."""
    max_connections: int = Field(10_000, ge=1)
    """Push sockets per process, handshaking ones included; lowered at start to stay below
    the process's file-descriptor limit. Past it a new socket gets HTTP 503."""
    max_connections_per_address: int = Field(1024, ge=1)
    """Push sockets per client IP address (a proxy in front counts as one); past it: 503."""
    socket_send_buffer_bytes: int | None = Field(None, ge=4096)
    """The kernel's send buffer per push socket (SO_SNDBUF); None lets the kernel size it
    (up to net.ipv4.tcp_wmem's maximum, 4 MiB by default, per connection). A bound here
    caps the kernel memory a stalled client holds and makes it a slow consumer sooner."""


class Framework(BaseModel):
    """Framework notifications (ResourceSync Framework Notification 1.0.1): events when a
    topic's capability documents change, on the channel ``{base_url}/topics/{t}/framework``
    advertised in its Capability List (docs/hub.md, "Framework notifications")."""

    enabled: bool = True
    """False: no events are recorded and the Capability Lists do not advertise the channel."""
    resourcelist_interval_s: float = Field(DEFAULT_FRAMEWORK_RESOURCELIST_INTERVAL_S, gt=0)
    """A Resource List changes with every accepted change: its 'updated' event is sent at
    most once per this many seconds (the first change after a quiet interval is announced
    within one rotation interval)."""
    max_events: int = Field(DEFAULT_FRAMEWORK_MAX_EVENTS, ge=10)
    """Events kept per topic (about: the stream is trimmed with MAXLEN ~)."""
    push_interval_s: float = Field(DEFAULT_FRAMEWORK_PUSH_INTERVAL_S, gt=0, le=60)
    """On a Redis Cluster, how often each push process reads the topics' new events (one
    pipelined round for all topics): the most a framework frame waits after its event. On a
    single server one blocking read waits for them instead."""


class Compression(BaseModel):
    """gzip for the pull documents (docs/hub.md, Compression)."""

    enabled: bool = True
    """Send documents gzipped to clients whose ``Accept-Encoding`` asks for it."""
    level: int = Field(DEFAULT_GZIP_LEVEL, ge=1, le=9)
    """zlib level of documents that change (compressed once per version)."""
    immutable_level: int = Field(DEFAULT_GZIP_IMMUTABLE_LEVEL, ge=1, le=9)
    """zlib level of closed Change Lists (compressed once, served for ever)."""
    cache_bytes: int = Field(DEFAULT_GZIP_CACHE_BYTES, ge=0)
    """Gzipped bytes kept in memory per hub process (least recently used dropped first)."""


class WebSub(BaseModel):
    """The W3C WebSub hub at ``POST /hub`` (docs/websub.md): subscriptions, leases, delivery
    and the callback address policy."""

    enabled: bool = True
    lease_default_s: int = Field(DEFAULT_LEASE_S, ge=1)
    """Lease granted when a subscription asks for none (WebSub §5.1 ``hub.lease_seconds``)."""
    lease_min_s: int = Field(DEFAULT_LEASE_MIN_S, ge=1)
    """Shortest lease granted; the notification spec §4.2 recommends 300 s."""
    lease_max_s: int = Field(DEFAULT_LEASE_MAX_S, ge=1)
    """Longest lease granted; the notification spec §4.2 recommends 2,678,400 s (a month)."""
    max_entries_per_notification: int = Field(1000, ge=1, le=50_000)
    """Changes in one delivered change notification at most."""
    max_notification_bytes: int = Field(1024 * 1024, ge=4096)
    """Bytes of one delivered change notification at most (one larger change goes alone)."""
    retry_base_s: float = Field(1.0, gt=0)
    """First retry delay after a failed delivery; doubles per attempt, with full jitter."""
    retry_max_s: float = Field(300.0, gt=0)
    """Longest delay between two attempts."""
    retry_horizon_s: float = Field(24 * 3600.0, gt=0)
    """A subscription whose callback has failed for this long is dropped (and logged)."""
    connect_timeout_s: float = Field(5.0, gt=0)
    read_timeout_s: float = Field(10.0, gt=0)
    """Per request to a callback: connecting, and each read/write of the exchange."""
    max_response_bytes: int = Field(4096, ge=64)
    """Bytes of a callback's answer read at most (the verification challenge echo)."""
    max_subscriptions_per_topic: int = Field(10_000, ge=1)
    max_subscriptions_per_host: int = Field(1000, ge=1)
    """Subscriptions whose callbacks share one host name, all topics together."""
    per_host_concurrency: int = Field(8, ge=1)
    """Requests in flight to one callback host at once (from this process)."""
    max_deliveries: int = Field(1024, ge=1)
    """Deliveries in flight at once, all callbacks together (from this process)."""
    worker_lease_s: float = Field(10.0, gt=0)
    """A subscription is delivered by the one process holding its lease, renewed while it
    works; another process takes over this long after the holder dies."""
    scan_interval_s: float = Field(1.0, gt=0)
    """How often a process looks for subscriptions nobody delivers (new, or orphaned)."""
    callback_allow: list[str] = []
    """CIDR networks callbacks may resolve to although they are not public (loopback,
    private, link-local…); by default only globally routable addresses are reached."""

    @field_validator("callback_allow")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for network in value:
            try:
                ipaddress.ip_network(network, strict=False)
            except ValueError:
                raise ValueError(f"callback_allow: {network!r} is not a CIDR network") from None
        return value

    @model_validator(mode="after")
    def _lease_bounds(self) -> WebSub:
        if not self.lease_min_s <= self.lease_default_s <= self.lease_max_s:
            raise ValueError("need lease_min_s <= lease_default_s <= lease_max_s")
        return self


class Limits(BaseModel):
    max_body_bytes: int = Field(DEFAULT_MAX_BODY_BYTES, ge=1024)
    max_entries_per_request: int = Field(DEFAULT_MAX_ENTRIES_PER_REQUEST, ge=1)
    changelist_max_entries: int = Field(DEFAULT_CHANGELIST_MAX_ENTRIES, ge=1, le=50_000)
    changelist_max_age_s: float = Field(DEFAULT_CHANGELIST_MAX_AGE_S, gt=0)
    retention_s: float = Field(DEFAULT_RETENTION_S, ge=0)
    future_tolerance_s: float = Field(DEFAULT_FUTURE_TOLERANCE_S, ge=0)
    idempotency_ttl_s: int = Field(DEFAULT_IDEMPOTENCY_TTL_S, ge=1)
    index_lists: int = Field(100, ge=1, le=49_999)
    """How many recent closed Change Lists the Change List Index groups (its 'period')."""
    body_budget_bytes: int = Field(DEFAULT_BODY_BUDGET_BYTES, ge=1024)
    """Bytes of request bodies held at once, all requests together (at least one body of
    max_body_bytes gets in); past it a post is refused with 503 and Retry-After."""
    body_timeout_s: float = Field(DEFAULT_BODY_TIMEOUT_S, gt=0)
    """A request body must arrive within this time (408 otherwise; nothing is written)."""
    header_timeout_s: float = Field(DEFAULT_HEADER_TIMEOUT_S, gt=0)
    """A request's line and headers must arrive within this time of its first byte (or of
    the connection's opening); otherwise the connection is closed."""
    keepalive_timeout_s: int = Field(DEFAULT_KEEPALIVE_TIMEOUT_S, ge=1)
    """An idle keep-alive connection is closed after this time."""
    max_connections: int = Field(DEFAULT_MAX_CONNECTIONS, ge=1)
    """Open HTTP connections at most; lowered at startup to fit the process's open-file
    limit (room is kept for Redis and the push port). Past it a connection is refused."""


BRIDGE_KINDS = ("oai-pmh", "resourcesync")
"""What a bridge can read (:mod:`.bridges`)."""
DEFAULT_BRIDGE_INTERVAL_S = 60.0
DEFAULT_BRIDGE_TIMEOUT_S = 30.0
DEFAULT_BRIDGE_MAX_BYTES = 50 * 1024 * 1024
DEFAULT_BRIDGE_MAX_CHANGES = 10_000
DEFAULT_BRIDGE_BACKOFF_MAX_S = 300.0
DEFAULT_OAI_FULL_LIST_INTERVAL_S = 24 * 3600.0


class BridgeConfig(BaseModel):
    """A bridge: the hub itself polls a remote pull-only Source (an OAI-PMH repository, a
    ResourceSync Source) and is the only Source of ``topic`` (docs/bridges.md)."""

    model_config = {"extra": "forbid"}

    topic: str
    kind: Literal["oai-pmh", "resourcesync"]
    url: str
    """The OAI-PMH base URL, or the ResourceSync Source's Capability List / Source
    Description."""
    interval_s: float = Field(DEFAULT_BRIDGE_INTERVAL_S, gt=0)
    """Seconds between polls once the bridge has caught up."""
    timeout_s: float = Field(DEFAULT_BRIDGE_TIMEOUT_S, gt=0)
    """Bound on one HTTP request to the remote (connect, each read, the whole body)."""
    max_bytes: int = Field(DEFAULT_BRIDGE_MAX_BYTES, ge=1024)
    """Largest response body read from the remote (after gzip inflation)."""
    max_changes_per_step: int = Field(DEFAULT_BRIDGE_MAX_CHANGES, ge=1, le=100_000)
    """Changes one step may append (with its checkpoint, atomically)."""
    backoff_max_s: float = Field(DEFAULT_BRIDGE_BACKOFF_MAX_S, gt=0)
    """Longest wait after repeated errors (exponential backoff with jitter)."""
    metadata_prefixes: list[str] = []
    """oai-pmh: the formats to bridge; default: every format the repository lists."""
    sets: list[str] = []
    """oai-pmh: the setSpecs to bridge; default: the whole repository."""
    full_list_interval_s: float = Field(DEFAULT_OAI_FULL_LIST_INTERVAL_S, gt=0)
    """oai-pmh: how often a full identifier listing looks for records that disappeared
    (deleted by a repository that keeps no, or only transient, deletion records; or lost by
    one that says it keeps them, reported as a regression)."""

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("a bridge's url must be an http(s) URL")
        return value

    @model_validator(mode="after")
    def _kind_keys(self) -> BridgeConfig:
        if self.kind != "oai-pmh" and (self.metadata_prefixes or self.sets):
            raise ValueError("metadata_prefixes and sets are oai-pmh keys")
        return self


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="RSPUSH_", env_nested_delimiter="__", extra="forbid"
    )

    hub: HubSection = HubSection()
    topics: list[Topic] = []
    sources: list[Source] = []
    subscribers: list[Subscriber] = []
    limits: Limits = Limits()
    push: Push = Push()
    framework: Framework = Framework()
    compression: Compression = Compression()
    bridges: list[BridgeConfig] = []
    websub: WebSub = WebSub()
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    data_dir: Path = Path("rspush-data")
    redis_url: str | None = None
    """None: start the embedded server under data_dir."""
    redis_prefix: str = "rs"
    appendfsync: Literal["always", "everysec"] = "everysec"
    """Embedded server only: AOF fsync policy (see :mod:`.embedded` and docs/hub.md)."""
    rotation_interval_s: float = Field(1.0, gt=0)
    lease_ttl_s: float = Field(10.0, gt=0)

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        names = [t.name for t in self.topics]
        if len(set(names)) != len(names):
            raise ValueError("topic names must be unique")
        for who in [*self.sources, *self.subscribers]:
            unknown = set(who.topics) - set(names)
            if unknown:
                raise ValueError(f"{who.name!r} names unknown topics: {', '.join(sorted(unknown))}")
        bridged = [b.topic for b in self.bridges]
        for topic in bridged:
            if topic not in names:
                raise ValueError(f"bridge of unknown topic {topic!r}: add it under [[topics]]")
        if len(set(bridged)) != len(bridged):
            raise ValueError("one bridge per topic: a bridge is its topic's only Source")
        for source in self.sources:
            shared = set(source.topics) & set(bridged)
            if shared:
                raise ValueError(
                    f"source {source.name!r} may post to bridged topic(s) "
                    f"{', '.join(sorted(shared))}: a bridge is its topic's only Source"
                )
        return self

    def topic(self, name: str) -> Topic | None:
        return next((t for t in self.topics if t.name == name), None)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The TOML file (model_config["toml_file"], set by load_settings) ranks below env vars.
        return init_settings, env_settings, TomlConfigSettingsSource(settings_cls)


def load_settings(config: Path | None, **overrides: Any) -> Settings:
    """Settings from ``config`` (TOML), env vars and explicit ``overrides`` (CLI options)."""
    if config is not None and not config.is_file():
        raise FileNotFoundError(f"config file {config} does not exist")
    settings_cls: type[Settings] = Settings
    if config is not None:
        settings_cls = type(
            "FileSettings",
            (Settings,),
            {"model_config": {**Settings.model_config, "toml_file": config}},
        )
    return settings_cls(**{k: v for k, v in overrides.items() if v is not None})
