"""Bearer-token authentication of Sources: tokens are configured as SHA-256 hex digests and
compared in constant time; the clear token is never stored."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # `rs-hub token new` runs without the hub's server dependencies
    from .settings import Source

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
    """The Source whose token this is. Every configured digest is compared (in constant
    time each), so the time taken does not reveal which Source, if any, matched."""
    digest = token_sha256(token)
    found = None
    for source in sources:
        if hmac.compare_digest(digest, source.token_sha256):
            found = source
    return found
