"""The push process's startup heap is frozen out of garbage collection once serving starts
(rspush.hub.push.heap): garbage collected first, what is left frozen, once per process."""

from __future__ import annotations

import gc
import subprocess
import sys

from rspush.hub.server import RunningHub

FRESH_PROCESS = """
import gc, weakref
gc.disable()  # the cycle below stays until a collection: only the freeze may collect it
from rspush.hub.push.heap import freeze_startup_heap

class Node:
    pass

cycle = Node()
cycle.self = cycle
ref = weakref.ref(cycle)
del cycle
kept = [Node() for _ in range(1000)]
assert ref() is not None and gc.get_freeze_count() == 0
assert freeze_startup_heap() is True
assert ref() is None, "garbage must be collected, not frozen"
frozen = gc.get_freeze_count()
assert frozen > 1000, frozen
later = [Node() for _ in range(100)]
assert freeze_startup_heap() is False
assert gc.get_freeze_count() == frozen, "only the first call freezes"
print("ok")
"""


def test_garbage_is_collected_then_the_rest_frozen_once() -> None:
    done = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


async def test_a_started_push_server_has_frozen_the_heap(hub: RunningHub) -> None:
    assert hub.push is not None
    assert gc.get_freeze_count() > 0
