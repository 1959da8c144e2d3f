"""Usage of the ``rs-subscribe`` console script that needs no Source: help, usage errors for
unusable state and events files, the installed script."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

import pytest

from tests.support.cli import RS_SUBSCRIBE, rs_subscribe


async def test_status_of_a_missing_state_file_is_a_usage_error(tmp_path: Path) -> None:
    code, out, err = await rs_subscribe("status", "--state", str(tmp_path / "nope.sqlite"))
    assert code == 2
    assert out == ""
    assert "nope.sqlite" in err
    assert not (tmp_path / "nope.sqlite").exists()


@pytest.mark.parametrize(
    ("command", "mentions"),
    [
        ("run", ["--map", "--events", "--exec", "--dest"]),
        ("baseline", ["--events", "--map"]),
        ("audit", ["--repair", "--json"]),
        ("status", ["--state", "--json"]),
    ],
)
async def test_help(command: str, mentions: list[str]) -> None:
    code, out, err = await rs_subscribe(command, "--help")
    assert code == 0, err
    for option in mentions:
        assert option in out, f"{command} --help does not mention {option}"


def test_console_script_is_installed() -> None:
    assert RS_SUBSCRIBE.is_file() and os.access(RS_SUBSCRIBE, os.X_OK)


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("rs-subscribe: "), err
    return lines[0]


@pytest.mark.parametrize("kind", ["not SQLite", "empty file", "other SQLite database"])
async def test_status_of_a_file_that_is_no_state_file(tmp_path: Path, kind: str) -> None:
    """``status`` of a file that is no state file: a usage error in one line naming it."""
    state = tmp_path / "state.sqlite"
    if kind == "not SQLite":
        state.write_bytes(b"garbage\n")
    elif kind == "empty file":
        state.write_bytes(b"")
    else:
        with contextlib.closing(sqlite3.connect(state)) as db:
            db.execute("CREATE TABLE notes (text)")
            db.commit()
    code, out, err = await rs_subscribe("status", "--state", str(state))
    assert code == 2, (out, err)
    assert "Traceback" not in err
    assert str(state) in _one_line(err)


async def test_run_with_an_unwritable_events_file(tmp_path: Path) -> None:
    """``run`` with an ``--events`` file that cannot be written: a usage error in one line."""
    events = tmp_path / "no" / "such" / "dir" / "events.jsonl"
    code, out, err = await rs_subscribe(
        "run",
        "http://127.0.0.1:9/capabilitylist.xml",  # never contacted
        "--dest",
        str(tmp_path / "mirror"),
        "--events",
        str(events),
    )
    assert code == 2, (out, err)
    assert "Traceback" not in err
    assert "--events" in _one_line(err)
