"""The file-tree bridge as an operator runs it: a directory served over HTTP (the origin a
web server would be), ``rs-publish watch`` on it as a real process, and what a test checks
at the end — the mirror equal to the tree's published files, and every change the hub lists
for the topic, each file's history a valid sequence with no duplicate and nothing missed."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import signal
import sys
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.staticfiles import StaticFiles

from rspush.resourcesync import Entry
from rspush.source.tree import Skips
from tests.support.agents import mirror_files
from tests.support.fragments import TOKEN_A
from tests.support.served_lists import served_change_lists
from tests.support.sockets import bind
from tests.support.waiting import TIMEOUT_SCALE, eventually

RS_PUBLISH = Path(sys.executable).parent / "rs-publish"
STARTUP_TIMEOUT_S = 10.0
WAIT_S = 30.0
WATCHING = "rs-publish watch: watching"


def tree_files(root: Path, skipped: Callable[[str], bool] = lambda _: False) -> dict[str, bytes]:
    """The regular files of ``root`` a watcher publishes, by '/path' (as ``mirror_files``)."""
    found = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and not path.is_symlink() and not skipped(rel):
            found["/" + rel] = path.read_bytes()
    return found


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self):  # type: ignore[no-untyped-def]
        yield  # the test process owns the signals


@asynccontextmanager
async def serving_tree(root: Path) -> AsyncIterator[str]:
    """``root`` served read-only on 127.0.0.1 (any free port), as a static web server would;
    yields its base URL, ending in ``/``."""
    sock = bind("127.0.0.1", 0)
    app = Starlette()
    app.mount("/", StaticFiles(directory=root, check_dir=True))
    # "critical": a file changing while it is served is the scenario, not an error to log.
    config = uvicorn.Config(app, log_level="critical", lifespan="off", access_log=False)
    server = _Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]), name="tree-origin")
    try:
        async with asyncio.timeout(STARTUP_TIMEOUT_S * TIMEOUT_SCALE):
            while not server.started:
                if task.done():
                    task.result()
                await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/"
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task
        sock.close()


class Publisher:
    """An ``rs-publish watch`` subprocess; its output goes to ``log``."""

    def __init__(self, process: asyncio.subprocess.Process, log: Path) -> None:
        self.process = process
        self.log_path = log

    @property
    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    async def until(self, predicate: Callable[[], bool], what: str, timeout: float = WAIT_S):
        def done() -> bool:
            if self.process.returncode is not None:
                pytest.fail(f"rs-publish exited {self.process.returncode}:\n{self.log}")
            return predicate()

        await eventually(done, what, timeout)

    async def watching(self) -> None:
        await self.until(lambda: WATCHING in self.log, "the watch to start")

    async def stop(self, signum: int = signal.SIGTERM) -> int:
        self.process.send_signal(signum)
        async with asyncio.timeout(WAIT_S * TIMEOUT_SCALE):
            return await self.process.wait()


def publisher_env(token: str = TOKEN_A) -> dict[str, str]:
    return {**os.environ, "RSPUSH_TOKEN": token}


def watch_args(
    root: Path, base_url: str, hub_url: str, *extra: str, quiet: float = 0.3
) -> list[str]:
    """``rs-publish watch`` of ``root`` to the topic dataset1, with short waits."""
    return [
        "watch", str(root), "--base-url", base_url, "--hub", hub_url, "--topic", "dataset1",
        "--quiet", str(quiet), "--retry-wait", "0.05", "--max-retry-wait", "0.5", *extra,
    ]  # fmt: skip


@asynccontextmanager
async def publishing(log: Path, *args: str, token: str = TOKEN_A) -> AsyncIterator[Publisher]:
    """``rs-publish ARGS`` in the background until the block ends; killed if still running."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        process = await asyncio.create_subprocess_exec(
            RS_PUBLISH,
            *args,
            stdout=out,
            stderr=out,
            stdin=asyncio.subprocess.DEVNULL,
            env=publisher_env(token),
        )
    try:
        yield Publisher(process, log)
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()


async def listed_changes(hub_url: str, topic: str = "dataset1") -> list[Entry]:
    """Every change the hub lists for ``topic``: the closed lists (archive order), then the
    open list."""
    return [e for d in await served_change_lists(hub_url, topic) for e in d.entries]


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
            assert previous[0] != "deleted", (path, history)
            assert previous[1] == hashlib.sha256(tree[path]).hexdigest(), (path, history)
        else:
            assert previous[0] == "deleted", (path, history)
    assert set(tree) <= set(per_path), sorted(set(tree) - set(per_path))


def write(path: Path, content: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)


def agent_args(hub_url: str, base: str, dest: Path) -> list[str]:
    """``rs-subscribe run`` of the topic dataset1, the tree's URIs onto ``dest``."""
    return [hub_url, "--topic", "dataset1", "--dest", str(dest), "--map", f"{base}="]
