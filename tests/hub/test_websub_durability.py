"""Durable delivery across hub crashes: two ``rs-hub serve`` processes on one Redis, a
subscription delivered by one of them, the delivering process killed (SIGKILL) in the middle
of deliveries while changes keep arriving through the other. Every change reaches the
callback, in order; ``from``/``until`` never leave a gap; the only duplicates are at the
seam (a notification answered 2xx whose cursor move died with the process is sent again by
the process taking over, starting at the same ``from``).

A callback outage and a slow callback are in test_websub_delivery.py (one process)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.fragments import Times, change_fragment
from tests.support.processes import SOURCE_TOKEN, HubProcess, write_config
from tests.support.waiting import eventually
from tests.support.websub import Notification, running_callback, subscribe

BASE_URL = "http://hub.test"
TOPIC_URI = f"{BASE_URL}/topics/dataset1"
WEBSUB = """
[websub]
callback_allow = ["127.0.0.1/32"]
worker_lease_s = 1.0
scan_interval_s = 0.1
retry_base_s = 0.05
retry_max_s = 0.2
max_entries_per_notification = 4
"""


@pytest.fixture
def hubs(tmp_path: Path, redis_url: str, prefix: str) -> Iterator[list[HubProcess]]:
    started: list[HubProcess] = []
    for name in ("a", "b"):
        config = write_config(tmp_path / f"{name}.toml", base_url=BASE_URL, redis_url=redis_url)
        text = config.read_text(encoding="utf-8")
        config.write_text(f'redis_prefix = "{prefix}"\n{text}{WEBSUB}', encoding="utf-8")
        started.append(HubProcess(tmp_path / f"{name}.log", "--config", config).start())
    try:
        yield started
    finally:
        for hub in started:
            hub.kill()


def delivered(notes: list[Notification]) -> tuple[list[str], int]:
    """The changes a subscriber keeps (duplicates at a seam dropped) and how many seams it
    saw; fails on a gap or on a notification going back further than a seam."""
    locs: list[str] = []
    seen: set[str] = set()
    seams = 0
    last_until = None
    for note in notes:
        start, until = note.span
        if last_until is not None:
            assert start <= last_until, f"gap: {last_until} -> {start}"
            if start < last_until:
                seams += 1
        last_until = until if last_until is None else max(last_until, until)
        for loc in note.locs:
            if loc not in seen:
                seen.add(loc)
                locs.append(loc)
    return locs, seams


async def test_killing_the_delivering_hub_loses_nothing(hubs: list[HubProcess]) -> None:
    a, b = hubs
    url_a, _ = await asyncio.to_thread(a.wait_serving)
    url_b, _ = await asyncio.to_thread(b.wait_serving)
    times = Times()
    expected: list[str] = []

    async def post(http: httpx.AsyncClient, url: str, batch: int) -> None:
        locs = [f"http://e.org/{batch}-{i}" for i in range(5)]
        body = change_fragment(*((loc, "updated", times.next()) for loc in locs))
        headers = {"Authorization": f"Bearer {SOURCE_TOKEN}", "Content-Type": "application/xml"}
        response = await http.post(f"{url}/topics/dataset1/changes", content=body, headers=headers)
        assert response.status_code == 202, response.text
        expected.extend(locs)

    async with running_callback() as cb, httpx.AsyncClient(timeout=30) as http:
        cb.delay_s = 0.05  # deliveries are in flight most of the time
        response = await subscribe(url_a, TOPIC_URI, cb.url())
        assert response.status_code == 202
        await eventually(lambda: cb.modes() == ["subscribe"], "verification", timeout=30)
        for batch in range(10):
            await post(http, url_a, batch)
        await eventually(lambda: len(cb.notifications) >= 3, "deliveries under way", timeout=30)
        a.kill()  # the process that verified, hence delivers, dies mid-delivery
        for batch in range(10, 20):
            await post(http, url_b, batch)

        def complete() -> bool:
            return delivered(cb.received())[0] == expected

        await eventually(complete, "delivered by the other process", timeout=60)
        a.start()
        url_a, _ = await asyncio.to_thread(a.wait_serving)  # a new port
        under_way = len(cb.notifications) + 3
        for batch in range(20, 30):
            await post(http, url_a, batch)
        await eventually(lambda: len(cb.notifications) >= under_way, "deliveries", timeout=30)
        b.kill()  # now the holder is the other one: it dies mid-delivery too
        await eventually(complete, "every change delivered", timeout=60)
        locs, seams = delivered(cb.received())
        assert locs == expected
        assert seams <= 2
        assert all(note.valid() for note in cb.received())
