"""``rs-validate``: check ResourceSync documents from files, URLs or standard input.

This module is the document layer's only I/O edge (reading files and fetching URLs); the
rest of :mod:`rspush.resourcesync` takes and returns bytes and values.

Exit status: 0 all documents valid, 1 any invalid (or unreadable as ResourceSync), 2 usage or
I/O errors (missing file, network failure).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

from . import namespaces as ns
from .compression import decompressed
from .console import PlainCommand, run
from .errors import DocumentError
from .fragments import fragment_violations
from .parser import parse_document
from .schema import schema_errors
from .validator import validate
from .violations import Severity, Violation

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode=None,  # plain help, the same style as every rspush command
    help="Validate ResourceSync documents against the spec's rules (and, with --schema, "
    "the official XML Schemas).",
)

FETCH_TIMEOUT_S = 30.0


class FetchError(Exception):
    """A source could not be read (file or network); exit status 2."""


@dataclass
class Report:
    source: str
    document_type: str | None = None
    version: str | None = None
    entries: int | None = None
    fatal: str | None = None
    violations: list[Violation] = field(default_factory=list)
    schema: list[str] = field(default_factory=list)

    def valid(self, strict: bool) -> bool:
        if self.fatal is not None or self.schema:
            return False
        return not any(strict or v.severity is Severity.ERROR for v in self.violations)

    def as_json(self, strict: bool) -> dict[str, Any]:
        return {
            "source": self.source,
            "valid": self.valid(strict),
            "type": self.document_type,
            "version": self.version,
            "entries": self.entries,
            "error": self.fatal,
            "violations": [v.model_dump(mode="json") for v in self.violations],
            "schema_errors": self.schema,
        }


def read_source(source: str, max_bytes: int) -> bytes:
    """Bytes of a file, ``-`` (standard input) or an http(s) URL, at most ``max_bytes``+1."""
    if source == "-":
        return sys.stdin.buffer.read(max_bytes + 1)
    if source.startswith(("http://", "https://")):
        return _fetch(source, max_bytes)
    path = Path(source)
    try:
        with path.open("rb") as handle:
            return handle.read(max_bytes + 1)
    except OSError as exc:
        raise FetchError(f"cannot read {source}: {exc.strerror or exc}") from exc


def _fetch(url: str, max_bytes: int) -> bytes:
    try:
        with httpx.stream("GET", url, follow_redirects=True, timeout=FETCH_TIMEOUT_S) as reply:
            if reply.status_code != 200:
                raise FetchError(f"GET {url}: HTTP {reply.status_code}")
            body = bytearray()
            for chunk in reply.iter_bytes():
                body += chunk
                if len(body) > max_bytes:
                    break  # enough to know it is too large
            return bytes(body)
    except httpx.HTTPError as exc:
        raise FetchError(f"GET {url}: {exc}") from exc


def check(
    source: str, data: bytes, *, with_schema: bool, max_bytes: int, fragment: bool = False
) -> Report:
    report = Report(source=source)
    try:
        # A gzipped Sitemap (.xml.gz) is read inflated, under the same cap.
        data = decompressed(data, max_bytes=max_bytes)
        document = parse_document(data, max_bytes=max_bytes)
    except DocumentError as exc:
        report.fatal = f"{type(exc).__name__}: {exc}"
        return report
    report.document_type = document.type.value
    report.version = document.version
    report.entries = len(document.entries)
    report.violations = fragment_violations(document) if fragment else validate(document)
    if with_schema:
        report.schema = schema_errors(data)
    return report


def _print_text(report: Report, strict: bool) -> None:
    if report.fatal is not None:
        typer.echo(f"{report.source}: INVALID: {report.fatal}")
        return
    errors = sum(v.severity is Severity.ERROR for v in report.violations) + len(report.schema)
    warnings = sum(v.severity is Severity.WARNING for v in report.violations)
    verdict = "valid" if report.valid(strict) else "INVALID"
    counts = []
    if errors:
        counts.append(f"{errors} error{'s' * (errors != 1)}")
    if warnings:
        counts.append(f"{warnings} warning{'s' * (warnings != 1)}")
    detail = f" ({', '.join(counts)})" if counts else ""
    typer.echo(
        f"{report.source}: {report.document_type} (ResourceSync {report.version}), "
        f"{report.entries} entries: {verdict}{detail}"
    )
    for violation in report.violations:
        typer.echo(f"  {violation}")
    for message in report.schema:
        typer.echo(f"  error: schema: {message}")


@app.command(cls=PlainCommand)
def validate_documents(
    sources: Annotated[
        list[str],
        typer.Argument(
            metavar="PATH_OR_URL...",
            help="Files, http(s) URLs, or - for standard input.",
            show_default=False,
        ),
    ],
    schema: Annotated[
        bool, typer.Option("--schema", help="Also validate against the official XSDs.")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON report (a list) on standard output.")
    ] = False,
    strict: Annotated[
        bool, typer.Option("--strict", help="Count warnings as failures too.")
    ] = False,
    fragment: Annotated[
        bool,
        typer.Option(
            "--fragment",
            help="Check a Change List fragment as a hub accepts it from a Source "
            "(rs:md from/until not required; at least one change).",
        ),
    ] = False,
    max_bytes: Annotated[
        int,
        typer.Option(
            "--max-bytes",
            metavar="BYTES",
            min=1,
            help="Refuse documents larger than this (default: the Sitemap limit, 50 MB).",
        ),
    ] = ns.MAX_DOCUMENT_BYTES,
) -> None:
    """Print each document's type, version, entry count and every violation.

    Exit 0 when all are valid, 1 when any is invalid, 2 on usage or I/O errors.
    """
    reports: list[Report] = []
    io_failed = False
    for source in sources:
        try:
            data = read_source(source, max_bytes)
        except FetchError as exc:
            typer.echo(f"rs-validate: {exc}", err=True)
            io_failed = True
            continue
        reports.append(
            check(source, data, with_schema=schema, max_bytes=max_bytes, fragment=fragment)
        )
    if as_json:
        typer.echo(json.dumps([r.as_json(strict) for r in reports], indent=2))
    else:
        for report in reports:
            _print_text(report, strict)
    if io_failed:
        raise typer.Exit(2)
    if not all(r.valid(strict) for r in reports):
        raise typer.Exit(1)


def main() -> None:
    """The ``rs-validate`` console script."""
    run(app, "rs-validate")
