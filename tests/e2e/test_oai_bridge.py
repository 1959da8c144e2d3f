"""An OAI-PMH repository made push-capable with no change at the repository: a real
repository process (tests/support/oai_repository.py), ``rs-hub serve`` with an OAI-PMH bridge
in its own process, and ``rs-subscribe`` mirroring the bridged topic; and the bridge's
catch-up of a few thousand records under ``kill -9`` of the hub."""

from __future__ import annotations

import asyncio
import collections
import random
from pathlib import Path

import httpx
import pytest
from lxml import etree
from redis.asyncio import Redis

from rspush.resourcesync import parse_document
from tests.support.agents import mirror_files
from tests.support.cli import running
from tests.support.oai_repository import OaiRepository, running_repository
from tests.support.processes import HubProcess
from tests.support.waiting import eventually

FORMATS = ("mods", "oai_dc")
OAI = "{http://www.openarchives.org/OAI/2.0/}"
TITLE = {
    "mods": "{http://www.loc.gov/mods/v3}title",
    "oai_dc": "{http://purl.org/dc/elements/1.1/}title",
}

CONFIG = """
host = "127.0.0.1"
port = 0
redis_url = "{redis_url}"
redis_prefix = "{prefix}"
rotation_interval_s = 0.2
lease_ttl_s = 1.0

[push]
port = 0

[[topics]]
name = "repo"

[[bridges]]
topic = "repo"
kind = "oai-pmh"
url = "{url}"
interval_s = 0.2
"""


def start_hub(tmp: Path, redis_url: str, prefix: str, repo: OaiRepository) -> HubProcess:
    config = tmp / "hub.toml"
    config.write_text(CONFIG.format(redis_url=redis_url, prefix=prefix, url=repo.base_url))
    # One process: a SIGKILL then ends the bridge mid-step (with workers, the parent's death
    # would stop them gracefully instead).
    return HubProcess(tmp / "hub.log", "--config", config, "--workers", "1").start()


def mirrored(dest: Path) -> dict[tuple[str, str], str]:
    """(identifier, metadataPrefix) -> title of every GetRecord response in the mirror."""
    found = {}
    for content in mirror_files(dest).values():
        root = etree.fromstring(content)
        request = root.find(f"{OAI}request")
        assert request is not None
        prefix = request.get("metadataPrefix", "")
        title = root.find(f".//{TITLE[prefix]}")
        found[(request.get("identifier", ""), prefix)] = "" if title is None else title.text or ""
    return found


def live(repo: OaiRepository) -> dict[tuple[str, str], str]:
    return {(i, p): t for i, t in repo.live().items() for p in FORMATS}


async def test_rs_subscribe_mirrors_the_repository(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    with running_repository(tmp_path / "repo", granularity="seconds", batch=5) as repo:
        repo.add_sets("a", "b")
        repo.put_many(
            [(f"oai:e:{i:02}", f"first {i}", ("a",) if i % 2 else ("b",)) for i in range(12)]
        )
        hub = start_hub(tmp_path, redis_url, prefix, repo)
        try:
            url, _ = hub.wait_serving()
            origin = repo.base_url.removesuffix("oai")
            dest = tmp_path / "mirror"
            args = [
                url,
                "--dest",
                str(dest),
                "--topic",
                "repo",
                "--map",
                f"{origin}=",
                "--poll-interval",
                "0.1",
            ]
            async with running(tmp_path, *args) as agent:
                await agent.until(lambda: mirrored(dest) == live(repo), "the first mirror", 60)
                first = repo.datestamp()
                await eventually(lambda: repo.datestamp() != first, "the next second", 5)
                repo.put("oai:e:01", "changed", ("a", "b"))
                repo.put("oai:e:20", "added", ("a",))
                repo.delete("oai:e:02", keep_record=True)
                await agent.until(lambda: mirrored(dest) == live(repo), "the mirror to follow", 60)
        finally:
            hub.stop()


@pytest.mark.timeout(300)
async def test_kill_9_during_catch_up_loses_and_duplicates_nothing(
    redis_url: str, prefix: str, tmp_path: Path, redis: Redis
) -> None:
    records = 2500
    rng = random.Random()
    with running_repository(tmp_path / "repo", granularity="seconds", batch=50) as repo:
        repo.put_many([(f"oai:k:{i:05}", f"t{i}", ()) for i in range(records)])
        hub = start_hub(tmp_path, redis_url, prefix, repo)
        at_kills: list[int] = []
        try:
            url, _ = hub.wait_serving()
            for _ in range(4):
                await asyncio.sleep(rng.uniform(0.3, 2.0))  # a random moment of the catch-up
                hub.kill()
                at_kills.append(await redis.xlen(f"{prefix}:{{repo}}:changes"))
                hub.start()
                url, _ = hub.wait_serving()

            async def caught_up() -> bool:
                async with httpx.AsyncClient() as client:
                    r = await client.get(f"{url}/topics/repo/changelist.xml")
                return r.status_code == 200 and r.text.count("<url>") >= records * 2

            await eventually(caught_up, "the bridge to catch up", 120)
            async with httpx.AsyncClient() as client:
                body = (await client.get(f"{url}/topics/repo/changelist.xml")).content
            document = parse_document(body)
            counts = collections.Counter((e.loc, e.change) for e in document.entries)
            assert len(counts) == records * 2, "a record is missing"
            assert set(counts.values()) == {1}, "a change was appended twice"
            assert {change for _, change in counts} == {"created"}
            assert "rspush_bridge" not in hub.log  # no internal failure logged
        finally:
            hub.stop()
        # At least one kill landed in the middle of the catch-up.
        assert any(0 < n < records * 2 for n in at_kills), at_kills
