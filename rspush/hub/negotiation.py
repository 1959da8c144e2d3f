"""Which content coding a document is sent in: ``gzip`` or ``identity`` (pure).

RFC 9110 §12.5.3: ``Accept-Encoding`` lists codings with optional weights (``q``, §12.4.2);
``q=0`` means "not acceptable"; ``*`` stands for any coding not listed; ``identity`` is
acceptable unless refused (``identity;q=0``, or ``*;q=0`` without ``identity`` listed); an
empty field asks for ``identity`` only. Without the field the hub sends ``identity``: a
client that says nothing may not decode anything. ``x-gzip`` is ``gzip`` (§8.4.1.3). When
both codings are refused the document goes out without a coding, which §12.5.3 allows in
place of an error.
"""

from __future__ import annotations

from enum import StrEnum


class Coding(StrEnum):
    IDENTITY = "identity"
    GZIP = "gzip"


_ALIASES = {"x-gzip": "gzip"}
_UNNAMED = 0.0001


def weights(header: str) -> dict[str, float]:
    """Each coding's weight in an ``Accept-Encoding`` value, names lower-cased; a member
    with a malformed weight is skipped (as if it were absent)."""
    result: dict[str, float] = {}
    for member in header.split(","):
        name, _, params = member.partition(";")
        name = name.strip().lower()
        if not name:
            continue
        weight = 1.0
        for param in params.split(";"):
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                parsed = _qvalue(value.strip())
                if parsed is None:
                    break
                weight = parsed
        else:
            name = _ALIASES.get(name, name)
            result[name] = max(weight, result.get(name, 0.0))
    return result


def _qvalue(text: str) -> float | None:
    """RFC 9110 §12.4.2: ``0[.ddd]`` or ``1[.000]``."""
    try:
        value = float(text)
    except ValueError:
        return None
    if not 0.0 <= value <= 1.0 or not text or text[0] not in "01":
        return None
    return value


def choose(header: str | None) -> Coding:
    """The coding to send a document in, given the request's ``Accept-Encoding``."""
    if header is None:
        return Coding.IDENTITY
    listed = weights(header)
    star = listed.get("*")
    gzip = listed.get("gzip", star if star is not None else 0.0)
    # Not listed and no ``*``: acceptable, but below any coding the client did name.
    identity = listed.get("identity", star if star is not None else _UNNAMED)
    if gzip > 0.0 and gzip >= identity:
        return Coding.GZIP
    return Coding.IDENTITY
