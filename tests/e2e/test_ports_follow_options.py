"""``rs-hub serve --port 0 --push-port 0`` with neither ``[hub] base_url`` nor ``[push] url``
configured: the documents name the ports it actually bound, it prints them on start, and
``rs-subscribe watch`` given only that URL receives a change posted there (a hub that kept
advertising the default :8080/:8081 would send the watcher to another hub, or nowhere)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from rspush.hub.auth import token_sha256
from rspush.resourcesync import parse_document
from tests.support.fragments import Times
from tests.support.processes import clean_env, rs_hub
from tests.support.waiting import TIMEOUT_SCALE

TOKEN = "ports-source-token"
START_S = 30
CONFIG = """
rotation_interval_s = 0.2
redis_prefix = "{prefix}"

[[topics]]
name = "dataset1"

[[sources]]
name = "a"
token_sha256 = "{digest}"
topics = ["dataset1"]
"""
LISTENING = re.compile(r"listening on (http://127\.0\.0\.1:(\d+)) \(HTTP\) and (ws://\S+) \(push\)")


def reply_links(reply: httpx.Response) -> set[str]:
    return {link["url"] for link in reply.links.values()} if reply.links else set()


@asynccontextmanager
async def serving(tmp_path: Path, redis_url: str, prefix: str) -> AsyncIterator[list[str]]:
    """``rs-hub serve --port 0 --push-port 0``; yields the lines it printed on start."""
    config = tmp_path / "hub.toml"
    config.write_text(CONFIG.format(prefix=prefix, digest=token_sha256(TOKEN)), encoding="utf-8")
    log = (tmp_path / "hub.log").open("wb")
    process = await asyncio.create_subprocess_exec(
        *rs_hub(),
        "serve",
        "--config",
        str(config),
        "--port",
        "0",
        "--push-port",
        "0",
        "--redis-url",
        redis_url,
        stdout=asyncio.subprocess.PIPE,
        stderr=log,
        stdin=asyncio.subprocess.DEVNULL,
        env=clean_env(),
        cwd=tmp_path,
    )
    assert process.stdout is not None
    lines: list[str] = []
    try:
        async with asyncio.timeout(START_S * TIMEOUT_SCALE):
            while not any(line.startswith("  Source Description:") for line in lines):
                line = (await process.stdout.readline()).decode()
                if not line:
                    log.flush()
                    pytest.fail("rs-hub exited: " + (tmp_path / "hub.log").read_text())
                lines.append(line.rstrip("\n"))
        yield lines
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                async with asyncio.timeout(30 * TIMEOUT_SCALE):
                    await process.wait()
            except TimeoutError:
                process.kill()
                await process.wait()
        log.close()


@pytest.mark.timeout(120)
async def test_bound_ports_are_advertised_and_watch_gets_a_change(
    tmp_path: Path, redis_url: str, prefix: str
) -> None:
    async with serving(tmp_path, redis_url, prefix) as printed:
        found = LISTENING.search(printed[0])
        assert found, printed
        base, port, push = found.group(1), int(found.group(2)), found.group(3)
        assert port not in (0, 8080)
        assert push != "ws://127.0.0.1:8081/" and not push.endswith(":0/")
        assert f"  base URL:           {base}" in printed
        assert f"  push:               {push}" in printed
        assert f"  Source Description: {base}/.well-known/resourcesync" in printed

        async with httpx.AsyncClient(base_url=base, timeout=30, trust_env=False) as http:
            description = parse_document((await http.get("/.well-known/resourcesync")).content)
            capability_url = f"{base}/topics/dataset1/capabilitylist.xml"
            assert [e.loc for e in description.entries] == [capability_url]
            capabilities = parse_document((await http.get(capability_url)).content)
            # The push endpoint rides on the change-notification entry (docs/protocol.md).
            hrefs = {link.href for e in capabilities.entries for link in e.links}
            assert push in hrefs, hrefs
            assert reply_links(await http.get(capability_url)) >= {push}
            assert all(e.loc.startswith(f"{base}/topics/dataset1") for e in capabilities.entries)

            watch = await asyncio.create_subprocess_exec(
                str(Path(rs_hub()[0]).parent / "rs-subscribe"),
                "watch",
                base,
                "--topic",
                "dataset1",
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=clean_env(),
            )
            assert watch.stdout is not None and watch.stderr is not None
            try:
                async with asyncio.timeout(20 * TIMEOUT_SCALE):
                    while b"subscribed to" not in (line := await watch.stderr.readline()):
                        assert line, "watch exited before subscribing"
                when = Times().next()
                body = (
                    '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
                    'xmlns:rs="http://www.openarchives.org/rs/terms/">'
                    '<rs:md capability="changelist"/><url><loc>http://example.com/p</loc>'
                    f'<rs:md change="created" datetime="{when}"/></url></urlset>'
                )
                reply = await http.post(
                    "/topics/dataset1/changes",
                    content=body,
                    headers={"Authorization": f"Bearer {TOKEN}"},
                )
                assert reply.status_code == 202, reply.text
                async with asyncio.timeout(20 * TIMEOUT_SCALE):
                    seen = json.loads(await watch.stdout.readline())
                assert (seen["loc"], seen["change"]) == ("http://example.com/p", "created")
            finally:
                if watch.returncode is None:
                    watch.kill()
                await watch.communicate()
