"""Discovery of a Source (Z39.99 §6.3) against real HTTP servers on loopback: a small
Starlette site serving ResourceSync documents shaped like the spec's examples. (Discovering a
hub is in the end-to-end tests.)"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field

import httpx
import pytest
import uvicorn
from hypothesis import given
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from rspush.protocol import PUSH_REL
from rspush.remote.discovery import (
    MAX_DISCOVERY_BYTES,
    MAX_HOPS,
    DiscoveryError,
    TopicEndpoints,
    discover,
    source_base_uri,
)
from rspush.remote.links import (
    html_resourcesync_links,
    parse_links,
    robots_sitemaps,
    topic_name,
)
from tests.support.sockets import bind
from tests.support.waiting import TIMEOUT_SCALE

XML = "application/xml"
HEAD = (
    '<?xml version="1.0" encoding="UTF-8"?>\n'
    '<{root} xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"\n'
    '        xmlns:rs="http://www.openarchives.org/rs/terms/">\n'
)


def document(
    capability: str,
    entries: Sequence[tuple[str, str | None]] = (),
    *,
    up: str | None = None,
    index: str | None = None,
    root: str = "urlset",
) -> str:
    """A ResourceSync document as a Source writes it (cf. Examples 2, 6, 7, 13, 18)."""
    item = "sitemap" if root == "sitemapindex" else "url"
    parts = [HEAD.format(root=root)]
    if up is not None:
        parts.append(f'  <rs:ln rel="up" href="{up}"/>\n')
    if index is not None:
        parts.append(f'  <rs:ln rel="index" href="{index}"/>\n')
    parts.append(f'  <rs:md capability="{capability}" at="2013-01-03T09:00:00Z"/>\n')
    for loc, entry_capability in entries:
        md = f'<rs:md capability="{entry_capability}"/>' if entry_capability else ""
        parts.append(f"  <{item}><loc>{loc}</loc>{md}</{item}>\n")
    parts.append(f"</{root}>\n")
    return "".join(parts)


@dataclass
class Page:
    body: bytes | str = b""
    status: int = 200
    media_type: str = XML
    headers: dict[str, str] = field(default_factory=dict)


class Site:
    """What a Source serves: path → page; every other path is a 404. ``hits`` counts GETs."""

    def __init__(self) -> None:
        self.pages: dict[str, Page | Response] = {}
        self.hits: list[str] = []
        self.base = ""

    def url(self, path: str) -> str:
        return self.base + path

    def add(self, path: str, body: bytes | str = b"", **page: object) -> str:
        self.pages[path] = Page(body, **page)  # type: ignore[arg-type]
        return self.url(path)

    def dataset(self, name: str, *, up: str | None = "/.well-known/resourcesync") -> str:
        """A pull-only dataset as Example 6 has it: Capability List, Resource List, Resource
        Dump, a Change List that is an index (§12.2), Change Dump, Change List Archive."""
        base = f"/{name}"
        self.add(
            f"{base}/capabilitylist.xml",
            document(
                "capabilitylist",
                [
                    (self.url(f"{base}/resourcelist.xml"), "resourcelist"),
                    (self.url(f"{base}/resourcedump.xml"), "resourcedump"),
                    (self.url(f"{base}/changelist.xml"), "changelist"),
                    (self.url(f"{base}/changedump.xml"), "changedump"),
                    (self.url(f"{base}/changelist-archive.xml"), "changelist-archive"),
                ],
                up=None if up is None else self.url(up),
            ),
        )
        cap = self.url(f"{base}/capabilitylist.xml")
        res = [(f"http://example.com/{name}/res1", None)]
        self.add(f"{base}/resourcelist.xml", document("resourcelist", res, up=cap))
        self.add(f"{base}/resourcedump.xml", document("resourcedump", res, up=cap))
        self.add(
            f"{base}/changelist.xml",
            document(
                "changelist",
                [(self.url(f"{base}/changelist-part1.xml"), None)],
                up=cap,
                root="sitemapindex",
            ),
        )
        self.add(
            f"{base}/changelist-part1.xml",
            document("changelist", index=self.url(f"{base}/changelist.xml")),
        )
        self.add(f"{base}/changedump.xml", document("changedump", up=cap))
        self.add(
            f"{base}/changelist-archive.xml",
            document(
                "changelist-archive",
                [(self.url(f"{base}/changelist-part1.xml"), None)],
                up=cap,
            ),
        )
        return cap

    def description(self, path: str, *datasets: str) -> str:
        caps = [(self.url(f"/{name}/capabilitylist.xml"), "capabilitylist") for name in datasets]
        return self.add(path, document("description", caps))

    async def serve(self, request: Request) -> Response:
        path = request.url.path
        self.hits.append(path)
        page = self.pages.get(path)
        if page is None:
            return PlainTextResponse("not found", status_code=404)
        if isinstance(page, Response):
            return page
        return Response(page.body, page.status, page.headers, media_type=page.media_type)


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling (the test process owns the signals)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def serving(site: Site) -> AsyncIterator[Site]:
    """``site`` on a real socket on 127.0.0.1, port 0, in this test's event loop."""
    sock = bind("127.0.0.1", 0)
    site.base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    app = Starlette(routes=[Route("/{path:path}", site.serve)])
    config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)
    server = _Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(10 * TIMEOUT_SCALE):
            while not server.started:
                if task.done():
                    task.result()
                await asyncio.sleep(0.01)
        yield site
    finally:
        server.should_exit = True
        await task
        sock.close()


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    async with serving(Site()) as running:
        yield running


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10 * TIMEOUT_SCALE, follow_redirects=True) as client:
        yield client


def assert_dataset1(found: TopicEndpoints, site: Site, description: str | None) -> None:
    assert found == TopicEndpoints(
        topic="dataset1",
        capability_list=site.url("/dataset1/capabilitylist.xml"),
        change_list=site.url("/dataset1/changelist.xml"),  # a Change List Index: reported as is
        change_list_archive=site.url("/dataset1/changelist-archive.xml"),
        resource_list=site.url("/dataset1/resourcelist.xml"),
        push_url=None,
        resource_dump=site.url("/dataset1/resourcedump.xml"),
        change_dump=site.url("/dataset1/changedump.xml"),
        source_description=description,
    )
    assert found.base_uri == site.url("/")


# --- The forms of SOURCE_URL -----------------------------------------------------------------


async def test_base_url_reads_the_well_known_source_description(
    site: Site, http: httpx.AsyncClient
) -> None:
    site.dataset("dataset1")
    description = site.description("/.well-known/resourcesync", "dataset1")
    for source_url in (site.base, site.url("/"), description):
        assert_dataset1(await discover(http, source_url, None), site, description)
        assert_dataset1(await discover(http, source_url, "dataset1"), site, description)


async def test_source_description_and_capability_list_urls(
    site: Site, http: httpx.AsyncClient
) -> None:
    # Example 12: a Source Description elsewhere than the well-known URI.
    site.dataset("dataset1", up="/resourcesync_description.xml")
    description = site.description("/resourcesync_description.xml", "dataset1")
    assert_dataset1(await discover(http, description, None), site, description)
    # A Capability List is taken as it is; its Source Description is not needed.
    capability_list = site.url("/dataset1/capabilitylist.xml")
    assert_dataset1(await discover(http, capability_list, None), site, None)
    assert_dataset1(await discover(http, capability_list, "dataset1"), site, None)


async def test_redirected_well_known_and_a_source_description_index(
    site: Site, http: httpx.AsyncClient
) -> None:
    """The well-known URI may redirect; a Source Description may be an index (§8) whose
    parts list the Capability Lists."""
    site.dataset("dataset1")
    site.description("/sd-1.xml", "dataset1")
    index = site.add(
        "/sd-index.xml",
        document("description", [(site.url("/sd-1.xml"), None)], root="sitemapindex"),
    )
    site.pages["/.well-known/resourcesync"] = Response(
        status_code=302, headers={"Location": "/sd-index.xml"}
    )
    found = await discover(http, site.base, None)
    assert_dataset1(found, site, site.url("/.well-known/resourcesync"))
    assert_dataset1(await discover(http, index, None), site, index)


async def test_well_known_under_the_given_path(site: Site, http: httpx.AsyncClient) -> None:
    """A Source mounted under a path prefix publishes its well-known URI there."""
    site.dataset("dataset1")
    description = site.description("/rspush/.well-known/resourcesync", "dataset1")
    assert_dataset1(await discover(http, site.url("/rspush"), None), site, description)
    assert_dataset1(await discover(http, site.url("/rspush/"), None), site, description)
    assert site.hits[:2] == ["/rspush", "/rspush/.well-known/resourcesync"]


@pytest.mark.parametrize(
    "start",
    [
        "/dataset1/resourcelist.xml",
        "/dataset1/resourcedump.xml",
        "/dataset1/changelist.xml",  # a Change List Index
        "/dataset1/changelist-part1.xml",  # only rel="index" to the Change List Index
        "/dataset1/changedump.xml",
        "/dataset1/changelist-archive.xml",  # archives: "up" is the Capability List too
    ],
)
async def test_any_document_leads_up_to_its_capability_list(
    site: Site, http: httpx.AsyncClient, start: str
) -> None:
    site.dataset("dataset1")
    assert_dataset1(await discover(http, site.url(start), None), site, None)
    assert "/.well-known/resourcesync" not in site.hits


async def test_up_chain_through_a_resource_list_index(site: Site, http: httpx.AsyncClient) -> None:
    """Example 15/16: a Resource List part → its index (rel="up" omitted) → Capability List."""
    cap = site.dataset("dataset1")
    index = site.add(
        "/dataset1/resourcelist-index.xml",
        document(
            "resourcelist", [(site.url("/dataset1/rl-1.xml"), None)], up=cap, root="sitemapindex"
        ),
    )
    site.add("/dataset1/rl-1.xml", document("resourcelist", index=index))
    found = await discover(http, site.url("/dataset1/rl-1.xml"), None)
    assert found.capability_list == cap


async def test_http_link_header_on_any_page(site: Site, http: httpx.AsyncClient) -> None:
    """Example 10, with several links in one header, a quoted multi-type rel and a relative
    target; the page itself is not XML."""
    site.dataset("dataset1")
    page = site.add(
        "/dataset1/res1",
        "plain text",
        media_type="text/plain",
        headers={
            "Link": '<http://example.com/license>; rel="license"; title="a, b; c=d", '
            '</dataset1/capabilitylist.xml>; rel="describedby resourcesync"'
        },
    )
    assert_dataset1(await discover(http, page, None), site, None)


async def test_http_link_header_to_a_source_description(
    site: Site, http: httpx.AsyncClient
) -> None:
    site.dataset("dataset1")
    description = site.description("/sd.xml", "dataset1")
    page = site.add("/page", b"", headers={"Link": "</sd.xml>; rel=resourcesync"})
    assert_dataset1(await discover(http, page, None), site, description)


async def test_html_link_element(site: Site, http: httpx.AsyncClient) -> None:
    """Example 9, with a relative href resolved against the page."""
    site.dataset("dataset1")
    html = (
        "<!DOCTYPE html>\n<html><head><title>Dataset 1</title>\n"
        '<link rel="stylesheet" href="/style.css">\n'
        '<link rel="resourcesync" href="capabilitylist.xml"/>\n'
        "</head><body><p>Resource 1</p></body></html>"
    )
    page = site.add("/dataset1/page.html", html, media_type="text/html; charset=utf-8")
    assert_dataset1(await discover(http, page, None), site, None)


async def test_html_page_without_a_link_falls_back_to_the_well_known_uri(
    site: Site, http: httpx.AsyncClient
) -> None:
    site.dataset("dataset1")
    description = site.description("/.well-known/resourcesync", "dataset1")
    page = site.add(
        "/about.html", "<html><head></head><body>hi</body></html>", media_type="text/html"
    )
    assert_dataset1(await discover(http, page, None), site, description)


async def test_robots_txt_sitemaps(site: Site, http: httpx.AsyncClient) -> None:
    """Example 11: no well-known URI; robots.txt names a plain Sitemap and a Resource List."""
    site.dataset("dataset1")
    site.add(
        "/sitemap.xml",
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        "<url><loc>http://example.com/</loc></url></urlset>",
    )
    site.add(
        "/robots.txt",
        "User-agent: *\nDisallow: /cgi-bin/\n"
        f"Sitemap: {site.url('/sitemap.xml')}\nSitemap: /dataset1/resourcelist.xml\n",
        media_type="text/plain",
    )
    assert_dataset1(await discover(http, site.base, None), site, None)
    assert site.hits[:2] == ["/.well-known/resourcesync", "/"]


async def test_robots_txt_with_several_datasets(site: Site, http: httpx.AsyncClient) -> None:
    for name in ("dataset1", "dataset2"):
        site.dataset(name)
    site.add(
        "/robots.txt",
        "Sitemap: /dataset1/resourcelist.xml\nSitemap: /dataset2/changelist.xml\n",
        media_type="text/plain",
    )
    with pytest.raises(DiscoveryError, match=r"2 topics \(dataset1, dataset2\).*--topic"):
        await discover(http, site.base, None)
    found = await discover(http, site.base, "dataset2")
    assert found.capability_list == site.url("/dataset2/capabilitylist.xml")


# --- Topics ------------------------------------------------------------------------------------


async def test_several_topics_and_unknown_topics(site: Site, http: httpx.AsyncClient) -> None:
    for name in ("dataset1", "dataset2"):
        site.dataset(name)
    site.description("/.well-known/resourcesync", "dataset1", "dataset2")
    with pytest.raises(DiscoveryError) as error:
        await discover(http, site.base, None)
    assert (
        str(error.value) == "the Source has 2 topics (dataset1, dataset2): choose one with --topic"
    )
    with pytest.raises(
        DiscoveryError, match=r"no topic 'nope'; the Source has: dataset1, dataset2"
    ):
        await discover(http, site.base, "nope")
    assert (await discover(http, site.base, "dataset2")).topic == "dataset2"


async def test_one_capability_list_and_a_topic_that_does_not_match(
    site: Site, http: httpx.AsyncClient
) -> None:
    cap = site.dataset("dataset1")
    with pytest.raises(DiscoveryError) as error:
        await discover(http, cap, "dataset2")
    assert str(error.value) == (
        f"no topic 'dataset2'; the Source has: dataset1 (Capability List {cap})"
    )


async def test_capability_lists_at_the_root(site: Site, http: httpx.AsyncClient) -> None:
    """Example 12's layout: the topic names come from the file names, not the (empty)
    directory; a push channel may be advertised in the Capability List's Link header."""
    for n in (1, 2):
        site.add(
            f"/capabilitylist{n}.xml",
            document("capabilitylist", [(site.url(f"/resourcelist{n}.xml"), "resourcelist")]),
            headers={"Link": f'<ws://127.0.0.1:9/>; rel="{PUSH_REL}"'},
        )
    site.add(
        "/.well-known/resourcesync",
        document(
            "description",
            [(site.url(f"/capabilitylist{n}.xml"), "capabilitylist") for n in (1, 2)],
        ),
    )
    found = await discover(http, site.base, "capabilitylist2")
    assert found.resource_list == site.url("/resourcelist2.xml")
    assert found.push_url == "ws://127.0.0.1:9/"
    assert found.change_list is None and found.resource_dump is None


# --- A hostile or broken Source ----------------------------------------------------------------


async def test_a_loop_of_up_links_is_reported(site: Site, http: httpx.AsyncClient) -> None:
    site.add("/a.xml", document("resourcelist", up=site.url("/b.xml")))
    site.add("/b.xml", document("changelist", up=site.url("/a.xml")))
    with pytest.raises(DiscoveryError, match=r"links loop: .*/a\.xml → .*/b\.xml → .*/a\.xml"):
        await discover(http, site.url("/a.xml"), None)
    assert site.hits == ["/a.xml", "/b.xml"]


async def test_a_chain_longer_than_the_hop_limit_is_refused(
    site: Site, http: httpx.AsyncClient
) -> None:
    for n in range(MAX_HOPS + 2):
        site.add(f"/{n}.xml", document("changelist", up=site.url(f"/{n + 1}.xml")))
    with pytest.raises(DiscoveryError, match=f"gave up after following {MAX_HOPS} links"):
        await discover(http, site.url("/0.xml"), None)
    assert len(site.hits) == MAX_HOPS + 1


async def test_an_oversized_document_is_refused(site: Site, http: httpx.AsyncClient) -> None:
    site.dataset("dataset1")
    padding = "".join(f"  <url><loc>http://example.com/r{i}</loc></url>\n" for i in range(3000))
    big = document("changelist", up=site.url("/dataset1/capabilitylist.xml"))
    site.add("/big.xml", big.replace("</urlset>", padding + "</urlset>"))
    with pytest.raises(DiscoveryError, match=r"/big\.xml: the document is \d+ bytes; discovery"):
        await discover(http, site.url("/big.xml"), None, max_bytes=64 * 1024)
    # Without a Content-Length, and at the default cap: reading stops at the cap.
    chunk = b" " * (1024 * 1024)

    async def endless() -> AsyncIterator[bytes]:
        yield b'<?xml version="1.0" encoding="UTF-8"?>'
        for _ in range(4 * MAX_DISCOVERY_BYTES // len(chunk)):
            yield chunk

    site.pages["/endless.xml"] = StreamingResponse(endless(), media_type=XML)
    with pytest.raises(DiscoveryError, match=r"/endless\.xml: the document is more than"):
        await discover(http, site.url("/endless.xml"), None)


async def test_server_errors_are_reported(site: Site, http: httpx.AsyncClient) -> None:
    site.add("/.well-known/resourcesync", "boom", status=500, media_type="text/plain")
    with pytest.raises(DiscoveryError) as error:
        await discover(http, site.base, None)
    assert str(error.value) == f"GET {site.url('/.well-known/resourcesync')}: HTTP 500"
    # A linked Capability List that fails names the document that linked it.
    description = site.description("/sd.xml", "dataset1")
    site.add("/dataset1/capabilitylist.xml", "boom", status=503, media_type="text/plain")
    with pytest.raises(DiscoveryError) as error:
        await discover(http, description, None)
    cap = site.url("/dataset1/capabilitylist.xml")
    assert str(error.value) == f"GET {cap} (linked from {description}): HTTP 503"


async def test_nothing_found_says_what_was_tried(site: Site, http: httpx.AsyncClient) -> None:
    site.add("/", "<html><body>Welcome</body></html>", media_type="text/html")
    site.add("/robots.txt", "User-agent: *\nDisallow:\n", media_type="text/plain")
    with pytest.raises(DiscoveryError) as error:
        await discover(http, site.base, None)
    message = str(error.value)
    assert message.startswith(
        f"no ResourceSync Source Description or Capability List found from {site.base}"
    )
    assert f"{site.url('/.well-known/resourcesync')} (HTTP 404)" in message
    assert f'{site.url("/")} (an HTML page without <link rel="resourcesync">)' in message
    assert f"{site.url('/robots.txt')} (no Sitemap lines)" in message


async def test_broken_documents_are_named(site: Site, http: httpx.AsyncClient) -> None:
    site.add("/rl.xml", document("resourcelist"))  # no up link
    with pytest.raises(DiscoveryError, match=r'/rl\.xml \(a Resource List with no rs:ln rel="up"'):
        await discover(http, site.url("/rl.xml"), None)
    site.add("/sd.xml", document("description", [(site.url("/rl.xml"), "capabilitylist")]))
    with pytest.raises(DiscoveryError, match=r"/rl\.xml, listed in .*/sd\.xml, is a Resource List"):
        await discover(http, site.url("/sd.xml"), None)
    site.add("/empty.xml", document("description"))
    with pytest.raises(DiscoveryError, match=r"/empty\.xml lists no Capability Lists"):
        await discover(http, site.url("/empty.xml"), None)
    site.add("/dtd.xml", '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "b">]><x/>')
    site.add("/page", headers={"Link": "</dtd.xml>; rel=resourcesync"})
    with pytest.raises(DiscoveryError, match=r"/dtd\.xml \(linked from .*/page\) is not a Res"):
        await discover(http, site.url("/page"), None)
    with pytest.raises(DiscoveryError, match="must be an http"):
        await discover(http, "ftp://example.com/", None)


async def test_unreachable_source(http: httpx.AsyncClient) -> None:
    sock = bind("127.0.0.1", 0)  # bound, never listening
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()
    with pytest.raises(DiscoveryError, match=f"GET {url}/.well-known/resourcesync: "):
        await discover(http, url, None)


# --- Sans-I/O pieces ---------------------------------------------------------------------------


def test_parse_links() -> None:
    links = parse_links(
        [
            '<a.xml>; rel="resourcesync hub", </b>; title="x, y; z=<c>"; rel=ResourceSync',
            '<http://o/c>; rel=up; anchor="#x", <d>;rel="up";rel=other, garbage, <e>',
        ],
        "http://h/p/q",
    )
    assert [(link.target, sorted(link.rels)) for link in links] == [
        ("http://h/p/a.xml", ["hub", "resourcesync"]),
        ("http://h/b", ["resourcesync"]),
        ("http://h/p/d", ["up"]),
    ]
    assert parse_links(["", "nonsense", '<//x/>; title="no rel"'], "http://h/") == []
    [push] = parse_links(['<ws://h:9/>; rel="urn:rspush:websocket"'], "http://h/")
    assert push.target == "ws://h:9/"


def test_html_links() -> None:
    page = (
        b'<html><head><base href="/x/"><link rel="Stylesheet ResourceSync" href=" c.xml ">'
        b'<link rel="resourcesync"><link rel="alternate" href="/no.xml"></head></html>'
    )
    assert html_resourcesync_links(page, "http://h/p/") == ["http://h/x/c.xml"]
    assert html_resourcesync_links(b"", "http://h/") == []
    assert html_resourcesync_links(b"\x00\xff<<<", "http://h/") == []


def test_robots_sitemaps() -> None:
    robots = (
        b"User-agent: *\nSITEMAP: /rl.xml # a comment\nsitemap:http://o/x.xml\n# Sitemap: /no\n"
    )
    assert robots_sitemaps(robots, "http://h/robots.txt") == ["http://h/rl.xml", "http://o/x.xml"]


def test_names() -> None:
    assert topic_name("http://h/topics/dataset1/capabilitylist.xml") == "dataset1"
    assert topic_name("http://h/x/caps.xml", "http://h/topics/t1/") == "t1"
    assert topic_name("http://h/capabilitylist2.xml") == "capabilitylist2"
    assert topic_name("http://h/") == "h"
    assert source_base_uri("HTTPS://user@Example.COM:8443/a/b.xml?q") == "https://example.com:8443/"


@given(st.text(), st.one_of(st.none(), st.text()))
def test_topic_name_never_fails(capability_list: str, notification: str | None) -> None:
    assert topic_name(capability_list, notification)
