"""Builders shared by the hub's pure-logic tests: Change List fragments parsed as the hub
parses them, planned at a fixed ``now``, and the rejection an ingest raises."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from rspush.hub.app import HTTP_STATUS
from rspush.hub.errors import IngestError
from rspush.hub.ingest import (
    IngestPlan,
    parse_fragment,
    plan_changes,
)
from rspush.resourcesync import Document

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
TOLERANCE = timedelta(seconds=300)
RS = (
    'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
    'xmlns:rs="http://www.openarchives.org/rs/terms/"'
)


def fragment(urls: str, *, md: str = 'capability="changelist"', root: str = "urlset") -> Document:
    body = f'<?xml version="1.0" encoding="UTF-8"?><{root} {RS}><rs:md {md}/>{urls}</{root}>'
    return parse_fragment(body.encode(), max_bytes=1_000_000)


def url(loc: str, change: str | None = "updated", when: str | None = None, extra: str = "") -> str:
    attrs = "".join(
        f' {name}="{value}"'
        for name, value in (("change", change), ("datetime", when))
        if value is not None
    )
    return f"<url><loc>{loc}</loc><rs:md{attrs}{extra}/></url>"


def plan(document: Document, *, now: datetime = NOW, max_entries: int = 100) -> IngestPlan:
    return plan_changes(document, now=now, max_entries=max_entries, future_tolerance=TOLERANCE)


def rejected(excinfo: pytest.ExceptionInfo[IngestError]) -> tuple[int, str, str]:
    return HTTP_STATUS[excinfo.value.code], excinfo.value.code, excinfo.value.message
