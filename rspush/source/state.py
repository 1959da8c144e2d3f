"""What ``rs-publish watch`` last published, kept across restarts: an SQLite database.

SQLite rather than a JSON file rewritten atomically: a post's acknowledgement changes a few
rows of a tree that may hold millions of files, and one transaction applies them *and*
clears the pending batch together, whatever happens to the process (kill -9 included).

The exactly-once protocol (the hub's ``Idempotency-Key`` does the rest):

1. a batch (its body, its key, the changes it carries) is stored as *pending* before it is
   posted;
2. once the hub acknowledged it, one transaction applies its changes to ``files`` and
   clears it.

A run that finds a pending batch posts it again first, byte for byte with the same key: the
hub answers a batch it already committed from its stored receipt (or, once the receipt has
expired, counts its changes as duplicates of what it holds), and commits one it never got.

The database also pins the hub's topic and the base URL it was written for: a diff against
the state of another topic would publish the wrong changes.
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import IO

from rspush.resourcesync.w3cdt import format_w3c_datetime, parse_w3c_datetime

from .diff import Published
from .errors import StateError

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS files (
    path TEXT PRIMARY KEY, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,
    md5 TEXT NOT NULL, sha256 TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS pending (
    id INTEGER PRIMARY KEY CHECK (id = 1), key TEXT NOT NULL, body BLOB NOT NULL,
    changes TEXT NOT NULL
);
"""


@dataclass(frozen=True, slots=True)
class Row:
    """One change of a batch as the state records it: ``published`` None for a deletion."""

    path: str
    published: Published | None


@dataclass(frozen=True, slots=True)
class Pending:
    key: str
    body: bytes
    rows: tuple[Row, ...]


class State:
    """The state database of one watched tree; held locked while open (one watcher each)."""

    def __init__(self, path: Path, *, topic: str, base_url: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = _locked(path.with_name(path.name + ".lock"))
        try:
            self._db = sqlite3.connect(path, isolation_level=None)
        except BaseException:
            self._lock.close()
            raise
        try:
            # WAL with FULL sync: a committed acknowledgement survives a crash or power loss.
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(SCHEMA)
            self._pin("topic", topic)
            self._pin("base_url", base_url)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self._db.close()
        self._lock.close()

    def _pin(self, name: str, value: str) -> None:
        row = self._db.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        if row is None:
            self._db.execute("INSERT INTO meta VALUES (?, ?)", (name, value))
        elif row[0] != value:
            raise StateError(
                f"the state file was written for {name.replace('_', ' ')} {row[0]!r}, "
                f"not {value!r}: give another --state (or remove it to start afresh)"
            )

    def files(self) -> dict[str, Published]:
        return {
            path: Published(size, mtime, md5, sha)
            for path, size, mtime, md5, sha in self._db.execute("SELECT * FROM files")
        }

    def last_time(self) -> datetime | None:
        """The latest change time any run may have posted (the clock starts after it)."""
        row = self._db.execute("SELECT value FROM meta WHERE name = 'last_time'").fetchone()
        return parse_w3c_datetime(row[0]) if row else None

    def pending(self) -> Pending | None:
        row = self._db.execute("SELECT key, body, changes FROM pending").fetchone()
        if row is None:
            return None
        rows = tuple(
            Row(r["path"], Published(**r["published"]) if r["published"] else None)
            for r in json.loads(row[2])
        )
        return Pending(row[0], bytes(row[1]), rows)

    def set_pending(self, pending: Pending, last_time: datetime) -> None:
        """Store ``pending`` (replacing none: one batch is in flight at a time) before it is
        posted, with the latest time it carries."""
        changes = json.dumps(
            [
                {"path": r.path, "published": asdict(r.published) if r.published else None}
                for r in pending.rows
            ]
        )
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute(
                "INSERT INTO pending VALUES (1, ?, ?, ?)", (pending.key, pending.body, changes)
            )
            self._db.execute(
                "INSERT OR REPLACE INTO meta VALUES ('last_time', ?)",
                (format_w3c_datetime(last_time),),
            )

    def acknowledged(self) -> None:
        """The pending batch was acknowledged: its changes become the state, in one step."""
        pending = self.pending()
        if pending is None:
            return
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._apply(pending.rows)
            self._db.execute("DELETE FROM pending")

    def refresh(self, rows: Iterable[Row]) -> None:
        """Record new stats of files whose content did not change (nothing to post)."""
        with self._db:
            self._db.execute("BEGIN IMMEDIATE")
            self._apply(rows)

    def _apply(self, rows: Iterable[Row]) -> None:
        for row in rows:
            if row.published is None:
                self._db.execute("DELETE FROM files WHERE path = ?", (row.path,))
            else:
                p = row.published
                self._db.execute(
                    "INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?, ?)",
                    (row.path, p.size, p.mtime_ns, p.md5, p.sha256),
                )


def _locked(path: Path) -> IO[bytes]:
    handle = path.open("ab")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise StateError(
            "another rs-publish watch is using this state file; one watcher per tree"
        ) from None
    os.set_inheritable(handle.fileno(), False)
    return handle
