"""The OAI-PMH bridge against a real OAI-PMH 2.0 repository process (the ``oaipmh`` package's
server, tests/support/oai_repository.py): the topic's state ends equal to the repository after
adds, changes and deletes, with sets, two formats, small pages (resumption tokens), second and
day granularity, persistent and absent deletion records; no change is appended twice."""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

from rspush.hub.bridges.oai_plan import Checkpoint, record_uri, set_uri
from rspush.hub.server import RunningHub, bind, running_hub
from rspush.hub.settings import BridgeConfig, Settings, Topic
from rspush.protocol import ZERO
from tests.support.oai_repository import MODS_NS, OAI_DC_NS, OaiRepository, running_repository
from tests.support.waiting import eventually

FORMATS = ("mods", "oai_dc")


@asynccontextmanager
async def bridged_hub(
    redis_url: str, prefix: str, repo: OaiRepository, **bridge: Any
) -> AsyncIterator[RunningHub]:
    sock = bind("127.0.0.1", 0)
    settings = Settings(
        hub={"base_url": f"http://127.0.0.1:{sock.getsockname()[1]}"},
        topics=[Topic(name="repo")],
        bridges=[
            BridgeConfig(topic="repo", kind="oai-pmh", url=repo.base_url, interval_s=0.2, **bridge)
        ],
        redis_url=redis_url,
        redis_prefix=prefix,
        push={"port": 0},
        rotation_interval_s=0.05,
        lease_ttl_s=1.0,
    )
    async with running_hub(settings, sock=sock) as running:
        yield running


def expected(repo: OaiRepository) -> set[str]:
    return {record_uri(repo.base_url, i, p) for i in repo.live() for p in FORMATS}


async def state(hub: RunningHub) -> dict[str, str]:
    return (await hub.hub.store.state("repo"))[1]


async def changes(hub: RunningHub) -> list[tuple[str, str, str]]:
    rows = await hub.hub.store.entries_after("repo", ZERO)
    return [(r.loc, r.change, r.xml) for r in rows]


async def in_step(hub: RunningHub, repo: OaiRepository) -> None:
    async def same() -> bool:
        return set(await state(hub)) == expected(repo)

    await eventually(same, "the topic's state to equal the repository", 30)


async def next_tick(repo: OaiRepository) -> None:
    """Wait for the repository's next datestamp, so the changes that follow have a later
    one than the records' first."""
    first = repo.datestamp()
    await eventually(lambda: repo.datestamp() != first, "the next second", 5)


async def test_seconds_granularity_with_sets_and_deletion_records(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    with running_repository(tmp_path, granularity="seconds", batch=7) as repo:
        repo.add_sets("math", "phys")
        repo.put_many(
            [
                (f"oai:t:{i:03}", f"title {i}", ("math",) if i % 3 else ("math", "phys"))
                for i in range(20)
            ]
        )
        async with bridged_hub(redis_url, prefix, repo) as hub:
            await in_step(hub, repo)
            entry = (await state(hub))[record_uri(repo.base_url, "oai:t:000", "mods")]
            assert f'rel="describedby" href="{MODS_NS}"' in entry
            assert set_uri(repo.base_url, "phys", "mods").replace("&", "&amp;") in entry
            await next_tick(repo)
            for i in (1, 2, 3):
                repo.put(f"oai:t:{i:03}", f"changed {i}", ("math",))
            repo.delete("oai:t:004", keep_record=True)
            repo.delete("oai:t:005", keep_record=True)
            repo.put("oai:t:100", "new", ("phys",))
            await in_step(hub, repo)

            async def all_appended() -> bool:
                kinds = collections.Counter(c for _, c, _ in await changes(hub))
                return kinds == {"created": 42, "updated": 6, "deleted": 4}

            await eventually(all_appended, "every change appended once", 15)
            rows = await changes(hub)
            assert len({(loc, xml) for loc, _, xml in rows}) == len(rows)

            async with httpx.AsyncClient(base_url=hub.url) as client:
                status = (
                    await client.get("/status", headers={"Accept": "application/json"})
                ).json()
                bridge = status["topics"][0]["bridge"]
                assert bridge["kind"] == "oai-pmh"
                assert bridge["changes"] == 52
                assert bridge["last_success"] is not None
                assert bridge["lag_s"] is not None
                metrics = (await client.get("/metrics")).text
                assert 'rspush_bridge_changes_total{topic="repo"} 52.0' in metrics


async def test_day_granularity_without_deletion_records(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    with running_repository(tmp_path, granularity="day", batch=4, deleted="no") as repo:
        repo.put_many([(f"oai:d:{i}", f"title {i}", ()) for i in range(10)])
        async with bridged_hub(redis_url, prefix, repo, full_list_interval_s=0.3) as hub:
            await in_step(hub, repo)
            # Two edits on one day: one datestamp, two different records' metadata.
            repo.put("oai:d:1", "first edit")

            async def edited(times: int) -> bool:
                rows = await changes(hub)
                return (
                    sum(1 for loc, c, _ in rows if "oai%3Ad%3A1&" in loc and c == "updated")
                    == times
                )

            await eventually(lambda: edited(2), "the first edit bridged", 15)
            repo.put("oai:d:1", "second edit")
            await eventually(lambda: edited(4), "the second edit of the day bridged", 15)
            # Records that vanish without a trace: found by the full listing.
            repo.delete("oai:d:2", keep_record=False)
            repo.delete("oai:d:3", keep_record=False)
            await in_step(hub, repo)
            kinds = collections.Counter(c for _, c, _ in await changes(hub))
            assert kinds == {"created": 20, "updated": 4, "deleted": 4}


async def test_a_lost_resumption_token_lists_the_window_again(
    redis_url: str, prefix: str, tmp_path: Path, redis: Any
) -> None:
    with running_repository(tmp_path, granularity="seconds", batch=3) as repo:
        repo.put_many([(f"oai:b:{i}", f"title {i}", ()) for i in range(9)])
        # A checkpoint whose token the repository no longer knows (expired, restarted).
        lost = Checkpoint(token="expired-token", formats={"mods": MODS_NS, "oai_dc": OAI_DC_NS})
        await redis.set(f"{prefix}:{{repo}}:bridge:checkpoint", lost.dumps())
        async with bridged_hub(redis_url, prefix, repo) as hub:
            await in_step(hub, repo)
            status = (await hub.hub.store.bridge_state("repo")).status
            assert "resumptionToken" in status["last_note"]
