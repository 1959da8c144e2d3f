"""What one agent (or audit) is told: :class:`AgentConfig`, built by the command line
(:func:`rspush.subscriber.cli_options.build_config`) or by a program embedding the agent."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from rspush.remote.deadlines import (
    DEFAULT_DOCUMENT_TOTAL,
    DEFAULT_GRACE,
    DEFAULT_MIN_RATE,
    TransferLimits,
)

from .fetch import DEFAULT_MAX_BYTES, DEFAULT_TRIES
from .filters import ChangeFilter
from .mapping import STATE_DIR
from .mirror import DEFAULT_CONCURRENCY

USER_AGENT = "rs-subscribe/0.1 (rspush)"

DEFAULT_STOP_GRACE = 1.0
"""Seconds the transfers in flight get to finish after a stop request before they are
cancelled (their temp files deleted; the changes come again next run)."""


@dataclass
class AgentConfig:
    source_url: str
    dest: Path
    state: Path | None = None
    """Default: ``<dest>/.rs-subscribe/state.sqlite``."""
    topic: str | None = None
    maps: list[tuple[str, str]] = field(default_factory=list)
    change_filter: ChangeFilter = field(default_factory=ChangeFilter)
    keep_deleted: bool = False
    concurrency: int = DEFAULT_CONCURRENCY
    poll_interval: float = 5.0
    rebaseline_interval: float = 3600.0
    """At most one rebaseline per this many seconds (after any baseline): a Source whose
    Change Lists can never prove they reach back (a list without ``from``) would otherwise
    be rebaselined at every poll. Meanwhile the agent follows the lists it can read."""
    token: str | None = None
    use_dump: bool = True
    fetch: bool = True
    """False: record changes without fetching content (metadata-only)."""
    tries: int = DEFAULT_TRIES
    max_bytes: int = DEFAULT_MAX_BYTES
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    http_timeout: float = 30.0
    retry_interval: float = 60.0
    """Seconds between retries of failed changes."""
    max_tries: int = 10
    """How often a failed change is retried before only a newer change (or audit --repair)
    can settle it."""
    transfer_grace: float = DEFAULT_GRACE
    """Seconds a resource or document transfer may take before ``min_rate`` applies
    (:mod:`rspush.remote.deadlines`)."""
    min_rate: float = DEFAULT_MIN_RATE
    """Bytes per second a transfer must average after the grace, or it fails (timed out)."""
    document_timeout: float = DEFAULT_DOCUMENT_TOTAL
    """Seconds one Source document may take at most, whatever its rate."""
    stop_grace: float = DEFAULT_STOP_GRACE

    @property
    def state_path(self) -> Path:
        return self.state or self.dest / STATE_DIR / "state.sqlite"

    @property
    def temp_dir(self) -> Path:
        """Downloads in flight: inside the destination (same file system: renames are
        atomic), one directory per state file — agents of several topics may share a
        destination, each clearing only its own leftovers."""
        key = hashlib.sha256(str(self.state_path.resolve()).encode()).hexdigest()[:12]
        return self.dest / STATE_DIR / "tmp" / key

    @property
    def transfer_limits(self) -> TransferLimits:
        """The deadline of one resource transfer."""
        return TransferLimits(grace=self.transfer_grace, min_rate=self.min_rate)

    @property
    def document_limits(self) -> TransferLimits:
        """The deadline of one Source document."""
        return TransferLimits(
            grace=self.transfer_grace, min_rate=self.min_rate, total=self.document_timeout
        )
