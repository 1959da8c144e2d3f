"""Hypothesis strategies: random *valid* ResourceSync documents of every document type.

"Valid" means what the spec asks of each type (Z39.99 §7–§13, Appendix A, the archives spec
and the notification spec), written out here independently of the validator:

- snapshot documents (Resource List/Dump, their indexes, the Resource Dump Manifest) carry a
  document-level ``at`` (and maybe ``completed`` >= ``at``); change documents carry ``from``
  (and maybe ``until`` >= ``from``; mandatory for notifications); the others carry neither;
- entry-level ``at`` only where Table 4 allows it, entry ``from`` where it is recommended or
  allowed (always present where recommended, so documents are warning-free too);
- entries of Change Lists, Change Dump Manifests and notifications carry a ``change`` and are
  in forward chronological order, with ``datetime`` inside the document's interval;
- manifests give every entry a ``path``, except deletions in a Change Dump Manifest;
- Change List / Change Dump indexes and archives are ordered by ``from``, Resource List /
  Resource Dump archives by ``at``;
- every document except the Source Description (and, optionally, the notification) has an
  ``up`` link; Capability Lists advertise each capability once;
- ``<sitemap>`` entries of an index have no ``<changefreq>``/``<priority>`` (the XSD has
  neither), and ``<loc>`` is at least 12 characters (the XSD's ``tLoc``).

Values deliberately include characters that need XML escaping (``&``, ``<``, ``"``, newlines
and tabs in attribute values), non-ASCII text and microsecond datetimes.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta

from hypothesis import strategies as st

from rspush.resourcesync import Document, DocumentType, Entry, HashValue, Link, Metadata

T = DocumentType

# Document type -> (capability, root).
LAYOUT: dict[DocumentType, tuple[str, str]] = {
    T.SOURCE_DESCRIPTION: ("description", "urlset"),
    T.SOURCE_DESCRIPTION_INDEX: ("description", "sitemapindex"),
    T.CAPABILITY_LIST: ("capabilitylist", "urlset"),
    T.RESOURCE_LIST: ("resourcelist", "urlset"),
    T.RESOURCE_LIST_INDEX: ("resourcelist", "sitemapindex"),
    T.RESOURCE_DUMP: ("resourcedump", "urlset"),
    T.RESOURCE_DUMP_INDEX: ("resourcedump", "sitemapindex"),
    T.RESOURCE_DUMP_MANIFEST: ("resourcedump-manifest", "urlset"),
    T.CHANGE_LIST: ("changelist", "urlset"),
    T.CHANGE_LIST_INDEX: ("changelist", "sitemapindex"),
    T.CHANGE_DUMP: ("changedump", "urlset"),
    T.CHANGE_DUMP_INDEX: ("changedump", "sitemapindex"),
    T.CHANGE_DUMP_MANIFEST: ("changedump-manifest", "urlset"),
    T.RESOURCE_LIST_ARCHIVE: ("resourcelist-archive", "urlset"),
    T.RESOURCE_LIST_ARCHIVE_INDEX: ("resourcelist-archive", "sitemapindex"),
    T.RESOURCE_DUMP_ARCHIVE: ("resourcedump-archive", "urlset"),
    T.RESOURCE_DUMP_ARCHIVE_INDEX: ("resourcedump-archive", "sitemapindex"),
    T.CHANGE_LIST_ARCHIVE: ("changelist-archive", "urlset"),
    T.CHANGE_LIST_ARCHIVE_INDEX: ("changelist-archive", "sitemapindex"),
    T.CHANGE_DUMP_ARCHIVE: ("changedump-archive", "urlset"),
    T.CHANGE_DUMP_ARCHIVE_INDEX: ("changedump-archive", "sitemapindex"),
    T.CHANGE_NOTIFICATION: ("change-notification", "urlset"),
    T.FRAMEWORK_NOTIFICATION: ("framework-notification", "urlset"),
}
ALL_TYPES = tuple(LAYOUT)

# Appendix A, Table 4 (document level).
SNAPSHOT = {
    T.RESOURCE_LIST,
    T.RESOURCE_LIST_INDEX,
    T.RESOURCE_DUMP,
    T.RESOURCE_DUMP_INDEX,
    T.RESOURCE_DUMP_MANIFEST,
}
INTERVAL = {
    T.CHANGE_LIST,
    T.CHANGE_LIST_INDEX,
    T.CHANGE_DUMP,
    T.CHANGE_DUMP_INDEX,
    T.CHANGE_DUMP_MANIFEST,
    T.CHANGE_NOTIFICATION,
}
# Entry level: Table 4 for the core documents, the archives spec for the archives.
ENTRY_AT = {
    T.RESOURCE_LIST_INDEX,
    T.RESOURCE_DUMP,
    T.RESOURCE_DUMP_INDEX,
    T.RESOURCE_LIST_ARCHIVE,
    T.RESOURCE_DUMP_ARCHIVE,
}
ENTRY_FROM_RECOMMENDED = {T.CHANGE_LIST_INDEX, T.CHANGE_DUMP, T.CHANGE_DUMP_INDEX}
ENTRY_FROM = ENTRY_FROM_RECOMMENDED | {T.CHANGE_LIST_ARCHIVE, T.CHANGE_DUMP_ARCHIVE}
CHANGES = {T.CHANGE_LIST, T.CHANGE_DUMP_MANIFEST, T.CHANGE_NOTIFICATION, T.FRAMEWORK_NOTIFICATION}
# Framework Notification §3: the notifications whose up link is optional; what its entries
# name (the changed document's capability).
OPTIONAL_UP = {T.CHANGE_NOTIFICATION, T.FRAMEWORK_NOTIFICATION}
FRAMEWORK_SUBJECTS = (
    "resourcelist",
    "resourcedump",
    "changelist",
    "changedump",
    "capabilitylist",
    "description",
    "changelist-archive",
)
MANIFESTS = {T.RESOURCE_DUMP_MANIFEST, T.CHANGE_DUMP_MANIFEST}
ORDERED_BY_AT = {T.RESOURCE_LIST_ARCHIVE, T.RESOURCE_DUMP_ARCHIVE}
NO_UP = {T.SOURCE_DESCRIPTION, T.SOURCE_DESCRIPTION_INDEX}
# What a Capability List may advertise (core §9, archives §2, notification §5).
ADVERTISED = (
    "resourcelist",
    "resourcedump",
    "changelist",
    "changedump",
    "resourcelist-archive",
    "resourcedump-archive",
    "changelist-archive",
    "changedump-archive",
    "change-notification",
    "framework-notification",
)

# --- values ---------------------------------------------------------------------------------

utc_datetimes = st.datetimes(
    min_value=datetime(1970, 1, 1),
    max_value=datetime(2200, 1, 1),
    timezones=st.just(UTC),
)
# Up to ~3 years, with microseconds.
deltas = st.integers(min_value=0, max_value=10**14).map(lambda us: timedelta(microseconds=us))

# Plain characters plus pieces that need XML escaping or are non-ASCII; "%" only as a
# well-formed escape (the XSD's anyURI refuses a bare "%"), at most one "#".
_URI_TRICKS = st.sampled_from(
    ["", "?a=1&b=2", "?q=<x>", '?"quoted"', "é/日本", "%20x", "#frag", "&amp;", "'s", "a>b"]
)
uris = st.builds(
    lambda host, path, trick: f"http://{host}.example.com/{path}{trick}",
    st.sampled_from(["www", "mirror", "data"]),
    st.text("abcxyzABC0129-._~/=;:@!$()*+,", max_size=8),
    _URI_TRICKS,
)
# The XSD's pathType "/.*[^/]": a leading slash and no trailing one.
paths = st.from_regex(r"(/[a-zA-Z0-9_.&<é-]{1,8}){1,3}", fullmatch=True)
ENTRY_RELS = (
    "duplicate",
    "alternate",
    "canonical",
    "describedby",
    "describes",
    "memento",
    "timegate",
    "collection",
    "via",
    "contents",
    "http://www.openarchives.org/rs/terms/patch",
)
media_types = st.sampled_from(["text/html", "application/xml", "image/png", "application/json"])
content_encodings = st.sampled_from(["gzip", "identity", "br", "compress"])

_DIGEST_SIZES = {"md5": 16, "sha-1": 20, "sha-256": 32, "sha-512": 64}


@st.composite
def hash_values(draw: st.DrawFn) -> HashValue:
    algorithm = draw(st.sampled_from(sorted(_DIGEST_SIZES)))
    raw = draw(st.binary(min_size=_DIGEST_SIZES[algorithm], max_size=_DIGEST_SIZES[algorithm]))
    style = draw(st.sampled_from(["hex", "base64", "base64url", "other"]))
    if style == "hex":
        digest = raw.hex()
    elif style == "base64":
        digest = base64.b64encode(raw).decode()
    elif style == "base64url":
        digest = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    else:  # like the spec's Example 27: neither hex nor base64 of the right size
        digest = draw(st.text("abcXYZ0189+/=_-", min_size=1, max_size=20))
    return HashValue(algorithm, digest)


hash_tuples = st.lists(hash_values(), min_size=1, max_size=3).map(tuple)

# Attribute text that must survive escaping: markup characters, quotes, tabs, newlines, CRs.
attribute_text = st.text(
    st.sampled_from(list("ab &<>\"'\t\n\ré日"))
    | st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Cn")),
    max_size=6,
)
# Attributes in other namespaces (Z39.99 §7 lets communities add them), as Clark names.
extras = st.just({}) | st.dictionaries(
    st.sampled_from(
        [
            "{http://example.org/ext}note",
            "{http://example.org/ext}id",
            "{http://example.net/other/}flag",
        ]
    ),
    attribute_text,
    min_size=1,
    max_size=2,
)


# Strategies are built once here: building them inside the draws costs more than drawing.
_booleans = st.booleans()
_optional_datetimes = st.none() | utc_datetimes
_optional_lengths = st.none() | st.integers(min_value=0, max_value=10**12)
_optional_paths = st.none() | paths
_optional_pris = st.none() | st.integers(min_value=1, max_value=999_999)
_optional_types = st.none() | media_types
_optional_encodings = st.none() | content_encodings
_optional_uris = st.none() | uris
_optional_hashes = st.just(()) | hash_tuples
_changes = st.sampled_from(["created", "updated", "deleted"])
_change_time_styles = st.sampled_from(["datetime", "lastmod", "none"])
_optional_changefreqs = st.none() | st.sampled_from(
    ["always", "hourly", "daily", "weekly", "monthly", "yearly", "never"]
)
# <priority> with at most three decimals, as the serialiser writes it.
_optional_priorities = st.none() | st.integers(0, 1000).map(lambda n: n / 1000)


@st.composite
def links(draw: st.DrawFn, rel: st.SearchStrategy[str]) -> Link:
    rel_value = draw(rel)
    href = draw(uris)
    if draw(_booleans):  # just the mandatory attributes, as most links are
        return Link(rel=rel_value, href=href)
    return Link(
        rel=rel_value,
        href=href,
        modified=draw(_optional_datetimes),
        hash=draw(_optional_hashes),
        length=draw(_optional_lengths),
        path=draw(_optional_paths),
        pri=draw(_optional_pris),
        type=draw(_optional_types),
        encoding=draw(_optional_encodings),
        profile=draw(_optional_uris),
        extra=draw(extras),
    )


_entry_links = st.lists(links(st.sampled_from(ENTRY_RELS)), max_size=1)
_other_document_links = st.lists(
    links(st.sampled_from(["describedby", "archives", "alternate"])), max_size=1
)
_up_links = links(st.just("up"))


# --- documents ------------------------------------------------------------------------------


@st.composite
def documents(
    draw: st.DrawFn,
    kind: DocumentType,
    *,
    min_entries: int | None = None,
    max_entries: int = 4,
) -> Document:
    """A random valid document of type ``kind``.

    Indexes get at least one entry by default: the Sitemap index XSD requires a ``<sitemap>``.
    """
    capability, root = LAYOUT[kind]
    is_index = root == "sitemapindex"
    if min_entries is None:
        min_entries = 1 if is_index else 0
    if kind is T.CAPABILITY_LIST:
        max_entries = min(max_entries, len(ADVERTISED))
    count = draw(st.integers(min_value=min_entries, max_value=max_entries))
    start = draw(utc_datetimes)

    # Entry datetimes: sorted where the document is ordered, free elsewhere.
    moments = sorted(
        start + offset for offset in draw(st.lists(deltas, min_size=count, max_size=count))
    )
    if kind not in CHANGES | ENTRY_FROM | ORDERED_BY_AT:
        moments = draw(st.permutations(moments))

    # Document-level rs:md.
    md: dict[str, object] = {"capability": capability, "extra": draw(extras)}
    if kind in SNAPSHOT:
        md["at"] = start
        if draw(_booleans):
            md["completed"] = start + draw(deltas)
    if kind in INTERVAL:
        md["from_"] = start
        last = moments[-1] if moments else start
        if kind is T.CHANGE_NOTIFICATION or draw(_booleans):
            md["until"] = last + draw(deltas)
    if kind is T.FRAMEWORK_NOTIFICATION:  # §3: from and until are optional
        if draw(_booleans):
            md["from_"] = start
        if draw(_booleans):
            md["until"] = (moments[-1] if moments else start) + draw(deltas)

    # Document-level rs:ln: up (where mandatory) among other links.
    doc_links = draw(_other_document_links)
    if kind not in NO_UP and (kind not in OPTIONAL_UP or draw(_booleans)):
        doc_links.insert(draw(st.integers(0, len(doc_links))), draw(_up_links))

    # Capability List entries take distinct capabilities (its count is capped above).
    advertised = draw(st.permutations(ADVERTISED))
    entries = [
        _entry(draw, kind, moment, is_index, advertised[number % len(advertised)])
        for number, moment in enumerate(moments)
    ]
    return Document(root=root, md=Metadata(**md), links=tuple(doc_links), entries=tuple(entries))


def _entry(
    draw: st.DrawFn, kind: DocumentType, moment: datetime, is_index: bool, advertised: str
) -> Entry:
    # The optional representation attributes any entry-level rs:md may carry.
    md: dict[str, object] = {
        "hash": draw(_optional_hashes),
        "length": draw(_optional_lengths),
        "type": draw(_optional_types),
        "encoding": draw(_optional_encodings),
        "modified": draw(_optional_datetimes),
        "extra": draw(extras),
    }
    lastmod = draw(_optional_datetimes)
    required_md = False

    if kind in CHANGES:
        required_md = True
        md["change"] = draw(_changes)
        # The change time is rs:md@datetime (1.1) or <lastmod> (1.0), or absent (Example 19).
        style = draw(_change_time_styles)
        if style == "datetime":
            md["datetime"] = moment
        elif style == "lastmod":
            lastmod = moment
        else:
            lastmod = None
    if kind in MANIFESTS and (md.get("change") != "deleted" or draw(_booleans)):
        required_md = True
        md["path"] = draw(paths)
    if kind in ENTRY_AT and (kind in ORDERED_BY_AT or draw(_booleans)):
        md["at"] = moment
        if draw(_booleans):
            md["completed"] = moment + draw(deltas)
    if kind in ENTRY_FROM:
        required_md = required_md or kind in ENTRY_FROM_RECOMMENDED
        md["from_"] = moment
        if draw(_booleans):
            md["until"] = moment + draw(deltas)
    if kind is T.CAPABILITY_LIST:
        required_md = True
        md["capability"] = advertised
    if kind is T.FRAMEWORK_NOTIFICATION:
        required_md = True
        md["capability"] = draw(st.sampled_from(FRAMEWORK_SUBJECTS))
    if kind is T.SOURCE_DESCRIPTION and draw(_booleans):
        required_md = True
        md["capability"] = "capabilitylist"

    metadata: Metadata | None = Metadata(**md)
    if not required_md and metadata == Metadata() and draw(_booleans):
        metadata = None
    return Entry(
        loc=draw(uris),
        lastmod=lastmod,
        # The Sitemap index XSD has no <changefreq> or <priority> in a <sitemap>.
        changefreq=None if is_index else draw(_optional_changefreqs),
        priority=None if is_index else draw(_optional_priorities),
        md=metadata,
        links=tuple(draw(_entry_links)),
    )


def any_document(**kwargs: object) -> st.SearchStrategy[Document]:
    """A valid document of any type."""
    return st.sampled_from(ALL_TYPES).flatmap(lambda kind: documents(kind, **kwargs))
