"""A resource that redirects is followed only where the agent would fetch for its own sake:
never to a host no ``--map`` covers, nor past ``--exclude``, nor to an internal address the
Source is not on (server-side request forgery through the mirror).

Two origins on loopback: the Source, and an "internal" service on another port that the map
does not cover.
"""

from __future__ import annotations

import asyncio
import ipaddress
from pathlib import Path

import pytest
from starlette.requests import Request
from starlette.responses import Response

from rspush.subscriber.agent import Agent
from rspush.subscriber.checkpoint import Checkpoint
from rspush.subscriber.errors import RedirectRefusedError
from rspush.subscriber.filters import ChangeFilter
from rspush.subscriber.mapping import UriMap
from rspush.subscriber.redirects import RedirectPolicy, address_kind
from tests.support.agents import mirror_files
from tests.support.origin import running_origin
from tests.support.static_source import (
    T0,
    StaticSource,
    capability_list,
    config_for,
    listed,
    urlset,
)
from tests.support.waiting import TIMEOUT_SCALE


class RedirectingSource(StaticSource):
    """A static Source some of whose paths answer ``302`` to a location."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.redirects: dict[str, str] = {}

    async def _get(self, request: Request) -> Response:
        location = self.redirects.get(request.scope["path"])
        if location is not None:
            self.requests[request.scope["path"]] += 1
            return Response(status_code=302, headers={"Location": location})
        return await super()._get(request)


async def baseline_with_redirects(
    tmp_path: Path, redirects: dict[str, str], **options: object
) -> tuple[Agent, RedirectingSource, StaticSource, Path]:
    """Baseline a Source listing /moved.txt and /leak.txt, each redirecting as
    ``redirects`` says (``{internal}`` stands for the internal origin's URL)."""
    async with (
        running_origin(RedirectingSource) as source,
        running_origin(StaticSource) as internal,
    ):
        internal.put("/secret", b"internal only")
        source.put("/new.txt", b"moved here")
        capability_list(source, {"resourcelist": "/resourcelist.xml"})
        entries = "".join(
            listed(source, path, content, T0)
            for path, content in (("/moved.txt", b"moved here"), ("/leak.txt", b"internal only"))
        )
        source.put_document("/resourcelist.xml", urlset("resourcelist", entries, at=T0))
        source.redirects = {p: loc.format(internal=internal.url) for p, loc in redirects.items()}
        dest = tmp_path / "mirror"
        agent = Agent(config_for(source, dest, **options))
        async with asyncio.timeout(20 * TIMEOUT_SCALE):
            await agent.run(baseline_only=True)
        return agent, source, internal, dest


async def test_a_redirect_to_an_unmapped_internal_origin_is_refused(tmp_path: Path) -> None:
    agent, source, internal, dest = await baseline_with_redirects(
        tmp_path, {"/moved.txt": "/new.txt", "/leak.txt": "{internal}/secret"}
    )
    # The redirect within the Source is followed; the one to the internal origin is not.
    assert mirror_files(dest) == {"/moved.txt": b"moved here"}
    assert internal.requests["/secret"] == 0
    assert source.requests["/leak.txt"] == 1, "refused for good: not tried again at once"
    assert agent.mirror is not None and agent.mirror.stats["refused"] == 1
    assert agent.endpoints is not None
    with Checkpoint(
        agent.config.state_path, agent.endpoints.capability_list, agent.endpoints.topic
    ) as checkpoint:
        [failure] = checkpoint.failures()
        assert failure.uri == source.uri("/leak.txt")
        assert f"redirects to {internal.url}/secret" in failure.reason
        assert "no --map covers it" in failure.reason
        assert checkpoint.retryable_failures(max_tries=10) == []


async def test_a_redirect_into_an_excluded_path_is_refused(tmp_path: Path) -> None:
    agent, source, _, dest = await baseline_with_redirects(
        tmp_path,
        {"/moved.txt": "/new.txt", "/leak.txt": "/private/new.txt"},
        change_filter=ChangeFilter.build(exclude=["/private/"]),
    )
    assert mirror_files(dest) == {"/moved.txt": b"moved here"}
    assert source.requests["/private/new.txt"] == 0
    assert agent.mirror is not None and agent.mirror.stats["refused"] == 1


POLICY = RedirectPolicy(
    UriMap.build(
        [
            ("http://93.184.216.34/", ""),
            ("http://127.0.0.1:9/", "l"),
            ("http://169.254.169.254/", "m"),
        ]
    ),
    ChangeFilter(),
)


@pytest.mark.parametrize(
    ("target", "kind"),
    [("http://127.0.0.1:9/x", "loopback"), ("http://169.254.169.254/latest/", "metadata")],
)
async def test_a_public_source_may_not_redirect_to_an_internal_address(
    target: str, kind: str
) -> None:
    # Mapped, so only the address check stands in the way; literal addresses: no DNS.
    with pytest.raises(RedirectRefusedError, match=f"internal \\({kind}\\)"):
        await POLICY.check("http://93.184.216.34/a", target)
    await POLICY.check("http://127.0.0.1:9/a", "http://127.0.0.1:9/b")  # the Source is there
    await POLICY.check("http://93.184.216.34/a", "http://93.184.216.34/b")


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("192.168.0.1", "private"),
        ("fd12::1", "private"),
        ("169.254.1.1", "link-local"),
        ("fe80::1", "link-local"),
        ("169.254.169.254", "metadata"),
        ("::ffff:127.0.0.1", "loopback"),
        ("0.0.0.0", "reserved"),
        ("93.184.216.34", None),
        ("2606:2800:220:1::1", None),
    ],
)
def test_address_kinds(address: str, kind: str | None) -> None:
    assert address_kind(ipaddress.ip_address(address)) == kind


def test_ipv4_addresses_inside_ipv6_ones_are_judged_by_the_ipv4_host() -> None:
    # NAT64 (RFC 6052), 6to4 and IPv4-compatible forms reach the embedded IPv4 host.
    assert address_kind(ipaddress.ip_address("64:ff9b::a9fe:a9fe")) == "metadata"
    assert address_kind(ipaddress.ip_address("2002:7f00:1::")) == "loopback"
    assert address_kind(ipaddress.ip_address("::7f00:1")) == "loopback"
    assert address_kind(ipaddress.ip_address("::ffff:10.0.0.1")) == "private"
    assert address_kind(ipaddress.ip_address("2606:4700:4700::1111")) is None
