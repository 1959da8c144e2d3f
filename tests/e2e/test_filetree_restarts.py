"""``rs-publish watch`` across restarts and failures: what changed while it was stopped is
published once on start (or by ``--once``), a batch the hub committed but the watcher never
heard of is posted again with the same Idempotency-Key (no duplicate), a hub not up yet,
answering 503 (its Retry-After honoured) or losing answers only delays changes, and a
refusal or an unusable state file is one line and a non-zero exit."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from rspush.hub.server import RunningHub, bind, running_hub
from tests.support.cli import run_script, running
from tests.support.edge import LossyProxy
from tests.support.filetree import (
    RS_PUBLISH,
    agent_args,
    check_history,
    listed_changes,
    mirrored,
    published_tree,
    publisher_env,
    publishing,
    serving_tree,
    watch_args,
    write,
)
from tests.support.fragments import TOKEN_B
from tests.support.hubs import HubFactory, make_settings
from tests.support.sockets import close_stream
from tests.support.waiting import TIMEOUT_SCALE

pytestmark = pytest.mark.timeout(180)


async def test_a_restart_publishes_what_changed_while_stopped_once(
    hub: RunningHub, tmp_path: Path
) -> None:
    root, dest = tmp_path / "tree", tmp_path / "mirror"
    for name in ("keep.txt", "edit.txt", "gone.txt", "move.txt", "touch.txt"):
        write(root / name, f"{name}\n".encode())
    async with (
        serving_tree(root) as base,
        running(tmp_path / "agent", *agent_args(hub.url, base, dest)) as agent,
    ):
        await agent.subscribed()
        async with publishing(tmp_path / "p1.log", *watch_args(root, base, hub.url)) as first:
            await first.watching()
            await mirrored(root, dest)
            assert await first.stop(signal.SIGINT) == 0
        # Stopped: the tree changes behind the watcher's back.
        write(root / "edit.txt", b"edited while stopped\n")
        (root / "gone.txt").unlink()
        (root / "sub").mkdir()
        (root / "move.txt").rename(root / "sub" / "moved.txt")
        write(root / "new" / "born.txt", b"created while stopped\n")
        os.utime(root / "touch.txt", ns=(1, 1))  # a new mtime, the same bytes: no change
        async with publishing(tmp_path / "p2.log", *watch_args(root, base, hub.url)) as second:
            await second.watching()
            await mirrored(root, dest)
            assert await second.stop() == 0
        entries = await listed_changes(hub.url)
    check_history(entries, base, published_tree(root))
    changes = sorted((e.loc.removeprefix(base), str(e.md.change)) for e in entries if e.md)
    assert changes == [
        ("edit.txt", "created"),
        ("edit.txt", "updated"),
        ("gone.txt", "created"),
        ("gone.txt", "deleted"),
        ("keep.txt", "created"),
        ("move.txt", "created"),
        ("move.txt", "deleted"),
        ("new/born.txt", "created"),
        ("sub/moved.txt", "created"),
        ("touch.txt", "created"),
    ]


async def test_once_publishes_the_difference_and_exits(hub: RunningHub, tmp_path: Path) -> None:
    root = tmp_path / "tree"
    write(root / "a.txt", b"a\n")
    write(root / "b" / "c.txt", b"c\n")
    args = watch_args(root, "http://files.example/", hub.url, "--once")
    code, _, err = await run_script(RS_PUBLISH, *args, env=publisher_env())
    assert code == 0, err
    assert "done: 2 changes accepted" in err
    code, _, err = await run_script(RS_PUBLISH, *args, env=publisher_env())
    assert code == 0 and "done: 0 changes accepted" in err, err
    (root / "a.txt").unlink()
    code, _, err = await run_script(RS_PUBLISH, *args, env=publisher_env())
    assert code == 0 and "done: 1 changes accepted" in err, err
    entries = await listed_changes(hub.url)
    assert [(e.loc, str(e.md.change)) for e in entries if e.md] == [
        ("http://files.example/a.txt", "created"),
        ("http://files.example/b/c.txt", "created"),
        ("http://files.example/a.txt", "deleted"),
    ]


async def test_a_batch_committed_before_a_crash_is_reposted_with_its_key(
    hub: RunningHub, tmp_path: Path
) -> None:
    """The hub commits the batch but every answer is lost; the watcher is killed (-9) before
    it could record it. The next run posts the pending batch again, byte for byte with the
    same key: the hub answers from its receipt, and lists each change once."""
    root = tmp_path / "tree"
    write(root / "a.txt", b"a\n")
    write(root / "b.txt", b"b\n")
    # Both quiet long ago, so the first run posts them as one batch: files written within
    # the quiet period would each wait their own, and a slow machine could split them.
    old = time.time() - 60
    for name in ("a.txt", "b.txt"):
        os.utime(root / name, (old, old))
    port = int(hub.url.rsplit(":", 1)[1])
    async with LossyProxy(port, drop=1_000).running() as proxy:
        args = watch_args(root, "http://files.example/", proxy.url, "--once")
        async with publishing(tmp_path / "p1.log", *args) as lost:
            await lost.until(lambda: proxy.dropped >= 2, "answers lost after the commit")
            assert await lost.stop(signal.SIGKILL) == -signal.SIGKILL
    assert len(await listed_changes(hub.url)) == 2
    args = watch_args(root, "http://files.example/", hub.url, "--once")
    code, _, err = await run_script(RS_PUBLISH, *args, env=publisher_env())
    assert code == 0, err
    assert "re-posting the batch left pending (2 changes)" in err
    assert "the hub already had this batch (replayed: True" in err
    assert "done: 0 changes accepted" in err  # the replay is not counted again
    entries = await listed_changes(hub.url)
    assert [(e.loc, str(e.md.change)) for e in entries if e.md] == [
        ("http://files.example/a.txt", "created"),
        ("http://files.example/b.txt", "created"),
    ]
    code, _, err = await run_script(RS_PUBLISH, *args, env=publisher_env())
    assert code == 0 and "done: 0 changes accepted" in err, err  # the state has them now


async def test_503s_and_lost_answers_only_delay_a_change(hub: RunningHub, tmp_path: Path) -> None:
    root = tmp_path / "tree"
    write(root / "a.txt", b"a\n")
    port = int(hub.url.rsplit(":", 1)[1])
    async with LossyProxy(port, drop=2, refuse=3).running() as proxy:
        args = watch_args(root, "http://files.example/", proxy.url, "--once")
        code, _, err = await run_script(RS_PUBLISH, *args, env=publisher_env())
        assert code == 0, err
        assert proxy.dropped == 2 and proxy.refused == 3
    assert err.count("retrying in") == 5
    entries = await listed_changes(hub.url)
    assert [(e.loc, str(e.md.change)) for e in entries if e.md] == [
        ("http://files.example/a.txt", "created")
    ]


async def test_a_busy_hub_s_retry_after_is_honoured(
    hub_factory: HubFactory, tmp_path: Path
) -> None:
    """A hub at its connection cap answers 503 with ``Retry-After: 1``: the watcher waits
    that second (not its own 0.05 s backoff) and posts again once the hub has room."""
    root = tmp_path / "tree"
    write(root / "a.txt", b"a\n")
    async with hub_factory(max_connections=40, header_timeout_s=60.0) as busy:
        port = int(busy.url.rsplit(":", 1)[1])
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(40)]
        args = watch_args(root, "http://files.example/", busy.url, "--once")
        async with publishing(tmp_path / "p.log", *args) as publisher:
            try:
                await publisher.until(
                    lambda: "503; retrying in 1 s" in publisher.log, "a refusal to wait out"
                )
            finally:
                for _, writer in held:
                    await close_stream(writer)
            async with asyncio.timeout(30 * TIMEOUT_SCALE):
                assert await publisher.process.wait() == 0, publisher.log
        assert "done: 1 changes accepted" in publisher.log
        entries = await listed_changes(busy.url)
    assert [(e.loc, str(e.md.change)) for e in entries if e.md] == [
        ("http://files.example/a.txt", "created")
    ]


@pytest.mark.parametrize(
    ("topic", "token", "says"),
    [
        ("dataset1", TOKEN_B, "403"),  # a Source the topic does not accept
        ("no-such-topic", None, "404"),
        ("dataset1", "not-a-token", "401"),
    ],
)
async def test_a_refusal_is_one_line_and_exit_1(
    hub: RunningHub, tmp_path: Path, topic: str, token: str | None, says: str
) -> None:
    root = tmp_path / "tree"
    write(root / "a.txt", b"a\n")
    args = watch_args(root, "http://files.example/", hub.url, "--once", "--topic", topic)
    env = publisher_env(token) if token else publisher_env()
    code, out, err = await run_script(RS_PUBLISH, *args, env=env)
    assert code == 1 and out == ""
    [line] = [x for x in err.splitlines() if "refused" in x]
    assert line.startswith(f"rs-publish watch: the hub refused a post: {says} "), err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--base-url", "ftp://files.example/"], "--base-url: 'ftp://files.example/' is not"),
        (["--base-url", "http://files.example/?x=1"], "--base-url: 'http://files.example/?x=1'"),
    ],
)
async def test_usage_errors_exit_2(tmp_path: Path, args: list[str], says: str) -> None:
    code, _, err = await run_script(
        RS_PUBLISH, *watch_args(tmp_path, "http://x/", "http://127.0.0.1:9"), *args,
        env=publisher_env(),
    )  # fmt: skip
    assert code == 2 and err.startswith(f"rs-publish watch: {says}"), err
    code, _, err = await run_script(
        RS_PUBLISH, *watch_args(tmp_path / "nope", "http://x/", "http://127.0.0.1:9"),
        env=publisher_env(),
    )  # fmt: skip
    assert code == 2 and "not a directory" in err, err


async def test_an_unusable_state_file_is_one_line_and_exit_2(
    hub: RunningHub, tmp_path: Path
) -> None:
    root = tmp_path / "tree"
    write(root / "a.txt", b"a\n")
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"not a database, not even close" * 100)
    args = watch_args(root, "http://files.example/", hub.url, "--once")
    code, _, err = await run_script(RS_PUBLISH, *args, "--state", str(garbage), env=publisher_env())
    assert code == 2 and err.startswith("rs-publish watch: cannot use the state file: "), err
    async with publishing(tmp_path / "p.log", *watch_args(root, "http://f/", hub.url)) as one:
        await one.watching()
        code, _, err = await run_script(RS_PUBLISH, *args, env=publisher_env())
        assert code == 2 and "another rs-publish watch is using this state file" in err, err
        assert await one.stop() == 0
    code, _, err = await run_script(RS_PUBLISH, *args, env=publisher_env())
    assert code == 2 and "written for base url 'http://f/', not 'http://files.example/'" in err


async def test_a_hub_not_yet_up_is_waited_for(redis_url: str, prefix: str, tmp_path: Path) -> None:
    """Connection refused: the watcher keeps trying, and publishes once the hub is up."""
    root = tmp_path / "tree"
    write(root / "a.txt", b"a\n")
    probe = bind("127.0.0.1", 0)
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there now
    base = f"http://127.0.0.1:{port}"
    args = watch_args(root, "http://files.example/", base, "--once")
    async with publishing(tmp_path / "p.log", *args) as publisher:
        await publisher.until(lambda: "ConnectError; retrying" in publisher.log, "a refusal")
        settings = make_settings(redis_url, prefix, base)
        async with running_hub(settings, sock=bind("127.0.0.1", port)) as late:
            async with asyncio.timeout(30 * TIMEOUT_SCALE):
                assert await publisher.process.wait() == 0, publisher.log
            entries = await listed_changes(late.url)
    assert [(e.loc, str(e.md.change)) for e in entries if e.md] == [
        ("http://files.example/a.txt", "created")
    ]


async def test_a_tree_gone_as_a_whole_is_not_published_as_deleted(
    hub: RunningHub, tmp_path: Path
) -> None:
    """The watched folder moved away (or its volume unmounted): exit 2, no deletions."""
    root = tmp_path / "tree"
    write(root / "a.txt", b"a\n")
    write(root / "b" / "c.txt", b"c\n")
    async with publishing(tmp_path / "p.log", *watch_args(root, "http://f/", hub.url)) as p:
        await p.watching()
        await p.until(lambda: "published 2 created" in p.log, "the first publication")
        root.rename(tmp_path / "elsewhere")
        async with asyncio.timeout(30 * TIMEOUT_SCALE):
            assert await p.process.wait() == 2, p.log
    assert "the tree is gone; nothing published for it" in p.log
    entries = await listed_changes(hub.url)
    assert sorted(str(e.md.change) for e in entries if e.md) == ["created", "created"]
