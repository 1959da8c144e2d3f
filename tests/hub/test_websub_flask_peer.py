"""Interop with a real WebSub subscriber from the package index, flask-websub 0.4.1, run in
its own process (tests/support/websub_peer.py): discovery through the topic URI's Link
header, subscription, verification of intent, notifications, unsubscription.

flask-websub refuses ``hub.secret`` with a hub on plain http (its NO_SECRET_WITH_HTTP rule),
so signatures are tested with this project's own callback server
(test_websub_conformance.py::test_101_subscription_with_secret)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from rspush.resourcesync import parse_document, validate
from tests.support.fragments import Times
from tests.support.waiting import TIMEOUT_SCALE, eventually
from tests.support.websub import post_changes, topic, verifications, websub_hub

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def peer(tmp_path: Path) -> Iterator[str]:
    """The flask-websub subscriber process; its URL."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.websub_peer", str(tmp_path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # the peer prints its address first, or exits
        assert line.startswith("listening on "), f"peer did not start: {line!r}"
        yield line.removeprefix("listening on ").strip()
    finally:
        process.terminate()
        try:
            process.wait(10 * TIMEOUT_SCALE)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        if process.stdout is not None:
            process.stdout.close()


async def events(http: httpx.AsyncClient, peer: str) -> dict[str, Any]:
    response = await http.get(f"{peer}/control/events")
    data: dict[str, Any] = response.json()
    return data


async def test_flask_websub_subscribes_and_receives(redis_url: str, prefix: str, peer: str) -> None:
    times = Times()
    async with websub_hub(redis_url, prefix) as hub, httpx.AsyncClient(timeout=30) as http:
        uri = topic(hub)
        response = await http.post(
            f"{peer}/control/subscribe", data={"url": uri, "lease_seconds": "3600"}
        )
        assert response.status_code == 200, response.text
        found = response.json()
        assert found["topic_url"] == uri  # discovered from Link rel="self"
        assert found["hub_url"] == f"{hub.hub.settings.hub.base_url}/hub"
        callback_id = found["callback_id"]

        async def confirmed() -> bool:
            return any(s["mode"] == "subscribe" for s in (await events(http, peer))["successes"])

        await eventually(confirmed, "flask-websub confirmed the subscription")
        await eventually(lambda: verifications(hub, "verified") == 1, "hub stored it")
        await post_changes(hub, times, "http://e.org/a", "http://e.org/b")
        await post_changes(hub, times, "http://e.org/c")

        async def received() -> list[str]:
            notes = (await events(http, peer))["notifications"]
            return [e.loc for n in notes for e in parse_document(n["body"].encode()).entries]

        async def all_received() -> bool:
            return await received() == ["http://e.org/a", "http://e.org/b", "http://e.org/c"]

        await eventually(all_received, "notifications received by flask-websub")
        notes = (await events(http, peer))["notifications"]
        assert all(n["topic"] == uri and n["callback_id"] == callback_id for n in notes)
        for note in notes:
            document = parse_document(note["body"].encode())
            assert document.md.capability == "change-notification"
            assert not validate(document)

        response = await http.post(f"{peer}/control/unsubscribe", data={"callback_id": callback_id})
        assert response.status_code == 200, response.text

        async def unsubscribed() -> bool:
            return await hub.hub.store.subscription_count() == 0

        await eventually(unsubscribed, "unsubscribed")
