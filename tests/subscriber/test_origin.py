"""The loopback origin the subscriber tests serve resources from: it serves, counts GETs,
corrupts on demand and stops."""

from __future__ import annotations

import httpx
import pytest

from tests.support.origin import running_origin


async def test_origin_serves_counts_corrupts_and_stops() -> None:
    async with running_origin() as served, httpx.AsyncClient(base_url=served.url) as http:
        served.put("/a b.txt", b"alpha")
        served.put_document("/doc.xml", b"<urlset/>")
        assert served.uri("a b.txt") == f"{served.url}/a%20b.txt"
        reply = await http.get(served.uri("/a b.txt"))
        assert (reply.status_code, reply.content) == (200, b"alpha")
        assert (await http.get("/doc.xml")).headers["content-type"] == "application/xml"
        assert served.resources == {"/a b.txt": b"alpha"}  # documents are not resources

        served.corrupt("/a b.txt", times=2)
        wrong = [(await http.get("/a%20b.txt")).content for _ in range(3)]
        assert wrong[0] == wrong[1] != b"alpha"
        assert len(wrong[0]) == len(b"alpha")
        assert wrong[2] == b"alpha"

        served.delete("/a b.txt")
        assert (await http.get("/a%20b.txt")).status_code == 404
        assert (await http.head("/doc.xml")).status_code == 200
        assert served.requests == {"/a b.txt": 5, "/doc.xml": 1}  # GETs only
    with pytest.raises(httpx.ConnectError):
        async with httpx.AsyncClient() as http:
            await http.get(served.uri("/doc.xml"))
