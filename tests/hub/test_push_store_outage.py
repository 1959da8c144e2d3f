"""The push channel across a restart of the Redis server: live subscribers keep receiving.

The per-topic reader blocks on the stream; when the server goes away, its read fails. It must
retry until the server is back (the store reports the failure as its own error type), never
end silently: a subscriber whose connection stays open would otherwise wait for ever while
the topic moves on.
"""

from __future__ import annotations

from pathlib import Path

import httpx

from rspush.hub.embedded import EmbeddedRedis
from rspush.hub.server import bind, running_hub
from tests.support.fragments import Times, auth, change_fragment
from tests.support.hubs import make_settings
from tests.support.push import batch, post, subscribed
from tests.support.waiting import eventually


async def test_live_subscribers_receive_after_the_redis_server_restarts(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path / "redis", appendfsync="always")
    server.start()
    try:
        sock = bind("127.0.0.1", 0)
        base = f"http://127.0.0.1:{sock.getsockname()[1]}"
        settings = make_settings(server.url, "outage", base)
        times = Times()
        async with (
            running_hub(settings, sock=sock) as hub,
            httpx.AsyncClient(base_url=base, timeout=30) as http,
        ):
            assert hub.push_url is not None
            async with subscribed(hub.push_url) as client:
                await post(http, batch(times, "before", 2))
                await eventually(lambda: len(client.changes()) == 2, "the first changes")

                server.kill()
                server.start()  # the same data dir: the stream and its positions survive

                async def posted() -> bool:
                    # Refused with 503 until the hub's client reconnects to the server.
                    change = ("http://example.com/after/0", "created", times.next())
                    reply = await http.post(
                        "/topics/dataset1/changes", content=change_fragment(change), headers=auth()
                    )
                    return reply.status_code == 202

                await eventually(posted, "a post accepted after the restart", timeout=30)
                await eventually(
                    lambda: len(client.changes()) == 3,
                    "the change posted after the restart, pushed on the same connection",
                    timeout=30,
                )
                assert not client.done
    finally:
        server.stop()
