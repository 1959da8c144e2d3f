"""The file-system parts of ``rs-publish watch`` on a real temporary tree: the scan (skips,
links, excluded paths), reading a file only while it stays the file it was, and the state
database (the pending batch, its acknowledgement in one step, the pins, the lock)."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rspush.source.diff import Published
from rspush.source.errors import StateError
from rspush.source.state import Pending, Row, State
from rspush.source.tree import Skips, regular_stat, scan
from rspush.source.watcher import read_facts


def test_the_scan_skips_patterns_links_and_excluded_paths(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    for name in ("a.txt", "d/b c.txt", ".git/config", "d/.hidden", "x.tmp", "state/s.db"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"x")
    (root / "link").symlink_to(root / "a.txt")
    (root / "dirlink").symlink_to(root / "d", target_is_directory=True)
    os.mkfifo(root / "fifo")
    found = scan(root, Skips(), exclude=[root / "state"])
    assert sorted(found) == ["a.txt", "d/b c.txt"]
    assert found["a.txt"].size == 1
    assert sorted(scan(root, Skips(), under="d")) == ["d/b c.txt"]


def test_facts_are_read_only_from_the_file_expected(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(b"0123456789")
    seen = regular_stat(path)
    assert seen is not None
    facts = read_facts(path, seen)
    assert facts is not None and facts.length == 10
    path.write_bytes(b"01234567890123")  # grew since it was seen
    assert read_facts(path, seen) is None
    replaced = tmp_path / "g.bin"
    replaced.write_bytes(b"0123456789")
    os.replace(replaced, path)  # another file (inode) under the same name
    assert read_facts(path, seen) is None
    path.unlink()
    path.symlink_to(tmp_path / "elsewhere")
    assert read_facts(path, seen) is None


def _state(tmp_path: Path, topic: str = "t") -> State:
    return State(tmp_path / "s" / "state.sqlite", topic=topic, base_url="http://x/")


def test_a_pending_batch_becomes_the_state_in_one_step(tmp_path: Path) -> None:
    state = _state(tmp_path)
    one = Published(1, 2, "m", "s")
    when = datetime(2026, 1, 1, 12, 0, 0, 700123, tzinfo=UTC)
    state.set_pending(Pending("k1", b"<urlset/>", (Row("a", one), Row("b", None))), when)
    state.close()
    state = _state(tmp_path)  # as after a crash: the batch is still there, the state not yet
    assert state.pending() == Pending("k1", b"<urlset/>", (Row("a", one), Row("b", None)))
    assert state.files() == {} and state.last_time() == when
    state.acknowledged()
    assert state.pending() is None and state.files() == {"a": one}
    state.refresh([Row("a", Published(1, 3, "m", "s"))])
    assert state.files()["a"].mtime_ns == 3
    with pytest.raises(Exception, match="UNIQUE|constraint"):  # one batch in flight at most
        state.set_pending(Pending("k2", b"", ()), when)
        state.set_pending(Pending("k3", b"", ()), when)
    state.close()


def test_the_state_is_pinned_to_its_topic_and_locked(tmp_path: Path) -> None:
    state = _state(tmp_path)
    with pytest.raises(StateError, match="another rs-publish watch"):
        _state(tmp_path)
    state.close()
    with pytest.raises(StateError, match="written for topic 't', not 'u'"):
        _state(tmp_path, topic="u")
    _state(tmp_path).close()  # released by the failed open above
