"""The subscriber token on the Source's own documents.

A hub serves a private topic's documents (Source Description entry, Capability List, Change
Lists, Resource List) only to its subscribers, as it does its push channel: the agent sends
its token as ``Authorization: Bearer`` on every request to the Source's origin (scheme, host
and port of SOURCE_URL) and to no other — resources live on other servers, which must never
see it. httpx drops the header itself when a redirect leaves the origin. The push channel
gets it only on the Source's own host (:func:`push_token`).
"""

from __future__ import annotations

import logging
from collections.abc import Generator

import httpx

log = logging.getLogger("rs_subscribe")


class SourceToken(httpx.Auth):
    def __init__(self, source_url: str, token: str) -> None:
        self.origin = _origin(httpx.URL(source_url))
        self.header = f"Bearer {token}"

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        if _origin(request.url) == self.origin:
            request.headers["Authorization"] = self.header
        yield request


def source_auth(source_url: str, token: str | None) -> SourceToken | None:
    return None if token is None else SourceToken(source_url, token)


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    return url.scheme, url.host, url.port


def push_token(push_url: str, source_url: str, token: str | None) -> str | None:
    """The token for the push channel a Source advertises: only when it is on the Source's
    own host (its port differs); a push URL elsewhere, named by a document, never gets it."""
    if token is None:
        return None
    if httpx.URL(push_url).host == httpx.URL(source_url).host:
        return token
    log.warning(
        "not sending the subscriber token to %s: it is not on the Source's host %s",
        push_url,
        httpx.URL(source_url).host,
    )
    return None
