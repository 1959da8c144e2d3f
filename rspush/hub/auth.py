"""Bearer-token authentication: of Sources (posting), of subscribers (reading private
topics) and of the metrics scraper. Tokens are configured as SHA-256 hex digests and compared
in constant time; the clear token is never stored."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

from .errors import Forbidden, Unauthenticated

if TYPE_CHECKING:  # `rs-hub token new` runs without the hub's server dependencies
    from .settings import Settings, Source, Subscriber

_Holder = TypeVar("_Holder", "Source", "Subscriber")

TOKEN_BYTES = 32


def token_sha256(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> tuple[str, str]:
    """A fresh random token and its ``token_sha256``."""
    token = secrets.token_urlsafe(TOKEN_BYTES)
    return token, token_sha256(token)


def bearer(header: str | None) -> str | None:
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def find_source(sources: Sequence[Source], token: str) -> Source | None:
    """The Source whose token this is (:func:`find_holder`)."""
    return find_holder(sources, token)


def find_holder(holders: Sequence[_Holder], token: str) -> _Holder | None:
    """The Source or subscriber whose token this is. Every configured digest is compared (in
    constant time each), so the time taken does not reveal which one, if any, matched."""
    digest = token_sha256(token)
    found = None
    for holder in holders:
        if hmac.compare_digest(digest, holder.token_sha256):
            found = holder
    return found


def token_matches(token: str | None, digest: str) -> bool:
    """``token`` is the one whose SHA-256 is ``digest`` (constant time)."""
    return token is not None and hmac.compare_digest(token_sha256(token), digest)


def authorise_read(settings: Settings, topic: str, token: str | None) -> None:
    """Every document of a private topic needs the bearer token of a subscriber listing it,
    as its push channel does (docs/hub.md): 401 without a known token, 403 for a subscriber
    of other topics. Public and unknown topics pass (an unknown one is then not found)."""
    config = settings.topic(topic)
    if config is None or not config.private:
        return
    if token is None:
        raise Unauthenticated(
            f"topic {topic!r} is private: send 'Authorization: Bearer <subscriber token>'"
        )
    subscriber = find_holder(settings.subscribers, token)
    if subscriber is None:
        raise Unauthenticated("unknown token")
    if topic not in subscriber.topics:
        raise Forbidden(
            f"subscriber {subscriber.name!r} may not read topic {topic!r}",
            topic=topic,
            source=subscriber.name,
        )


def readable_private_topics(settings: Settings, token: str | None) -> frozenset[str]:
    """The private topics ``token`` may read (none without a subscriber token)."""
    subscriber = None if token is None else find_holder(settings.subscribers, token)
    return frozenset() if subscriber is None else frozenset(subscriber.topics)
