"""The ResourceSync bridge end to end: a pull-only Source written by ``resync`` (its Change
Lists rotating between polls) on a static loopback server, a hub whose ``[[bridges]]``
follows it, and ``rs-subscribe`` mirroring the bridged topic from the hub.

- the mirror ends equal to the Source's files (baseline, then changes pushed by the hub);
- the hub (its own process) killed with SIGKILL at random moments of the bridge's catch-up
  of a few thousand changes loses none and duplicates none in its Change Lists.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from rspush.hub.embedded import EmbeddedRedis
from rspush.hub.server import bind, running_hub
from rspush.hub.settings import BridgeConfig, Topic
from rspush.resourcesync import Document, parse_document
from tests.support.agents import mirror_files
from tests.support.cli import running
from tests.support.etag_origin import running_source
from tests.support.hubs import make_settings
from tests.support.processes import HubProcess, write_config
from tests.support.resync_rotating import CAPABILITY_LIST, RotatingSource
from tests.support.waiting import eventually

TOPIC = "bridged"
RESOURCES = {f"/r/{n}.txt": f"resource {n}".encode() for n in range(6)}


@pytest.mark.parametrize("spec_version", ["1.1", "1.0"])
async def test_the_bridged_topic_mirrors_the_source(
    redis_url: str, prefix: str, tmp_path: Path, spec_version: str
) -> None:
    async with running_source() as origin:
        source = RotatingSource(origin, RESOURCES, spec_version=spec_version, index=True)
        source.change("/r/0.txt", "updated", b"zero, again")
        source.rotate()
        settings = make_settings(redis_url, prefix, "http://127.0.0.1:0")
        sock = bind("127.0.0.1", 0)
        base = f"http://127.0.0.1:{sock.getsockname()[1]}"
        settings = settings.model_copy(
            update={
                "hub": settings.hub.model_copy(update={"base_url": base}),
                "topics": [*settings.topics, Topic(name=TOPIC)],
                "bridges": [
                    BridgeConfig(
                        topic=TOPIC,
                        kind="resourcesync",
                        url=source.uri(CAPABILITY_LIST),
                        interval_s=0.2,
                    )
                ],
            }
        )
        dest = tmp_path / "mirror"
        async with running_hub(settings, sock=sock) as hub:
            # The seed is state without change events: a Destination that baselined the
            # still empty topic before it would never hear of the seeded resources.
            await eventually(lambda: seeded(hub.url), "the bridge's seed", 30)
            args = [hub.url, "--dest", str(dest), "--topic", TOPIC, "--map", f"{origin.url}/="]
            async with running(tmp_path, *args, "--poll-interval", "0.1") as agent:

                def same() -> bool:
                    return mirror_files(dest) == origin.resources

                await agent.until(same, "the mirror to equal the Source")
                await agent.subscribed()
                # Changes, a list closed between two polls, a deletion, a new resource.
                source.change("/r/1.txt", "updated", b"one, again")
                source.change("/new.txt", "created", b"new")
                source.rotate()
                source.change("/r/2.txt", "deleted")
                source.change("/new.txt", "updated", b"newer")
                await agent.until(same, "the mirror to follow the Source's changes")
    assert mirror_files(dest)["/new.txt"] == b"newer"
    assert "/r/2.txt" not in mirror_files(dest)


async def seeded(hub_url: str) -> bool:
    async with httpx.AsyncClient(timeout=10) as http:
        reply = await http.get(f"{hub_url}/topics/{TOPIC}/resourcelist.xml")
        return reply.is_success and len(parse_document(reply.content).entries) >= len(RESOURCES)


# --- kill -9 during the catch-up ------------------------------------------------------------

CATCH_UP_CHANGES = 3000
LIST_ENTRIES = 250
KILLS = 4


def bridge_section(url: str) -> str:
    # Fifty changes per step: the catch-up is many commits long, so the kills land between
    # them whatever the speed of the machine.
    return (
        f'\n[[topics]]\nname = "{TOPIC}"\n\n[[bridges]]\ntopic = "{TOPIC}"\n'
        f'kind = "resourcesync"\nurl = "{url}"\ninterval_s = 0.2\nmax_changes_per_step = 50\n'
    )


async def hub_changes(hub_url: str) -> list[tuple[str, str, str]]:
    """(URI, change, time) of every change in the topic's published Change Lists: the
    archive's closed lists, then the open list. (The documents name the hub by its
    configured base URL; they are read from where it listens.)"""
    async with httpx.AsyncClient(timeout=30) as http:

        async def get(url: str) -> Document:
            reply = await http.get(hub_url + urlsplit(url).path)
            reply.raise_for_status()
            return parse_document(reply.content)

        capabilities = await get(f"{hub_url}/topics/{TOPIC}/capabilitylist.xml")
        urls = {e.md.capability: e.loc for e in capabilities.entries if e.md and e.md.capability}
        lists: list[str] = []
        if "changelist-archive" in urls:
            archive = await get(urls["changelist-archive"])
            parts = [archive]
            if archive.is_index:
                parts = [await get(e.loc) for e in archive.entries]
            lists += [e.loc for part in parts for e in part.entries]
        lists.append(urls["changelist"])
        found: list[tuple[str, str, str]] = []
        for url in dict.fromkeys(lists):
            document = await get(url)
            for entry in document.entries:
                md = entry.md
                assert md is not None and md.change is not None and md.datetime is not None
                found.append((entry.loc, md.change, md.datetime.isoformat()))
        return found


@pytest.mark.timeout(300)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux process control")
async def test_a_hub_killed_during_the_catch_up_loses_and_duplicates_nothing(
    tmp_path: Path,
) -> None:
    seed = int(os.environ.get("RSPUSH_BRIDGE_KILL_SEED", random.randrange(1 << 30)))
    print(f"RSPUSH_BRIDGE_KILL_SEED={seed}")
    rng = random.Random(seed)
    redis = EmbeddedRedis(tmp_path / "redis", appendfsync="always")
    redis.spawn()
    await asyncio.to_thread(redis.wait_ready)
    hub: HubProcess | None = None
    try:
        async with running_source() as origin:
            source = RotatingSource(origin, RESOURCES)
            for n in range(CATCH_UP_CHANGES):
                # Every change a new version, so the hub drops none as a no-op.
                source.change(f"/c/{n % 500}.txt", "updated", f"v{n}".encode(), publish=False)
                if n % LIST_ENTRIES == LIST_ENTRIES - 1:
                    source.rotate(publish=False)
            source.publish()
            expected = source.log
            config = write_config(tmp_path / "hub.toml", redis_url=redis.url, max_entries=700)
            with config.open("a", encoding="utf-8") as out:
                out.write(bridge_section(source.uri(CAPABILITY_LIST)))
            # One process: SIGKILL then ends the bridge mid-step (with workers, the parent's
            # death would stop them gracefully instead).
            hub = HubProcess(tmp_path / "hub.log", "--config", config, "--workers", "1")
            kills = 0
            hub.start()
            url, _ = await asyncio.to_thread(hub.wait_serving)
            for _ in range(KILLS):
                # A random moment of the catch-up: SIGKILL (nothing of the shutdown runs).
                await asyncio.sleep(rng.uniform(0.05, 0.4))
                if len(await hub_changes(url)) >= len(expected):
                    break  # caught up already: later kills would not be during the catch-up
                await asyncio.to_thread(hub.kill)
                kills += 1
                hub.start()
                url, _ = await asyncio.to_thread(hub.wait_serving)

            async def caught_up() -> bool:
                return len(await hub_changes(url)) >= len(expected)

            await eventually(caught_up, "the bridge to catch up", 120)
            published = await hub_changes(url)
    finally:
        if hub is not None:
            await asyncio.to_thread(hub.stop)
        await asyncio.to_thread(redis.stop)
    assert kills >= 1, f"seed {seed}: the catch-up ended before the first kill"
    assert [(uri, change) for uri, change, _ in published] == expected, (
        f"seed {seed}: {len(published)} published for {len(expected)} remote changes"
    )
