"""Framework events (Framework Notification 1.0.1 §2-§3) on a real hub and a real Redis:
rotations announced exactly once, the Resource List throttled, Capability Lists and the
Source Description announced when the configuration changes them, the channel advertised
(§5) and its topic URI answering (§4.1)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

import httpx
from redis.asyncio import Redis

from rspush.hub.framework import FRAMEWORK, rotation_announcement
from rspush.hub.materialise import Urls
from rspush.hub.server import RunningHub, bind, running_hub
from rspush.hub.settings import Push, Settings, Topic
from rspush.hub.store import ClosedList, FrameworkEvent, TopicStore
from rspush.protocol import ZERO
from rspush.resourcesync import (
    Capability,
    Change,
    FrameworkChange,
    framework_changes,
    parse_document,
    validate,
)
from rspush.resourcesync.schema import schema_errors
from rspush.resourcesync.w3cdt import to_us
from tests.support.fragments import Times, auth, change_fragment
from tests.support.hubs import HubFactory, make_settings
from tests.support.waiting import eventually

TOPIC = "dataset1"


async def events(store: TopicStore, topic: str = TOPIC) -> list[FrameworkEvent]:
    return await FRAMEWORK.events_after(store, topic, ZERO)


def kinds(found: list[FrameworkEvent]) -> list[tuple[str, str, str]]:
    """(capability, change, path after the topic) of each event."""
    return [(e.change.capability, e.change.change.value, e.change.loc) for e in found]


async def post(client: httpx.AsyncClient, times: Times, *locs: str) -> None:
    body = change_fragment(*[(loc, "created", times.next()) for loc in locs])
    reply = await client.post(f"/topics/{TOPIC}/changes", content=body, headers=auth())
    assert reply.status_code == 202, reply.text


async def test_a_rotation_is_announced_once_under_the_index(hub_factory: HubFactory) -> None:
    async with (
        hub_factory(changelist_max_entries=3) as running,
        httpx.AsyncClient(base_url=running.url) as client,
    ):
        store = running.hub.store
        urls = Urls(running.hub.settings.hub.base_url, TOPIC)
        await post(client, Times(), "http://example.com/a", "http://example.com/b")
        await post(client, Times(timedelta(seconds=1)), "http://example.com/c")

        async def rotated() -> bool:
            return any(e.change.capability == "changelist" for e in await events(store))

        await eventually(rotated, what="the rotation's framework events")
        found = [e for e in await events(store) if e.change.capability == "changelist"]
        assert kinds(found) == [
            ("changelist", "updated", urls.closed_change_list(0)),
            ("changelist", "created", urls.change_list),
        ]
        assert {e.change.index for e in found} == {urls.change_list_index}
        # The notification a transport sends: valid against the XSDs and the spec's rules.
        data = FRAMEWORK.notification(running.hub.settings.hub.base_url, TOPIC, found)
        assert schema_errors(data) == []
        document = parse_document(data)
        assert validate(document) == []
        assert framework_changes(document) == [e.change for e in found]
        assert document.link("up") is not None
        assert document.link("up").href == urls.capability_list  # type: ignore[union-attr]


async def test_replaying_the_rotation_script_adds_no_second_event(
    hub_factory: HubFactory, redis: Redis, prefix: str
) -> None:
    """The events are written by the rotation script itself: the same call run twice (a
    retry after a lost reply, a crash and restart) closes the list once and announces it once."""
    async with (
        hub_factory(changelist_max_entries=1000) as running,
        httpx.AsyncClient(base_url=running.url) as client,
    ):
        await post(client, Times(), "http://example.com/a", "http://example.com/b")
        base = running.hub.settings.hub.base_url
    store = TopicStore(redis, prefix=prefix)  # the hub has stopped: its lease is released
    before = len(await events(store))
    meta = await store.meta(TOPIC)
    entries = await store.open_entries(TOPIC, meta.open_start)
    assert meta.open_from_us is not None and len(entries) == 2
    closed = ClosedList(0, meta.open_from_us, entries[-1].time_us, entries[0].id, entries[-1].id, 2)
    assert await store.acquire_lease(TOPIC, "token", 10_000)
    now_us = to_us(datetime.now(UTC))
    announcement = rotation_announcement(Urls(base, TOPIC), 0, 100)

    async def close() -> str:
        return await store.close_list(
            TOPIC,
            token="token",
            expected_open_start=meta.open_start,
            closed=closed,
            xml=b"<urlset/>",
            now_us=now_us,
            framework=announcement,
        )

    assert await close() == "ok"
    assert await close() == "moved"
    added = (await events(store))[before:]
    assert kinds(added) == [
        ("changelist", "updated", Urls(base, TOPIC).closed_change_list(0)),
        ("changelist", "created", Urls(base, TOPIC).change_list),
    ]


async def test_the_resource_list_is_announced_at_most_once_per_interval(
    redis: Redis, prefix: str
) -> None:
    """The throttle, driven by the caller's clock against a real Redis: a change within the
    interval is held back, announced once the interval has passed, and only once."""
    store = TopicStore(redis, prefix=prefix)
    meta = store.keys(TOPIC).meta
    second = 1_000_000

    async def announce(now_s: float) -> str:
        return await store.announce_resource_list(
            TOPIC,
            now_us=int(now_s * second),
            interval_us=10 * second,
            max_events=100,
            list_loc="http://h/topics/t/resourcelist.xml",
            part_loc="http://h/topics/t/resourcelist/0.xml",
            max_entries=1,
        )

    assert await announce(1) == "same"  # no state yet: nothing to announce
    await redis.hset(meta, "last_t", 100)  # a change was accepted
    assert await announce(100) == "added"
    assert await announce(101) == "same"  # nothing changed since
    await redis.hset(meta, "last_t", 102)
    assert await announce(105) == "throttled"  # changed, but within the interval
    assert await announce(109.9) == "throttled"
    assert await announce(110) == "added"
    assert await announce(200) == "same"
    found = await events(store)
    assert kinds(found) == [("resourcelist", "updated", "http://h/topics/t/resourcelist.xml")] * 2
    # Past max_entries the Resource List is an index: its first part is announced (§2).
    await redis.hset(store.keys(TOPIC).state, mapping={"http://e/a": "<url/>", "http://e/b": "x"})
    await redis.hset(meta, "last_t", 300)
    assert await announce(300) == "added"
    last = (await events(store))[-1].change
    assert (last.loc, last.index) == (
        "http://h/topics/t/resourcelist/0.xml",
        "http://h/topics/t/resourcelist.xml",
    )


async def test_a_running_hub_announces_its_resource_list(hub_factory: HubFactory) -> None:
    async with (
        hub_factory(framework={"resourcelist_interval_s": 0.5}) as running,
        httpx.AsyncClient(base_url=running.url) as client,
    ):
        store = running.hub.store
        times = Times()

        async def resource_list_events() -> list[FrameworkEvent]:
            return [e for e in await events(store) if e.change.capability == "resourcelist"]

        await post(client, times, "http://example.com/a")
        await eventually(resource_list_events, what="the Resource List event")
        await post(client, times, "http://example.com/b")
        await post(client, times, "http://example.com/c")

        async def two() -> bool:
            return len(await resource_list_events()) >= 2

        await eventually(two, what="the second Resource List event")
        first, second = await resource_list_events()
        assert first.change.time is not None and second.change.time is not None
        # Two posts after the first event: one event for both, after the interval.
        assert second.change.time - first.change.time >= timedelta(seconds=0.5)
        assert first.change.loc == Urls(running.hub.settings.hub.base_url, TOPIC).resource_list


@asynccontextmanager
async def hub_with(settings: Settings) -> AsyncIterator[RunningHub]:
    sock = bind("127.0.0.1", 0)
    async with running_hub(settings, sock=sock) as running:
        yield running


async def test_configuration_changes_are_announced_once(
    redis_url: str, prefix: str, redis: Redis
) -> None:
    base = "http://hub.example"
    # One push URL for every process (the Capability Lists name it): as behind a proxy.
    settings = make_settings(redis_url, prefix, base).model_copy(
        update={"push": Push(port=0, url="ws://hub.example/push")}
    )
    store = TopicStore(redis, prefix=prefix)
    sd = f"{base}/.well-known/resourcesync"
    async with hub_with(settings):
        pass
    first = kinds(await events(store))
    assert first == [
        ("capabilitylist", "created", f"{base}/topics/{TOPIC}/capabilitylist.xml"),
        ("description", "created", sd),
    ]
    assert kinds(await events(store, "dataset2"))[-1] == ("description", "created", sd)
    # A restart with the same configuration (two processes, even) announces nothing.
    async with hub_with(settings), hub_with(settings):
        pass
    assert kinds(await events(store)) == first
    # A topic added: its Capability List is created, the Source Description updated on
    # every channel (§2); the other Capability Lists did not change.
    more = settings.model_copy(update={"topics": [*settings.topics, Topic(name="dataset3")]})
    async with hub_with(more):
        pass
    assert kinds(await events(store))[len(first) :] == [("description", "updated", sd)]
    assert kinds(await events(store, "dataset3")) == [
        ("capabilitylist", "created", f"{base}/topics/dataset3/capabilitylist.xml"),
        ("description", "updated", sd),
    ]
    # A topic removed: the Source Description is updated again.
    async with hub_with(settings):
        pass
    assert kinds(await events(store))[len(first) + 1 :] == [("description", "updated", sd)]
    # ... and one that comes back is announced again, as new.
    async with hub_with(more):
        pass
    assert kinds(await events(store, "dataset3"))[2:] == [
        ("capabilitylist", "created", f"{base}/topics/dataset3/capabilitylist.xml"),
        ("description", "updated", sd),
    ]
    async with hub_with(settings):
        pass
    # A Capability List that changes (here its describedby link): updated.
    described = settings.model_copy(
        update={"topics": [Topic(name=TOPIC, description="http://e/about"), settings.topics[1]]}
    )
    async with hub_with(described):
        pass
    assert kinds(await events(store))[-1] == (
        "capabilitylist",
        "updated",
        f"{base}/topics/{TOPIC}/capabilitylist.xml",
    )


async def test_the_capability_list_advertises_the_channel(
    hub: RunningHub, client: httpx.AsyncClient
) -> None:
    reply = await client.get(f"/topics/{TOPIC}/capabilitylist.xml")
    assert reply.status_code == 200
    assert schema_errors(reply.content) == []
    document = parse_document(reply.content)
    assert validate(document) == []
    urls = Urls(hub.hub.settings.hub.base_url, TOPIC)
    (entry,) = [
        e
        for e in document.entries
        if e.md is not None and e.md.capability == Capability.FRAMEWORK_NOTIFICATION
    ]
    # §5, Example 8: the topic URI in <loc>, rs:ln rel="hub" to the hub URI.
    assert entry.loc == urls.framework_topic_uri == f"{urls.topic_uri}/framework"
    assert entry.link("hub") is not None and entry.link("hub").href == urls.hub  # type: ignore[union-attr]
    # Beside the change-notification channel, which keeps its own topic URI (§4).
    notification = [
        e for e in document.entries if e.md is not None and e.md.capability == "change-notification"
    ]
    assert [e.loc for e in notification] == [urls.topic_uri]
    # §4.1: the topic URI answers 200, application/xml, Link self and hub, no content.
    topic = await client.get(f"/topics/{TOPIC}/framework")
    assert topic.status_code == 200
    assert topic.headers["content-type"].startswith("application/xml")
    assert topic.content == b""
    links = topic.headers["link"]
    assert f'<{urls.framework_topic_uri}>; rel="self"' in links
    assert f'<{urls.hub}>; rel="hub"' in links
    assert (await client.head(f"/topics/{TOPIC}/framework")).status_code == 200
    assert (await client.get("/topics/nope/framework")).status_code == 404
    assert FRAMEWORK.topic_of(hub.hub.settings.hub.base_url, urls.framework_topic_uri) == TOPIC
    assert FRAMEWORK.topic_of(hub.hub.settings.hub.base_url, urls.topic_uri) is None


async def test_disabled_framework_notifications_are_neither_advertised_nor_recorded(
    hub_factory: HubFactory,
) -> None:
    async with (
        hub_factory(framework={"enabled": False}, changelist_max_entries=1) as running,
        httpx.AsyncClient(base_url=running.url) as client,
    ):
        cap = await client.get(f"/topics/{TOPIC}/capabilitylist.xml")
        assert b"framework-notification" not in cap.content
        assert (await client.get(f"/topics/{TOPIC}/framework")).status_code == 404
        await post(client, Times(), "http://example.com/a")
        await eventually(lambda: running.hub.rotator.rotations >= 1, what="a rotation")
        assert await events(running.hub.store) == []
        assert Change.CREATED.value == "created"


async def test_both_reads_of_every_topic_agree(redis: Redis, prefix: str) -> None:
    """The push process's two ways to read every topic's events: one blocking XREAD over all
    streams (a single server) and a pipelined XRANGE per topic (a Redis Cluster)."""
    store = TopicStore(redis, prefix=prefix)
    when = datetime.now(UTC)
    for topic, count in (("a", 2), ("b", 0), ("c", 1)):
        for n in range(count):
            change = FrameworkChange(f"http://h/{topic}/{n}", Change.UPDATED, "changelist", when)
            await store.add_framework_event(topic, change, max_events=100)
    after = dict.fromkeys(("a", "b", "c"), ZERO)
    each = await store.framework_events_after_each(after, count=100)
    blocking = await store.wait_framework_events_all(after, count=100, block_ms=100)
    assert {t: [e.change.loc for e in found] for t, found in each.items()} == {
        "a": ["http://h/a/0", "http://h/a/1"],
        "b": [],
        "c": ["http://h/c/0"],
    }
    assert {t: v for t, v in each.items() if v} == blocking
    # After the last one: nothing, and the blocking read gives up after its wait.
    last = {t: (found[-1].position if found else ZERO) for t, found in each.items()}
    assert await store.wait_framework_events_all(last, count=100, block_ms=50) == {}
    assert all(v == [] for v in (await store.framework_events_after_each(last, count=9)).values())
