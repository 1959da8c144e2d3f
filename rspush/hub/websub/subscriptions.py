"""Subscription requests (WebSub §5.1) and the verification of intent (§5.3).

A request is checked at once (form, topic access for private topics, an IP-literal callback
against the address policy) and answered ``202 Accepted``; the rest runs in the background:
denial for a topic this hub does not have or past a subscription cap (§5.2), otherwise the
verification GET to the callback, and only after a 2xx echoing ``hub.challenge`` the
subscription is stored (or removed, for ``unsubscribe``). A renewal (a new request for the
same topic and callback, §5.1) keeps the subscription's cursor: nothing is delivered twice or
skipped.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import secrets
import time
from collections.abc import Callable
from urllib.parse import urlsplit

import httpx

from ..auth import authorise_read, find_holder
from ..errors import Code, HubError, RequestError, StoreUnavailable
from ..metrics import HubMetrics
from ..settings import Settings
from ..store import TopicStore
from .callbacks import REQUEST_ERRORS, CallbackClient, callback_host
from .channels import Channel, resolve
from .form import BadSubscription, SubscriptionRequest, parse_form
from .leases import LeasePolicy, expires_us
from .records import Cursor, Subscription, subscription_id

log = logging.getLogger("rspush.hub.websub")

MAX_PENDING_VERIFICATIONS = 1000
"""Verifications running at once in one process; past it a request gets 503."""


class SubscriptionRejected(HubError):
    def __init__(self, message: str) -> None:
        super().__init__(Code.BAD_SUBSCRIPTION, message)


def now_us() -> int:
    return time.time_ns() // 1000


class Subscriptions:
    def __init__(
        self,
        settings: Settings,
        store: TopicStore,
        client: CallbackClient,
        metrics: HubMetrics,
        *,
        on_subscribed: Callable[[str], None],
        on_unsubscribed: Callable[[str], None],
    ) -> None:
        self.settings = settings
        self.config = settings.websub
        self.store = store
        self.client = client
        self.metrics = metrics
        self.on_subscribed = on_subscribed
        self.on_unsubscribed = on_unsubscribed
        self.leases = LeasePolicy(
            self.config.lease_default_s, self.config.lease_min_s, self.config.lease_max_s
        )
        self.topics = [t.name for t in settings.topics]
        self._pending: set[asyncio.Task[None]] = set()

    async def request(self, body: bytes, token: str | None) -> None:
        """Check a request and start its verification; raises :class:`HubError` for what
        is refused at once (nothing written)."""
        try:
            request = parse_form(body)
        except BadSubscription as exc:
            raise SubscriptionRejected(str(exc)) from None
        resolved = resolve(self.settings.hub.base_url, request.topic_uri, self.topics)
        framework_off = not self.settings.framework.enabled
        if (
            resolved is not None
            and resolved[1].name == "framework"
            and framework_off
            and request.mode == "subscribe"
        ):
            # Not advertised, nothing recorded: denied as unknown. An unsubscribe still goes
            # through, so a subscription from when the channel was on can be cancelled.
            resolved = None
        subscriber = None
        if resolved is not None:
            topic = resolved[0]
            authorise_read(self.settings, topic, token)  # private topics: 401/403
            config = self.settings.topic(topic)
            if config is not None and config.private and token is not None:
                holder = find_holder(self.settings.subscribers, token)
                subscriber = None if holder is None else holder.name
        host = urlsplit(request.callback).hostname or ""
        try:
            literal = ipaddress.ip_address(host)
        except ValueError:
            literal = None
        if literal is not None and not self.client.policy.permits(literal):
            raise SubscriptionRejected("hub.callback: this address may not be reached")
        if len(self._pending) >= MAX_PENDING_VERIFICATIONS:
            raise RequestError(Code.SERVER_BUSY, "too many subscriptions being verified")
        task = asyncio.create_task(self._run(request, resolved, subscriber))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def stop(self) -> None:
        for task in list(self._pending):
            task.cancel()
        if self._pending:
            await asyncio.wait(list(self._pending), timeout=2.0)

    async def _run(
        self,
        request: SubscriptionRequest,
        resolved: tuple[str, Channel] | None,
        subscriber: str | None,
    ) -> None:
        outcome = "failed"
        try:
            outcome = await self._verify(request, resolved, subscriber)
        except REQUEST_ERRORS as exc:
            log.info("websub: %s of %s not verified: %r", request.mode, request.callback, exc)
        except StoreUnavailable:
            log.warning("websub: %s of %s: store unavailable", request.mode, request.callback)
        except Exception:
            log.exception("websub: %s of %s failed", request.mode, request.callback)
        self.metrics.websub_verifications.labels(request.mode, outcome).inc()

    async def _verify(
        self,
        request: SubscriptionRequest,
        resolved: tuple[str, Channel] | None,
        subscriber: str | None,
    ) -> str:
        if resolved is None:
            await self._deny(request, "unknown topic: not a topic URI of this hub")
            return "denied"
        topic, channel = resolved
        sid = subscription_id(request.topic_uri, request.callback)
        if request.mode == "unsubscribe":
            if not await self._confirmed(request, None):
                return "refused"
            await self.store.remove_subscription(sid)
            self.on_unsubscribed(sid)
            log.info("websub: unsubscribed %s from %s", request.callback, request.topic_uri)
            return "verified"
        existing = await self.store.subscription(sid)
        if existing is None:
            reason = await self._over_cap(request)
            if reason is not None:
                await self._deny(request, reason)
                return "denied"
        lease_s = self.leases.grant(request.lease_seconds)
        if not await self._confirmed(request, lease_s):
            return "refused"
        record = Subscription(
            topic_uri=request.topic_uri,
            topic=topic,
            channel=channel.name,
            callback=request.callback,
            expires_us=expires_us(now_us(), lease_s),
            secret=request.secret,
            subscriber=subscriber,
        )
        # A new subscription starts at the channel's tail: it receives what comes next.
        last = await self.store.last_row(channel.stream_key(self.store.keys(topic)), channel.decode)
        if last is not None:
            start = Cursor(last.position, last.time_us)
        else:
            # An empty stream may still have lost history (retention trimmed it all): start
            # after what it lost, so the subscriber is not told of a loss before its time.
            trimmed = await channel.trimmed(self.store, topic)
            start = Cursor(*trimmed) if trimmed is not None else Cursor.decode("0-0")
        new = await self.store.save_subscription(sid, record.to_json(), start.encode())
        log.info(
            "websub: %s %s to %s for %d s",
            "subscribed" if new else "renewed",
            request.callback,
            request.topic_uri,
            lease_s,
        )
        self.on_subscribed(sid)
        return "verified"

    async def _confirmed(self, request: SubscriptionRequest, lease_s: int | None) -> bool:
        """The verification of intent (§5.3): a 2xx whose body is the challenge."""
        challenge = secrets.token_urlsafe(24)
        params = {"hub.mode": request.mode, "hub.topic": request.topic_uri}
        params["hub.challenge"] = challenge
        if lease_s is not None:
            params["hub.lease_seconds"] = str(lease_s)
        try:
            answer = await self.client.get(request.callback, params)
        except httpx.TransportError:
            # A pooled connection the callback's server had closed: the GET is idempotent,
            # so it is sent once more on a fresh connection before the request fails.
            answer = await self.client.get(request.callback, params)
        if answer.ok and answer.body.strip() == challenge.encode():
            return True
        log.info(
            "websub: %s of %s refused by the callback (HTTP %d)",
            request.mode,
            request.callback,
            answer.status,
        )
        return False

    async def _deny(self, request: SubscriptionRequest, reason: str) -> None:
        """§5.2: tell the callback the subscription is denied."""
        params = {"hub.mode": "denied", "hub.topic": request.topic_uri, "hub.reason": reason}
        await self.client.get(request.callback, params)
        log.info("websub: denied %s on %s: %s", request.callback, request.topic_uri, reason)

    async def _over_cap(self, request: SubscriptionRequest) -> str | None:
        """Why a new subscription would pass a cap (per topic, per callback host), or None."""
        host = callback_host(request.callback)
        per_topic = per_host = 0
        for text in (await self.store.subscriptions()).values():
            record = Subscription.from_json(text)
            per_topic += record.topic_uri == request.topic_uri
            per_host += callback_host(record.callback) == host
        if per_topic >= self.config.max_subscriptions_per_topic:
            return "this topic has as many subscriptions as the hub takes"
        if per_host >= self.config.max_subscriptions_per_host:
            return "this callback host has as many subscriptions as the hub takes"
        return None
