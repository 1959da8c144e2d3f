"""Framework notifications over WebSub: a subscriber of a topic's framework-notification
topic URI (``{base}/topics/{t}/framework``, framework notification spec §4-§5) gets the
hub's framework events as valid notifications, with the same durable, contiguous delivery
as change notifications; the channel is denied where the hub does not offer it."""

from __future__ import annotations

from datetime import timedelta

from rspush.hub.materialise import Urls
from rspush.hub.server import RunningHub
from rspush.protocol import Position
from rspush.resourcesync import framework_changes
from rspush.resourcesync.schema import schema_errors
from tests.support.fragments import Times
from tests.support.waiting import eventually
from tests.support.websub import (
    Callback,
    contiguous,
    post_changes,
    running_callback,
    subscribe,
    verifications,
    websub_hub,
)


def framework_topic(hub: RunningHub, name: str = "dataset1") -> str:
    return Urls(hub.hub.settings.hub.base_url, name).framework_topic_uri


async def subscribed(hub: RunningHub, cb: Callback) -> None:
    before = verifications(hub, "verified")
    response = await subscribe(hub.url, framework_topic(hub), cb.url())
    assert response.status_code == 202, response.text
    await eventually(lambda: verifications(hub, "verified") > before, "verified")


async def test_a_rotation_reaches_a_websub_subscriber_of_the_framework_channel(
    redis_url: str, prefix: str
) -> None:
    async with (
        running_callback() as cb,
        websub_hub(redis_url, prefix, limits={"changelist_max_entries": 2}) as hub,
    ):
        await subscribed(hub, cb)
        urls = Urls(hub.hub.settings.hub.base_url, "dataset1")
        times = Times()
        await post_changes(hub, times, "http://e.org/a", "http://e.org/b")
        await post_changes(hub, Times(timedelta(seconds=1)), "http://e.org/c")

        def announced() -> list[tuple[str, str, str]]:
            return [
                (c.capability, c.change.value, c.loc)
                for n in cb.received()
                for c in framework_changes(n.document)
            ]

        await eventually(
            lambda: ("changelist", "created", urls.change_list) in announced(),
            "the rotation's framework notification",
        )
        assert ("changelist", "updated", urls.closed_change_list(0)) in announced()
        notes = cb.received()
        assert all(n.valid() and schema_errors(n.body) == [] for n in notes)
        assert all(n.document.md.capability == "framework-notification" for n in notes)
        assert contiguous(notes)
        # WebSub §7 / notification spec §4.3: the topic URI delivered is the channel's own.
        link = notes[0].headers["link"]
        assert f'<{framework_topic(hub)}>; rel="self"' in link
        assert f'<{urls.hub}>; rel="hub"' in link


async def test_the_framework_channel_is_denied_when_the_hub_does_not_offer_it(
    redis_url: str, prefix: str
) -> None:
    async with (
        running_callback() as cb,
        websub_hub(redis_url, prefix, limits={"framework": {"enabled": False}}) as hub,
    ):
        response = await subscribe(hub.url, framework_topic(hub), cb.url())
        assert response.status_code == 202
        await eventually(lambda: cb.modes() == ["denied"], "denial")
        assert await hub.hub.store.subscription_count() == 0


async def test_a_framework_subscription_can_be_cancelled_after_the_channel_is_turned_off(
    redis_url: str, prefix: str
) -> None:
    async with running_callback() as cb:
        async with websub_hub(redis_url, prefix) as hub:
            await subscribed(hub, cb)
            uri = framework_topic(hub)
        async with websub_hub(redis_url, prefix, limits={"framework": {"enabled": False}}) as hub:
            # Nothing is delivered on a channel the hub no longer offers; the subscriber
            # can still unsubscribe (verified like any other), and the record goes.
            response = await subscribe(hub.url, uri, cb.url(), mode="unsubscribe")
            assert response.status_code == 202, response.text

            async def gone() -> bool:
                return await hub.hub.store.subscription_count() == 0

            await eventually(gone, "the subscription removed")
            assert "denied" not in cb.modes()


async def test_the_trim_mark_of_a_stream_is_its_newest_lost_position(
    redis_url: str, prefix: str
) -> None:
    async with websub_hub(redis_url, prefix) as hub:
        store = hub.hub.store
        key = f"{prefix}:trim-mark-probe"
        assert await store.trim_mark(key) is None  # no stream
        ids = [await store.redis.xadd(key, {"n": str(n)}) for n in range(5)]
        assert await store.trim_mark(key) is None  # nothing removed yet
        await store.redis.xtrim(key, maxlen=2, approximate=False)
        mark = await store.trim_mark(key)
        # Entries 0-2 are gone: the mark is after the newest lost one, before the oldest kept.
        assert mark is not None
        assert Position.parse(ids[2].decode()) <= mark < Position.parse(ids[3].decode())
