"""The hub fixtures (a real hub on loopback, on the session's Redis) for these tests, and an
asyncio client of that Redis."""

from tests.support.hubs import client, hub, hub_factory
from tests.support.redis import redis_client

__all__ = ["client", "hub", "hub_factory", "redis_client"]
