"""WebSub peers and hubs for the WebSub tests: hub settings that reach loopback callbacks,
and :class:`Callback`, a real HTTP callback server on loopback that answers verifications,
records every notification (parsed with the document layer) and can refuse, fail, stall or
check signatures on purpose.

``async with running_callback() as cb:`` serves on 127.0.0.1, a free port, in the test's own
event loop (uvicorn, like :mod:`tests.support.origin`); ``cb.url("name")`` is a callback URL.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from rspush.hub.auth import token_sha256
from rspush.hub.server import RunningHub, bind, running_hub
from rspush.hub.settings import Settings
from rspush.resourcesync import parse_document, validate
from tests.support.fragments import TOKEN_A, Times, auth, change_fragment
from tests.support.hubs import make_settings
from tests.support.origin import _Server
from tests.support.waiting import TIMEOUT_SCALE

LOOPBACK_ALLOWED = {"callback_allow": ["127.0.0.1/32"]}
FAST = {
    "lease_min_s": 1,
    "scan_interval_s": 0.1,
    "worker_lease_s": 1.0,
    "retry_base_s": 0.05,
    "retry_max_s": 0.2,
    "connect_timeout_s": 2.0,
    "read_timeout_s": 2.0,
}


def websub_settings(
    redis_url: str,
    prefix: str,
    base_url: str,
    *,
    limits: dict[str, Any] | None = None,
    private: dict[str, list[str]] | None = None,
    **websub: Any,
) -> Settings:
    """The test hub's settings (:func:`tests.support.hubs.make_settings`, with ``limits``)
    and a WebSub section reaching loopback callbacks with short timers (``websub``
    overrides). ``private``: subscriber token -> the topics it may read, which become
    private."""
    settings = make_settings(redis_url, prefix, base_url, **(limits or {}))
    data = settings.model_dump()
    data["websub"] = {**LOOPBACK_ALLOWED, **FAST, **websub}
    if private:
        names = {name for topics in private.values() for name in topics}
        for topic in data["topics"]:
            topic["private"] = topic["name"] in names
        data["subscribers"] = [
            {"name": f"reader{i}", "token_sha256": token_sha256(token), "topics": topics}
            for i, (token, topics) in enumerate(private.items())
        ]
    return Settings.model_validate(data)


@asynccontextmanager
async def websub_hub(
    redis_url: str, prefix: str, *, port: int = 0, **options: Any
) -> AsyncIterator[RunningHub]:
    """A hub on 127.0.0.1 (``port``; 0: a free one) with :func:`websub_settings`."""
    sock = bind("127.0.0.1", port)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    async with running_hub(websub_settings(redis_url, prefix, base, **options), sock=sock) as hub:
        yield hub


@dataclass
class Notification:
    path: str
    headers: dict[str, str]
    body: bytes

    @cached_property
    def document(self) -> Any:
        return parse_document(self.body)

    @property
    def locs(self) -> list[str]:
        return [entry.loc for entry in self.document.entries]

    @property
    def span(self) -> tuple[datetime, datetime]:
        md = self.document.md
        return md.from_, md.until

    def valid(self) -> bool:
        return not validate(self.document)


@dataclass
class Callback:
    base: str
    confirm: bool = True
    """Answer verifications with the challenge (False: 404, no intent)."""
    status: int = 204
    """The answer to notification POSTs (set 503 to take the callback "down")."""
    delay_s: float = 0.0
    """Wait this long before answering a POST (a slow callback)."""
    verifications: list[dict[str, str]] = field(default_factory=list)
    notifications: list[Notification] = field(default_factory=list)
    refused_posts: int = 0
    redirect_to: str | None = None
    """Answer every request with a 307 to this URL (redirects must not be followed)."""

    def url(self, name: str = "cb") -> str:
        return f"{self.base}/{name}"

    def received(self, name: str = "cb") -> list[Notification]:
        return [n for n in self.notifications if n.path == f"/{name}"]

    def locs(self, name: str = "cb") -> list[str]:
        return [loc for n in self.received(name) for loc in n.locs]

    def modes(self, name: str = "cb") -> list[str]:
        return [v["hub.mode"] for v in self.verifications if v["path"] == f"/{name}"]

    async def _get(self, request: Request) -> Response:
        params = dict(request.query_params)
        self.verifications.append({**params, "path": request.url.path})
        if self.redirect_to is not None:
            return Response(status_code=307, headers={"Location": self.redirect_to})
        if params.get("hub.mode") == "denied" or not self.confirm:
            return Response(status_code=200 if params.get("hub.mode") == "denied" else 404)
        return Response(params.get("hub.challenge", ""), media_type="text/plain")

    async def _post(self, request: Request) -> Response:
        body = await request.body()
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if not 200 <= self.status < 300:
            self.refused_posts += 1
            return Response(status_code=self.status)
        self.notifications.append(Notification(request.url.path, dict(request.headers), body))
        return Response(status_code=self.status)


@asynccontextmanager
async def running_callback() -> AsyncIterator[Callback]:
    sock = bind("127.0.0.1", 0)
    callback = Callback(f"http://127.0.0.1:{sock.getsockname()[1]}")
    app = Starlette(
        routes=[
            Route("/{path:path}", callback._get, methods=["GET"]),
            Route("/{path:path}", callback._post, methods=["POST"]),
        ]
    )
    config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)
    server = _Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]), name="test-callback")
    try:
        async with asyncio.timeout(10 * TIMEOUT_SCALE):
            while not server.started:
                if task.done():
                    task.result()
                    raise RuntimeError("callback server stopped during startup")
                await asyncio.sleep(0.01)
        yield callback
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await task
        sock.close()


async def subscribe(
    hub_url: str,
    topic_uri: str,
    callback: str,
    *,
    mode: str = "subscribe",
    headers: dict[str, str] | None = None,
    **extra: str,
) -> httpx.Response:
    """POST a subscription form to ``{hub_url}/hub`` (``extra``: more form fields, with
    ``_`` for ``.``: ``hub_secret="s"``)."""
    form = {"hub.mode": mode, "hub.topic": topic_uri, "hub.callback": callback}
    form.update({name.replace("_", ".", 1): value for name, value in extra.items()})
    async with httpx.AsyncClient(timeout=30) as http:
        return await http.post(f"{hub_url}/hub", data=form, headers=headers or {})


def topic(hub: RunningHub, name: str = "dataset1") -> str:
    """The change-notification topic URI of ``name`` on ``hub``."""
    return f"{hub.hub.settings.hub.base_url}/topics/{name}"


async def post_changes(
    hub: RunningHub, times: Times, *locs: str, name: str = "dataset1", token: str = TOKEN_A
) -> None:
    """One Change List fragment of ``updated`` changes of ``locs``, accepted (202)."""
    body = change_fragment(*((loc, "updated", times.next()) for loc in locs))
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.post(
            f"{hub.url}/topics/{name}/changes", content=body, headers=auth(token)
        )
    assert response.status_code == 202, response.text


def delivering(hub: RunningHub) -> int:
    """Subscriptions this hub process delivers."""
    websub = hub.hub.websub
    return 0 if websub is None else len(websub.deliveries.workers)


def verifications(hub: RunningHub, outcome: str, mode: str = "subscribe") -> float:
    value: float = hub.hub.metrics.websub_verifications.labels(mode, outcome)._value.get()
    return value


def contiguous(notes: list[Notification]) -> bool:
    """Each notification's ``from`` is the previous one's ``until`` (spec §3)."""
    spans = [n.span for n in notes]
    return all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False)) and all(
        s[0] <= s[1] for s in spans
    )
