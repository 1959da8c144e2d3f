"""Where the subscriber token goes: the Source's origin for documents, the Source's host for
the push channel, nowhere else."""

from __future__ import annotations

import httpx

from rspush.subscriber.source_auth import SourceToken, push_token


def test_documents_on_the_source_origin_get_the_token_and_nothing_else_does() -> None:
    auth = SourceToken("http://hub.example:8080/", "secret")

    def sent(url: str) -> str | None:
        request = httpx.Request("GET", url)
        next(auth.auth_flow(request))
        return request.headers.get("authorization")

    assert sent("http://hub.example:8080/topics/t/changelist.xml") == "Bearer secret"
    assert sent("http://hub.example:9090/x") is None  # another port: another origin
    assert sent("https://hub.example:8080/x") is None
    assert sent("http://origin.example/resource.txt") is None


def test_the_push_channel_gets_the_token_only_on_the_source_host() -> None:
    assert push_token("ws://hub.example:8081/", "http://hub.example:8080", "s") == "s"
    assert push_token("wss://elsewhere.example/push", "http://hub.example:8080", "s") is None
    assert push_token("ws://hub.example:8081/", "http://hub.example:8080", None) is None
