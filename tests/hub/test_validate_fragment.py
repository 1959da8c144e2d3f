"""``rs-validate --fragment`` says what the hub says: the fragment rules of the document layer
(:mod:`rspush.resourcesync.fragments`) are the hub ingest's, and on sample bodies the
verdict matches the hub's answer to the same post."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import httpx
import pytest

from rspush.hub import ingest
from rspush.hub.server import RunningHub
from rspush.resourcesync import is_valid_fragment, parse_document
from rspush.resourcesync.fragments import FRAGMENT_CAPABILITIES, RELAXED_FOR_FRAGMENTS
from tests.support.fragments import Times, auth, change_fragment
from tests.support.waiting import TIMEOUT_SCALE

REPO = Path(__file__).resolve().parents[2]
RS_VALIDATE = Path(sys.executable).parent / "rs-validate"


async def rs_validate(*args: str) -> tuple[int, str]:
    process = await asyncio.create_subprocess_exec(
        RS_VALIDATE, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    async with asyncio.timeout(30 * TIMEOUT_SCALE):
        out, _ = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode()


def test_the_rules_are_the_hubs() -> None:
    # One definition, used by the hub's ingest and by rs-validate --fragment.
    assert ingest._RELAXED_RULES == RELAXED_FOR_FRAGMENTS
    assert ingest.CHANGE_CAPABILITIES == FRAGMENT_CAPABILITIES


async def test_the_example_fragment_is_valid_only_as_a_fragment() -> None:
    example = str(REPO / "examples" / "changes.xml")
    code, out = await rs_validate("--fragment", "--strict", example)
    assert code == 0, out
    code, out = await rs_validate(example)
    assert code == 1 and "time-from-missing" in out


def bodies() -> dict[str, bytes]:
    times = Times()
    first, second = times.next(), times.next()
    good = change_fragment(("http://example.com/a", "created", first))
    return {
        "good": good,
        "two in order": change_fragment(
            ("http://example.com/b", "created", first), ("http://example.com/c", "updated", second)
        ),
        "backwards": change_fragment(
            ("http://example.com/d", "created", second), ("http://example.com/e", "updated", first)
        ),
        "empty": change_fragment(),
        "resource list": change_fragment(
            ("http://example.com/f", "created", first), capability="resourcelist"
        ),
        "bad change": change_fragment(("http://example.com/g", "born", first)),
        "bad length": good.replace(b'length="20"', b'length="x"'),
    }


@pytest.mark.parametrize("name", list(bodies()))
async def test_the_verdict_is_the_hubs_answer(
    name: str, hub: RunningHub, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    body = bodies()[name]
    reply = await client.post("/topics/dataset1/changes", content=body, headers=auth())
    assert reply.status_code in (202, 200, 400, 409, 422), reply.text
    hub_accepts = reply.status_code < 300
    assert is_valid_fragment(parse_document(body)) is hub_accepts, reply.text
    file = tmp_path / "fragment.xml"
    file.write_bytes(body)
    code, out = await rs_validate("--fragment", str(file))
    assert (code == 0) is hub_accepts, out
