"""Discovery (Z39.99 §6.3) of a hub: from its base URL, its topic URI or any of its documents
to the topic's Capability List and push endpoint."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from rspush.hub.server import RunningHub
from rspush.remote.discovery import (
    TopicEndpoints,
    discover,
)
from tests.support.waiting import TIMEOUT_SCALE


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10 * TIMEOUT_SCALE, follow_redirects=True) as client:
        yield client


async def test_the_hub(hub: RunningHub, http: httpx.AsyncClient) -> None:
    topic = f"{hub.hub.settings.hub.base_url}/topics/dataset1"
    description = f"{hub.hub.settings.hub.base_url}/.well-known/resourcesync"
    found = await discover(http, hub.url, "dataset1")
    assert found == TopicEndpoints(
        topic="dataset1",
        capability_list=f"{topic}/capabilitylist.xml",
        change_list=f"{topic}/changelist.xml",
        change_list_archive=f"{topic}/changelist-archive.xml",
        resource_list=f"{topic}/resourcelist.xml",
        push_url=hub.push_url,
        source_description=description,
        framework=f"{topic}/framework",  # Framework Notification §5
    )
    assert found.push_url is not None
    assert found.base_uri == f"{hub.url}/"
    # The topic URI (an empty body with Link headers) and any hub document lead there too.
    for start in (topic, f"{topic}/changelist.xml", f"{topic}/changelist-archive.xml"):
        again = await discover(http, start, None)
        assert again.capability_list == found.capability_list
        assert again.push_url == found.push_url
