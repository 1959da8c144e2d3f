"""A real OAI-PMH 2.0 repository in its own process, for the OAI-PMH bridge's tests.

The protocol side is the ``oaipmh`` package's server (the maintained fork of pyoai: request
validation, errors, resumption tokens, the XML envelope); the repository behind it is a
SQLite file the test writes with :class:`OaiRepository` (add, change, delete records) while
the server process reads it on every request. Two metadata formats (``oai_dc`` and a small
``mods``), sets, small pages (resumption tokens), day or second granularity, and
``deletedRecord`` ``persistent`` (deleted records stay, with ``status="deleted"``) or ``no``
(deleted records vanish).

Run as ``python -m tests.support.oai_repository DB --granularity day|seconds --batch N
--deleted persistent|no``: it prints ``listening on <base URL>`` once it serves.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.support.waiting import TIMEOUT_SCALE

OAI_DC_NS = "http://www.openarchives.org/OAI/2.0/oai_dc/"
MODS_NS = "http://www.loc.gov/mods/v3"
FORMATS = {
    "oai_dc": ("http://www.openarchives.org/OAI/2.0/oai_dc.xsd", OAI_DC_NS),
    "mods": ("http://www.loc.gov/standards/mods/v3/mods-3-7.xsd", MODS_NS),
}
SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    identifier TEXT PRIMARY KEY,
    datestamp TEXT NOT NULL,
    deleted INTEGER NOT NULL DEFAULT 0,
    sets TEXT NOT NULL DEFAULT '',
    title TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS sets (spec TEXT PRIMARY KEY, name TEXT NOT NULL);
"""
LISTENING = re.compile(r"listening on (http://127\.0\.0\.1:\d+/oai)")


def connect(db: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(db, timeout=30, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(SCHEMA)
    return conn


# --- the test's side -------------------------------------------------------------------------


class OaiRepository:
    """The records of a repository process (started by :func:`running_repository`)."""

    def __init__(self, db: Path, base_url: str, granularity: str) -> None:
        self.db = db
        self.base_url = base_url
        self.granularity = granularity
        self.conn = connect(db)

    def datestamp(self) -> str:
        now = datetime.now(UTC)
        if self.granularity == "day":
            return now.strftime("%Y-%m-%dT00:00:00")
        return now.strftime("%Y-%m-%dT%H:%M:%S")

    def add_sets(self, *specs: str) -> None:
        self.conn.executemany(
            "INSERT OR IGNORE INTO sets VALUES (?, ?)", [(s, f"Set {s}") for s in specs]
        )

    def put(self, identifier: str, title: str, sets: tuple[str, ...] = ()) -> None:
        """Add or change a record (its datestamp becomes now)."""
        self.put_many([(identifier, title, sets)])

    def put_many(self, rows: list[tuple[str, str, tuple[str, ...]]]) -> None:
        stamp = self.datestamp()
        self.conn.execute("BEGIN")
        self.conn.executemany(
            "INSERT OR REPLACE INTO records VALUES (?, ?, 0, ?, ?)",
            [(i, stamp, " ".join(s), t) for i, t, s in rows],
        )
        self.conn.execute("COMMIT")

    def delete(self, identifier: str, *, keep_record: bool) -> None:
        """``keep_record``: deletedRecord persistent (the header stays, status deleted)."""
        if keep_record:
            self.conn.execute(
                "UPDATE records SET deleted = 1, datestamp = ? WHERE identifier = ?",
                (self.datestamp(), identifier),
            )
        else:
            self.conn.execute("DELETE FROM records WHERE identifier = ?", (identifier,))

    def live(self) -> dict[str, str]:
        """identifier -> title of the records not deleted."""
        rows = self.conn.execute("SELECT identifier, title FROM records WHERE deleted = 0")
        return dict(rows.fetchall())

    def close(self) -> None:
        self.conn.close()


@contextlib.contextmanager
def running_repository(
    tmp: Path, *, granularity: str = "seconds", batch: int = 7, deleted: str = "persistent"
) -> Iterator[OaiRepository]:
    """A repository process on 127.0.0.1 (a free port), stopped on exit."""
    tmp.mkdir(parents=True, exist_ok=True)
    db = tmp / "repository.sqlite"
    connect(db).close()
    log = tmp / "repository.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.oai_repository",
                str(db),
                "--granularity",
                granularity,
                "--batch",
                str(batch),
                "--deleted",
                deleted,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        base_url = _wait_listening(log, process)
        repository = OaiRepository(db, base_url, granularity)
        try:
            yield repository
        finally:
            repository.close()
    finally:
        process.terminate()
        try:
            process.wait(10 * TIMEOUT_SCALE)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_listening(log: Path, process: subprocess.Popen[bytes]) -> str:
    from tests.support.waiting import wait_for

    found: list[str] = []

    def listening() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"the repository exited: {log.read_text()[-2000:]}")
        match = LISTENING.search(log.read_text())
        if match:
            found.append(match.group(1))
        return bool(match)

    wait_for(listening, "the OAI-PMH repository to listen", 30)
    return found[0]


# --- the repository process ------------------------------------------------------------------


def _naive(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S")


def serve(db: Path, *, granularity: str, batch: int, deleted: str) -> None:
    from lxml.etree import SubElement
    from oaipmh import common, error
    from oaipmh.datestamp import datetime_to_datestamp
    from oaipmh.metadata import MetadataRegistry
    from oaipmh.server import NS_XSI, Server, XMLTreeServer, nsoai, oai_dc_writer

    day = granularity == "day"
    conn = connect(db)
    conn.execute("PRAGMA query_only=1")

    def mods_writer(element: Any, metadata: Any) -> None:
        mods = SubElement(element, f"{{{MODS_NS}}}mods", nsmap={None: MODS_NS, "xsi": NS_XSI})
        info = SubElement(mods, f"{{{MODS_NS}}}titleInfo")
        for title in metadata.getMap().get("title", []):
            SubElement(info, f"{{{MODS_NS}}}title").text = title

    class Repository:
        """The IOAI interface over the SQLite file."""

        def identify(self) -> Any:
            first = conn.execute("SELECT MIN(datestamp) FROM records").fetchone()[0]
            return common.Identify(
                repositoryName="rspush test repository",
                baseURL=BASE_URL,
                protocolVersion="2.0",
                adminEmails=["admin@example.org"],
                earliestDatestamp=_naive(first) if first else datetime(2000, 1, 1),
                deletedRecord=deleted,
                granularity="YYYY-MM-DD" if day else "YYYY-MM-DDThh:mm:ssZ",
                compression=["identity"],
            )

        def listMetadataFormats(self, identifier: str | None = None) -> list[Any]:
            if identifier is not None:
                self._row(identifier)
            return [(p, schema, ns) for p, (schema, ns) in FORMATS.items()]

        def listSets(self) -> list[Any]:
            rows = conn.execute("SELECT spec, name FROM sets ORDER BY spec").fetchall()
            if not rows:
                raise error.NoSetHierarchyError("this repository has no sets")
            return [(spec, name, None) for spec, name in rows]

        def _rows(self, prefix: str, set: str | None, from_: Any, until: Any) -> list[Any]:
            if prefix not in FORMATS:
                raise error.CannotDisseminateFormatError(f"unknown format {prefix}")
            query = "SELECT * FROM records WHERE 1"
            args: list[Any] = []
            if from_ is not None:
                query += " AND datestamp >= ?"
                args.append(from_.strftime("%Y-%m-%dT%H:%M:%S"))
            if until is not None:
                query += " AND datestamp <= ?"
                args.append(until.strftime("%Y-%m-%dT%H:%M:%S"))
            # The order of most repositories: by identifier, not by datestamp.
            rows = conn.execute(query + " ORDER BY identifier", args).fetchall()
            if set is not None:
                rows = [r for r in rows if set in r[3].split()]
            return rows

        def _header(self, row: Any) -> Any:
            identifier, stamp, is_deleted, sets, _ = row
            return common.Header(None, identifier, _naive(stamp), sets.split(), bool(is_deleted))

        def _metadata(self, row: Any) -> Any:
            return common.Metadata(None, {"title": [row[4]], "identifier": [row[0]]})

        def listIdentifiers(
            self, metadataPrefix: str, set: str | None = None, from_: Any = None, until: Any = None
        ) -> list[Any]:
            return [self._header(r) for r in self._rows(metadataPrefix, set, from_, until)]

        def listRecords(
            self, metadataPrefix: str, set: str | None = None, from_: Any = None, until: Any = None
        ) -> list[Any]:
            return [
                (self._header(r), self._metadata(r), None)
                for r in self._rows(metadataPrefix, set, from_, until)
            ]

        def _row(self, identifier: str) -> Any:
            row = conn.execute("SELECT * FROM records WHERE identifier = ?", (identifier,))
            found = row.fetchone()
            if found is None:
                raise error.IdDoesNotExistError(f"no record {identifier}")
            return found

        def getRecord(self, metadataPrefix: str, identifier: str) -> Any:
            if metadataPrefix not in FORMATS:
                raise error.CannotDisseminateFormatError(f"unknown format {metadataPrefix}")
            row = self._row(identifier)
            return self._header(row), self._metadata(row), None

    class DayTreeServer(XMLTreeServer):  # type: ignore[misc]
        """Datestamps at the repository's granularity (the library writes seconds)."""

        def _outputHeader(self, element: Any, header: Any) -> None:
            e_header = SubElement(element, nsoai("header"))
            if header.isDeleted():
                e_header.set("status", "deleted")
            SubElement(e_header, nsoai("identifier")).text = header.identifier()
            SubElement(e_header, nsoai("datestamp")).text = datetime_to_datestamp(
                header.datestamp(), day_granularity=day
            )
            for spec in header.setSpec():
                SubElement(e_header, nsoai("setSpec")).text = spec

    registry = MetadataRegistry()
    registry.registerWriter("oai_dc", oai_dc_writer)
    registry.registerWriter("mods", mods_writer)
    server = Server(Repository(), registry, resumption_batch_size=batch)
    server._tree_server = DayTreeServer(server._tree_server._server, registry)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server API
            query = parse_qs(urlsplit(self.path).query, keep_blank_values=True)
            body = server.handleRequest({k: v[0] for k, v in query.items()})
            self.send_response(200)
            self.send_header("Content-Type", "text/xml; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = HTTPServer(("127.0.0.1", 0), Handler)  # one thread: the SQLite connection is its
    global BASE_URL
    BASE_URL = f"http://127.0.0.1:{httpd.server_address[1]}/oai"
    print(f"listening on {BASE_URL}", flush=True)
    httpd.serve_forever()


BASE_URL = ""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("db", type=Path)
    parser.add_argument("--granularity", choices=["day", "seconds"], default="seconds")
    parser.add_argument("--batch", type=int, default=7)
    parser.add_argument("--deleted", choices=["persistent", "no"], default="persistent")
    args = parser.parse_args()
    serve(args.db, granularity=args.granularity, batch=args.batch, deleted=args.deleted)


if __name__ == "__main__":
    main()
