"""WebSub delivery and safety with a real hub and real callback servers on loopback:
batching, outages and retries, order and contiguity, a slow callback beside a fast one,
lease expiry, private topics, the callback address policy and redirects, and what a
subscriber that fell behind retention receives."""

from __future__ import annotations

import time

import httpx

from rspush.hub.server import RunningHub
from tests.support.fragments import Times
from tests.support.waiting import eventually
from tests.support.websub import (
    Callback,
    contiguous,
    delivering,
    post_changes,
    running_callback,
    subscribe,
    topic,
    verifications,
    websub_hub,
)

READER = "token-of-a-reader"
OTHER_READER = "token-of-another-reader"


async def subscribed(hub: RunningHub, cb: Callback, name: str = "cb", **extra: str) -> None:
    before = verifications(hub, "verified")
    response = await subscribe(hub.url, topic(hub), cb.url(name), **extra)
    assert response.status_code == 202, response.text
    await eventually(lambda: verifications(hub, "verified") > before, "verified")


async def test_batches_are_bounded_and_contiguous(redis_url: str, prefix: str) -> None:
    times = Times()
    locs = [f"http://e.org/{i}" for i in range(10)]
    async with (
        running_callback() as cb,
        websub_hub(redis_url, prefix, max_entries_per_notification=3) as hub,
    ):
        await subscribed(hub, cb)
        await post_changes(hub, times, *locs)
        await eventually(lambda: cb.locs() == locs, "all changes")
        notes = cb.received()
        assert all(len(n.locs) <= 3 for n in notes)
        assert len(notes) >= 4
        assert contiguous(notes)
        assert all(n.valid() for n in notes)


async def test_outage_loses_nothing(redis_url: str, prefix: str) -> None:
    """The callback answers 503 for a while: every change arrives after, in order, with
    contiguous from/until."""
    times = Times()
    async with running_callback() as cb, websub_hub(redis_url, prefix) as hub:
        await subscribed(hub, cb)
        await post_changes(hub, times, "http://e.org/0")
        await eventually(lambda: cb.locs() == ["http://e.org/0"], "first")
        cb.status = 503
        expected = ["http://e.org/0"]
        for i in range(1, 6):
            await post_changes(hub, times, f"http://e.org/{i}a", f"http://e.org/{i}b")
            expected += [f"http://e.org/{i}a", f"http://e.org/{i}b"]
        await eventually(lambda: cb.refused_posts >= 3, "retries during the outage")
        cb.status = 200
        await eventually(lambda: cb.locs() == expected, "everything after the outage")
        assert contiguous(cb.received())
        failed = hub.hub.metrics.websub_deliveries.labels("failed")._value.get()
        assert failed >= 3


async def test_slow_callback_does_not_delay_a_fast_one(redis_url: str, prefix: str) -> None:
    times = Times()
    async with (
        running_callback() as slow,
        running_callback() as fast,
        websub_hub(redis_url, prefix, read_timeout_s=30.0) as hub,
    ):
        slow.delay_s = 5.0
        await subscribed(hub, slow)
        await subscribed(hub, fast)
        started = time.monotonic()
        await post_changes(hub, times, "http://e.org/a")
        await eventually(lambda: fast.locs() == ["http://e.org/a"], "fast delivery", timeout=4)
        assert slow.received() == []  # still waiting on the slow one
        assert time.monotonic() - started < 4
        await eventually(lambda: slow.locs() == ["http://e.org/a"], "slow delivery", timeout=20)


async def test_retry_horizon_drops_the_subscription(redis_url: str, prefix: str) -> None:
    times = Times()
    async with (
        running_callback() as cb,
        websub_hub(redis_url, prefix, retry_horizon_s=0.5) as hub,
    ):
        await subscribed(hub, cb)
        cb.status = 500
        await post_changes(hub, times, "http://e.org/a")

        removed = hub.hub.metrics.websub_removed.labels("retries-exhausted")

        async def dropped() -> bool:
            # The delivery task counts the removal once the store has it: wait for both,
            # or this check can run in between.
            gone = await hub.hub.store.subscription_count() == 0
            return gone and removed._value.get() >= 1

        await eventually(dropped, "subscription dropped past the horizon, and counted")
        assert removed._value.get() == 1


async def test_lease_expiry_removes_the_subscription(redis_url: str, prefix: str) -> None:
    times = Times()
    async with running_callback() as cb, websub_hub(redis_url, prefix) as hub:
        await subscribed(hub, cb, hub_lease_seconds="1")
        assert cb.verifications[0]["hub.lease_seconds"] == "1"

        async def gone() -> bool:
            return await hub.hub.store.subscription_count() == 0

        await eventually(gone, "expired subscription removed", timeout=10)
        await eventually(lambda: not delivering(hub), "delivery task ended")
        await post_changes(hub, times, "http://e.org/late")
        assert hub.hub.metrics.websub_removed.labels("expired")._value.get() == 1
        assert cb.received() == []


async def test_private_topic_needs_a_subscriber_token(redis_url: str, prefix: str) -> None:
    times = Times()
    private = {READER: ["dataset1"], OTHER_READER: ["dataset2"]}
    async with running_callback() as cb, websub_hub(redis_url, prefix, private=private) as hub:
        uri = topic(hub)
        response = await subscribe(hub.url, uri, cb.url())
        assert response.status_code == 401
        assert response.headers["www-authenticate"].startswith("Bearer")
        other = {"Authorization": f"Bearer {OTHER_READER}"}
        response = await subscribe(hub.url, uri, cb.url(), headers=other)
        assert response.status_code == 403
        bad = {"Authorization": "Bearer nope"}
        assert (await subscribe(hub.url, uri, cb.url(), headers=bad)).status_code == 401
        assert cb.verifications == []  # nothing started before the token was checked
        mine = {"Authorization": f"Bearer {READER}"}
        response = await subscribe(hub.url, uri, cb.url(), headers=mine)
        assert response.status_code == 202
        await eventually(lambda: verifications(hub, "verified") == 1, "verified")
        await post_changes(hub, times, "http://e.org/secret")
        await eventually(lambda: cb.locs() == ["http://e.org/secret"], "delivery")


async def test_loopback_is_refused_without_the_allow_list(redis_url: str, prefix: str) -> None:
    async with (
        running_callback() as cb,
        websub_hub(redis_url, prefix, callback_allow=[]) as hub,
    ):
        # An address literal: refused at once.
        response = await subscribe(hub.url, topic(hub), cb.url())
        assert response.status_code == 400
        assert "127.0.0.1" not in response.text
        for private in ("http://10.0.0.7/cb", "http://169.254.169.254/latest", "http://[::1]/"):
            response = await subscribe(hub.url, topic(hub), private)
            assert response.status_code == 400, private
        # A name resolving to loopback: accepted, then refused at resolution: no request.
        named = cb.url().replace("127.0.0.1", "localhost")
        response = await subscribe(hub.url, topic(hub), named)
        assert response.status_code == 202
        await eventually(lambda: verifications(hub, "failed") == 1, "refused at resolution")
        assert cb.verifications == []
        assert await hub.hub.store.subscription_count() == 0


async def test_redirects_are_not_followed(redis_url: str, prefix: str) -> None:
    async with (
        running_callback() as redirecting,
        running_callback() as target,
        websub_hub(redis_url, prefix) as hub,
    ):
        redirecting.redirect_to = target.url()
        response = await subscribe(hub.url, topic(hub), redirecting.url())
        assert response.status_code == 202
        await eventually(lambda: verifications(hub, "refused") == 1, "verification refused")
        assert len(redirecting.verifications) == 1
        assert target.verifications == []
        assert await hub.hub.store.subscription_count() == 0


async def test_history_moved_when_the_cursor_falls_behind_retention(
    redis_url: str, prefix: str
) -> None:
    """A subscription whose undelivered changes were trimmed from the stream receives one
    notification naming the Change List Archive, covering the lost interval, then the
    changes the stream still holds, contiguous."""
    times = Times()
    limits = {"changelist_max_entries": 2, "retention_s": 0}
    async with running_callback() as cb:
        async with websub_hub(redis_url, prefix, limits=limits) as hub:
            port = int(hub.url.rsplit(":", 1)[1])
            await subscribed(hub, cb)
            await post_changes(hub, times, "http://e.org/0")
            await eventually(lambda: cb.locs() == ["http://e.org/0"], "first")
            cb.status = 503
            for i in range(1, 7):
                await post_changes(hub, times, f"http://e.org/{i}")

            async def trimmed() -> bool:
                meta = await hub.hub.store.push_meta("dataset1")
                oldest = await hub.hub.store.oldest("dataset1")
                return meta.trimmed is not None and (oldest is None or oldest.ms > 0)

            await eventually(trimmed, "retention trimmed the stream")
            archive = f"{hub.hub.settings.hub.base_url}/topics/dataset1/changelist-archive.xml"
        # A new process (its recent-events cache starts at the tail) takes over. It closes
        # no more lists: with retention 0 a closed list's changes leave the stream at once,
        # and the live change below must stay in it to be delivered as a change.
        cb.status = 204
        open_only = {**limits, "changelist_max_entries": 1000}
        async with websub_hub(redis_url, prefix, limits=open_only, port=port) as hub:
            await post_changes(hub, times, "http://e.org/7")
            await eventually(lambda: cb.locs()[-1:] == ["http://e.org/7"], "live change")
            notes = cb.received()
            moved = [n for n in notes if n.locs == [archive]]
            # One, or two when the first process's rotator closed and trimmed another list
            # after the first notice was prepared (those changes were lost too).
            assert 1 <= len(moved) <= 2, len(moved)
            assert all(m.document.link("collection").href == archive for m in moved)
            assert all(m.valid() for m in moved)
            assert contiguous(notes)
            metric = hub.hub.metrics.websub_history_moved.labels("dataset1")._value.get()
            assert metric == len(moved)


async def test_metrics_show_subscriptions_and_deliveries(redis_url: str, prefix: str) -> None:
    times = Times()
    async with running_callback() as cb, websub_hub(redis_url, prefix) as hub:
        await subscribed(hub, cb)
        await post_changes(hub, times, "http://e.org/a")
        await eventually(lambda: cb.locs() == ["http://e.org/a"], "delivery")
        async with httpx.AsyncClient() as http:
            text = (await http.get(f"{hub.url}/metrics")).text
        assert "rspush_websub_subscriptions 1.0" in text
        assert 'rspush_websub_deliveries_total{outcome="ok"} 1.0' in text
        assert 'rspush_websub_delivered_changes_total{topic="dataset1"} 1.0' in text
        assert "rspush_websub_lag_seconds_count" in text


async def test_status_json_has_websub_figures(redis_url: str, prefix: str) -> None:
    times = Times()
    async with running_callback() as cb, websub_hub(redis_url, prefix) as hub:
        await subscribed(hub, cb)
        await post_changes(hub, times, "http://e.org/a", "http://e.org/b")
        await eventually(lambda: len(cb.locs()) == 2, "delivery")
        async with httpx.AsyncClient() as http:
            response = await http.get(f"{hub.url}/status", headers={"Accept": "application/json"})
        status = response.json()
        assert status["process"]["websub_delivering"] == 1
        row = next(t for t in status["topics"] if t["name"] == "dataset1")
        assert row["websub_delivered"] == 2


async def test_caps_per_topic_and_per_host_deny(redis_url: str, prefix: str) -> None:
    """Past max_subscriptions_per_topic, then past max_subscriptions_per_host (all topics):
    the new subscription is denied (hub.mode=denied with a reason); renewals still pass."""
    async with (
        running_callback() as cb,
        websub_hub(
            redis_url, prefix, max_subscriptions_per_topic=1, max_subscriptions_per_host=2
        ) as hub,
    ):
        await subscribed(hub, cb, "one")
        response = await subscribe(hub.url, topic(hub), cb.url("two"))
        assert response.status_code == 202
        await eventually(lambda: cb.modes("two") == ["denied"], "denied past the topic cap")
        await subscribed(hub, cb, "one")  # a renewal is not a new subscription
        response = await subscribe(hub.url, topic(hub, "dataset2"), cb.url("three"))
        await eventually(lambda: cb.modes("three") == ["subscribe"], "second topic verified")
        response = await subscribe(hub.url, topic(hub, "dataset2"), cb.url("four"))
        await eventually(lambda: cb.modes("four") == ["denied"], "denied past the host cap")
        assert await hub.hub.store.subscription_count() == 2


async def test_a_new_subscriber_of_a_fully_trimmed_stream_is_told_of_no_loss(
    redis_url: str, prefix: str
) -> None:
    """Retention emptied the stream before the subscription existed: the subscriber missed
    nothing, so its first notification is the next change, not a history-moved one."""
    times = Times()
    limits = {"changelist_max_entries": 2, "retention_s": 0}
    async with running_callback() as cb, websub_hub(redis_url, prefix, limits=limits) as hub:
        for i in range(6):
            await post_changes(hub, times, f"http://e.org/old{i}")
        stream = hub.hub.store.keys("dataset1").stream

        async def emptied() -> bool:
            meta = await hub.hub.store.push_meta("dataset1")
            return meta.trimmed is not None and await hub.hub.store.redis.xlen(stream) == 0

        await eventually(emptied, "retention emptied the stream")
        await subscribed(hub, cb)
        await post_changes(hub, times, "http://e.org/new")
        await eventually(lambda: cb.locs() == ["http://e.org/new"], "the next change")
        assert hub.hub.metrics.websub_history_moved.labels("dataset1")._value.get() == 0
