"""``rs-subscribe run|baseline|audit|status`` as an operator runs them: the real console script
in a subprocess, against a real hub on a real Redis (in this test's event loop) and a loopback
origin that serves the resources.

The hub serves the topic's documents; the resources live on the origin, so every command gets
``--map ORIGIN/=`` (the origin onto the root of ``--dest``). A running agent's stdout and
stderr go to files (no pipe to fill up); tests wait on what appears in them, or in the
``--events`` file, never for a fixed time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shlex
import signal
import sys
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from rspush.hub.server import RunningHub
from tests.support.agents import mirror_files
from tests.support.cli import (
    WAIT_S,
    RunningAgent,
    applied,
    position,
    read_events,
    rs_subscribe,
    running,
    status_of,
)
from tests.support.origin import Announced, Origin, post_fragment, publish, running_origin
from tests.support.waiting import TIMEOUT_SCALE


def run_args(hub: RunningHub, origin: Origin, dest: Path, *extra: str) -> list[str]:
    return [
        hub.url,
        "--dest",
        str(dest),
        "--topic",
        "dataset1",
        "--map",
        f"{origin.url}/=",
        "--poll-interval",
        "0.1",
        *extra,
    ]


def same_as_origin(origin: Origin, dest: Path) -> Callable[[], bool]:
    return lambda: mirror_files(dest) == origin.resources


async def post_locs(
    http: httpx.AsyncClient, origin: Origin, entries: list[tuple[str, str, bytes]]
) -> httpx.Response:
    """POST (loc, change, content) entries as they are — any loc, no quoting — with the
    content's length and md5 (what :func:`publish` does for paths on the origin)."""
    announced = [
        Announced(loc, change, content, origin.clock.next()) for loc, change, content in entries
    ]
    return await post_fragment(http, "dataset1", announced)


def files_under(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


class StalledServer:
    """A loopback HTTP server that reads each request and answers it only once ``release``
    is set: a resource whose fetch stays in flight for as long as a test needs."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.release = asyncio.Event()
        self.requests = 0

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            self.requests += 1
            await self.release.wait()
            head = (
                "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
                f"Content-Length: {len(self.body)}\r\nConnection: close\r\n\r\n"
            )
            writer.write(head.encode() + self.body)
            await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[str]:
        """Serve on 127.0.0.1, a free port; yield ``http://127.0.0.1:PORT``."""
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        try:
            yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        finally:
            self.release.set()  # let stuck handlers finish
            server.close()
            await server.wait_closed()


# --- baseline and status -----------------------------------------------------------------------


async def test_baseline_then_status(
    hub: RunningHub, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    async with running_origin() as origin:
        await publish(
            client,
            "dataset1",
            origin,
            [
                ("/a.txt", "created", b"alpha"),
                ("/dir/b.txt", "created", b"bravo"),
                ("/dir/sub/c.txt", "created", b"charlie"),
                ("/gone.txt", "created", b"to be deleted"),
                ("/empty", "created", b""),
            ],
        )
        await publish(client, "dataset1", origin, [("/gone.txt", "deleted", None)])
        dest = tmp_path / "mirror"
        events = tmp_path / "baseline.events.jsonl"
        code, _, err = await rs_subscribe(
            "baseline",
            hub.url,
            "--dest",
            str(dest),
            "--topic",
            "dataset1",
            "--map",
            f"{origin.url}/=",
            "--events",
            str(events),
        )
        assert code == 0, err
        assert mirror_files(dest) == origin.resources
        assert len(origin.resources) == 4

        lines = read_events(events)
        assert {e["uri"] for e in applied(lines, "baseline")} == {
            origin.uri(p) for p in origin.resources
        }
        assert len(lines) == 4

        row = await status_of(dest / ".rs-subscribe" / "state.sqlite")
        assert row["topic"] == "dataset1"
        assert row["source"].startswith(hub.url)
        assert row["baseline_at"] is not None
        assert row["resources"] == 4
        assert row["failures"] == 0
        # The human form names the same things.
        code, out, _ = await rs_subscribe(
            "status", "--state", str(dest / ".rs-subscribe/state.sqlite")
        )
        assert code == 0
        assert "dataset1" in out and "baseline_at" in out


async def test_baseline_exits_1_when_a_resource_cannot_be_fetched(
    hub: RunningHub, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    async with running_origin() as origin:
        await publish(
            client,
            "dataset1",
            origin,
            [("/a.txt", "created", b"alpha"), ("/lost.txt", "created", b"lost")],
        )
        origin.delete("/lost.txt")  # the Source lists it, but its server answers 404
        dest = tmp_path / "mirror"
        code, _, err = await rs_subscribe(
            "baseline",
            hub.url,
            "--dest",
            str(dest),
            "--topic",
            "dataset1",
            "--map",
            f"{origin.url}/=",
        )
        assert code == 1, err
        assert "1 resources failed" in err
        assert mirror_files(dest) == {"/a.txt": b"alpha"}
        row = await status_of(dest / ".rs-subscribe" / "state.sqlite")
        assert row["failures"] == 1
        assert row["resources"] == 1


# --- run: live push, SIGTERM ------------------------------------------------------------------


@pytest.mark.timeout(90)
async def test_run_applies_pushed_changes_and_stops_cleanly_on_sigterm(
    hub: RunningHub, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    async with running_origin() as origin:
        await publish(
            client,
            "dataset1",
            origin,
            [("/a.txt", "created", b"alpha"), ("/dir/b.txt", "created", b"bravo")],
        )
        dest = tmp_path / "mirror"
        async with running(tmp_path, *run_args(hub, origin, dest)) as agent:
            await agent.subscribed()
            assert mirror_files(dest) == origin.resources  # the baseline came first
            receipt = await publish(
                client,
                "dataset1",
                origin,
                [
                    ("/a.txt", "updated", b"alpha 2"),
                    ("/c.txt", "created", b"charlie"),
                    ("/dir/b.txt", "deleted", None),
                ],
            )
            await agent.until(
                lambda: len(applied(agent.events, "push")) >= 3, "three pushed changes applied"
            )
            assert mirror_files(dest) == origin.resources
            code = await agent.stop(signal.SIGTERM)
            assert code == 0, agent.log

        pushed = applied(agent.events, "push")
        assert {(e["uri"], e["change"]) for e in pushed} == {
            (origin.uri("/a.txt"), "updated"),
            (origin.uri("/c.txt"), "created"),
            (origin.uri("/dir/b.txt"), "deleted"),
        }
        for event in pushed:
            assert event.keys() >= {"uri", "change", "time", "position", "channel", "applied"}
        assert max((e["position"] for e in pushed), key=position) == receipt["last"]
        assert {e["position"] for e in pushed} >= {receipt["first"], receipt["last"]}

        row = await status_of(dest / ".rs-subscribe" / "state.sqlite")
        assert row["position"] == receipt["last"]
        assert row["epoch"] == receipt["epoch"]
        assert row["resources"] == 2
        assert row["tombstones"] == 1
        assert mirror_files(dest) == {"/a.txt": b"alpha 2", "/c.txt": b"charlie"}


# --- run: SIGKILL mid-stream, restart ----------------------------------------------------------

URIS = 20
UPDATES = 200  # 10 per URI, each with its own content


@pytest.mark.timeout(120)
async def test_restart_after_sigkill_misses_nothing_and_applies_nothing_twice(
    hub: RunningHub, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    paths = [f"/r/{i:02}.txt" for i in range(URIS)]
    # position -> (uri, change, index of the change in publishing order)
    published: dict[str, tuple[str, str, int]] = {}
    order = 0

    async def one(path: str, change: str, content: bytes | None) -> None:
        nonlocal order
        receipt = await publish(client, "dataset1", origin, [(path, change, content)])
        assert receipt["first"] == receipt["last"]
        published[receipt["last"]] = (origin.uri(path), change, order)
        order += 1

    async with running_origin() as origin:
        await publish(
            client, "dataset1", origin, [(p, "created", f"{p} v0".encode()) for p in paths]
        )
        dest = tmp_path / "mirror"
        state = dest / ".rs-subscribe" / "state.sqlite"
        killed = asyncio.Event()
        progress_at_kill = 0

        async def publisher() -> None:
            for n in range(UPDATES):
                if n == UPDATES // 2:
                    # Hold the second half until the agent is dead: the kill is mid-stream
                    # whatever the relative speeds, and the rest arrives while it is down.
                    async with asyncio.timeout(WAIT_S * TIMEOUT_SCALE):
                        await killed.wait()
                path = paths[n % URIS]
                await one(path, "updated", f"{path} v{n // URIS + 1} ({n})".encode())

        async with running(tmp_path, *run_args(hub, origin, dest), name="first") as first:
            await first.subscribed()
            task = asyncio.create_task(publisher())
            try:
                await first.until(
                    lambda: len(applied(first.events, "push")) >= 30, "30 pushed changes applied"
                )
                assert await first.stop(signal.SIGKILL) == -signal.SIGKILL
                progress_at_kill = order
                killed.set()
                await task
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        assert progress_at_kill <= UPDATES // 2

        # While it is down: more updates, two deletions, two new resources.
        for path in paths[:2]:
            await one(path, "deleted", None)
        for i in range(2):
            await one(f"/r/new-{i}.txt", "created", f"new {i}".encode())
        for path in paths[2:6]:
            await one(path, "updated", f"{path} while down".encode())
        final = max(published, key=position)

        checkpointed = (await status_of(state))["position"]
        assert checkpointed is not None
        assert position(checkpointed) < position(final)

        async with running(tmp_path, *run_args(hub, origin, dest), name="second") as second:
            await second.until(
                lambda: (
                    mirror_files(dest) == origin.resources
                    and final in {e.get("position") for e in second.events}
                ),
                "the mirror to equal the origin after the restart",
                timeout=60,
            )
            assert await second.stop(signal.SIGTERM) == 0, second.log

        runs = {"first": first.events, "second": second.events}
        # Nothing applied twice: not within a run, not across the two.
        keys = Counter(
            (e["uri"], e["time"], e["change"]) for events in runs.values() for e in applied(events)
        )
        assert [k for k, n in keys.items() if n > 1] == []

        # Nothing missed: every change after the checkpointed position was applied (or
        # reported failed), or a later change of the same URI was applied (the lead's
        # "superseded": its bytes were never the resource's state for long enough).
        handled = {
            e["position"]
            for events in runs.values()
            for e in events
            if e.get("event") in ("applied", "failed") and "position" in e
        }
        applied_positions = {
            e["position"] for events in runs.values() for e in applied(events) if "position" in e
        }
        last_of_uri: dict[str, str] = {}
        for pos in sorted(published, key=position):
            last_of_uri[published[pos][0]] = pos
        missed = []
        for pos, (uri, change, _) in sorted(published.items(), key=lambda kv: position(kv[0])):
            if position(pos) <= position(checkpointed) or pos in handled:
                continue
            later = last_of_uri[uri]
            if position(later) > position(pos) and later in applied_positions:
                continue
            missed.append((pos, uri, change))
        assert missed == []
        # The last change of every URI is applied, by one run or the other.
        assert set(last_of_uri.values()) - applied_positions <= {
            p for p in last_of_uri.values() if position(p) <= position(checkpointed)
        }

        row = await status_of(state)
        assert row["position"] == final
        assert row["resources"] == len(origin.resources)
        assert mirror_files(dest) == origin.resources


async def held_change_then_sigkill(
    hub: RunningHub, client: httpx.AsyncClient, tmp_path: Path
) -> tuple[RunningAgent, RunningAgent, Path, Origin, str, str]:
    """Five changes applied while an earlier one (a fetch that never answers) holds the
    checkpoint back; SIGKILL; restart once the fetch can answer. Returns (first run, second
    run, dest, origin, the held URI, the position checkpointed at the kill)."""
    stalled = StalledServer(b"held content")
    others = [f"/k{i}.txt" for i in range(5)]
    dest = tmp_path / "mirror"
    state = dest / ".rs-subscribe" / "state.sqlite"
    async with running_origin() as origin, stalled.running() as stalled_url:
        await publish(
            client, "dataset1", origin, [(p, "created", f"{p} v0".encode()) for p in others]
        )
        args = run_args(hub, origin, dest, "--map", f"{stalled_url}/=held")
        held_uri = f"{stalled_url}/h.txt"
        async with running(tmp_path, *args, name="first") as first:
            await first.subscribed()
            before = await publish(client, "dataset1", origin, [("/k0.txt", "updated", b"k0 v1")])
            await first.until(lambda: len(applied(first.events, "push")) == 1, "k0 v1 applied")
            held = await post_locs(client, origin, [(held_uri, "created", stalled.body)])
            assert held.status_code == 202, held.text
            after = await publish(
                client, "dataset1", origin, [(p, "updated", f"{p} v2".encode()) for p in others]
            )
            await first.until(
                lambda: len(applied(first.events, "push")) == 6 and stalled.requests >= 1,
                "the five later changes applied while the held one is in flight",
            )
            assert [e for e in first.events if e["uri"] == held_uri] == []
            assert await first.stop(signal.SIGKILL) == -signal.SIGKILL

        checkpointed = (await status_of(state))["position"]
        # The watermark only moves over a gap-free prefix: it stopped before the held change.
        assert checkpointed == before["last"]
        assert position(checkpointed) < position(held.json()["last"]) < position(after["first"])

        stalled.release.set()
        async with running(tmp_path, *args, name="second") as second:
            await second.until(
                lambda: any(e["uri"] == held_uri for e in applied(second.events)),
                "the held change applied after the restart",
            )
            await second.until(
                lambda: mirror_files(dest) == origin.resources | {"/held/h.txt": b"held content"},
                "the mirror to equal the origin plus the held resource",
            )
            assert await second.stop() == 0, second.log
        assert (await status_of(state))["position"] == after["last"]
    return first, second, dest, origin, held_uri, checkpointed


@pytest.mark.timeout(90)
async def test_changes_applied_past_the_checkpoint_are_not_reapplied_after_sigkill(
    hub: RunningHub, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    first, second, dest, origin, held_uri, _ = await held_change_then_sigkill(hub, client, tmp_path)
    # The five later changes came again after the restart (they are past the checkpoint) and
    # were skipped as already applied: only the held change is applied by the second run.
    assert [e["uri"] for e in applied(second.events)] == [held_uri]
    assert [e for e in second.events if e.get("event") == "failed"] == []
    keys = Counter(
        (e["uri"], e["time"], e["change"]) for run in (first, second) for e in applied(run.events)
    )
    assert [k for k, n in keys.items() if n > 1] == []
    assert {p: c for p, c in mirror_files(dest).items() if p.startswith("/k")} == {
        f"/k{i}.txt": f"/k{i}.txt v2".encode() for i in range(5)
    }


@pytest.mark.timeout(90)
async def test_no_stale_temp_files_after_a_crash_and_restart(
    hub: RunningHub, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    _, _, dest, _, _, _ = await held_change_then_sigkill(hub, client, tmp_path)
    tmp = dest / ".rs-subscribe" / "tmp"
    assert sorted(p.name for p in tmp.rglob("*") if p.is_file()) == []


@pytest.mark.timeout(90)
async def test_backlog_after_downtime_reports_no_spurious_failures(
    hub: RunningHub, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    paths = [f"/u{i}.txt" for i in range(10)]  # more URIs than the default concurrency (8)
    async with running_origin() as origin:
        await publish(
            client, "dataset1", origin, [(p, "created", b"v0 " + p.encode()) for p in paths]
        )
        dest = tmp_path / "mirror"
        common = [hub.url, "--dest", str(dest), "--topic", "dataset1", "--map", f"{origin.url}/="]
        code, _, err = await rs_subscribe("baseline", *common)
        assert code == 0, err
        # The agent is down: every resource changes twice.
        for version in (1, 2):
            receipt = await publish(
                client,
                "dataset1",
                origin,
                [(p, "updated", f"v{version} {p}".encode()) for p in paths],
            )
        async with running(tmp_path, *run_args(hub, origin, dest)) as agent:
            await agent.until(
                lambda: receipt["last"] in {e.get("position") for e in agent.events},
                "the last change of the backlog",
                timeout=40,
            )
            await agent.until(same_as_origin(origin, dest), "the mirror to equal the origin")
            assert await agent.stop() == 0, agent.log
        assert (await status_of(dest / ".rs-subscribe" / "state.sqlite"))["failures"] == 0
        # The intermediate (v1) changes are moot once v2 is known: not failures.
        assert [e["uri"] for e in agent.events if e.get("event") == "failed"] == []


# --- verification --------------------------------------------------------------------------------


@pytest.mark.timeout(90)
async def test_hash_mismatch_is_never_written_and_is_reported(
    hub: RunningHub, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    async with running_origin() as origin:
        await publish(client, "dataset1", origin, [("/doc.txt", "created", b"version one")])
        dest = tmp_path / "mirror"
        target = dest / "doc.txt"
        async with running(tmp_path, *run_args(hub, origin, dest)) as agent:
            await agent.subscribed()
            assert target.read_bytes() == b"version one"

            good = b"version two, the good bytes"
            bad = bytes(b ^ 0xFF for b in good)
            origin.corrupt("/doc.txt", times=10)
            await publish(client, "dataset1", origin, [("/doc.txt", "updated", good)])
            seen: set[bytes] = set()

            def failed() -> bool:
                seen.add(target.read_bytes())
                return any(
                    e.get("event") == "failed" and e["uri"] == origin.uri("/doc.txt")
                    for e in agent.events
                )

            await agent.until(failed, "a failed event for /doc.txt")
            seen.add(target.read_bytes())
            assert bad not in seen
            assert seen == {b"version one"}
            [failure] = [e for e in agent.events if e.get("event") == "failed"]
            assert failure["change"] == "updated"
            assert failure["channel"] == "push"
            assert "md5" in failure.get("reason", "") or "digest" in failure.get("reason", "")
            assert 1 <= origin.requests["/doc.txt"] - 1 <= 10  # tried, but not forever
            # No half-verified bytes are left in the agent's temp directory.
            tmp = dest / ".rs-subscribe" / "tmp"
            assert [p for p in tmp.rglob("*") if p.is_file()] == []
            row = await status_of(dest / ".rs-subscribe" / "state.sqlite")
            assert row["failures"] >= 1
            [listed] = row["recent_failures"]
            assert listed["uri"] == origin.uri("/doc.txt") and "md5" in listed["reason"]

            # The origin serves good bytes again (Origin has no public "uncorrupt"): the next
            # update applies, and its success clears the failure.
            origin._corrupt.clear()
            await publish(client, "dataset1", origin, [("/doc.txt", "updated", b"version three")])
            await agent.until(
                lambda: target.read_bytes() == b"version three", "the next update applied"
            )
            await agent.until(lambda: len(applied(agent.events, "push")) >= 1, "the applied event")
            assert await agent.stop() == 0, agent.log
        row = await status_of(dest / ".rs-subscribe" / "state.sqlite")
        assert row["failures"] == 0
        assert mirror_files(dest) == origin.resources


# --- hostile locations ---------------------------------------------------------------------------


@pytest.mark.timeout(90)
async def test_hostile_locations_are_refused_and_nothing_escapes_dest(
    hub: RunningHub, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    async with running_origin() as origin:
        await publish(client, "dataset1", origin, [("/seed.txt", "created", b"seed")])
        work = tmp_path / "work"
        dest = work / "mirror"
        before = files_under(tmp_path)
        async with running(work, *run_args(hub, origin, dest)) as agent:
            await agent.subscribed()
            hostile = [
                f"{origin.url}/%2e%2e/escape.txt",
                f"{origin.url}/%2E%2E/%2e%2e/escape.txt",
                f"{origin.url}/a%2Fb",
                f"{origin.url}/..%5Cescape.txt",
                f"{origin.url}/.rs-subscribe/state.sqlite",
                "http://127.0.0.2:9/x",
            ]
            accepted = []
            for loc in hostile:
                reply = await post_locs(client, origin, [(loc, "created", b"evil")])
                if reply.status_code != 202:
                    # The hub may refuse a loc at ingest: then it must say so as a 400.
                    assert reply.status_code == 400, (loc, reply.status_code, reply.text)
                    continue
                accepted.append(loc)
            origin.put("/ok.txt", b"still working")
            receipt = await post_locs(
                client, origin, [(origin.uri("/ok.txt"), "created", b"still working")]
            )
            assert receipt.status_code == 202, receipt.text
            await agent.until(
                lambda: receipt.json()["last"] in {e.get("position") for e in agent.events},
                "the good change after the hostile ones",
            )
            failed = {e["uri"]: e for e in agent.events if e.get("event") == "failed"}
            assert set(failed) == set(accepted)
            assert {e["uri"] for e in applied(agent.events, "push")} == {origin.uri("/ok.txt")}
            row = await status_of(dest / ".rs-subscribe" / "state.sqlite")
            assert row["failures"] == len(accepted)
            assert await agent.stop() == 0, agent.log

        assert accepted, "the hub refused every hostile loc: nothing reached the agent"
        assert mirror_files(dest) == {"/seed.txt": b"seed", "/ok.txt": b"still working"}
        # Nothing was written outside --dest: only the agent's log and events beside it.
        outside = {p for p in files_under(tmp_path) - before if not p.startswith("work/mirror/")}
        assert outside == {"work/agent.log", "work/agent.events.jsonl"}
        assert not [p for p in files_under(tmp_path) if "escape" in p or p.endswith("/b")]
        # The state file was not overwritten by the loc that maps into .rs-subscribe/.
        assert (dest / ".rs-subscribe" / "state.sqlite").read_bytes()[:16] == b"SQLite format 3\0"
        # Nothing hostile was fetched: the URIs were refused before any GET.
        assert set(origin.requests) <= {"/seed.txt", "/ok.txt"}


# --- --exec ----------------------------------------------------------------------------------

EXEC_SCRIPT = """
import json, sys
message = json.loads(sys.stdin.read())
if message.get("content_file"):
    with open(message["content_file"], "rb") as handle:
        message["content"] = handle.read().decode()
with open(sys.argv[1], "a") as out:
    out.write(json.dumps(message) + "\\n")
"""


@pytest.mark.timeout(90)
async def test_exec_hands_each_change_to_the_command(
    hub: RunningHub, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    received = tmp_path / "received.jsonl"
    command = shlex.join([sys.executable, "-c", EXEC_SCRIPT, str(received)])
    async with running_origin() as origin:
        await publish(client, "dataset1", origin, [("/a.txt", "created", b"alpha")])
        dest = tmp_path / "mirror"
        async with running(tmp_path, *run_args(hub, origin, dest, "--exec", command)) as agent:
            await agent.subscribed()
            await publish(
                client,
                "dataset1",
                origin,
                [("/b.txt", "created", b"bravo"), ("/a.txt", "deleted", None)],
            )
            await agent.until(lambda: len(read_events(received)) >= 3, "three --exec calls")
            await agent.until(lambda: len(applied(agent.events)) >= 3, "three applied events")
            assert await agent.stop() == 0, agent.log

        messages = read_events(received)
        for message in messages:
            assert message.keys() >= {"uri", "change", "content_file"}
        got = {(m["uri"], m["change"], m["channel"], m.get("content")) for m in messages}
        assert got == {
            (origin.uri("/a.txt"), "created", "baseline", "alpha"),
            (origin.uri("/b.txt"), "created", "push", "bravo"),
            (origin.uri("/a.txt"), "deleted", "push", None),
        }
        deletion = next(m for m in messages if m["change"] == "deleted")
        assert deletion["content_file"] is None
        for message in messages:
            if message["content_file"] is not None:
                # The verified bytes' temp file is gone once the command has exited.
                assert not Path(message["content_file"]).exists()
        # --exec replaces writing files: nothing in --dest but the agent's own directory.
        assert mirror_files(dest) == {}
        assert [p.name for p in dest.iterdir()] == [".rs-subscribe"]


async def test_exec_failure_is_a_failed_change(
    hub: RunningHub, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    command = shlex.join([sys.executable, "-c", "import sys; sys.exit('no room on device')"])
    async with running_origin() as origin:
        dest = tmp_path / "mirror"
        async with running(tmp_path, *run_args(hub, origin, dest, "--exec", command)) as agent:
            await agent.subscribed()
            await publish(client, "dataset1", origin, [("/a.txt", "created", b"alpha")])
            await agent.until(
                lambda: any(e.get("event") == "failed" for e in agent.events), "a failed event"
            )
            [failure] = agent.events
            assert failure["uri"] == origin.uri("/a.txt")
            assert "no room on device" in failure["reason"]
            assert await agent.stop() == 0, agent.log


# --- the state lock, topics --------------------------------------------------------------------


@pytest.mark.timeout(90)
async def test_second_agent_on_the_same_state_exits_5_naming_the_pid(
    hub: RunningHub, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    async with running_origin() as origin:
        dest = tmp_path / "mirror"
        state = tmp_path / "shared-state.sqlite"
        args = run_args(hub, origin, dest, "--state", str(state))
        async with running(tmp_path, *args, name="first") as first:
            await first.subscribed()
            other = tmp_path / "other-mirror"
            code, _, err = await rs_subscribe(
                "run", *run_args(hub, origin, other, "--state", str(state))
            )
            assert code == 5, err
            assert f"pid {first.process.pid}" in err
            assert err.strip().splitlines()[-1].startswith("rs-subscribe: ")
            assert "Traceback" not in err
            assert first.process.returncode is None  # the first agent is undisturbed
            # ...and still works.
            await publish(client, "dataset1", origin, [("/a.txt", "created", b"alpha")])
            await first.until(same_as_origin(origin, dest), "the first agent to apply")
            assert await first.stop() == 0, first.log
        assert mirror_files(other) == {}


async def test_several_topics_and_no_topic_is_a_usage_error(
    hub: RunningHub, tmp_path: Path
) -> None:
    dest = tmp_path / "mirror"
    code, out, err = await rs_subscribe("run", hub.url, "--dest", str(dest))
    assert code == 2, err
    assert "dataset1" in err and "dataset2" in err
    assert "--topic" in err
    assert "Traceback" not in err
    assert out == ""
    assert not dest.exists()  # nothing created before the Source was understood


# --- audit -------------------------------------------------------------------------------------


@pytest.mark.timeout(90)
async def test_audit_reports_then_repairs(
    hub: RunningHub, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    async with running_origin() as origin:
        await publish(
            client,
            "dataset1",
            origin,
            [
                ("/a.txt", "created", b"alpha"),
                ("/dir/b.txt", "created", b"bravo"),
                ("/c.txt", "created", b"charlie"),
            ],
        )
        dest = tmp_path / "mirror"
        common = [hub.url, "--dest", str(dest), "--topic", "dataset1", "--map", f"{origin.url}/="]
        code, _, err = await rs_subscribe("baseline", *common)
        assert code == 0, err
        assert mirror_files(dest) == origin.resources

        code, out, err = await rs_subscribe("audit", *common, "--json")
        assert code == 0, err
        assert json.loads(out)["listed"] == 3

        (dest / "a.txt").unlink()
        (dest / "dir" / "b.txt").write_bytes(b"BRAVO")  # same length: only the hash can tell
        (dest / "extra.txt").write_bytes(b"not on the Source")

        code, out, err = await rs_subscribe("audit", *common, "--json")
        assert code == 1, err
        report = json.loads(out)
        assert report["listed"] == 3
        assert report["missing"] == [origin.uri("/a.txt")]
        assert [d["uri"] for d in report["different"]] == [origin.uri("/dir/b.txt")]
        assert report["extra"] == ["extra.txt"]
        assert report["unmapped"] == []
        assert report["repaired"] == 0

        code, out, err = await rs_subscribe("audit", *common)  # the human form
        assert code == 1
        assert "missing" in out and "different" in out and "extra.txt" in out

        code, out, err = await rs_subscribe("audit", *common, "--repair", "--json")
        assert code == 0, err
        assert json.loads(out)["repaired"] == 3
        assert json.loads(out)["repair_failures"] == []
        assert mirror_files(dest) == origin.resources

        code, out, err = await rs_subscribe("audit", *common, "--json")
        assert code == 0, err
        report = json.loads(out)
        assert (report["missing"], report["different"], report["extra"]) == ([], [], [])

        # The repaired mirror agrees with the checkpoint: a run applies later changes on it.
        row = await status_of(dest / ".rs-subscribe" / "state.sqlite")
        assert row["resources"] == 3
