"""``rs-publish --created URL=FILE --updated URL=FILE --deleted URL``: the fragment is built
for the Source (length, md5, sha-256 from each file, the time now, strictly increasing) and
the hub accepts it; the ``rs-publish FILE`` form is unchanged."""

from __future__ import annotations

import hashlib
import os
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from rspush.hub.server import RunningHub
from rspush.resourcesync import fragment_violations, is_valid_fragment, parse_document
from rspush.resourcesync.models import Change
from rspush.source.errors import ChangeArgumentError
from rspush.source.fragment import (
    IncreasingClock,
    build_fragment,
    file_facts,
    parse_deleted,
    parse_with_file,
)
from tests.support.cli import RS_PUBLISH, run_script
from tests.support.fragments import TOKEN_A, change_fragment


async def rs_publish(*args: str) -> tuple[int, str, str]:
    return await run_script(RS_PUBLISH, *args, env={**os.environ, "RSPUSH_TOKEN": TOKEN_A})


def test_the_clock_never_repeats_nor_goes_back() -> None:
    frozen = datetime(2026, 1, 1, tzinfo=UTC)
    clock = IncreasingClock(lambda: frozen)
    times = [clock() for _ in range(3)]
    assert times == sorted(set(times)) and len(times) == 3


def test_url_file_splits_at_the_last_equals_sign() -> None:
    given = parse_with_file(Change.UPDATED, "http://x.example/a?b=c=data/a.txt")
    assert (given.loc, given.path) == ("http://x.example/a?b=c", Path("data/a.txt"))
    for bad in ("http://x.example/a", "=a.txt", "http://x.example/a="):
        with pytest.raises(ChangeArgumentError, match="URL=FILE"):
            parse_with_file(Change.CREATED, bad)
    with pytest.raises(ChangeArgumentError, match="http"):
        parse_deleted("a.txt")


def test_the_fragment_is_a_valid_change_list(tmp_path: Path) -> None:
    page = tmp_path / "page.html"
    page.write_bytes(b"<p>hello</p>")
    created = parse_with_file(Change.CREATED, f"http://x.example/p={page}")
    doc = parse_document(
        build_fragment(
            [(created, file_facts(page)), (parse_deleted("http://x.example/q"), None)],
            IncreasingClock(),
        )
    )
    assert is_valid_fragment(doc), fragment_violations(doc)
    first = doc.entries[0].md
    assert first is not None and first.type == "text/html" and first.length == 12


@pytest.mark.timeout(60)
async def test_changes_given_as_options_are_posted_with_their_fixity(
    hub: RunningHub, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    one, two = tmp_path / "one.txt", tmp_path / "two.bin"
    one.write_bytes(b"first resource\n")
    two.write_bytes(bytes(range(256)) * 5000)  # more than one read chunk
    code, out, err = await rs_publish(
        "--hub", hub.url, "--topic", "dataset1",
        "--created", f"http://example.com/one={one}",
        "--updated", f"http://example.com/two={two}",
        "--created", f"http://example.com/three={one}",
        "--deleted", "http://example.com/gone",
    )  # fmt: skip
    assert code == 0, err
    assert httpx.Response(200, content=out).json()["accepted"] == 4
    listed = parse_document((await client.get("/topics/dataset1/changelist.xml")).content)
    seen = [(e.loc, e.md.change if e.md else None) for e in listed.entries]
    assert seen == [
        ("http://example.com/one", "created"),
        ("http://example.com/three", "created"),
        ("http://example.com/two", "updated"),
        ("http://example.com/gone", "deleted"),
    ]
    times = [e.md.datetime for e in listed.entries if e.md and e.md.datetime]
    assert len(times) == 4 and times == sorted(set(times))  # strictly increasing
    for entry, path in zip(listed.entries[:3], (one, one, two), strict=True):
        assert entry.md is not None
        content = path.read_bytes()
        assert entry.md.length == len(content)
        assert {str(h) for h in entry.md.hash} == {
            f"md5:{hashlib.md5(content).hexdigest()}",
            f"sha-256:{hashlib.sha256(content).hexdigest()}",
        }
    gone = listed.entries[3].md
    assert gone is not None and gone.length is None and gone.hash == ()


async def test_the_file_form_still_posts(hub: RunningHub, tmp_path: Path) -> None:
    file = tmp_path / "changes.xml"
    file.write_bytes(change_fragment(("http://example.com/f", "created", "2026-01-01T00:00:00Z")))
    code, out, err = await rs_publish(str(file), "--hub", hub.url, "--topic", "dataset1")
    assert code == 0, err
    assert httpx.Response(200, content=out).json()["accepted"] == 1


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["x.xml", "--deleted", "http://example.com/a"],
        ["--created", "http://example.com/a=does-not-exist.txt"],
        ["--created", "no-equals-sign"],
    ],
)
async def test_a_usage_error_is_one_line_and_exit_2(args: list[str]) -> None:
    code, out, err = await rs_publish(*args, "--hub", "http://127.0.0.1:9", "--topic", "t")
    assert code == 2 and out == ""
    assert err.startswith("rs-publish: ") and err.count("\n") == 1, err
