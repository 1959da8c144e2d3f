"""Private topics over HTTP: every document of a private topic, and its topic URI, needs the
bearer token of a subscriber of that topic (401 with WWW-Authenticate without a known token,
403 for a subscriber of other topics), like its push channel; the public Source Description
does not list it. The routes come from the app itself, so a new route cannot be forgotten."""

from __future__ import annotations

import httpx
import pytest

from rspush.hub.auth import authorise_read, readable_private_topics
from rspush.hub.errors import Forbidden, Unauthenticated
from rspush.resourcesync import parse_document
from tests.support.edge import (
    MIRROR_1,
    MIRROR_2,
    PRIVATE,
    PUBLIC,
    TOKEN_C,
    app_routes,
    concrete,
    edge_hub,
    edge_settings,
)
from tests.support.fragments import TOKEN_A, auth, change_fragment

ROUTES = app_routes()
NOT_OF_A_TOPIC = {"/.well-known/resourcesync", "/hub", "/healthz", "/readyz", "/metrics", "/status"}
"""Routes that belong to no topic; every other route must be one of a topic."""
READS = sorted(
    (template, tuple(sorted(methods & {"GET", "HEAD"})))
    for template, methods in ROUTES
    if "{topic}" in template and "GET" in methods
)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_every_route_is_of_a_topic_or_known_to_be_of_none() -> None:
    """A new route outside /topics/{topic} must be added here, deciding whether it needs
    a token; one under it is in READS and so checked below."""
    assert {t for t, _ in ROUTES if "{topic}" not in t} == NOT_OF_A_TOPIC
    templates = {t for t, _ in READS}
    assert all(methods == ("GET", "HEAD") for _, methods in READS)
    assert "/topics/{topic}/changelist.xml" in templates
    assert "/topics/{topic}/resourcelist.xml" in templates
    assert "/topics/{topic}" in templates
    posts_only = {t for t, methods in ROUTES if "{topic}" in t and "GET" not in methods}
    assert posts_only == {"/topics/{topic}/changes", "/topics/{topic}/baseline"}


@pytest.mark.parametrize(("template", "methods"), READS)
async def test_every_read_of_a_private_topic_needs_a_subscriber_token(
    redis_url: str, prefix: str, template: str, methods: tuple[str, ...]
) -> None:
    async with edge_hub(redis_url, prefix) as (_, http):
        when = "2026-01-01T10:00:00Z"
        body = change_fragment(("http://example.com/secret", "created", when))
        posted = await http.post(f"/topics/{PRIVATE}/changes", content=body, headers=auth())
        assert posted.status_code == 202, posted.text
        for method in methods:
            await _check_read(http, method, template)


async def _check_read(http: httpx.AsyncClient, method: str, template: str) -> None:
    path = concrete(template, PRIVATE)

    for headers in ({}, bearer("not-a-token"), bearer(TOKEN_A), bearer(TOKEN_C)):
        # No token, an unknown one, or a Source's (posting is not reading): 401.
        reply = await http.request(method, path, headers=headers)
        assert reply.status_code == 401, (headers, reply.text)
        assert reply.headers["www-authenticate"].startswith("Bearer")
        assert "secret" not in reply.text
        if method == "GET":
            assert reply.json()["error"] == "unauthenticated"
            assert set(reply.json()) == {"error", "message"}

    # A subscriber of another topic: 403.
    reply = await http.request(method, path, headers=bearer(MIRROR_2))
    assert reply.status_code == 403, reply.text
    if method == "GET":
        assert reply.json()["error"] == "forbidden"
        assert set(reply.json()) == {"error", "message"}

    # The topic's subscriber reads it (numbered parts may not exist: 404, not a refusal).
    reply = await http.request(method, path, headers=bearer(MIRROR_1))
    assert reply.status_code in {200, 404}, reply.text
    if reply.status_code == 200 and reply.content:
        assert reply.headers["cache-control"].startswith("private")
        assert "Authorization" in {v.strip() for v in reply.headers["vary"].split(",")}

    # The public topic's same document needs nothing.
    reply = await http.request(method, concrete(template, PUBLIC))
    assert reply.status_code in {200, 404}, reply.text


async def test_the_subscriber_reads_the_private_documents(redis_url: str, prefix: str) -> None:
    async with edge_hub(redis_url, prefix) as (_, http):
        when = "2026-01-01T10:00:00Z"
        body = change_fragment(("http://example.com/secret", "created", when))
        assert (
            await http.post(f"/topics/{PRIVATE}/changes", content=body, headers=auth())
        ).is_success
        for document in ("changelist.xml", "resourcelist.xml"):
            reply = await http.get(f"/topics/{PRIVATE}/{document}", headers=bearer(MIRROR_1))
            assert reply.status_code == 200, reply.text
            assert [e.loc for e in parse_document(reply.content).entries] == [
                "http://example.com/secret"
            ]


async def test_the_public_source_description_lists_public_topics_only(
    redis_url: str, prefix: str
) -> None:
    async with edge_hub(redis_url, prefix) as (running, http):

        def listed(reply: httpx.Response) -> list[str]:
            assert reply.status_code == 200, reply.text
            return [e.loc for e in parse_document(reply.content).entries]

        base = running.hub.settings.hub.base_url
        public = f"{base}/topics/{PUBLIC}/capabilitylist.xml"
        private = f"{base}/topics/{PRIVATE}/capabilitylist.xml"
        anonymous = await http.get("/.well-known/resourcesync")
        assert listed(anonymous) == [public]
        assert "private" not in anonymous.headers["cache-control"]
        assert listed(await http.get("/.well-known/resourcesync", headers=bearer(TOKEN_A))) == [
            public
        ]
        assert listed(await http.get("/.well-known/resourcesync", headers=bearer(MIRROR_2))) == [
            public
        ]
        # The topic's subscriber is shown it too; that answer is not for shared caches.
        mine = await http.get("/.well-known/resourcesync", headers=bearer(MIRROR_1))
        assert listed(mine) == [private, public]
        assert mine.headers["cache-control"].startswith("private")


def test_read_authorisation_without_http() -> None:
    settings = edge_settings("redis://unused", "p", "http://hub.example")
    authorise_read(settings, PUBLIC, None)
    authorise_read(settings, "no-such-topic", None)  # left to the document's 404
    authorise_read(settings, PRIVATE, MIRROR_1)
    for token in (None, "not-a-token", TOKEN_A):
        with pytest.raises(Unauthenticated):
            authorise_read(settings, PRIVATE, token)
    with pytest.raises(Forbidden):
        authorise_read(settings, PRIVATE, MIRROR_2)
    assert readable_private_topics(settings, MIRROR_1) == {PRIVATE}
    assert readable_private_topics(settings, TOKEN_A) == frozenset()
    assert readable_private_topics(settings, None) == frozenset()
