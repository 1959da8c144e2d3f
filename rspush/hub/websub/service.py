"""The WebSub hub of one hub process: the callback client, subscription requests and
deliveries, started and stopped with the hub."""

from __future__ import annotations

from ..metrics import HubMetrics
from ..settings import Settings
from ..store import TopicStore
from .addresses import AddressPolicy
from .callbacks import CallbackClient
from .delivery import Deliveries
from .subscriptions import Subscriptions


class WebSubHub:
    def __init__(self, settings: Settings, store: TopicStore, metrics: HubMetrics) -> None:
        config = settings.websub
        self.client = CallbackClient(
            AddressPolicy.from_cidrs(config.callback_allow),
            connect_timeout_s=config.connect_timeout_s,
            read_timeout_s=config.read_timeout_s,
            max_response_bytes=config.max_response_bytes,
            per_host=config.per_host_concurrency,
            total=config.max_deliveries,
        )
        self.deliveries = Deliveries(settings, store, self.client, metrics)
        self.subscriptions = Subscriptions(
            settings,
            store,
            self.client,
            metrics,
            on_subscribed=self.deliveries.poke,
            on_unsubscribed=self.deliveries.drop,
        )

    async def request(self, body: bytes, token: str | None) -> None:
        await self.subscriptions.request(body, token)

    def start(self) -> None:
        self.deliveries.start()

    async def stop(self) -> None:
        await self.subscriptions.stop()
        await self.deliveries.stop()
        await self.client.aclose()
