"""The agent's durable checkpoint: one SQLite file.

Per Source and topic: the epoch, the last position and the last change time applied (the
*watermark*: every change up to it is done), the Resource List ``at`` of the last baseline.
Per resource: change time, change type, length, hash and file path. A resource's new state
and the watermark it allows are written in the same transaction, so a crash at any point
leaves a state the agent resumes from without losing or re-doing a change (re-delivered
changes are skipped by :func:`rspush.subscriber.decide.decide`).

A lock file beside the database (``flock``) stops two agents from sharing one state.

The schema and every statement on it stay in this one module (hence its length), so a change
of a table is made, and reviewed, in one place.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType

from rspush.resourcesync.hashes import HashSyntaxError, parse_hashes
from rspush.resourcesync.w3cdt import from_us, to_us

from .changes import ChangeType, Channel, ResourceChange
from .decide import ResourceState
from .errors import StateLockedError
from .watermark import Watermark

__all__ = ["Checkpoint", "Failure", "TopicState", "Watermark", "list_topics", "recent_failures"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS topics (
    source TEXT NOT NULL, topic TEXT NOT NULL,
    epoch TEXT, position TEXT, last_time_us INTEGER, baseline_at_us INTEGER,
    updated_us INTEGER,
    PRIMARY KEY (source, topic));
CREATE TABLE IF NOT EXISTS resources (
    source TEXT NOT NULL, topic TEXT NOT NULL, uri TEXT NOT NULL,
    time_us INTEGER NOT NULL, change TEXT NOT NULL, length INTEGER, hash TEXT, path TEXT,
    PRIMARY KEY (source, topic, uri)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS failures (
    source TEXT NOT NULL, topic TEXT NOT NULL, uri TEXT NOT NULL,
    time_us INTEGER NOT NULL, change TEXT NOT NULL, reason TEXT NOT NULL, at_us INTEGER,
    length INTEGER, hash TEXT, retryable INTEGER NOT NULL DEFAULT 1,
    tries INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (source, topic, uri)) WITHOUT ROWID;
"""

_IN_CHUNK = 500
"""URIs per ``IN (...)`` query (SQLite allows 32,766 parameters since 3.32; older, 999)."""

# Columns added to the failures table after its first version (state files made before).
_FAILURE_COLUMNS = {
    "length": "INTEGER",
    "hash": "TEXT",
    "retryable": "INTEGER NOT NULL DEFAULT 1",
    "tries": "INTEGER NOT NULL DEFAULT 1",
}


@dataclass(frozen=True, slots=True)
class TopicState:
    source: str
    topic: str
    watermark: Watermark
    baseline_at: datetime | None
    updated: datetime | None


@dataclass(frozen=True, slots=True)
class Failure:
    uri: str
    time: datetime
    change: str
    reason: str


class Checkpoint:
    """The state of one (Source, topic) in a state file shared by nothing else."""

    def __init__(self, path: Path, source: str, topic: str) -> None:
        self.path = path
        self.source = source
        self.topic = topic
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = _lock(path)
        self._closed = False
        self._batch = False
        try:
            self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode: a commit survives the agent crashing; only a power loss may
            # undo the last ones, and those changes are simply applied again.
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
            have = {row[1] for row in self._db.execute("PRAGMA table_info(failures)")}
            for column, kind in _FAILURE_COLUMNS.items():
                if column not in have:
                    self._db.execute(f"ALTER TABLE failures ADD COLUMN {column} {kind}")
        except BaseException:
            _unlock(self._lock)
            raise

    def close(self) -> None:
        if self._closed:
            return  # the lock's fd number may already belong to another file
        self._closed = True
        self.commit_batch()
        self._db.close()
        _unlock(self._lock)

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # --- reading ---------------------------------------------------------------------------

    def state(self) -> TopicState | None:
        row = self._db.execute(
            "SELECT epoch, position, last_time_us, baseline_at_us, updated_us FROM topics "
            "WHERE source = ? AND topic = ?",
            (self.source, self.topic),
        ).fetchone()
        if row is None:
            return None
        epoch, position, last_us, baseline_us, updated_us = row
        return TopicState(
            self.source,
            self.topic,
            Watermark(epoch, position, None if last_us is None else from_us(last_us)),
            None if baseline_us is None else from_us(baseline_us),
            None if updated_us is None else from_us(updated_us),
        )

    def resource(self, uri: str) -> ResourceState | None:
        row = self._db.execute(
            "SELECT time_us, change, length, hash, path FROM resources "
            "WHERE source = ? AND topic = ? AND uri = ?",
            (self.source, self.topic, uri),
        ).fetchone()
        if row is None:
            return None
        return ResourceState(uri, from_us(row[0]), row[1], row[2], row[3], row[4])

    def resources_of(self, uris: Iterable[str]) -> dict[str, ResourceState]:
        """The rows of ``uris`` that exist, by URI: one query per :data:`_IN_CHUNK` URIs."""
        wanted = list(uris)
        found: dict[str, ResourceState] = {}
        for start in range(0, len(wanted), _IN_CHUNK):
            chunk = wanted[start : start + _IN_CHUNK]
            marks = ", ".join("?" * len(chunk))
            for uri, time_us, change, length, hash_, path in self._db.execute(
                "SELECT uri, time_us, change, length, hash, path FROM resources "
                f"WHERE source = ? AND topic = ? AND uri IN ({marks})",
                (self.source, self.topic, *chunk),
            ):
                found[uri] = ResourceState(uri, from_us(time_us), change, length, hash_, path)
        return found

    def resources(self) -> Iterator[ResourceState]:
        """Every resource the mirror holds (tombstones left out), by URI."""
        for uri, time_us, change, length, hash_, path in self._db.execute(
            "SELECT uri, time_us, change, length, hash, path FROM resources "
            "WHERE source = ? AND topic = ? AND change != 'deleted' ORDER BY uri",
            (self.source, self.topic),
        ):
            yield ResourceState(uri, from_us(time_us), change, length, hash_, path)

    def failures(self) -> list[Failure]:
        return [
            Failure(uri, from_us(t), change, reason)
            for uri, t, change, reason in self._db.execute(
                "SELECT uri, time_us, change, reason FROM failures "
                "WHERE source = ? AND topic = ? ORDER BY uri",
                (self.source, self.topic),
            )
        ]

    # --- writing: every method is one transaction ------------------------------------------

    def record(
        self,
        change: ResourceChange,
        state: ResourceState | None,
        watermark: Watermark | None,
        *,
        now: datetime,
    ) -> None:
        """The outcome of one change: the resource's new state (None: unchanged), its failure
        row cleared, and the watermark it moves (None: unchanged) — atomically."""
        with self._transaction():
            if state is not None:
                self._db.execute(
                    "INSERT OR REPLACE INTO resources VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        self.source,
                        self.topic,
                        state.uri,
                        to_us(state.time),
                        state.change,
                        state.length,
                        state.hash,
                        state.path,
                    ),
                )
                self._db.execute(
                    "DELETE FROM failures WHERE source = ? AND topic = ? AND uri = ? "
                    "AND time_us <= ?",
                    (self.source, self.topic, change.uri, to_us(change.time)),
                )
            if watermark is not None:
                self._set_watermark(watermark, now)

    def record_many(self, applied: Sequence[tuple[ResourceChange, ResourceState]]) -> None:
        """:meth:`record` of many changes (no watermark), in one transaction: each
        resource's new state, its failure rows up to the change cleared."""
        if not applied:
            return
        with self._transaction():
            self._db.executemany(
                "INSERT OR REPLACE INTO resources VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        self.source,
                        self.topic,
                        s.uri,
                        to_us(s.time),
                        s.change,
                        s.length,
                        s.hash,
                        s.path,
                    )
                    for _, s in applied
                ],
            )
            if self._has_failures():
                self._db.executemany(
                    "DELETE FROM failures WHERE source = ? AND topic = ? AND uri = ? "
                    "AND time_us <= ?",
                    [(self.source, self.topic, c.uri, to_us(c.time)) for c, _ in applied],
                )

    def _has_failures(self) -> bool:
        return (
            self._db.execute(
                "SELECT 1 FROM failures WHERE source = ? AND topic = ? LIMIT 1",
                (self.source, self.topic),
            ).fetchone()
            is not None
        )

    def record_failure(
        self,
        change: ResourceChange,
        reason: str,
        watermark: Watermark | None,
        *,
        now: datetime,
        retryable: bool = True,
    ) -> None:
        """A change that could not be applied: remembered (with what it announced, to
        verify a retry) for ``status``, the agent's retries and ``audit --repair``; the
        watermark still moves so one bad resource cannot stall the rest."""
        hash_text = change.hash_text
        with self._transaction():
            self._db.execute(
                "INSERT INTO failures (source, topic, uri, time_us, change, reason, at_us, "
                "length, hash, retryable, tries) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1) "
                "ON CONFLICT (source, topic, uri) DO UPDATE SET time_us = excluded.time_us, "
                "change = excluded.change, reason = excluded.reason, at_us = excluded.at_us, "
                "length = excluded.length, hash = excluded.hash, "
                "retryable = excluded.retryable, tries = failures.tries + 1",
                (
                    self.source,
                    self.topic,
                    change.uri,
                    to_us(change.time),
                    str(change.change),
                    reason,
                    to_us(now),
                    change.length,
                    hash_text,
                    int(retryable),
                ),
            )
            if watermark is not None:
                self._set_watermark(watermark, now)

    def retryable_failures(self, *, max_tries: int) -> list[ResourceChange]:
        """Failed changes worth another try (not refused paths; fewer than ``max_tries``),
        as changes to submit again — oldest failure first."""
        rows = self._db.execute(
            "SELECT uri, time_us, change, length, hash FROM failures "
            "WHERE source = ? AND topic = ? AND retryable = 1 AND tries < ? ORDER BY at_us",
            (self.source, self.topic, max_tries),
        ).fetchall()
        retries = []
        for uri, time_us, change, length, hash_text in rows:
            try:
                hashes = parse_hashes(hash_text) if hash_text else ()
            except HashSyntaxError:
                hashes = ()
            retries.append(
                ResourceChange(
                    uri, ChangeType(change), from_us(time_us), Channel.RETRY, length, hashes
                )
            )
        return retries

    def set_watermark(self, watermark: Watermark, *, now: datetime) -> None:
        with self._transaction():
            self._set_watermark(watermark, now)

    def start_baseline(self, *, now: datetime) -> None:
        """A new baseline: the topic's watermark is forgotten until the baseline completes
        (an interrupted baseline starts over; resources already fetched are not fetched
        again, see :func:`rspush.subscriber.decide.decide`)."""
        with self._transaction():
            self._db.execute(
                "INSERT INTO topics (source, topic, updated_us) VALUES (?, ?, ?) "
                "ON CONFLICT (source, topic) DO UPDATE SET epoch = NULL, position = NULL, "
                "last_time_us = NULL, baseline_at_us = NULL, updated_us = excluded.updated_us",
                (self.source, self.topic, to_us(now)),
            )

    def finish_baseline(
        self, at: datetime, watermark: Watermark, *, now: datetime, started: datetime | None = None
    ) -> None:
        """The baseline that began at ``started`` is complete as of the Source's ``at``.
        Failures recorded before it began are settled by it: it re-read the state of every
        resource, and what changed after ``at`` comes again from the watermark (inclusive)."""
        with self._transaction():
            self._set_watermark(watermark, now)
            if started is not None:
                self._db.execute(
                    "DELETE FROM failures WHERE source = ? AND topic = ? AND at_us < ?",
                    (self.source, self.topic, to_us(started)),
                )
            self._db.execute(
                "UPDATE topics SET baseline_at_us = ? WHERE source = ? AND topic = ?",
                (to_us(at), self.source, self.topic),
            )

    def clear_failure(self, uri: str) -> None:
        with self._transaction():
            self._db.execute(
                "DELETE FROM failures WHERE source = ? AND topic = ? AND uri = ?",
                (self.source, self.topic, uri),
            )

    def forget(self, uri: str) -> None:
        with self._transaction():
            self._db.execute(
                "DELETE FROM resources WHERE source = ? AND topic = ? AND uri = ?",
                (self.source, self.topic, uri),
            )

    def _set_watermark(self, watermark: Watermark, now: datetime) -> None:
        last = None if watermark.last_time is None else to_us(watermark.last_time)
        self._db.execute(
            "INSERT INTO topics (source, topic, epoch, position, last_time_us, updated_us) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (source, topic) DO UPDATE SET "
            "epoch = excluded.epoch, position = excluded.position, "
            "last_time_us = excluded.last_time_us, updated_us = excluded.updated_us",
            (self.source, self.topic, watermark.epoch, watermark.position, last, to_us(now)),
        )

    # --- group commit ----------------------------------------------------------------------

    @property
    def in_batch(self) -> bool:
        return self._batch

    def begin_batch(self) -> None:
        """Open one transaction for the records that follow, until :meth:`commit_batch`.

        Each record stays atomic inside it (a savepoint); the batch only saves the commit
        per change — the agent commits at the end of every event-loop pass, so a burst of
        changes finishing together costs one commit. A crash loses the uncommitted records
        *and* the watermark they moved: those changes simply come again.
        """
        if not self._batch:
            self._db.execute("BEGIN IMMEDIATE")
            self._batch = True

    def commit_batch(self) -> None:
        if self._batch:
            self._batch = False
            self._db.execute("COMMIT")

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db, savepoint=self._batch)


class _Transaction:
    def __init__(self, db: sqlite3.Connection, *, savepoint: bool) -> None:
        self.db = db
        self.savepoint = savepoint

    def __enter__(self) -> None:
        self.db.execute("SAVEPOINT record" if self.savepoint else "BEGIN IMMEDIATE")

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if not self.savepoint:
            self.db.execute("COMMIT" if kind is None else "ROLLBACK")
        elif kind is None:
            self.db.execute("RELEASE record")
        else:
            self.db.execute("ROLLBACK TO record")
            self.db.execute("RELEASE record")


def list_topics(path: Path) -> list[tuple[TopicState, dict[str, int]]]:
    """Every (Source, topic) in a state file with counts of resources, tombstones and
    failures — read-only, without the lock, so it works while an agent runs."""
    if not path.exists():
        raise FileNotFoundError(f"no state file at {path}")
    if path.is_dir():
        # SQLite would say "disk I/O error".
        raise IsADirectoryError(f"{path} is a folder, not a state file")
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = db.execute(
            "SELECT source, topic, epoch, position, last_time_us, baseline_at_us, updated_us "
            "FROM topics ORDER BY source, topic"
        ).fetchall()
        result = []
        for source, topic, epoch, position, last, base, upd in rows:
            state = TopicState(
                source,
                topic,
                Watermark(epoch, position, None if last is None else from_us(last)),
                None if base is None else from_us(base),
                None if upd is None else from_us(upd),
            )
            held, tombstones = db.execute(
                "SELECT coalesce(sum(change != 'deleted'), 0), "
                "coalesce(sum(change = 'deleted'), 0) FROM resources "
                "WHERE source = ? AND topic = ?",
                (source, topic),
            ).fetchone()
            failures = db.execute(
                "SELECT count(*) FROM failures WHERE source = ? AND topic = ?", (source, topic)
            ).fetchone()[0]
            result.append(
                (state, {"resources": held, "tombstones": tombstones, "failures": failures})
            )
    finally:
        db.close()
    return result


def recent_failures(path: Path, source: str, topic: str, limit: int = 20) -> list[Failure]:
    """The latest failures of a (Source, topic), newest first — read-only, like
    :func:`list_topics`."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = db.execute(
            "SELECT uri, time_us, change, reason FROM failures WHERE source = ? AND topic = ? "
            "ORDER BY at_us DESC LIMIT ?",
            (source, topic, limit),
        ).fetchall()
    finally:
        db.close()
    return [Failure(uri, from_us(t), change, reason) for uri, t, change, reason in rows]


def _lock(path: Path) -> int:
    lock_path = path.with_name(path.name + ".lock")
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise StateLockedError(
            f"{path} is in use by another rs-subscribe (pid {holder}); one state file per agent"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


def _unlock(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
