"""``rs-publish watch DIR`` → hub → ``rs-subscribe run``: a real directory, changed by the test
while it is watched, ends byte-identical at the mirror.

Every program runs as an operator runs it: ``rs-publish watch`` and ``rs-subscribe run`` are
the console scripts in subprocesses; the hub runs in this test's event loop on the session's
Redis, and the tree is served over HTTP by a static file server (the origin a web server
would be). At the end the hub's Change Lists are read back: each file's history must be a
valid sequence (created, then updated or deleted; never the same state announced twice
in a row: no duplicate), ending in the tree's current state (no missed change).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
from collections import defaultdict
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from rspush.hub.server import RunningHub
from rspush.resourcesync import Entry
from rspush.source.tree import Skips
from tests.support.agents import mirror_files
from tests.support.cli import running
from tests.support.filetree import (
    listed_changes,
    publishing,
    serving_tree,
    tree_files,
    watch_args,
)
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(180)

SKIPS = Skips()


def published_tree(root: Path) -> dict[str, bytes]:
    return tree_files(root, SKIPS.skipped)


async def mirrored(root: Path, dest: Path, timeout: float = 30) -> None:
    """The mirror equals the published part of the tree (hidden and temp files left out)."""

    def same() -> bool:
        return mirror_files(dest) == published_tree(root)

    try:
        await eventually(same, "the mirror to equal the tree", timeout)
    except AssertionError:
        mine, theirs = mirror_files(dest), published_tree(root)
        raise AssertionError(
            f"mirror != tree: missing {sorted(set(theirs) - set(mine))}, "
            f"extra {sorted(set(mine) - set(theirs))}, "
            f"different {sorted(k for k in mine if k in theirs and mine[k] != theirs[k])}"
        ) from None


def histories(entries: list[Entry], base: str) -> dict[str, list[tuple[str, str | None]]]:
    """Per tree path: its changes in list order, as (change, sha-256 or None)."""
    found: dict[str, list[tuple[str, str | None]]] = defaultdict(list)
    for entry in entries:
        assert entry.loc.startswith(base), entry.loc
        assert entry.md is not None and entry.md.change is not None
        sha = next((h.digest for h in entry.md.hash if h.algorithm == "sha-256"), None)
        found["/" + unquote(urlsplit(entry.loc).path[len(urlsplit(base).path) :])].append(
            (str(entry.md.change), sha)
        )
    return found


def check_history(entries: list[Entry], base: str, tree: dict[str, bytes]) -> None:
    """Each file's changes are a valid sequence with no state announced twice in a row (a
    duplicate), ending in the tree's current content (nothing missed)."""
    times = [e.md.datetime for e in entries if e.md is not None]
    assert all(t is not None for t in times) and times == sorted(times)
    per_path = histories(entries, base)
    for path, history in per_path.items():
        previous: tuple[str, str | None] | None = None
        for change, sha in history:
            if previous is None or previous[0] == "deleted":
                assert change == "created", (path, history)
            else:
                assert change in ("updated", "deleted"), (path, history)
                assert change == "deleted" or sha != previous[1], ("duplicate", path, history)
            previous = (change, sha)
        assert previous is not None
        if path in tree:
            assert previous == ("updated" if len(history) > 1 else "created", previous[1])
            assert previous[1] == hashlib.sha256(tree[path]).hexdigest(), (path, history)
        else:
            assert previous[0] == "deleted", (path, history)
    assert set(tree) <= set(per_path), sorted(set(tree) - set(per_path))


def write(path: Path, content: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)


def agent_args(hub: RunningHub, base: str, dest: Path) -> list[str]:
    return [hub.url, "--topic", "dataset1", "--dest", str(dest), "--map", f"{base}="]


async def test_a_watched_tree_ends_byte_identical_at_the_mirror(
    hub: RunningHub, tmp_path: Path
) -> None:
    root, dest = tmp_path / "tree", tmp_path / "mirror"
    write(root / "a.txt", b"first\n")
    write(root / "dir with space" / "é ü ☃.txt", b"unicode names\n")
    write(root / "nested" / "deep" / "x.bin", os.urandom(300_000))
    write(root / "odd #?;=&+ name.txt", b"reserved characters\n")
    write(root / ".hidden", b"never published\n")
    write(root / "draft.tmp", b"never published\n")
    write(root / ".git" / "config", b"never published\n")
    # The agent first: it takes its baseline of the empty topic, so the watcher's first
    # changes must be dated after it (now), or the agent would skip them.
    async with (
        serving_tree(root) as base,
        running(tmp_path / "agent", *agent_args(hub, base, dest)) as agent,
    ):
        await agent.subscribed()
        # A quiet period ten times the growing writer's pace below, even on a loaded machine.
        args = watch_args(root, base, hub.url, quiet=1.0)
        async with publishing(tmp_path / "publisher.log", *args) as publisher:
            await publisher.watching()
            await mirrored(root, dest)

            write(root / "a.txt", b"first, then modified\n")
            write(root / "new" / "nested" / "c.txt", b"a file in new folders\n")
            write(root / "x.swp", b"an editor's swap file\n")
            write(root / "download.part", os.urandom(50_000))
            (root / "download.part").rename(root / "download.bin")  # appears whole
            (root / "dir with space" / "é ü ☃.txt").rename(root / "renamed ü.txt")
            shutil.rmtree(root / "nested")
            await mirrored(root, dest)

            # A file written slowly, in pieces closer together than the quiet period:
            # it is published whole, never half-written.
            with (root / "growing.log").open("wb") as growing:
                for _ in range(8):
                    growing.write(os.urandom(10_000))
                    growing.flush()
                    await asyncio.sleep(0.1)  # the writer's pace, not a wait
            (root / "a.txt").unlink()
            await mirrored(root, dest)
            assert await publisher.stop() == 0
        entries = await listed_changes(hub.url)
    check_history(entries, base, published_tree(root))
    grown = [e for e in entries if e.loc.endswith("/growing.log")]
    assert [e.md.length for e in grown if e.md] == [80_000]
    assert not [
        e for e in entries if any(s in e.loc for s in (".hidden", ".tmp", ".git", ".swp", ".part"))
    ]
    assert "stopped" in publisher.log
