"""WebSub with ``rs-hub serve --workers 2``: the HTTP worker takes the subscription and the
Source's post, the push worker delivers (so callbacks never share an event loop with
ingest), and a subscriber still gets every change, in order."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.fragments import Times, change_fragment
from tests.support.processes import (
    SOURCE_TOKEN,
    HubProcess,
    alive,
    children_of,
    kill_all,
    valkey_pids,
    write_config,
)
from tests.support.waiting import eventually
from tests.support.websub import running_callback, subscribe

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
]
BASE_URL = "http://127.0.0.1:8080"  # write_config's: the topic URIs name it
AUTH = {"Authorization": f"Bearer {SOURCE_TOKEN}", "Content-Type": "application/xml"}


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[HubProcess]:
    config = write_config(tmp_path / "hub.toml", base_url=BASE_URL)
    with config.open("a", encoding="utf-8") as out:
        out.write('\n[websub]\ncallback_allow = ["127.0.0.1/32"]\nscan_interval_s = 0.2\n')
    data = tmp_path / "data"
    process = HubProcess(
        tmp_path / "hub.log", "--config", config, "--data-dir", data, "--workers", "2"
    )
    process.start()
    yield process
    children = children_of(process.pid)
    process.kill()
    kill_all({p for p in children if alive(p)} | valkey_pids(data))


async def test_the_push_worker_delivers_what_the_http_worker_accepted(hub: HubProcess) -> None:
    url, _ = hub.wait_serving(60)
    topic_uri = f"{BASE_URL}/topics/dataset1"
    times = Times()
    async with running_callback() as cb:
        reply = await subscribe(url, topic_uri, cb.url())
        assert reply.status_code == 202, reply.text
        await eventually(lambda: [v["hub.mode"] for v in cb.verifications] == ["subscribe"])
        locs = []
        async with httpx.AsyncClient(timeout=30) as http:
            for n in range(3):
                batch = [
                    (f"http://example.com/w/{n}/{i}", "created", times.next()) for i in range(4)
                ]
                locs += [loc for loc, _, _ in batch]
                response = await http.post(
                    f"{url}/topics/dataset1/changes", content=change_fragment(*batch), headers=AUTH
                )
                assert response.status_code == 202, response.text
        await eventually(lambda: cb.locs() == locs, "every change delivered, in order")
        assert all(n.valid() for n in cb.received())
        # /metrics, served by the HTTP worker, counts the subscription the push worker holds.
        await eventually(
            lambda: metric(url, "rspush_websub_delivering ") == 1, "summed delivering gauge"
        )
        assert metric(url, "rspush_websub_subscriptions ") == 1


def metric(url: str, line_start: str) -> float | None:
    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    return None
