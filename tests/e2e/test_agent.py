"""The agent end to end: a real hub on a real Redis, a loopback origin, the agent in this
event loop — baseline, live push, restart, poll fallback, archive catch-up, rebaseline."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path, PurePosixPath
from typing import Any

import httpx
from redis.asyncio import Redis

from rspush.hub.push.server import PushServer
from rspush.hub.server import RunningHub, bind, running_hub
from rspush.hub.settings import Push
from rspush.resourcesync.w3cdt import parse_w3c_datetime, to_us
from rspush.subscriber.agent import AgentConfig
from rspush.subscriber.api import Subscription
from rspush.subscriber.changes import Channel, Outcome, ResourceChange
from rspush.subscriber.filters import ChangeFilter
from tests.support.agents import converged, mirror_files, running_agent
from tests.support.hubs import HubFactory, make_settings
from tests.support.origin import Announced, Origin, post_fragment, publish, running_origin
from tests.support.waiting import eventually


def config_for(hub: RunningHub, origin: Origin, dest: Path, **options: Any) -> AgentConfig:
    quick = {"poll_interval": 0.1, "backoff_initial": 0.1, "backoff_max": 0.5}
    return AgentConfig(
        source_url=hub.url,
        dest=dest,
        topic="dataset1",
        maps=[(origin.url + "/", "")],
        **(quick | options),
    )


async def test_baseline_then_live_push(
    hub: RunningHub, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    async with running_origin() as origin:
        await publish(
            client,
            "dataset1",
            origin,
            [("/a.txt", "created", b"alpha"), ("/dir/b.txt", "created", b"bravo")],
        )
        dest = tmp_path / "mirror"
        async with running_agent(config_for(hub, origin, dest)) as run:
            await converged(origin, dest)
            # A file is in place a moment before its event: events follow the commit.
            await eventually(lambda: len(run.applied("baseline")) >= 2, "two baseline events")
            assert {e["uri"] for e in run.applied("baseline")} == {
                origin.uri("/a.txt"),
                origin.uri("/dir/b.txt"),
            }
            await eventually(lambda: run.agent.channel == "push", "the push subscription")
            await publish(
                client,
                "dataset1",
                origin,
                [
                    ("/a.txt", "updated", b"alpha 2"),
                    ("/c.txt", "created", b"charlie"),
                    ("/dir/b.txt", "deleted", None),
                ],
            )
            await converged(origin, dest)
            # A file is in place a moment before its event: events follow the commit.
            await eventually(lambda: len(run.applied("push")) >= 3, "three pushed changes")
            pushed = run.applied("push")
            # Different URIs are applied concurrently: compare as a set.
            assert {(e["uri"], e["change"]) for e in pushed} == {
                (origin.uri("/a.txt"), "updated"),
                (origin.uri("/c.txt"), "created"),
                (origin.uri("/dir/b.txt"), "deleted"),
            }
            assert all(e["position"] for e in pushed)
        assert mirror_files(dest) == {"/a.txt": b"alpha 2", "/c.txt": b"charlie"}


def no_change_applied_twice(events: list[dict[str, object]]) -> None:
    keys = [(e["uri"], e["time"], e["change"]) for e in events if e.get("event") == "applied"]
    repeated = sorted({k for k in keys if keys.count(k) > 1})  # type: ignore[type-var]
    assert not repeated, f"applied twice: {repeated}"


def updates(origin: Origin, round_: int, paths: list[str]) -> list[tuple[str, str, bytes | None]]:
    return [
        (p, "updated" if p in origin.resources else "created", f"{p} v{round_}".encode())
        for p in paths
    ]


async def test_restart_resumes_from_the_checkpoint(
    hub: RunningHub, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    paths = [f"/r{i}.txt" for i in range(5)]
    dest = tmp_path / "mirror"
    async with running_origin() as origin:
        await publish(client, "dataset1", origin, updates(origin, 0, paths))
        async with running_agent(config_for(hub, origin, dest)) as first:
            await eventually(lambda: first.agent.channel == "push", "the push subscription")
            for round_ in (1, 2):
                await publish(client, "dataset1", origin, updates(origin, round_, paths))
            await converged(origin, dest)
        # While it is away: more changes, one resource deleted.
        for round_ in (3, 4):
            await publish(client, "dataset1", origin, updates(origin, round_, paths))
        await publish(client, "dataset1", origin, [("/r0.txt", "deleted", None)])
        async with running_agent(config_for(hub, origin, dest)) as second:
            await converged(origin, dest)
            # Every resource's newest change is applied (older ones may be superseded).
            await eventually(
                lambda: {e["uri"] for e in second.applied()} == {origin.uri(p) for p in paths},
                "the changes made while away",
            )
        assert not second.applied("baseline"), "a restart must not baseline again"
        assert {e["channel"] for e in second.applied()} == {"push"}
        no_change_applied_twice(first.events + second.events)


async def test_push_down_polls_then_returns_to_push(
    hub: RunningHub, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    assert hub.push is not None and hub.push_url is not None
    push_port = int(hub.push_url.rsplit(":", 1)[1].strip("/"))
    paths = [f"/p{i}.txt" for i in range(3)]
    dest = tmp_path / "mirror"
    async with running_origin() as origin:
        await publish(client, "dataset1", origin, updates(origin, 0, paths))
        async with running_agent(config_for(hub, origin, dest)) as run:
            await eventually(lambda: run.agent.channel == "push", "the push subscription")
            # The push endpoint goes away; the HTTP documents stay.
            await hub.push.stop()
            await eventually(lambda: run.agent.channel == "poll", "the fallback to polling")
            await publish(client, "dataset1", origin, updates(origin, 1, paths))
            await converged(origin, dest)
            assert len(run.applied("poll")) == 3
            # Push comes back on the same port: the agent returns to it.
            push = PushServer(hub.hub.settings, hub.hub.redis)
            await push.start(bind("127.0.0.1", push_port))
            try:
                await eventually(lambda: run.agent.channel == "push", "the return to push", 20)
                await publish(client, "dataset1", origin, updates(origin, 2, paths))
                await converged(origin, dest)
                await eventually(lambda: len(run.applied("push")) == 3, "3 pushed changes")
            finally:
                await push.stop()
        no_change_applied_twice(run.events)
        assert [e["channel"] for e in run.applied()] == ["baseline"] * 3 + ["poll"] * 3 + [
            "push"
        ] * 3


async def test_trimmed_stream_catches_up_through_the_archive(
    hub_factory: HubFactory, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    paths = [f"/t{i}.txt" for i in range(4)]
    dest = tmp_path / "mirror"
    async with (
        hub_factory(changelist_max_entries=4, retention_s=0) as running,
        httpx.AsyncClient(base_url=running.url, timeout=30) as http,
        running_origin() as origin,
    ):
        await publish(http, "dataset1", origin, updates(origin, 0, paths))
        async with running_agent(config_for(running, origin, dest)) as first:
            await converged(origin, dest)
            await eventually(lambda: first.agent.channel == "push", "the push subscription")
        for round_ in range(1, 4):
            await publish(http, "dataset1", origin, updates(origin, round_, paths))
        meta_key = f"{prefix}:{{dataset1}}:meta"
        # The first agent's resume point: its watermark, or the baseline's ``at`` before any
        # change moved it. Retention must trim a change after it, or the second agent
        # would resume from the stream and never need the archive.
        with contextlib.closing(sqlite3.connect(dest / ".rs-subscribe" / "state.sqlite")) as state:
            (resume_us,) = state.execute(
                "SELECT MAX(MAX(COALESCE(last_time_us, 0)), MAX(COALESCE(baseline_at_us, 0))) "
                "FROM topics"
            ).fetchone()
        redis = Redis.from_url(redis_url)
        try:

            async def trimmed_past_the_checkpoint() -> bool:
                trimmed: Any = await redis.hget(meta_key, "trimmed_through_t")
                return (
                    trimmed is not None
                    and int(trimmed) > resume_us
                    and running.hub.rotator.rotations >= 3
                )

            await eventually(trimmed_past_the_checkpoint, what="rotation and trimming")
        finally:
            await redis.aclose()
        async with running_agent(config_for(running, origin, dest)) as second:
            await converged(origin, dest)
            await eventually(lambda: second.agent.channel == "push", "push after the catch-up")
            await publish(http, "dataset1", origin, updates(origin, 4, paths))
            await converged(origin, dest)
        assert len(second.applied("archive")) >= 4, "the trimmed changes came from the archive"
        assert not second.applied("baseline")
        assert len(second.applied("push")) >= 4
        no_change_applied_twice(first.events + second.events)


async def test_a_new_stream_epoch_beyond_the_archive_rebaselines(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    dest = tmp_path / "mirror"
    async with running_origin() as origin:
        async with (
            running_hub(make_settings(redis_url, prefix, base), sock=sock) as running,
            httpx.AsyncClient(base_url=running.url, timeout=30) as http,
        ):
            await publish(http, "dataset1", origin, updates(origin, 0, ["/old.txt", "/kept.txt"]))
            async with running_agent(config_for(running, origin, dest)) as first:
                await converged(origin, dest)
                await eventually(lambda: first.agent.channel == "push", "the push subscription")
        # The topic's stream is recreated (a new epoch): its history is gone.
        redis = Redis.from_url(redis_url)
        try:
            keys = [k async for k in redis.scan_iter(match=f"{prefix}:*")]
            await redis.delete(*keys)
        finally:
            await redis.aclose()
        origin.delete("/old.txt")
        async with (
            running_hub(
                make_settings(redis_url, prefix, base), sock=bind("127.0.0.1", port)
            ) as running,
            httpx.AsyncClient(base_url=running.url, timeout=30) as http,
        ):
            await publish(http, "dataset1", origin, updates(origin, 1, ["/kept.txt", "/new.txt"]))
            async with running_agent(config_for(running, origin, dest)) as second:
                await converged(origin, dest)
                await eventually(lambda: second.agent.channel == "push", "push after rebaselining")
            assert [e["event"] for e in second.events if e["event"] == "rebaseline"] == [
                "rebaseline"
            ]
            assert mirror_files(dest) == {"/kept.txt": b"/kept.txt v1", "/new.txt": b"/new.txt v1"}


class IndexApplier:
    """An applier other than the file system: keeps the latest bytes of each URI in memory."""

    def __init__(self) -> None:
        self.index: dict[str, bytes | None] = {}

    async def apply(
        self, change: ResourceChange, relative: PurePosixPath, content: Path | None
    ) -> None:
        self.index[change.uri] = None if content is None else content.read_bytes()


async def test_python_api_yields_verified_changes_to_a_custom_applier(
    hub: RunningHub, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    applier = IndexApplier()
    dest = tmp_path / "state-only"
    async with running_origin() as origin:
        await publish(client, "dataset1", origin, [("/x.txt", "created", b"x1")])
        seen: list[Outcome] = []
        async with Subscription(config_for(hub, origin, dest), applier=applier) as outcomes:
            async for outcome in outcomes:
                seen.append(outcome)
                if outcome.change.channel == Channel.BASELINE:
                    await publish(
                        client,
                        "dataset1",
                        origin,
                        [("/x.txt", "updated", b"x2"), ("/y.txt", "created", b"y1")],
                    )
                if len(seen) == 3:
                    break
        assert [(o.event, o.change.channel) for o in seen] == [
            ("applied", Channel.BASELINE),
            ("applied", Channel.PUSH),
            ("applied", Channel.PUSH),
        ]
        assert applier.index == {origin.uri("/x.txt"): b"x2", origin.uri("/y.txt"): b"y1"}
        assert mirror_files(dest) == {}, "the custom applier replaces the file system"


async def post_at(
    http: httpx.AsyncClient, origin: Origin, when: str | None, items: list[tuple[str, bytes]]
) -> None:
    """Update resources on the origin and announce them all at one change time (``None``:
    the hub stamps them with its own clock)."""
    for path, content in items:
        origin.put(path, content)
    entries = [Announced(origin.uri(p), "updated", c, when) for p, c in items]
    reply = await post_fragment(http, "dataset1", entries)
    assert reply.status_code == 202, reply.text


async def test_catch_up_when_trimmed_and_kept_changes_share_a_time(
    hub_factory: HubFactory, redis_url: str, prefix: str, tmp_path: Path
) -> None:
    """The last trimmed change and the first one still in the stream have the same time: a
    time-based resume is refused even after the catch-up; the agent resumes by position."""
    dest = tmp_path / "mirror"
    async with (
        hub_factory(changelist_max_entries=3, retention_s=0) as running,
        httpx.AsyncClient(base_url=running.url, timeout=30) as http,
        running_origin() as origin,
    ):
        await publish(http, "dataset1", origin, [("/s0.txt", "created", b"s0")])
        async with running_agent(config_for(running, origin, dest)) as first:
            await eventually(lambda: first.agent.channel == "push", "the push subscription")
        same = origin.clock.next()
        # s0, s1, s2 fill a list that closes and leaves the stream; s3, at the same time as
        # s1 and s2, comes after that and stays.
        await post_at(http, origin, same, [("/s1.txt", b"one"), ("/s2.txt", b"two")])
        redis = Redis.from_url(redis_url)
        try:

            async def trimmed_at_that_time() -> bool:
                raw: Any = await redis.hget(f"{prefix}:{{dataset1}}:meta", "trimmed_through_t")
                length = await redis.xlen(f"{prefix}:{{dataset1}}:changes")
                trimmed_us = None if raw is None else int(raw)
                return trimmed_us == to_us(parse_w3c_datetime(same)) and length == 0

            await eventually(trimmed_at_that_time, what="a trim up to the shared time")
        finally:
            await redis.aclose()
        await post_at(http, origin, same, [("/s3.txt", b"three")])
        async with running_agent(config_for(running, origin, dest)) as second:
            await converged(origin, dest)
            await eventually(lambda: second.agent.channel == "push", "push after the catch-up")
            await publish(http, "dataset1", origin, [("/s4.txt", "created", b"four")])
            await converged(origin, dest)
        no_change_applied_twice(first.events + second.events)
        assert {e["uri"] for e in second.applied("archive")} >= {
            origin.uri("/s1.txt"),
            origin.uri("/s2.txt"),
        }


async def test_a_baseline_of_an_empty_topic_is_continued_by_its_archive(
    hub_factory: HubFactory, tmp_path: Path
) -> None:
    """Baselined before the topic's first change (the Resource List's ``at`` is the topic's
    start), away while its changes were archived and trimmed: the archive must reach back to
    that ``at`` — catch-up, not a rebaseline."""
    dest = tmp_path / "mirror"
    async with (
        hub_factory(changelist_max_entries=2, retention_s=0) as running,
        httpx.AsyncClient(base_url=running.url, timeout=30) as http,
        running_origin() as origin,
    ):
        async with running_agent(config_for(running, origin, dest)) as first:
            await eventually(lambda: first.agent.channel == "push", "the push subscription")
        assert mirror_files(dest) == {}
        for i in range(4):
            await post_at(http, origin, None, [(f"/late{i}.txt", f"late {i}".encode())])

        async def all_archived() -> bool:
            reply = await http.get("/topics/dataset1/changelist-archive.xml")
            return reply.text.count("<url>") == 2

        await eventually(all_archived, what="two closed lists")
        async with running_agent(config_for(running, origin, dest)) as second:
            await converged(origin, dest)
            await eventually(lambda: second.agent.channel == "push", "push after the catch-up")
        assert not [e for e in second.events if e["event"] == "rebaseline"]
        assert not second.applied("baseline")


async def test_filters_choose_a_collection_and_its_deletions_still_apply(
    hub: RunningHub, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    theses = "http://example.org/collections/theses"
    in_set = f'<rs:ln rel="collection" href="{theses}"/>'
    dest = tmp_path / "mirror"
    async with running_origin() as origin:
        theses_in = [("/t1.pdf", "created", b"thesis 1"), ("/t2.pdf", "created", b"thesis 2")]
        await publish(client, "dataset1", origin, theses_in, links=in_set)
        await publish(client, "dataset1", origin, [("/a1.pdf", "created", b"article 1")])
        await publish(
            client, "dataset1", origin, [("/skip/t3.pdf", "created", b"thesis 3")], links=in_set
        )
        config = config_for(
            hub,
            origin,
            dest,
            change_filter=ChangeFilter.build(collection=theses, exclude=["/skip/"]),
        )
        async with running_agent(config) as run:
            await eventually(lambda: run.agent.channel == "push", "the push subscription")
            assert mirror_files(dest) == {"/t1.pdf": b"thesis 1", "/t2.pdf": b"thesis 2"}
            # A deletion entry carries no links: it still removes what the mirror holds.
            changes = [("/t1.pdf", "deleted", None), ("/a1.pdf", "updated", b"article 1 v2")]
            await publish(client, "dataset1", origin, changes)
            await publish(
                client, "dataset1", origin, [("/t4.pdf", "created", b"thesis 4")], links=in_set
            )
            await eventually(
                lambda: mirror_files(dest) == {"/t2.pdf": b"thesis 2", "/t4.pdf": b"thesis 4"},
                "the collection's changes",
            )
        assert origin.requests["/a1.pdf"] == 0, "a resource outside the filter was fetched"


async def test_pull_only_polling_follows_the_lists_across_rotations(
    redis_url: str, prefix: str, tmp_path: Path
) -> None:
    """A hub without a push channel is a plain pull-only Source: the agent polls its open
    Change List; when lists close between two polls (the open list's ``from`` moves past the
    agent's last change), it reads the closed ones from the archive — nothing is missed."""
    sock = bind("127.0.0.1", 0)
    settings = make_settings(
        redis_url, prefix, f"http://127.0.0.1:{sock.getsockname()[1]}", changelist_max_entries=3
    ).model_copy(update={"push": Push(enabled=False)})
    dest = tmp_path / "mirror"
    paths = [f"/q{i}.txt" for i in range(4)]
    async with (
        running_hub(settings, sock=sock) as running,
        httpx.AsyncClient(base_url=running.url, timeout=30) as http,
        running_origin() as origin,
    ):
        assert running.push_url is None
        await publish(http, "dataset1", origin, updates(origin, 0, paths[:1]))
        config = config_for(running, origin, dest, poll_interval=0.5)
        async with running_agent(config) as run:
            await eventually(lambda: run.agent.channel == "poll", "polling")
            assert run.agent.endpoints is not None and run.agent.endpoints.push_url is None
            for round_ in range(1, 4):  # 12 changes: lists of 3 close in between polls
                await publish(http, "dataset1", origin, updates(origin, round_, paths))
            await converged(origin, dest)
            assert running.hub.rotator.rotations >= 3
        assert {e["channel"] for e in run.applied()} == {"baseline", "poll"}
        assert not [e for e in run.events if e["event"] == "rebaseline"]
        no_change_applied_twice(run.events)


async def test_keep_deleted_keeps_the_file_and_records_the_deletion(
    hub: RunningHub, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    dest = tmp_path / "mirror"
    async with running_origin() as origin:
        await publish(client, "dataset1", origin, [("/k.txt", "created", b"keep me")])
        async with running_agent(config_for(hub, origin, dest, keep_deleted=True)) as run:
            await eventually(lambda: run.agent.channel == "push", "the push subscription")
            await publish(client, "dataset1", origin, [("/k.txt", "deleted", None)])
            await eventually(lambda: len(run.applied("push")) == 1, "the deletion")
            assert run.agent.mirror is not None
            stored = run.agent.mirror.checkpoint.resource(origin.uri("/k.txt"))
            assert stored is not None and stored.change == "deleted"
        assert mirror_files(dest) == {"/k.txt": b"keep me"}


async def test_failed_changes_are_retried_until_they_apply(
    hub: RunningHub, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    """The origin serves wrong bytes for a while: the change fails (all its tries), is
    recorded, and a later retry — not a newer change — brings the mirror in step."""
    dest = tmp_path / "mirror"
    async with running_origin() as origin:
        await publish(client, "dataset1", origin, [("/r.txt", "created", b"first")])
        config = config_for(hub, origin, dest, retry_interval=0.2, tries=1)
        async with running_agent(config) as run:
            await eventually(lambda: run.agent.channel == "push", "the push subscription")
            origin.corrupt("/r.txt", times=2)  # the push attempt and the first retry
            await publish(client, "dataset1", origin, [("/r.txt", "updated", b"second")])
            await eventually(
                lambda: any(e["event"] == "failed" for e in run.events), "the failed change"
            )
            await eventually(lambda: len(run.applied("retry")) == 1, "the retried change", 20)
            assert mirror_files(dest) == {"/r.txt": b"second"}
            assert run.agent.mirror is not None
            assert run.agent.mirror.checkpoint.failures() == []
        assert origin.requests["/r.txt"] == 4  # baseline, push, retry (bad), retry (good)
