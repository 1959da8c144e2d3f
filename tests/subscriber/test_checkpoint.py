"""The agent's checkpoint (``subscriber.checkpoint``) on a real SQLite file in ``tmp_path``:
what it keeps across a restart, that every write is one transaction, and the ``flock`` that
stops two agents (in this process or another) from sharing a state file."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from rspush.subscriber.changes import ChangeType, Channel, ResourceChange
from rspush.subscriber.checkpoint import Checkpoint, Failure, Watermark, list_topics
from rspush.subscriber.decide import ResourceState
from rspush.subscriber.errors import StateLockedError, SubscriberError
from tests.support.spec import REPO
from tests.support.waiting import TIMEOUT_SCALE

SOURCE = "http://example.org/.well-known/resourcesync"
TOPIC = "dataset1"
NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
T1 = datetime(2026, 2, 1, 8, 30, 15, 123456, tzinfo=UTC)  # microseconds are kept
T2 = T1 + timedelta(minutes=5)
A = "http://example.org/a"
B = "http://example.org/b"
CHILD_TIMEOUT_S = 30 * TIMEOUT_SCALE


def change(
    uri: str = A, time: datetime = T1, kind: ChangeType = ChangeType.UPDATED
) -> ResourceChange:
    return ResourceChange(uri=uri, change=kind, time=time, channel=Channel.PUSH)


def state(uri: str = A, time: datetime = T1, kind: str = "updated", **kw: object) -> ResourceState:
    values: dict[str, object] = {"length": 12, "hash": "md5:00", "path": uri.rsplit("/", 1)[1]}
    values.update(kw)
    return ResourceState(uri, time, kind, values["length"], values["hash"], values["path"])  # type: ignore[arg-type]


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "state.sqlite"  # the parent directory is made on open


@pytest.fixture
def checkpoint(path: Path) -> Iterator[Checkpoint]:
    with Checkpoint(path, SOURCE, TOPIC) as opened:
        yield opened


# --- reading and writing -------------------------------------------------------------------


def test_a_new_checkpoint_holds_nothing(checkpoint: Checkpoint) -> None:
    assert checkpoint.state() is None
    assert checkpoint.resource(A) is None
    assert list(checkpoint.resources()) == []
    assert checkpoint.failures() == []


def test_record_keeps_the_resource_and_moves_the_watermark(checkpoint: Checkpoint) -> None:
    mark = Watermark("epoch-1", "17-0", T1)

    checkpoint.record(change(), state(), mark, now=NOW)

    assert checkpoint.resource(A) == state()
    topic = checkpoint.state()
    assert topic is not None
    assert (topic.source, topic.topic) == (SOURCE, TOPIC)
    assert topic.watermark == mark
    assert topic.updated == NOW
    assert topic.baseline_at is None


def test_record_without_watermark_leaves_it_alone(checkpoint: Checkpoint) -> None:
    checkpoint.set_watermark(Watermark("e", "1-0", T1), now=NOW)

    checkpoint.record(change(B, T2), state(B, T2), None, now=NOW + timedelta(hours=1))

    topic = checkpoint.state()
    assert topic is not None
    assert topic.watermark == Watermark("e", "1-0", T1)
    assert topic.updated == NOW
    assert checkpoint.resource(B) == state(B, T2)


def test_record_with_no_state_only_moves_the_watermark(checkpoint: Checkpoint) -> None:
    checkpoint.record(change(), None, Watermark(None, None, T2), now=NOW)

    assert checkpoint.resource(A) is None
    topic = checkpoint.state()
    assert topic is not None
    assert topic.watermark == Watermark(None, None, T2)


def test_record_replaces_the_previous_state(checkpoint: Checkpoint) -> None:
    checkpoint.record(change(), state(), None, now=NOW)
    newer = state(time=T2, kind="deleted", length=None, hash=None)

    checkpoint.record(change(time=T2, kind=ChangeType.DELETED), newer, None, now=NOW)

    assert checkpoint.resource(A) == newer


def test_times_in_other_zones_come_back_as_the_same_instant(checkpoint: Checkpoint) -> None:
    local = datetime(2026, 2, 1, 10, 30, 15, 999999, tzinfo=timezone(timedelta(hours=2)))

    checkpoint.record(change(time=local), state(time=local), Watermark(None, None, local), now=NOW)

    held = checkpoint.resource(A)
    assert held is not None
    assert held.time == local
    assert held.time.utcoffset() == timedelta(0)
    topic = checkpoint.state()
    assert topic is not None and topic.watermark.last_time == local


def test_resources_leave_tombstones_out_and_are_sorted(checkpoint: Checkpoint) -> None:
    c = "http://example.org/c"
    for uri in (c, A, B):
        checkpoint.record(change(uri), state(uri), None, now=NOW)
    checkpoint.record(change(B, T2), state(B, T2, "deleted"), None, now=NOW)

    assert [r.uri for r in checkpoint.resources()] == [A, c]
    tombstone = checkpoint.resource(B)
    assert tombstone is not None and tombstone.change == "deleted"  # kept for decide()


def test_forget_removes_the_resource_and_its_tombstone(checkpoint: Checkpoint) -> None:
    checkpoint.record(change(), state(kind="deleted"), None, now=NOW)
    checkpoint.record(change(B), state(B), None, now=NOW)

    checkpoint.forget(A)

    assert checkpoint.resource(A) is None
    assert checkpoint.resource(B) is not None


def test_failures_are_recorded_and_cleared_by_a_later_success(checkpoint: Checkpoint) -> None:
    checkpoint.record_failure(change(B, T1), "HTTP 500", Watermark("e", "3-0", T1), now=NOW)
    checkpoint.record_failure(change(A, T2), "HTTP 404", None, now=NOW)

    assert checkpoint.failures() == [
        Failure(A, T2, "updated", "HTTP 404"),
        Failure(B, T1, "updated", "HTTP 500"),
    ]
    topic = checkpoint.state()
    assert topic is not None and topic.watermark == Watermark("e", "3-0", T1)

    # An older success does not clear a newer failure; one at or after it does.
    checkpoint.record(change(A, T1), state(A, T1), None, now=NOW)
    assert [f.uri for f in checkpoint.failures()] == [A, B]
    checkpoint.record(change(A, T2), state(A, T2), None, now=NOW)
    checkpoint.record(change(B, T2), state(B, T2), None, now=NOW)
    assert checkpoint.failures() == []


def test_a_second_failure_replaces_the_first(checkpoint: Checkpoint) -> None:
    checkpoint.record_failure(change(A, T1), "first", None, now=NOW)
    checkpoint.record_failure(change(A, T2, ChangeType.DELETED), "second", None, now=NOW)

    assert checkpoint.failures() == [Failure(A, T2, "deleted", "second")]


def test_a_baseline_forgets_the_watermark_until_it_finishes(checkpoint: Checkpoint) -> None:
    checkpoint.record(change(), state(), Watermark("e", "9-0", T1), now=NOW)

    checkpoint.start_baseline(now=NOW + timedelta(seconds=1))

    topic = checkpoint.state()
    assert topic is not None
    assert topic.watermark == Watermark(None, None, None)
    assert topic.baseline_at is None
    assert topic.updated == NOW + timedelta(seconds=1)
    assert checkpoint.resource(A) == state()  # resources stay: they are not fetched again

    checkpoint.finish_baseline(T2, Watermark(None, None, T2), now=NOW + timedelta(seconds=2))

    topic = checkpoint.state()
    assert topic is not None
    assert topic.watermark == Watermark(None, None, T2)
    assert topic.baseline_at == T2


def test_start_baseline_on_a_new_topic_creates_it(checkpoint: Checkpoint) -> None:
    checkpoint.start_baseline(now=NOW)

    topic = checkpoint.state()
    assert topic is not None
    assert topic.watermark == Watermark(None, None, None)
    assert topic.updated == NOW


def test_everything_survives_close_and_reopen(path: Path) -> None:
    mark = Watermark("epoch-7", "1700000000000-3", T2)
    with Checkpoint(path, SOURCE, TOPIC) as first:
        first.record(change(), state(), None, now=NOW)
        first.record(change(B, T2), state(B, T2, "deleted"), None, now=NOW)
        first.record_failure(change("http://example.org/c"), "refused", None, now=NOW)
        first.finish_baseline(T1, mark, now=NOW)

    with Checkpoint(path, SOURCE, TOPIC) as again:
        topic = again.state()
        assert topic is not None
        assert topic.watermark == mark
        assert topic.baseline_at == T1
        assert topic.updated == NOW
        assert again.resource(A) == state()
        assert again.resource(B) == state(B, T2, "deleted")
        assert [f.uri for f in again.failures()] == ["http://example.org/c"]


def test_topics_and_sources_are_kept_apart(path: Path) -> None:
    with Checkpoint(path, SOURCE, TOPIC) as first:
        first.record(change(), state(), Watermark("e", "1-0", T1), now=NOW)
    with Checkpoint(path, SOURCE, "other") as other:
        assert other.state() is None
        assert other.resource(A) is None
        other.record(change(B), state(B), Watermark("f", "2-0", T2), now=NOW)
    with Checkpoint(path, "http://other.org/", TOPIC) as foreign:
        assert foreign.state() is None
        assert list(foreign.resources()) == []


# --- transactions --------------------------------------------------------------------------


class Unbindable:
    """Not a type sqlite3 can store: executing a statement with it raises."""


def _seeded(checkpoint: Checkpoint) -> Watermark:
    mark = Watermark("e", "1-0", T1)
    checkpoint.record(change(), state(), mark, now=NOW)
    return mark


def test_a_failing_resource_write_changes_nothing(checkpoint: Checkpoint) -> None:
    mark = _seeded(checkpoint)
    bad = state(time=T2, length=Unbindable())

    with pytest.raises(sqlite3.Error):
        checkpoint.record(change(time=T2), bad, Watermark("e", "2-0", T2), now=NOW)

    assert checkpoint.resource(A) == state()
    topic = checkpoint.state()
    assert topic is not None and topic.watermark == mark


def test_a_failing_watermark_write_undoes_the_resource_write(checkpoint: Checkpoint) -> None:
    """The resource row is written first; the watermark failing after it must roll it back."""
    mark = _seeded(checkpoint)
    checkpoint.record_failure(change(time=T1), "HTTP 500", None, now=NOW)
    bad_mark = Watermark(Unbindable(), "2-0", T2)  # type: ignore[arg-type]

    with pytest.raises(sqlite3.Error):
        checkpoint.record(change(time=T2), state(time=T2), bad_mark, now=NOW)

    assert checkpoint.resource(A) == state()
    assert [f.uri for f in checkpoint.failures()] == [A]  # the failure row is not cleared
    topic = checkpoint.state()
    assert topic is not None and topic.watermark == mark


def test_a_failing_watermark_write_undoes_the_failure_row(checkpoint: Checkpoint) -> None:
    mark = _seeded(checkpoint)
    bad_mark = Watermark(Unbindable(), "2-0", T2)  # type: ignore[arg-type]

    with pytest.raises(sqlite3.Error):
        checkpoint.record_failure(change(B), "HTTP 500", bad_mark, now=NOW)

    assert checkpoint.failures() == []
    topic = checkpoint.state()
    assert topic is not None and topic.watermark == mark


def test_the_connection_is_usable_after_a_rolled_back_write(path: Path) -> None:
    with Checkpoint(path, SOURCE, TOPIC) as checkpoint:
        _seeded(checkpoint)
        with pytest.raises(TypeError):  # a naive datetime: refused in Python, mid-transaction
            checkpoint.record(change(B), state(B, datetime(2026, 1, 1)), None, now=NOW)

        checkpoint.record(change(B, T2), state(B, T2), None, now=NOW)  # no nested BEGIN

    with Checkpoint(path, SOURCE, TOPIC) as reopened:
        assert reopened.resource(B) == state(B, T2)


# --- the lock ------------------------------------------------------------------------------


def test_a_second_checkpoint_in_this_process_is_refused_naming_the_pid(
    checkpoint: Checkpoint, path: Path
) -> None:
    with pytest.raises(StateLockedError, match=rf"\(pid {os.getpid()}\)") as caught:
        Checkpoint(path, SOURCE, "another-topic")

    assert isinstance(caught.value, SubscriberError)
    assert str(path) in str(caught.value)
    # The refused attempt did not break the holder, nor take the lock over.
    checkpoint.record(change(), state(), None, now=NOW)
    assert checkpoint.resource(A) == state()


def test_the_lock_is_released_on_close(path: Path) -> None:
    Checkpoint(path, SOURCE, TOPIC).close()

    with Checkpoint(path, SOURCE, TOPIC) as again:
        assert again.state() is None


def _python(script: str, *args: str, **kwargs: object) -> subprocess.Popen[str]:
    env = os.environ | {"PYTHONPATH": str(REPO)}
    return subprocess.Popen(  # type: ignore[call-overload, no-any-return]
        [sys.executable, "-c", script, *args], env=env, text=True, **kwargs
    )


TRY_OPEN = """
import sys
from pathlib import Path
from rspush.subscriber.checkpoint import Checkpoint
from rspush.subscriber.errors import StateLockedError
try:
    Checkpoint(Path(sys.argv[1]), "s", "t").close()
except StateLockedError as exc:
    print("refused:", exc)
else:
    print("opened")
"""

HOLD_OPEN = """
import sys
from pathlib import Path
from rspush.subscriber.checkpoint import Checkpoint
with Checkpoint(Path(sys.argv[1]), "s", "t"):
    print("holding", flush=True)
    sys.stdin.readline()
"""


def _try_open(path: Path) -> str:
    with _python(TRY_OPEN, str(path), stdout=subprocess.PIPE, stderr=subprocess.PIPE) as child:
        out, err = child.communicate(timeout=CHILD_TIMEOUT_S)
    assert child.returncode == 0, err
    return out.strip()


def test_another_process_is_refused_while_we_hold_the_lock(path: Path) -> None:
    with Checkpoint(path, SOURCE, TOPIC):
        out = _try_open(path)

        assert out.startswith("refused:"), out
        assert f"(pid {os.getpid()})" in out

    assert _try_open(path) == "opened"


def test_we_are_refused_while_another_process_holds_the_lock(path: Path) -> None:
    with _python(HOLD_OPEN, str(path), stdin=subprocess.PIPE, stdout=subprocess.PIPE) as child:
        assert child.stdin is not None and child.stdout is not None
        try:
            assert child.stdout.readline().strip() == "holding"

            with pytest.raises(StateLockedError, match=rf"\(pid {child.pid}\)"):
                Checkpoint(path, SOURCE, TOPIC)
        finally:
            child.stdin.write("done\n")
            child.stdin.close()
            assert child.wait(timeout=CHILD_TIMEOUT_S) == 0

    # The child is gone: its lock went with it.
    with Checkpoint(path, SOURCE, TOPIC) as ours:
        assert ours.state() is None


def test_a_lock_left_by_a_killed_process_does_not_block(path: Path) -> None:
    with _python(HOLD_OPEN, str(path), stdin=subprocess.PIPE, stdout=subprocess.PIPE) as child:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "holding"
        child.kill()
        child.wait(timeout=CHILD_TIMEOUT_S)

    with Checkpoint(path, SOURCE, TOPIC) as ours:  # the lock file stays; the flock does not
        assert ours.state() is None


def test_closing_twice_is_harmless(path: Path, tmp_path: Path) -> None:
    checkpoint = Checkpoint(path, SOURCE, TOPIC)
    checkpoint.close()
    with open(tmp_path / "bystander", "w") as bystander:  # likely reuses the lock's fd number
        checkpoint.close()

        bystander.write("still open")
        bystander.flush()


# --- list_topics ---------------------------------------------------------------------------


def test_list_topics_reads_while_an_agent_holds_the_lock(path: Path) -> None:
    with Checkpoint(path, SOURCE, "other") as earlier:
        earlier.record(change(), state(), Watermark("f", "5-0", T1), now=NOW)

    with Checkpoint(path, SOURCE, TOPIC) as running:
        running.record(change(), state(), Watermark("e", "1-0", T1), now=NOW)
        running.record(change(B), state(B, kind="deleted"), None, now=NOW)
        running.record_failure(change("http://example.org/c"), "HTTP 500", None, now=NOW)

        topics = list_topics(path)

        # ... and the agent goes on writing afterwards.
        running.record(change(B, T2), state(B, T2), Watermark("e", "2-0", T2), now=NOW)

    assert [(t.topic, t.watermark.position, counts) for t, counts in topics] == [
        (TOPIC, "1-0", {"resources": 1, "tombstones": 1, "failures": 1}),
        ("other", "5-0", {"resources": 1, "tombstones": 0, "failures": 0}),
    ]
    assert all(t.source == SOURCE for t, _ in topics)


def test_list_topics_after_the_agent_stopped(path: Path) -> None:
    with Checkpoint(path, SOURCE, TOPIC) as stopped:
        stopped.start_baseline(now=NOW)

    [(topic, counts)] = list_topics(path)

    assert topic.watermark == Watermark(None, None, None)
    assert counts == {"resources": 0, "tombstones": 0, "failures": 0}


def test_list_topics_never_creates_a_state_file(tmp_path: Path) -> None:
    missing = tmp_path / "nothing.sqlite"

    with pytest.raises(FileNotFoundError, match="no state file"):
        list_topics(missing)
    assert not missing.exists()
