"""No answer names the store's internals: with the embedded server gone, every route's error
body (and the unauthenticated ``/readyz``) says "the store is unavailable" and nothing of its
socket path, data dir or error texts. ``/metrics`` can require a bearer token."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import httpx
import pytest

from rspush.hub.embedded import EmbeddedRedis
from rspush.hub.server import bind, running_hub
from tests.support.edge import (
    METRICS_TOKEN,
    MIRROR_1,
    PUBLIC,
    app_routes,
    concrete,
    edge_hub,
    edge_settings,
)
from tests.support.fragments import TOKEN_A, Times, auth, change_fragment

INTERNALS = ("redis", "valkey", ".sock", "unix:", "errno", "traceback", "connection")


def leaks(text: str, data_dir: Path) -> list[str]:
    lowered = text.lower()
    found = [word for word in INTERNALS if word in lowered]
    return found + ([str(data_dir)] if str(data_dir) in text or data_dir.name in text else [])


@pytest.mark.timeout(120)
async def test_no_error_body_names_the_store_or_its_data_dir(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data_dir = tmp_path / "hub-data-dir-secret"
    server = EmbeddedRedis(data_dir)
    url = await asyncio.to_thread(server.start)
    sock = bind("127.0.0.1", 0)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    body = change_fragment(("http://example.com/n1", "created", Times().next()))
    try:
        async with (
            running_hub(edge_settings(url, "internals", base), sock=sock) as running,
            httpx.AsyncClient(base_url=running.url, timeout=30) as http,
        ):
            assert (await http.get("/readyz")).status_code == 200
            await asyncio.to_thread(server.kill)
            checked = 0
            for template, methods in app_routes():
                path = concrete(template, PUBLIC)
                for method in sorted(methods):
                    # Valid credentials and a valid post: only the store can fail them.
                    token = TOKEN_A if method == "POST" else MIRROR_1
                    link = f'<{base}/topics/{PUBLIC}>; rel="self", <{base}/hub>; rel="hub"'
                    headers = {**auth(token), "Link": link}
                    content = body if method == "POST" else None
                    reply = await http.request(method, path, headers=headers, content=content)
                    if reply.status_code >= 400:
                        checked += 1
                        assert not leaks(reply.text, data_dir), (method, path, reply.text)
                        for name, value in reply.headers.items():
                            assert not leaks(value, data_dir), (method, path, name, value)
            assert checked >= 5  # the store-backed routes failed, and were looked at

            ready = await http.get("/readyz")
            assert ready.status_code == 503
            assert ready.json() == {
                "status": "unavailable",
                "error": "store-unavailable",
                "message": "the store is unavailable; retry later",
            }
            reply = await http.post(
                f"/topics/{PUBLIC}/changes", content=body, headers=auth(TOKEN_A)
            )
            assert reply.status_code == 503
            assert reply.json()["error"] == "store-unavailable"
            assert not leaks(reply.text, data_dir)
    finally:
        server.kill()
    # The detail is for the operator: in the log.
    logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("valkey.sock" in message for message in logged)


async def test_metrics_can_require_a_bearer_token(redis_url: str, prefix: str) -> None:
    async with edge_hub(redis_url, prefix, metrics_token=True) as (_, http):
        for token in (None, "wrong", TOKEN_A):
            headers = {} if token is None else {"Authorization": f"Bearer {token}"}
            reply = await http.get("/metrics", headers=headers)
            assert reply.status_code == 401, reply.text
            assert reply.headers["www-authenticate"].startswith("Bearer")
            assert reply.json()["error"] == "unauthenticated"
            assert "rspush_" not in reply.text
        reply = await http.get("/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
        assert reply.status_code == 200
        assert "rspush_accepted_changes_total" in reply.text


async def test_metrics_are_open_without_a_configured_token(redis_url: str, prefix: str) -> None:
    async with edge_hub(redis_url, prefix) as (_, http):
        reply = await http.get("/metrics")
        assert reply.status_code == 200 and "rspush_accepted_changes_total" in reply.text
