"""``rs-publish watch`` killed with SIGKILL at random moments while the tree keeps changing:
the hub lists every change exactly once and the mirror ends byte-identical.

A seeded RNG (printed; ``RSPUSH_FILETREE_SEED`` replays it) writes, deletes and renames files
— in nested folders, with spaces and non-ASCII names — while the watcher runs, is killed (-9)
after a random time, and is started again, round after round; small batches (``--batch 3``)
and a short quiet period keep posts in flight, so kills land before, during and after them,
and between a post and the state write. At the end a last watcher runs to quiet; the
``rs-subscribe`` mirror must equal the tree, and each file's history in the hub's Change
Lists must be a valid sequence with no state announced twice in a row (a re-post that was
not recognised as the same batch would be) and end in the file's current content.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
from pathlib import Path

import pytest

from rspush.hub.server import RunningHub
from tests.support.cli import running
from tests.support.filetree import (
    agent_args,
    check_history,
    listed_changes,
    mirrored,
    published_tree,
    publishing,
    serving_tree,
    watch_args,
    write,
)

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(not os.sys.platform.startswith("linux"), reason="Linux signals"),
]

ROUNDS = int(os.environ.get("RSPUSH_FILETREE_ROUNDS", "8"))
NAMES = (
    "a.txt",
    "b c.txt",
    "ü/d.txt",
    "deep/er/e.bin",
    "f.txt",
    "g h/i ☃.txt",
    "deep/j.txt",
    "k.dat",
    "ü/l m.txt",
    "n.txt",
)


async def mutate(root: Path, rng: random.Random, stop: asyncio.Event) -> int:
    """Change the tree at random until ``stop``; return how many changes were made."""
    made = 0
    while not stop.is_set():
        path = root / rng.choice(NAMES)
        roll = rng.random()
        if roll < 0.5:
            write(path, rng.randbytes(rng.randint(0, 20_000)))
        elif roll < 0.7:
            path.unlink(missing_ok=True)
        elif path.exists():
            target = root / rng.choice(NAMES)
            target.parent.mkdir(parents=True, exist_ok=True)
            path.rename(target)  # a rename over another file replaces it
        else:
            part = path.with_name(path.name + ".part")  # skipped until renamed whole
            write(part, rng.randbytes(rng.randint(1, 20_000)))
            part.rename(path)
        made += 1
        await asyncio.sleep(rng.uniform(0.005, 0.05))  # the writer's pace
    return made


async def test_kill_9_at_random_moments_loses_and_duplicates_nothing(
    hub: RunningHub, tmp_path: Path
) -> None:
    seed = int(os.environ.get("RSPUSH_FILETREE_SEED") or random.SystemRandom().getrandbits(32))
    print(f"file-tree crash seed {seed} (replay: RSPUSH_FILETREE_SEED={seed})")
    rng = random.Random(seed)
    root, dest, logs = tmp_path / "tree", tmp_path / "mirror", tmp_path / "logs"
    root.mkdir()
    async with (
        serving_tree(root) as base,
        running(tmp_path / "agent", *agent_args(hub.url, base, dest)) as agent,
    ):
        await agent.subscribed()
        args = watch_args(root, base, hub.url, "--batch", "3", quiet=0.05)
        stop = asyncio.Event()
        mutator = asyncio.create_task(mutate(root, rng, stop))
        try:
            for round_ in range(ROUNDS):
                async with publishing(logs / f"round-{round_}.log", *args) as publisher:
                    if rng.random() < 0.8:  # else it dies starting up, or catching up
                        await publisher.watching()
                    await asyncio.sleep(rng.uniform(0.05, 1.5))  # a random moment to die
                    assert await publisher.stop(signal.SIGKILL) == -signal.SIGKILL
        finally:
            stop.set()
            made = await mutator
        async with publishing(logs / "last.log", *args) as last:
            await last.watching()
            await mirrored(root, dest, timeout=60)
            assert await last.stop() == 0
        entries = await listed_changes(hub.url)
    check_history(entries, base, published_tree(root))
    reposted = sum("re-posting" in p.read_text() for p in logs.iterdir())
    posts = sum(p.read_text().count("watch: published ") for p in logs.iterdir())
    print(
        f"{made} changes made, {len(entries)} listed in {posts} acknowledged posts, "
        f"{reposted} pending batches re-posted"
    )
