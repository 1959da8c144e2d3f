"""Posting changes to a real hub over HTTP, reading the materialised documents back."""

from __future__ import annotations

import httpx

from rspush.hub.server import RunningHub
from rspush.resourcesync import DocumentType, parse_document, validate
from rspush.resourcesync.schema import schema_errors
from tests.support.fragments import auth, change_fragment


async def test_post_then_read_every_document(hub: RunningHub, client: httpx.AsyncClient) -> None:
    body = change_fragment(
        ("http://example.com/a", "created", "2026-01-01T10:00:00Z"),
        ("http://example.com/b", "created", "2026-01-01T10:01:00Z"),
        ("http://example.com/a", "updated", "2026-01-01T10:02:00Z"),
        ("http://example.com/b", "deleted", "2026-01-01T10:03:00Z"),
    )
    reply = await client.post("/topics/dataset1/changes", content=body, headers=auth())
    assert reply.status_code == 202, reply.text
    receipt = reply.json()
    assert receipt["accepted"] == 4
    assert receipt["first"] < receipt["last"] or receipt["first"] != receipt["last"]

    change_list = await client.get("/topics/dataset1/changelist.xml")
    assert change_list.status_code == 200
    assert change_list.headers["content-type"] == "application/xml"
    assert 'capabilitylist.xml>; rel="resourcesync"' in change_list.headers["link"]
    assert 'rel="urn:rspush:websocket"' in change_list.headers["link"]
    doc = parse_document(change_list.content)
    assert doc.type is DocumentType.CHANGE_LIST
    assert doc.md.until is None
    assert [(e.loc, e.change) for e in doc.entries] == [
        ("http://example.com/a", "created"),
        ("http://example.com/b", "created"),
        ("http://example.com/a", "updated"),
        ("http://example.com/b", "deleted"),
    ]

    resource_list = parse_document((await client.get("/topics/dataset1/resourcelist.xml")).content)
    assert [e.loc for e in resource_list.entries] == ["http://example.com/a"]
    assert resource_list.md.at is not None

    for path in (
        "/.well-known/resourcesync",
        "/topics/dataset1/capabilitylist.xml",
        "/topics/dataset1/changelist.xml",
        "/topics/dataset1/changelist-index.xml",
        "/topics/dataset1/changelist-archive.xml",
        "/topics/dataset1/resourcelist.xml",
    ):
        reply = await client.get(path)
        assert reply.status_code == 200, path
        document = parse_document(reply.content)
        assert validate(document) == [], path
        assert schema_errors(reply.content) == [], path


async def test_conditional_get(client: httpx.AsyncClient) -> None:
    body = change_fragment(("http://example.com/a", "created", "2026-01-01T10:00:00Z"))
    assert (await client.post("/topics/dataset1/changes", content=body, headers=auth())).is_success
    first = await client.get("/topics/dataset1/changelist.xml")
    etag = first.headers["etag"]
    again = await client.get("/topics/dataset1/changelist.xml", headers={"If-None-Match": etag})
    assert again.status_code == 304
    body = change_fragment(("http://example.com/b", "created", "2026-01-01T10:00:01Z"))
    assert (await client.post("/topics/dataset1/changes", content=body, headers=auth())).is_success
    changed = await client.get("/topics/dataset1/changelist.xml", headers={"If-None-Match": etag})
    assert changed.status_code == 200
    assert changed.headers["etag"] != etag
