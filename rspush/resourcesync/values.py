"""The simple types of the official XML Schemas, checked on single values.

The parser already converts what has a value space of its own (datetimes, integers, hashes);
these are the string-typed values the schemas still constrain. Each check is *at least as
strict* as its schema type, so a value that passes here makes a schema-valid document when
written back; some are stricter on purpose, where the schema type is a loose stand-in for what
the spec says (noted per function).

- ``<loc>``: ``tLoc`` of sitemap-0.9.xsd, an ``xsd:anyURI`` of 12 to 2,048 characters. Here: an
  absolute URI (RFC 3986 §4.3) with no whitespace or control character, because a relative
  ``<loc>`` means nothing once the hub republishes it under its own URL. Like ``anyURI``
  (XSD Part 2 §3.2.17, which leaves escaping to the consumer) it tolerates characters outside
  ASCII (IRIs, RFC 3987) and the ASCII ones RFC 3986 excludes but browsers escape
  (``<>"{}|\\^```); its structure (scheme, ``%`` escapes, one ``#``, brackets only around an
  IP literal) is RFC 3986's.
- ``rs:ln@href`` and ``@profile``: ``xsd:anyURI``; here an absolute URI as well.
- ``rs:ln@rel``: ``relType``, a registered relation (``[a-z][a-z0-9.-]*``) or a URI (RFC 8288
  §3.3: an extension relation is an absolute URI).
- ``rs:md@type`` and ``rs:ln@type``: ``contentType``, the pattern ``[\\w-]+/[\\w-]+``. In XML
  Schema ``\\w`` excludes every punctuation character (XSD Part 2, F.1.1), so ``.`` and ``_``
  are refused even though media types may contain them; the schema is what validators apply.
"""

from __future__ import annotations

import re
from typing import Final

LOC_MIN_CHARS: Final = 12
LOC_MAX_CHARS: Final = 2048
"""sitemap-0.9.xsd ``tLoc``: minLength 12, maxLength 2048 (characters)."""

# RFC 3986 Appendix A. Wherever an unreserved character may stand, also RFC 3987's ucschar
# (a non-ASCII character that is not a control, a space or a surrogate) and the ASCII
# characters the schema's anyURI tolerates there (libxml2 reads each as an unreserved one).
_UCS = r"[^\x00-\x9f\s\ud800-\udfff\ufdd0-\ufdef\ufffe\uffff]"
_PCT = r"%[0-9A-Fa-f]{2}"
_UNRESERVED_SUB = r"[A-Za-z0-9\-._~!$&'()*+,;=<>\"{}|\\^`]"
_PCHAR = rf"(?:{_UNRESERVED_SUB}|[:@]|{_PCT}|{_UCS})"
_REG_NAME = rf"(?:{_UNRESERVED_SUB}|{_PCT}|{_UCS})*"
_IP_LITERAL = r"\[[0-9A-Fa-f:.vV]+\]"
_USERINFO = rf"(?:{_UNRESERVED_SUB}|:|{_PCT}|{_UCS})*"
_AUTHORITY = rf"(?:{_USERINFO}@)?(?:{_IP_LITERAL}|{_REG_NAME})(?::[0-9]*)?"
_ABSOLUTE_URI = re.compile(
    rf"[A-Za-z][A-Za-z0-9+.\-]*:"  # scheme
    rf"(?://{_AUTHORITY}(?:/{_PCHAR}*)*|(?:{_PCHAR}|/)*)"  # hier-part
    rf"(?:\?(?:{_PCHAR}|[/?])*)?"  # query
    rf"(?:#(?:{_PCHAR}|[/?])*)?"  # fragment
)
_REGISTERED_REL = re.compile(r"[a-z][a-z0-9.\-]*")
# RFC 6838 §4.2 restricted-name characters that are also XSD word characters (or "-"):
# letters, digits, $ + ^ -. Non-ASCII is left out (not a media type; and the schema's Unicode
# tables and Python's may differ).
_TYPE_TOKEN = r"[A-Za-z0-9$+^\-]+"
_MEDIA_TYPE = re.compile(rf"{_TYPE_TOKEN}/{_TYPE_TOKEN}")


def is_absolute_uri(value: str) -> bool:
    """An absolute URI (scheme, ``:``, the rest) with no space, control or stray character."""
    return _ABSOLUTE_URI.fullmatch(value) is not None


def loc_problem(loc: str) -> str | None:
    """Why ``loc`` cannot be a ``<loc>`` (None when it can)."""
    if not LOC_MIN_CHARS <= len(loc) <= LOC_MAX_CHARS:
        return (
            f"<loc> is {len(loc)} characters; the Sitemap schema allows "
            f"{LOC_MIN_CHARS} to {LOC_MAX_CHARS}"
        )
    if not is_absolute_uri(loc):
        return f"<loc> {_shown(loc)} is not an absolute URI"
    return None


def is_rel(value: str) -> bool:
    """A registered relation type or an extension relation URI (RFC 8288 §3.3)."""
    return _REGISTERED_REL.fullmatch(value) is not None or is_absolute_uri(value)


def is_media_type(value: str) -> bool:
    """``type/subtype`` as the ResourceSync schema's ``contentType`` pattern allows it."""
    return _MEDIA_TYPE.fullmatch(value) is not None


def _shown(value: str) -> str:
    """A value quoted for a message, cut short: messages must stay one line."""
    return repr(value if len(value) <= 80 else value[:77] + "...")
