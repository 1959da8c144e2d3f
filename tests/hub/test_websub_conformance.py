"""The hub against the websub.rocks hub tests 100-104 and the W3C implementation report's
hub checklist (docs/websub.md publishes the table naming these tests). 105 (plaintext) and
106 (JSON) do not apply: this hub's content is always application/xml change notifications.

Every test runs a real hub and a real callback server on loopback."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Callable

import httpx

from rspush.hub.server import RunningHub
from tests.support.fragments import Times
from tests.support.waiting import eventually
from tests.support.websub import (
    Callback,
    delivering,
    post_changes,
    running_callback,
    subscribe,
    topic,
    verifications,
    websub_hub,
)


async def subscribed(hub: RunningHub, cb: Callback, name: str = "cb", **extra: str) -> None:
    response = await subscribe(hub.url, topic(hub), cb.url(name), **extra)
    assert response.status_code == 202, response.text
    await eventually(lambda: delivering(hub), "subscription verified and delivered")


async def test_100_typical_subscription(redis_url: str, prefix: str) -> None:
    """100: subscribe (202), verification GET with mode, topic, challenge, lease; then a
    notification with Content-Type application/xml and Link self + hub."""
    times = Times()
    async with running_callback() as cb, websub_hub(redis_url, prefix) as hub:
        await subscribed(hub, cb, hub_lease_seconds="600")
        check = cb.verifications[0]
        assert check["hub.mode"] == "subscribe"
        assert check["hub.topic"] == topic(hub)
        assert check["hub.challenge"]
        assert check["hub.lease_seconds"] == "600"
        await post_changes(hub, times, "http://e.org/a", "http://e.org/b")
        await eventually(lambda: cb.locs() == ["http://e.org/a", "http://e.org/b"], "delivery")
        note = cb.received()[0]
        assert note.headers["content-type"] == "application/xml"
        link = note.headers["link"]
        assert f'<{topic(hub)}>; rel="self"' in link
        assert f'<{hub.hub.settings.hub.base_url}/hub>; rel="hub"' in link
        assert note.valid()
        assert note.document.md.capability == "change-notification"


async def test_101_subscription_with_secret(redis_url: str, prefix: str) -> None:
    """101: hub.secret -> X-Hub-Signature sha256=HMAC(secret, exact body)."""
    times = Times()
    secret = "s3cr3t-of-the-subscriber"
    async with running_callback() as cb, websub_hub(redis_url, prefix) as hub:
        await subscribed(hub, cb, hub_secret=secret)
        await post_changes(hub, times, "http://e.org/a")
        await eventually(lambda: cb.received(), "delivery")
        note = cb.received()[0]
        method, _, signature = note.headers["x-hub-signature"].partition("=")
        assert method == "sha256"
        expected = hmac.new(secret.encode(), note.body, hashlib.sha256).hexdigest()
        assert hmac.compare_digest(signature, expected)


async def test_101_secret_of_200_bytes_is_refused(redis_url: str, prefix: str) -> None:
    async with running_callback() as cb, websub_hub(redis_url, prefix) as hub:
        response = await subscribe(hub.url, topic(hub), cb.url(), hub_secret="x" * 200)
        assert response.status_code == 400
        assert response.json()["error"] == "bad-subscription"
        assert cb.verifications == []


async def test_102_extra_parameters_are_ignored(redis_url: str, prefix: str) -> None:
    times = Times()
    async with running_callback() as cb, websub_hub(redis_url, prefix) as hub:
        await subscribed(hub, cb, foo="bar", hub_unknown="x", hub_lease_seconds="600")
        await post_changes(hub, times, "http://e.org/a")
        await eventually(lambda: cb.locs() == ["http://e.org/a"], "delivery")


async def test_103_resubscribe_renews_the_lease_and_keeps_the_cursor(
    redis_url: str, prefix: str
) -> None:
    """103: a second subscription of the same callback renews it: verified again, one
    subscription, and no change is delivered twice or skipped across the renewal."""
    times = Times()
    async with running_callback() as cb, websub_hub(redis_url, prefix) as hub:
        await subscribed(hub, cb, hub_lease_seconds="600")
        await post_changes(hub, times, "http://e.org/1")
        await eventually(lambda: cb.locs() == ["http://e.org/1"], "first delivery")
        cb.status = 503  # hold the next change in the stream across the renewal
        await post_changes(hub, times, "http://e.org/2")
        await eventually(lambda: cb.refused_posts > 0, "a refused delivery")
        response = await subscribe(hub.url, topic(hub), cb.url(), hub_lease_seconds="900")
        assert response.status_code == 202
        await eventually(lambda: len(cb.modes()) == 2, "second verification")
        assert cb.verifications[1]["hub.lease_seconds"] == "900"
        cb.status = 204
        await post_changes(hub, times, "http://e.org/3")
        await eventually(lambda: cb.locs()[-1:] == ["http://e.org/3"], "later delivery")
        assert cb.locs() == ["http://e.org/1", "http://e.org/2", "http://e.org/3"]
        assert await hub.hub.store.subscription_count() == 1


async def test_104_unsubscribe(redis_url: str, prefix: str) -> None:
    times = Times()
    async with running_callback() as cb, websub_hub(redis_url, prefix) as hub:
        await subscribed(hub, cb)
        response = await subscribe(hub.url, topic(hub), cb.url(), mode="unsubscribe")
        assert response.status_code == 202
        await eventually(lambda: cb.modes() == ["subscribe", "unsubscribe"], "unsubscribe GET")
        await eventually(_no_subscriptions(hub), "subscription removed")
        await post_changes(hub, times, "http://e.org/a")
        await eventually(_no_workers(hub), "delivery task ended")
        assert cb.received() == []


def _no_subscriptions(hub: RunningHub) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return await hub.hub.store.subscription_count() == 0

    return check


def _no_workers(hub: RunningHub) -> Callable[[], bool]:
    return lambda: not delivering(hub)


async def test_intent_not_confirmed_means_not_subscribed(redis_url: str, prefix: str) -> None:
    """§5.3: any answer but a 2xx echoing the challenge: no subscription."""
    async with running_callback() as cb, websub_hub(redis_url, prefix) as hub:
        cb.confirm = False
        response = await subscribe(hub.url, topic(hub), cb.url())
        assert response.status_code == 202
        await eventually(lambda: cb.modes() == ["subscribe"], "verification")
        await eventually(lambda: verifications(hub, "refused") == 1, "refusal counted")
        assert await hub.hub.store.subscription_count() == 0


async def test_unknown_topic_is_denied(redis_url: str, prefix: str) -> None:
    """§5.2: a topic this hub does not have: 202, then hub.mode=denied with a reason."""
    async with running_callback() as cb, websub_hub(redis_url, prefix) as hub:
        uri = f"{hub.hub.settings.hub.base_url}/topics/nope"
        response = await subscribe(hub.url, uri, cb.url())
        assert response.status_code == 202
        await eventually(lambda: cb.modes() == ["denied"], "denial")
        assert cb.verifications[0]["hub.topic"] == uri
        assert cb.verifications[0]["hub.reason"]
        assert await hub.hub.store.subscription_count() == 0


async def test_malformed_requests_get_400(redis_url: str, prefix: str) -> None:
    async with running_callback() as cb, websub_hub(redis_url, prefix) as hub:
        for form in (
            {"hub.mode": "subscribe", "hub.topic": topic(hub)},
            {"hub.mode": "follow", "hub.topic": topic(hub), "hub.callback": cb.url()},
            {"hub.mode": "subscribe", "hub.topic": topic(hub), "hub.callback": "ftp://x/"},
            {
                "hub.mode": "subscribe",
                "hub.topic": topic(hub),
                "hub.callback": cb.url(),
                "hub.lease_seconds": "-5",
            },
        ):
            async with httpx.AsyncClient() as http:
                response = await http.post(f"{hub.url}/hub", data=form)
            assert response.status_code == 400, form
            assert response.json()["error"] == "bad-subscription"
        assert cb.verifications == []


async def test_topic_uri_advertises_hub_and_self(redis_url: str, prefix: str) -> None:
    """Discovery (WebSub §4): the topic URI answers with Link rel=hub and rel=self."""
    async with websub_hub(redis_url, prefix) as hub, httpx.AsyncClient() as http:
        response = await http.get(topic(hub).replace(hub.hub.settings.hub.base_url, hub.url))
        assert response.status_code == 200
        assert response.links["hub"]["url"] == f"{hub.hub.settings.hub.base_url}/hub"
        assert response.links["self"]["url"] == topic(hub)
