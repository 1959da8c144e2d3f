"""What an idle push subscriber costs the hub (docs/benchmarks.md, "Idle memory per
connection"): a real hub in this process, 200 subscribers in a child process (so only the
hub's allocations are traced) that subscribe to one topic and then do nothing.

Asserted: the Python memory the hub holds per idle subscriber (``tracemalloc``) stays under a
bound, and each holds one task (its handler), not one more for keepalive pings. The figure
is printed (``pytest -s``).
"""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import tracemalloc

import pytest

from rspush.hub.settings import Settings
from tests.support.push import custom_hub
from tests.support.waiting import eventually

SUBSCRIBERS = 200
# Measured 9.7 KB (Python 3.11, websockets 17); 16.4 KB while each connection kept
# its handshake headers, its subscribe message and a keepalive task.
BOUND_BYTES = 11 * 1024

CLIENTS = """
import asyncio, json, sys
from websockets.asyncio.client import connect

async def main(url, n):
    subscribe = json.dumps({"type": "subscribe", "topics": [{"topic": "dataset1"}]})
    held = []
    for _ in range(n):
        ws = await connect(url, compression=None, open_timeout=30)
        await ws.send(subscribe)
        await ws.recv()
        held.append(ws)
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


def _per_address(settings: Settings) -> Settings:
    push = settings.push.model_copy(update={"max_connections_per_address": 2 * SUBSCRIBERS})
    return settings.model_copy(update={"push": push})


@pytest.mark.timeout(120)
async def test_an_idle_subscriber_holds_little_memory_and_one_task(
    redis_url: str, prefix: str
) -> None:
    async with custom_hub(redis_url, prefix, _per_address) as (running, _):
        assert running.push_url is not None and running.push is not None
        feed = running.push.feeds["dataset1"]
        # The test suite runs its loops in debug mode, which keeps a creation traceback with
        # every task, future and callback: not what a hub holds.
        loop = asyncio.get_running_loop()
        debug = loop.get_debug()
        loop.set_debug(False)
        gc.collect()
        tasks_before = len(asyncio.all_tasks())
        tracemalloc.start()
        try:
            before = tracemalloc.take_snapshot()
            clients = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                CLIENTS,
                running.push_url,
                str(SUBSCRIBERS),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            try:
                assert clients.stdout is not None and clients.stdin is not None
                async with asyncio.timeout(90):
                    assert await clients.stdout.readline() == b"ready\n"
                await eventually(
                    lambda: sum(sub.live for sub in feed.subscriptions) == SUBSCRIBERS,
                    what="every subscriber live",
                )
                gc.collect()
                after = tracemalloc.take_snapshot()
                tasks = len(asyncio.all_tasks()) - tasks_before
            finally:
                if clients.stdin is not None:
                    clients.stdin.close()
                async with asyncio.timeout(30):
                    await clients.wait()
        finally:
            tracemalloc.stop()
            loop.set_debug(debug)
        held = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
        per_subscriber = held / SUBSCRIBERS
        print(f"idle subscriber: {per_subscriber / 1024:.1f} KB traced, {tasks} tasks")
        assert per_subscriber <= BOUND_BYTES, f"{per_subscriber:.0f} bytes per idle subscriber"
        # One handler task each (websockets keeps it for the connection's life), and a few
        # for the hub (the topic's feed reader).
        assert SUBSCRIBERS <= tasks <= SUBSCRIBERS + 5, tasks
