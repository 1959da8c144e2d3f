"""The Change Lists a hub serves for a topic, read as a Destination would see them."""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx

from rspush.resourcesync import Document, parse_document


async def served_change_lists(hub_url: str, topic: str) -> list[Document]:
    """The closed lists of ``topic`` (archive order), then its open list; read again when a
    list was closed meanwhile, so no change falls between two reads."""
    async with httpx.AsyncClient(base_url=hub_url, timeout=30) as http:
        while True:
            archive = await http.get(f"/topics/{topic}/changelist-archive.xml")
            assert archive.status_code == 200, archive.text
            docs = []
            for item in parse_document(archive.content).entries:
                reply = await http.get(urlsplit(item.loc).path)
                assert reply.status_code == 200, (item.loc, reply.text)
                docs.append(parse_document(reply.content))
            reply = await http.get(f"/topics/{topic}/changelist.xml")
            assert reply.status_code == 200, reply.text
            docs.append(parse_document(reply.content))
            again = await http.get(f"/topics/{topic}/changelist-archive.xml")
            if again.content == archive.content:
                return docs
