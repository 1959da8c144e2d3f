"""The status page in a real headless browser (Chromium): the DOM after the page's script ran
shows the figures and that the live refresh fetched the JSON; a screenshot is a non-empty PNG,
kept in ``test-artifacts/status.png`` for a person to look at."""

from __future__ import annotations

import asyncio
import re
import shutil
from pathlib import Path

import httpx
import pytest

from rspush.hub.server import RunningHub
from tests.support.fragments import TOKEN_A, Times, auth, change_fragment
from tests.support.waiting import TIMEOUT_SCALE

CHROMIUM = shutil.which("chromium")
BROWSER_TIMEOUT_S = 90 * TIMEOUT_SCALE
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="no chromium binary on PATH (apt-get install chromium; scripts/test tries to)",
)


async def browse(profile: Path, *args: str) -> str:
    """Run headless Chromium with ``args``; its stdout. The hub serves in this event loop, so
    the browser runs as a subprocess awaited here, bounded in time."""
    assert CHROMIUM is not None
    process = await asyncio.create_subprocess_exec(
        CHROMIUM,
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        f"--user-data-dir={profile}",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(BROWSER_TIMEOUT_S):
            out, err = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise AssertionError(f"chromium did not finish within {BROWSER_TIMEOUT_S} s") from None
    assert process.returncode == 0, err.decode(errors="replace")[-2000:]
    return out.decode()


async def post_changes(client: httpx.AsyncClient, topic: str, count: int) -> None:
    times = Times()
    body = change_fragment(
        *((f"http://example.com/{topic}/{i}", "created", times.next()) for i in range(count))
    )
    headers = auth(TOKEN_A if topic == "dataset1" else "token-of-source-b")
    reply = await client.post(f"/topics/{topic}/changes", content=body, headers=headers)
    assert reply.status_code == 202, reply.text


def cell(dom: str, topic: str, field: str) -> str | None:
    """The text of a topic's cell in the dumped DOM."""
    row = re.search(
        rf'<section class="topic" data-topic="{re.escape(topic)}">(.*?)</section>', dom, re.S
    )
    if row is None:
        return None
    found = re.search(rf'data-field="{re.escape(field)}">([^<]*)<', row.group(1))
    return None if found is None else found.group(1)


async def test_the_page_in_a_browser_shows_the_figures(
    hub: RunningHub, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    await post_changes(client, "dataset1", 7)
    await post_changes(client, "dataset2", 2)
    # A budget of virtual time lets the page's first fetch of the JSON finish before the dump.
    dom = await browse(
        tmp_path / "profile", "--virtual-time-budget=5000", "--dump-dom", f"{hub.url}/status"
    )
    assert "rspush hub status" in dom
    assert cell(dom, "dataset1", "stream_length") == "7"
    assert cell(dom, "dataset2", "stream_length") == "2"
    assert cell(dom, "dataset1", "open_list.entries") == "7"
    assert '<td data-process="redis">ok</td>' in dom
    # The script replaced the static marker: it fetched the JSON and rewrote the figures.
    assert 'id="live" data-state="live"' in dom, dom[:3000]


async def test_a_screenshot_of_the_page_is_a_png(
    hub: RunningHub, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    await post_changes(client, "dataset1", 3)
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "status.png"
    shot.unlink(missing_ok=True)
    await browse(
        tmp_path / "profile",
        "--hide-scrollbars",
        "--virtual-time-budget=5000",
        f"--screenshot={shot}",
        "--window-size=1280,900",
        f"{hub.url}/status",
    )
    data = shot.read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    assert len(data) > 5000, len(data)  # a blank page compresses to far less
