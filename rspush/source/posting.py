"""Posting fragments to a hub until it acknowledges them: what ``rs-publish watch`` relies on
to never drop a change.

A post is retried for as long as it takes while the hub cannot answer it now — connection
errors, 5xx, 429 — with exponential backoff and jitter (so a fleet of Sources restarted
together does not retry in step), and ``Retry-After`` honoured (RFC 9110 §10.2.3: seconds or
an HTTP date). Any other 4xx is the hub's final word (a bad token, a topic it does not have):
:class:`HubRefused`, one line. Each retry carries the same ``Idempotency-Key`` and body, so a
post the hub committed but whose answer was lost is answered from the hub's stored receipt,
never written twice.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx

from rspush.remote.retry import retry_after_s

from .errors import HubRefused

TIMEOUT_S = 60.0
FIRST_WAIT_S = 0.5
"""The first backoff; each next one doubles, up to the cap."""
MAX_WAIT_S = 60.0
MAX_RETRY_AFTER_S = 600.0
"""A ``Retry-After`` longer than this is taken as this: the watcher keeps trying."""
RETRY_STATUSES = frozenset({408, 425, 429})
"""4xx answers that mean "not now" (RFC 9110 §15.5.9, RFC 8470 §5.2, RFC 6585 §4); every 5xx
is retried too."""


def derived_key(topic: str, body: bytes) -> str:
    """The Idempotency-Key of a post: the SHA-256 of its topic and body, so the same body
    posted again to the same topic is the same request."""
    digest = hashlib.sha256(topic.encode() + b"\n" + body).hexdigest()
    return f"sha256-{digest}"


def wait_s(
    attempt: int,
    *,
    first_s: float = FIRST_WAIT_S,
    cap_s: float = MAX_WAIT_S,
    retry_after: float | None = None,
    rand: Callable[[], float] = random.random,
) -> float:
    """How long to wait before retry ``attempt`` (0-based): what ``Retry-After`` asked
    (capped at :data:`MAX_RETRY_AFTER_S`), else a backoff doubled per attempt and capped,
    of which a random half is taken off ("equal jitter")."""
    if retry_after is not None:
        return min(retry_after, MAX_RETRY_AFTER_S)
    backoff = min(first_s * 2**attempt, cap_s)
    return float(backoff / 2 + rand() * backoff / 2)


def retried(status: int) -> bool:
    return status >= 500 or status in RETRY_STATUSES


class Poster:
    """Posts to ``{hub}/topics/{topic}/changes`` with the Source's bearer token."""

    def __init__(
        self,
        hub: str,
        topic: str,
        token: str,
        *,
        first_wait_s: float = FIRST_WAIT_S,
        max_wait_s: float = MAX_WAIT_S,
        log: Callable[[str], None] = lambda _: None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.url = f"{hub.rstrip('/')}/topics/{topic}/changes"
        self.topic = topic
        self._token = token
        self._first_wait_s = first_wait_s
        self._max_wait_s = max_wait_s
        self._log = log
        self._sleep = sleep
        self._client = httpx.Client(timeout=TIMEOUT_S)

    def close(self) -> None:
        self._client.close()

    def post(self, body: bytes, key: str) -> dict[str, Any]:
        """The hub's receipt of ``body``, however many attempts it takes."""
        headers = {
            "Authorization": f"Bearer {self._token}",
            "Content-Type": "application/xml",
            "Idempotency-Key": key,
        }
        attempt = 0
        while True:
            try:
                reply = self._client.post(self.url, content=body, headers=headers)
            except httpx.TransportError as exc:
                wait = self._wait(attempt, None)
                self._log(f"POST {self.url}: {type(exc).__name__}; retrying in {wait:.2g} s")
            else:
                if reply.status_code < 300:
                    receipt: dict[str, Any] = reply.json()
                    return receipt
                if not retried(reply.status_code):
                    raise HubRefused(f"{reply.status_code} {one_line(reply)}")
                after = retry_after_s(reply.headers.get("retry-after"), datetime.now(UTC))
                wait = self._wait(attempt, after)
                self._log(f"POST {self.url}: {reply.status_code}; retrying in {wait:.2g} s")
            self._sleep(wait)
            attempt += 1

    def _wait(self, attempt: int, retry_after: float | None) -> float:
        return wait_s(
            attempt, first_s=self._first_wait_s, cap_s=self._max_wait_s, retry_after=retry_after
        )


def one_line(reply: httpx.Response) -> str:
    """The hub's message of an error answer, on one line."""
    try:
        data = json.loads(reply.text)
        message = str(data.get("message", "")) if isinstance(data, dict) else ""
    except ValueError:
        message = ""
    message = message or reply.reason_phrase or "refused"
    return " ".join(message.split())[:300]
