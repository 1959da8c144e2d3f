"""Property: whatever the hub accepts, every document it then serves is valid against the
official XML Schemas — the open and closed Change Lists (closed ones are immutable, so a bad
value would stay for good), the Change List Index and Archive, the Resource List, the
Capability List and the Source Description.

Random fragments mix ordinary values with edge cases (short, long, relative and malformed
URIs, odd media types and relations, every W3C datetime profile, hashes, escapes); a real hub
in a thread of its own serves them, and each document is checked with
:func:`rspush.resourcesync.schema.schema_errors`."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rspush.hub.server import bind, running_hub
from rspush.hub.settings import Settings
from rspush.resourcesync import parse_document
from rspush.resourcesync.schema import schema_errors
from tests.support.fragments import auth
from tests.support.hubs import make_settings
from tests.support.waiting import TIMEOUT_SCALE

TOPIC = "/topics/dataset1"
OK_LOC = "http://example.com/resource"
MD = '<rs:md change="updated" datetime="{when}"/>'
EXAMPLES = 30


@contextmanager
def hub_in_thread(settings: Settings, sock: object) -> Iterator[str]:
    """A real hub on its own event loop in a thread, for synchronous Hypothesis tests."""
    ready = threading.Event()
    state: dict[str, object] = {}

    async def main() -> None:
        stop = asyncio.Event()
        state["loop"], state["stop"] = asyncio.get_running_loop(), stop
        async with running_hub(settings, sock=sock) as running:  # type: ignore[arg-type]
            state["url"] = running.url
            ready.set()
            await stop.wait()

    def run() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:  # reported by the test thread
            state["error"] = exc
            ready.set()

    thread = threading.Thread(target=run, name="hub", daemon=True)
    thread.start()
    assert ready.wait(30 * TIMEOUT_SCALE), "hub did not start"
    if "error" in state:
        raise AssertionError("hub failed to start") from state["error"]  # type: ignore[misc]
    try:
        yield str(state["url"])
    finally:
        loop = state["loop"]
        loop.call_soon_threadsafe(state["stop"].set)  # type: ignore[attr-defined]
        thread.join(30 * TIMEOUT_SCALE)
        assert not thread.is_alive(), "hub did not stop"


def escape(text: str, *, attribute: bool = False) -> str:
    out = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    if attribute:
        out = out.replace('"', "&quot;")
        for ch in "\t\n\r":  # literal ones would be normalised to spaces by the XML parser
            out = out.replace(ch, f"&#{ord(ch)};")
    return out


_odd = list("aZ09:/?#[]@!$&'()*+,;=%-._~<>\"{}|\\^` \t\né日\u00a0")
_odd_text = st.text(st.sampled_from(_odd), max_size=16)
_ok_uri = st.builds(
    lambda host, path: f"http://{host}.example.com/{path}",
    st.sampled_from(["www", "data", "x"]),
    st.text("abcXYZ019-._~/=;:@!$()*+,%", max_size=12).map(lambda p: p.replace("%", "%41")),
)
# Valid but unusual: the shortest and longest <loc>, characters anyURI tolerates, IRIs.
_edge_uri = st.sampled_from(
    [
        "http://ab.cd",
        "http://e.org/" + "p" * 2035,
        'http://example.com/a?b=<c>&d="e"#{f}|g^h`i\\j',
        "http://example.com/%41%2f",
        "http://[2001:db8::1]:8080/x",
        "http://例え.jp/パス",
        "urn:x:1234567",
        "mailto:someone@example.org",
    ]
)
_bad_uri = st.one_of(
    st.builds(lambda u, s: u + s, _ok_uri, _odd_text),
    _odd_text,
    st.integers(0, 16).map(lambda n: "http://" + "a" * n),
    st.integers(2036, 2040).map(lambda n: "http://e.org/" + "p" * n),
    st.sampled_from(["/relative/res", "//host.example/x", "relative/resource"]),
)
_lastmods = [
    "2020",
    "2020-05",
    "2020-05-06",
    "2020-05-06T07:08Z",
    "2020-05-06T07:08:09Z",
    "2020-05-06T07:08:09.123456+02:00",
    "0001-01-01T00:00:00Z",
    "9999-12-31T23:59:59Z",
    " 2020-05-06 ",
]
# Per field: (acceptable values, edge cases included; values that may well be refused).
FIELDS: dict[str, tuple[st.SearchStrategy[str], st.SearchStrategy[str]]] = {
    "loc": (st.one_of(_ok_uri, _edge_uri), _bad_uri),
    "type": (
        st.sampled_from(["text/html", "application/ld+json", "a$b/c^d+e-f"]),
        st.one_of(
            st.sampled_from(["application/vnd.x", "text/plain;x=1", "x_y/z"]),
            st.builds(lambda a, b: f"{a}/{b}", _odd_text, _odd_text),
        ),
    ),
    "hash": (
        st.sampled_from(["md5:" + "0" * 32, "sha-256:" + "ab" * 32 + " md5:" + "1" * 32]),
        _odd_text.map(lambda t: "md5:" + t),
    ),
    "length": (st.sampled_from(["0", "12", "123456789"]), st.sampled_from(["-1", "1.5"])),
    "encoding": (_odd_text, _odd_text),
    "lastmod": (st.sampled_from(_lastmods), st.sampled_from(["2020-13-01", "yesterday"])),
    "changefreq": (st.sampled_from(["daily", "never"]), st.just("often")),
    "priority": (st.sampled_from(["0.5", "1.0", "0.00001"]), st.sampled_from(["2", "-0.1"])),
    "rel": (
        st.sampled_from(["alternate", "describedby", "x.y-z", "http://example.org/rel"]),
        st.one_of(st.sampled_from(["Up", "x y"]), _bad_uri),
    ),
    "href": (st.one_of(_ok_uri, _edge_uri), _bad_uri),
    "ln-type": (st.sampled_from(["text/html", "image/png"]), st.just("application/vnd.x")),
    "profile": (st.one_of(_ok_uri, _edge_uri), _bad_uri),
    "pri": (st.sampled_from(["1", "999999"]), st.just("0")),
    "modified": (st.sampled_from(_lastmods), st.just("2020-02-30")),
}
# Three entries in four spoil nothing; the fourth spoils one field.
_spoil = st.sampled_from([None] * (3 * len(FIELDS)) + list(FIELDS))


@st.composite
def entries(draw: st.DrawFn) -> tuple[str, str, str]:
    """(loc, the <url> children after <loc> with a datetime placeholder, change)."""
    spoil = draw(_spoil)

    def value(name: str) -> str:
        good, bad = FIELDS[name]
        return draw(bad if name == spoil else good)

    def present(name: str) -> bool:
        return name == spoil or draw(st.booleans())

    def attributes(values: dict[str, str]) -> str:
        return " ".join(f'{k}="{escape(v, attribute=True)}"' for k, v in values.items())

    loc = value("loc")
    change = draw(st.sampled_from(["created", "updated", "deleted"]))
    md = {"change": change}
    for name in ("type", "hash", "length", "encoding"):
        if present(name):
            md[name] = value(name)
    parts = []
    for name in ("lastmod", "changefreq", "priority"):
        if present(name):
            parts.append(f"<{name}>{escape(value(name))}</{name}>")
    parts.append(f'<rs:md {attributes(md)} datetime="{{when}}"/>')
    if any(present(name) for name in ("rel", "href", "ln-type", "profile", "pri", "modified")):
        ln = {"rel": value("rel"), "href": value("href")}
        for name in ("ln-type", "profile", "pri", "modified"):
            if present(name):
                ln[name.removeprefix("ln-")] = value(name)
        parts.append(f"<rs:ln {attributes(ln)}/>")
    return loc, "".join(parts), change


class Times:
    def __init__(self) -> None:
        self.now = datetime.now(UTC) - timedelta(minutes=4)

    def next(self) -> str:
        self.now += timedelta(milliseconds=1)
        return self.now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def fragment(items: list[tuple[str, str, str]], times: Times) -> bytes:
    urls = "".join(
        f"<url><loc>{escape(loc)}</loc>{rest.replace('{when}', times.next())}</url>"
        for loc, rest, _ in items
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
        'xmlns:rs="http://www.openarchives.org/rs/terms/">'
        f'<rs:md capability="changelist"/>{urls}</urlset>'
    ).encode()


class Served:
    """Fetches and schema-checks the hub's documents; closed lists once each (immutable)."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client
        self.closed_checked: set[str] = set()

    def check(self, path: str) -> bytes:
        reply = self.client.get(path)
        assert reply.status_code == 200, (path, reply.text)
        parse_document(reply.content)  # schema_errors wants bytes that passed the parser
        assert schema_errors(reply.content) == [], (path, reply.text)
        return reply.content

    def check_all(self) -> int:
        for path in [
            "/.well-known/resourcesync",
            f"{TOPIC}/capabilitylist.xml",
            f"{TOPIC}/changelist.xml",
            f"{TOPIC}/changelist-index.xml",
            f"{TOPIC}/resourcelist.xml",
        ]:
            self.check(path)
        archive = parse_document(self.check(f"{TOPIC}/changelist-archive.xml"))
        for item in archive.entries:
            path = urlsplit(item.loc).path
            if path not in self.closed_checked:
                self.check(path)
                self.closed_checked.add(path)
        return len(archive.entries)


@pytest.mark.timeout(300)
def test_every_served_document_is_schema_valid(redis_url: str, prefix: str) -> None:
    sock = bind("127.0.0.1", 0)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    settings_ = make_settings(redis_url, prefix, base, changelist_max_entries=3)
    times = Times()
    accepted: list[str] = []
    with hub_in_thread(settings_, sock) as url, httpx.Client(base_url=url, timeout=30) as client:
        served = Served(client)

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        )
        @given(st.lists(entries(), min_size=1, max_size=3))
        # Values the schemas refuse, always tried: a hub that took one would publish it.
        @example([("http://a.b", MD, "created")])
        @example([("http://e.org/" + "p" * 2040, MD, "created")])
        @example([("http://example.com/%zz", MD, "created")])
        @example([(OK_LOC, MD.replace("/>", ' type="application/vnd.x"/>'), "updated")])
        @example([(OK_LOC, MD + '<rs:ln rel="alternate" href="http://example.com/a b"/>', "")])
        def post_and_check(items: list[tuple[str, str, str]]) -> None:
            reply = client.post(f"{TOPIC}/changes", content=fragment(items, times), headers=auth())
            assert reply.status_code in (202, 400, 413), reply.text
            if reply.status_code == 202:
                accepted.extend(loc for loc, _, _ in items)
            served.check_all()

        post_and_check()

        # Force a rotation of whatever is open, then check the lists it closed.
        filler = [("http://example.com/filler", '<rs:md change="updated" datetime="{when}"/>', "")]
        before = served.check_all()
        for _ in range(3):
            reply = client.post(f"{TOPIC}/changes", content=fragment(filler, times), headers=auth())
            assert reply.status_code == 202, reply.text
        deadline = datetime.now(UTC) + timedelta(seconds=10 * TIMEOUT_SCALE)
        while served.check_all() == before:
            assert datetime.now(UTC) < deadline, "no rotation"
            time.sleep(0.05)
        assert served.closed_checked
    print(f"{len(accepted)} random entries accepted, {len(served.closed_checked)} closed lists")
    assert accepted, "no random fragment was accepted: the property was never exercised"
