"""``POST /topics/T/baseline`` seeds only a topic without history: on a topic with state or
changes it is ``409 topic-has-history`` and writes nothing, so push and Change List
followers never silently diverge from the hub's Resource List (docs/hub.md). The receipt's
``at`` is a W3C datetime."""

from __future__ import annotations

import hashlib
from pathlib import Path

import httpx

from rspush.hub.server import RunningHub
from rspush.resourcesync import parse_document
from tests.e2e.test_agent import config_for
from tests.support.agents import converged, mirror_files, running_agent
from tests.support.fragments import auth
from tests.support.origin import Origin, publish, running_origin
from tests.support.waiting import eventually

NS = (
    'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
    'xmlns:rs="http://www.openarchives.org/rs/terms/"'
)


def resource_list(origin: Origin, at: str, paths: list[str]) -> bytes:
    urls = "".join(
        f"<url><loc>{origin.uri(p)}</loc><lastmod>{at}</lastmod>"
        f'<rs:md length="{len(origin.resources[p])}" '
        f'hash="md5:{hashlib.md5(origin.resources[p]).hexdigest()}"/></url>'
        for p in paths
    )
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><urlset {NS}>'
        f'<rs:md capability="resourcelist" at="{at}"/>{urls}</urlset>'
    ).encode()


async def hub_resources(client: httpx.AsyncClient) -> set[str]:
    reply = await client.get("/topics/dataset1/resourcelist.xml")
    assert reply.status_code == 200, reply.text
    return {e.loc for e in parse_document(reply.content).entries}


async def test_a_second_baseline_is_refused_and_the_mirror_never_diverges(
    hub: RunningHub, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    async with running_origin() as origin:
        paths = [f"/r{n}.txt" for n in range(10)]
        for path in paths:
            origin.put(path, path.encode() * 3)
        at = origin.clock.next()
        reply = await client.post(
            "/topics/dataset1/baseline", content=resource_list(origin, at, paths), headers=auth()
        )
        assert reply.status_code == 202, reply.text
        assert reply.json()["seeded"] == 10
        assert reply.json()["at"] == at  # a W3C datetime, not microseconds

        dest = tmp_path / "mirror"
        async with running_agent(config_for(hub, origin, dest)) as run:
            await converged(origin, dest)
            await eventually(lambda: run.agent.channel == "push", "the push subscription")
            await publish(client, "dataset1", origin, [("/r0.txt", "updated", b"zero 2")])
            await converged(origin, dest)

            # The Source means to drop nine resources and posts a baseline of what is left.
            later = origin.clock.next()
            reply = await client.post(
                "/topics/dataset1/baseline",
                content=resource_list(origin, later, ["/r0.txt"]),
                headers=auth(),
            )
            assert reply.status_code == 409, reply.text
            assert reply.json()["error"] == "topic-has-history"
            assert "changes" in reply.json()["message"]
            # Nothing written: the hub's state is still what its followers hold.
            assert await hub_resources(client) == {origin.uri(p) for p in paths}
            assert len(mirror_files(dest)) == 10

            # It publishes the differences as changes instead; every follower gets them.
            await publish(client, "dataset1", origin, [(p, "deleted", None) for p in paths[1:]])
            await converged(origin, dest)
            assert await hub_resources(client) == {origin.uri("/r0.txt")}
            assert mirror_files(dest) == {"/r0.txt": b"zero 2"}
            assert not run.task.done()
