"""``rs-publish watch DIR`` → hub → ``rs-subscribe run``: a real directory, changed by the test
while it is watched, ends byte-identical at the mirror.

Every program runs as an operator runs it: ``rs-publish watch`` and ``rs-subscribe run`` are
the console scripts in subprocesses; the hub runs in this test's event loop on the session's
Redis, and the tree is served over HTTP by a static file server (the origin a web server
would be). At the end the hub's Change Lists are read back: each file's history must be a
valid sequence (created, then updated or deleted; never the same state announced twice
in a row: no duplicate), ending in the tree's current state (no missed change). Hidden and
temporary files, and symbolic links (out of the tree or within it), are never published.
"""

from __future__ import annotations

import asyncio
import os
import shutil
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

pytestmark = pytest.mark.timeout(180)


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
    # Links are not followed: neither out of the tree nor within it.
    write(tmp_path / "secret" / "key.txt", b"outside the tree\n")
    (root / "link-to-file").symlink_to(tmp_path / "secret" / "key.txt")
    (root / "link-to-folder").symlink_to(tmp_path / "secret", target_is_directory=True)
    (root / "link-inside").symlink_to(root / "a.txt")
    # The agent first: it takes its baseline of the empty topic, so the watcher's first
    # changes must be dated after it (now), or the agent would skip them.
    async with (
        serving_tree(root) as base,
        running(tmp_path / "agent", *agent_args(hub.url, base, dest)) as agent,
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

            # A folder renamed: its files are deleted under the old name, created under the
            # new one; a folder moved in from outside the tree: its files are created.
            (root / "new").rename(root / "moved folder")
            outside = tmp_path / "outside"
            write(outside / "inner" / "o.txt", b"moved in\n")
            outside.rename(root / "moved in")
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
    never = (".hidden", ".tmp", ".git", ".swp", ".part", "link-")
    assert not [e for e in entries if any(s in e.loc for s in never)]
    assert "stopped" in publisher.log
