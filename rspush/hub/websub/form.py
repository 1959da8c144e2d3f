"""A subscription request (WebSub §5.1): the form a subscriber posts to the hub URI.

Parsed without I/O. Parameters the hub does not understand are ignored (§5.1: "Hubs MUST
ignore additional request parameters they do not understand").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import parse_qsl, urlsplit

FORM_MEDIA_TYPE = "application/x-www-form-urlencoded"
MAX_FORM_BYTES = 16 * 1024
"""A subscription form is a few URLs; anything longer is refused before parsing."""
MAX_SECRET_BYTES = 200
"""WebSub §5.1: ``hub.secret`` "MUST be less than 200 bytes in length"."""
MAX_URL_CHARS = 2048
MAX_FIELDS = 64

Mode = Literal["subscribe", "unsubscribe"]


class BadSubscription(ValueError):
    """The form is not a subscription request; the message says what to fix."""


@dataclass(frozen=True, slots=True)
class SubscriptionRequest:
    mode: Mode
    topic_uri: str
    callback: str
    lease_seconds: int | None
    secret: str | None


def parse_form(body: bytes) -> SubscriptionRequest:
    """The request in ``body`` (``application/x-www-form-urlencoded``), or
    :class:`BadSubscription`."""
    if len(body) > MAX_FORM_BYTES:
        raise BadSubscription(f"a subscription form is at most {MAX_FORM_BYTES} bytes")
    try:
        text = body.decode("utf-8")
        pairs = parse_qsl(
            text, keep_blank_values=True, strict_parsing=False, max_num_fields=MAX_FIELDS
        )
    except (UnicodeDecodeError, ValueError):
        raise BadSubscription("the form is not UTF-8 application/x-www-form-urlencoded") from None
    fields: dict[str, str] = {}
    for name, value in pairs:
        fields.setdefault(name, value)  # the first of repeated names counts
    mode: Mode
    match fields.get("hub.mode"):
        case "subscribe":
            mode = "subscribe"
        case "unsubscribe":
            mode = "unsubscribe"
        case _:
            raise BadSubscription("hub.mode must be 'subscribe' or 'unsubscribe'")
    topic = _url(fields, "hub.topic")
    callback = _url(fields, "hub.callback")
    return SubscriptionRequest(
        mode=mode,
        topic_uri=topic,
        callback=callback,
        lease_seconds=_lease(fields.get("hub.lease_seconds")),
        secret=_secret(fields.get("hub.secret")),
    )


def _url(fields: dict[str, str], name: str) -> str:
    value = fields.get(name, "").strip()
    if not value:
        raise BadSubscription(f"{name} is required")
    if len(value) > MAX_URL_CHARS:
        raise BadSubscription(f"{name} is longer than {MAX_URL_CHARS} characters")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        raise BadSubscription(f"{name} is not a URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadSubscription(f"{name} must be an http or https URL")
    if parts.username is not None or parts.password is not None:
        raise BadSubscription(f"{name} must not carry credentials")
    return value


def _lease(value: str | None) -> int | None:
    if value is None or value == "":
        return None
    if not (value.isascii() and value.isdigit()) or len(value) > 12:
        raise BadSubscription("hub.lease_seconds must be a positive integer")
    seconds = int(value)
    if seconds <= 0:
        raise BadSubscription("hub.lease_seconds must be a positive integer")
    return seconds


def _secret(value: str | None) -> str | None:
    if value is None or value == "":
        return None
    if len(value.encode("utf-8")) >= MAX_SECRET_BYTES:
        raise BadSubscription(f"hub.secret must be less than {MAX_SECRET_BYTES} bytes")
    return value
