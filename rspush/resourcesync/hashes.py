"""Fixity values of ``rs:md``/``rs:ln`` ``hash`` attributes (Z39.99 §7).

The spec says each value is ``algorithm:hex-digest`` and the attribute holds a
whitespace-separated list of them. In practice the reference library ``resync`` writes
base64 digests and the spec's own examples (Example 27) hold values that are neither. So:
parse any non-empty digest, classify its encoding, and when comparing with content accept a
match in hex or in base64 (standard or URL-safe, padded or not). A document is never rejected
for an encoding we cannot check; only a missing ``algorithm:`` prefix or an empty digest is a
syntax error.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass
from enum import StrEnum

# RFC 5988-style token for the algorithm; digest characters cover hex, base64 and base64url.
_TOKEN = re.compile(r"(?P<algorithm>[A-Za-z0-9][A-Za-z0-9._-]*):(?P<digest>[A-Za-z0-9+/=_-]+)")
_HEX = re.compile(r"[0-9a-fA-F]+")

# Spec algorithm names (as in the examples) -> hashlib names.
_HASHLIB_NAMES = {
    "md5": "md5",
    "sha-1": "sha1",
    "sha1": "sha1",
    "sha-224": "sha224",
    "sha-256": "sha256",
    "sha256": "sha256",
    "sha-384": "sha384",
    "sha-512": "sha512",
    "sha512": "sha512",
}


class HashSyntaxError(ValueError):
    """A hash token is not ``algorithm:digest``."""


class DigestEncoding(StrEnum):
    HEX = "hex"
    BASE64 = "base64"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class HashValue:
    """One ``algorithm:digest`` token, exactly as written."""

    algorithm: str
    digest: str

    def __str__(self) -> str:
        return f"{self.algorithm}:{self.digest}"

    @property
    def hashlib_name(self) -> str | None:
        """The :mod:`hashlib` name of the algorithm, or None when we cannot compute it."""
        return _HASHLIB_NAMES.get(self.algorithm.lower())

    @property
    def encoding(self) -> DigestEncoding:
        """How the digest is encoded, judged by its length for the algorithm."""
        size = _digest_size(self.hashlib_name)
        if size is None:
            return DigestEncoding.UNKNOWN
        if len(self.digest) == 2 * size and _HEX.fullmatch(self.digest):
            return DigestEncoding.HEX
        raw = _b64decode(self.digest)
        if raw is not None and len(raw) == size:
            return DigestEncoding.BASE64
        return DigestEncoding.UNKNOWN

    @property
    def raw(self) -> bytes | None:
        """The digest's bytes, however it is written; None when neither hex nor base64 of
        the algorithm's size (or the algorithm is unknown)."""
        encoding = self.encoding
        if encoding is DigestEncoding.HEX:
            return bytes.fromhex(self.digest)
        if encoding is DigestEncoding.BASE64:
            return _b64decode(self.digest)
        return None

    def matches_digest(self, raw_digest: bytes) -> bool:
        """True when this value equals ``raw_digest`` written in hex or base64."""
        if self.digest.lower() == raw_digest.hex():
            return True
        decoded = _b64decode(self.digest)
        return decoded is not None and decoded == raw_digest

    def matches_content(self, content: bytes) -> bool | None:
        """Compare with content: True/False, or None when the algorithm is unknown to us."""
        name = self.hashlib_name
        if name is None:
            return None
        return self.matches_digest(hashlib.new(name, content).digest())


def parse_hashes(text: str) -> tuple[HashValue, ...]:
    """Parse a whitespace-separated list of ``algorithm:digest`` tokens.

    Raises :class:`HashSyntaxError` naming the first bad token.
    """
    values = []
    for token in text.split():
        match = _TOKEN.fullmatch(token)
        if match is None:
            raise HashSyntaxError(
                f"hash token {token!r} is not 'algorithm:digest' (e.g. md5:1584abdf…)"
            )
        values.append(HashValue(*match.group("algorithm", "digest")))
    if not values:
        raise HashSyntaxError("hash attribute is empty")
    return tuple(values)


def format_hashes(values: tuple[HashValue, ...]) -> str:
    # Once or twice per change on the agent's catch-up path: no generator, no __str__ calls.
    return " ".join([f"{v.algorithm}:{v.digest}" for v in values])


def _digest_size(name: str | None) -> int | None:
    return None if name is None else hashlib.new(name).digest_size


def _b64decode(text: str) -> bytes | None:
    padded = text + "=" * (-len(text) % 4)
    try:
        if "-" in text or "_" in text:
            return base64.urlsafe_b64decode(padded)
        return base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError):
        return None
