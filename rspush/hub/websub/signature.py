"""Authenticated content distribution (WebSub §7.1): ``X-Hub-Signature: method=signature``,
the HMAC of the exact body under the subscriber's ``hub.secret``."""

from __future__ import annotations

import hmac

ALGORITHMS = ("sha1", "sha256", "sha384", "sha512")
"""The methods §7.1 lists; the hub signs with :data:`DEFAULT_ALGORITHM`."""
DEFAULT_ALGORITHM = "sha256"
HEADER = "X-Hub-Signature"


def sign(secret: str, body: bytes, algorithm: str = DEFAULT_ALGORITHM) -> str:
    """The header value: ``sha256=<hex HMAC of body>``."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"signature method {algorithm!r} is not one of {', '.join(ALGORITHMS)}")
    digest = hmac.new(secret.encode("utf-8"), body, algorithm).hexdigest()
    return f"{algorithm}={digest}"


def verify(secret: str, body: bytes, header: str) -> bool:
    """Whether ``header`` is a valid signature of ``body`` (what a subscriber checks)."""
    algorithm, _, signature = header.partition("=")
    if algorithm not in ALGORITHMS:
        return False
    return hmac.compare_digest(sign(secret, body, algorithm), f"{algorithm}={signature}")
