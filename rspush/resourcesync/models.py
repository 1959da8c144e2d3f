"""Typed models of ResourceSync documents (Z39.99-2014/2017 §7, archives, notifications).

Every document is a Sitemap (``<urlset>``) or Sitemap index (``<sitemapindex>``) with one
document-level ``rs:md``, any number of document-level ``rs:ln`` and a list of entries
(``<url>``/``<sitemap>``). The ``capability`` and the root element together name the document
type (:class:`DocumentType`). Models never parse or fetch; :mod:`rspush.resourcesync.parser` builds
them from bytes, :mod:`rspush.resourcesync.serialiser` writes them back.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from .hashes import HashValue, parse_hashes
from .violations import Violation
from .w3cdt import ensure_utc, parse_w3c_datetime


def _w3c_text(value: object) -> object:
    # Strings are W3C Datetimes (any profile), not pydantic's ISO 8601 superset.
    return parse_w3c_datetime(value) if isinstance(value, str) else value


def _hash_tuple(value: object) -> object:
    if isinstance(value, str):
        return parse_hashes(value)
    if isinstance(value, list):
        return tuple(value)
    return value


UTCDatetime = Annotated[datetime, BeforeValidator(_w3c_text), AfterValidator(ensure_utc)]
Hashes = Annotated[tuple[HashValue, ...], BeforeValidator(_hash_tuple)]


class Capability(StrEnum):
    """``capability`` values of Z39.99 §7, the archives spec §2 and notifications §3."""

    DESCRIPTION = "description"
    CAPABILITYLIST = "capabilitylist"
    RESOURCELIST = "resourcelist"
    RESOURCEDUMP = "resourcedump"
    RESOURCEDUMP_MANIFEST = "resourcedump-manifest"
    CHANGELIST = "changelist"
    CHANGEDUMP = "changedump"
    CHANGEDUMP_MANIFEST = "changedump-manifest"
    RESOURCELIST_ARCHIVE = "resourcelist-archive"
    RESOURCEDUMP_ARCHIVE = "resourcedump-archive"
    CHANGELIST_ARCHIVE = "changelist-archive"
    CHANGEDUMP_ARCHIVE = "changedump-archive"
    CHANGE_NOTIFICATION = "change-notification"
    # The name used by drafts of the notification spec; accepted on input, never written.
    CHANGELIST_NOTIFICATION = "changelist-notification"
    FRAMEWORK_NOTIFICATION = "framework-notification"
    """Framework notification §3: a notification of changed capability documents."""


class Change(StrEnum):
    """``change`` values of Z39.99 §7."""

    CREATED = "created"
    UPDATED = "updated"
    DELETED = "deleted"


CHANGEFREQ_VALUES = frozenset({"always", "hourly", "daily", "weekly", "monthly", "yearly", "never"})


class DocumentType(StrEnum):
    SOURCE_DESCRIPTION = "Source Description"
    SOURCE_DESCRIPTION_INDEX = "Source Description Index"
    CAPABILITY_LIST = "Capability List"
    RESOURCE_LIST = "Resource List"
    RESOURCE_LIST_INDEX = "Resource List Index"
    RESOURCE_DUMP = "Resource Dump"
    RESOURCE_DUMP_INDEX = "Resource Dump Index"
    RESOURCE_DUMP_MANIFEST = "Resource Dump Manifest"
    CHANGE_LIST = "Change List"
    CHANGE_LIST_INDEX = "Change List Index"
    CHANGE_DUMP = "Change Dump"
    CHANGE_DUMP_INDEX = "Change Dump Index"
    CHANGE_DUMP_MANIFEST = "Change Dump Manifest"
    RESOURCE_LIST_ARCHIVE = "Resource List Archive"
    RESOURCE_LIST_ARCHIVE_INDEX = "Resource List Archive Index"
    RESOURCE_DUMP_ARCHIVE = "Resource Dump Archive"
    RESOURCE_DUMP_ARCHIVE_INDEX = "Resource Dump Archive Index"
    CHANGE_LIST_ARCHIVE = "Change List Archive"
    CHANGE_LIST_ARCHIVE_INDEX = "Change List Archive Index"
    CHANGE_DUMP_ARCHIVE = "Change Dump Archive"
    CHANGE_DUMP_ARCHIVE_INDEX = "Change Dump Archive Index"
    CHANGE_NOTIFICATION = "Change Notification"
    FRAMEWORK_NOTIFICATION = "Framework Notification"
    UNKNOWN = "unknown"


Root = Literal["urlset", "sitemapindex"]

# (capability, root) -> type. A pair missing here is a root the spec does not define for
# that capability (e.g. a manifest as <sitemapindex>); the validator reports it.
_TYPES: dict[tuple[str, str], DocumentType] = {}
for _cap, _plain, _index in [
    (
        Capability.DESCRIPTION,
        DocumentType.SOURCE_DESCRIPTION,
        DocumentType.SOURCE_DESCRIPTION_INDEX,
    ),
    (Capability.CAPABILITYLIST, DocumentType.CAPABILITY_LIST, None),
    (Capability.RESOURCELIST, DocumentType.RESOURCE_LIST, DocumentType.RESOURCE_LIST_INDEX),
    (Capability.RESOURCEDUMP, DocumentType.RESOURCE_DUMP, DocumentType.RESOURCE_DUMP_INDEX),
    (Capability.RESOURCEDUMP_MANIFEST, DocumentType.RESOURCE_DUMP_MANIFEST, None),
    (Capability.CHANGELIST, DocumentType.CHANGE_LIST, DocumentType.CHANGE_LIST_INDEX),
    (Capability.CHANGEDUMP, DocumentType.CHANGE_DUMP, DocumentType.CHANGE_DUMP_INDEX),
    (Capability.CHANGEDUMP_MANIFEST, DocumentType.CHANGE_DUMP_MANIFEST, None),
    (
        Capability.RESOURCELIST_ARCHIVE,
        DocumentType.RESOURCE_LIST_ARCHIVE,
        DocumentType.RESOURCE_LIST_ARCHIVE_INDEX,
    ),
    (
        Capability.RESOURCEDUMP_ARCHIVE,
        DocumentType.RESOURCE_DUMP_ARCHIVE,
        DocumentType.RESOURCE_DUMP_ARCHIVE_INDEX,
    ),
    (
        Capability.CHANGELIST_ARCHIVE,
        DocumentType.CHANGE_LIST_ARCHIVE,
        DocumentType.CHANGE_LIST_ARCHIVE_INDEX,
    ),
    (
        Capability.CHANGEDUMP_ARCHIVE,
        DocumentType.CHANGE_DUMP_ARCHIVE,
        DocumentType.CHANGE_DUMP_ARCHIVE_INDEX,
    ),
    (Capability.CHANGE_NOTIFICATION, DocumentType.CHANGE_NOTIFICATION, None),
    (Capability.CHANGELIST_NOTIFICATION, DocumentType.CHANGE_NOTIFICATION, None),
    # Framework notification §3: never a <sitemapindex>.
    (Capability.FRAMEWORK_NOTIFICATION, DocumentType.FRAMEWORK_NOTIFICATION, None),
]:
    _TYPES[(_cap.value, "urlset")] = _plain
    if _index is not None:
        _TYPES[(_cap.value, "sitemapindex")] = _index


_Model = TypeVar("_Model", bound=BaseModel)
_NO_DEFAULT = object()
_IMMUTABLE = (type(None), str, int, float, tuple, frozenset)
_Layout = tuple[dict[str, Any], frozenset[str], frozenset[str]]
_LAYOUTS: dict[type[BaseModel], _Layout] = {}


def _layout(model: type[BaseModel]) -> _Layout:
    """Every field in order with its plain default (a marker where it has none), the fields
    a caller must give (required, made by a factory, or a default that could be changed in
    place and so is copied per instance) and all field names."""
    defaults: dict[str, Any] = {}
    needed = set()
    for name, info in model.model_fields.items():
        if (
            info.is_required()
            or info.default_factory is not None
            or not isinstance(info.default, _IMMUTABLE)
        ):
            defaults[name] = _NO_DEFAULT
            needed.add(name)
        else:
            defaults[name] = info.default
    layout = (defaults, frozenset(needed), frozenset(defaults))
    _LAYOUTS[model] = layout
    return layout


def construct(model: type[_Model], values: dict[str, Any]) -> _Model:
    """``model.model_construct(**values)`` for trusted values keyed by field name: the same
    instance (fields in field order, defaults filled in, the given names as the fields set)
    at a fraction of the cost, for the parser, which builds several models per entry.

    Values whose field has no plain default (a required field, ``extra``) must be given;
    otherwise, or for a name that is not a field, this is ``model_construct`` itself."""
    defaults, needed, names = _LAYOUTS.get(model) or _layout(model)
    given = values.keys()
    if not (needed <= given <= names):
        return model.model_construct(**values)
    fields = defaults.copy()
    fields.update(values)
    instance = model.__new__(model)
    _set = object.__setattr__
    _set(instance, "__dict__", fields)
    _set(instance, "__pydantic_fields_set__", set(given))
    _set(instance, "__pydantic_extra__", None)
    _set(instance, "__pydantic_private__", None)
    return instance


def document_type(capability: str | None, root: Root) -> DocumentType:
    """The document type for a capability value and a root element name."""
    return _TYPES.get((capability or "", root), DocumentType.UNKNOWN)


class _Attributes(BaseModel):
    """Shared config: frozen values; ``extra`` keeps attributes of other namespaces
    (Clark notation ``{ns}name``), which Z39.99 §7 allows communities to add."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")

    extra: dict[str, str] = Field(default_factory=dict)


class Link(_Attributes):
    """``<rs:ln>``: a link to a related resource or document (Z39.99 §7, Table 3)."""

    rel: str
    href: str
    modified: UTCDatetime | None = None
    hash: Hashes = ()
    length: int | None = Field(default=None, ge=0)
    path: str | None = None
    pri: int | None = Field(default=None, ge=1, le=999_999)
    type: str | None = None
    encoding: str | None = None
    profile: str | None = None  # 1.1 / 2023 schema: specificity for a media type


class Metadata(_Attributes):
    """``<rs:md>``: metadata about the document (root level) or one resource (entry level)."""

    capability: str | None = None
    at: UTCDatetime | None = None
    completed: UTCDatetime | None = None
    from_: UTCDatetime | None = Field(default=None, alias="from")
    until: UTCDatetime | None = None
    change: str | None = None
    datetime: UTCDatetime | None = None
    hash: Hashes = ()
    length: int | None = Field(default=None, ge=0)
    path: str | None = None
    type: str | None = None
    encoding: str | None = None
    modified: UTCDatetime | None = None


class Entry(BaseModel):
    """A ``<url>`` (or, in an index, ``<sitemap>``) child: one resource, change or document."""

    model_config = ConfigDict(frozen=True)

    loc: str
    lastmod: UTCDatetime | None = None
    changefreq: str | None = None
    priority: float | None = None
    md: Metadata | None = None
    links: tuple[Link, ...] = ()

    @property
    def change(self) -> str | None:
        return None if self.md is None else self.md.change

    @property
    def change_time(self) -> datetime | None:
        """When the change happened: 1.1's ``rs:md@datetime``, else (1.0) ``<lastmod>``."""
        if self.md is not None and self.md.datetime is not None:
            return self.md.datetime
        return self.lastmod

    @property
    def hashes(self) -> tuple[HashValue, ...]:
        return () if self.md is None else self.md.hash

    @property
    def length(self) -> int | None:
        return None if self.md is None else self.md.length

    def link(self, rel: str) -> Link | None:
        return next((ln for ln in self.links if ln.rel == rel), None)


class Document(BaseModel):
    """One ResourceSync document of any type.

    ``problems`` carries the violations the parser found in attribute values it could not
    convert (bad datetimes, non-integer lengths, malformed hashes…); those values are left
    out of the model and :func:`rspush.resourcesync.validator.validate` reports them with the rest.
    ``size`` is the byte length it was parsed from (None for documents built in code).
    """

    model_config = ConfigDict(frozen=True)

    root: Root = "urlset"
    md: Metadata
    links: tuple[Link, ...] = ()
    entries: tuple[Entry, ...] = ()
    problems: tuple[Violation, ...] = Field(default=(), exclude=True, repr=False)
    size: int | None = Field(default=None, exclude=True, repr=False)

    @property
    def capability(self) -> str | None:
        return self.md.capability

    @property
    def type(self) -> DocumentType:
        return document_type(self.md.capability, self.root)

    @property
    def is_index(self) -> bool:
        return self.root == "sitemapindex"

    @property
    def version(self) -> str:
        """ "1.1" when the document uses what 1.1 added (``rs:md@datetime``,
        ``rs:ln@profile``), else "1.0". A heuristic: a 1.1 document may use neither."""
        for entry in self.entries:
            if entry.md is not None and entry.md.datetime is not None:
                return "1.1"
            if any(ln.profile is not None for ln in entry.links):
                return "1.1"
        if any(ln.profile is not None for ln in self.links):
            return "1.1"
        return "1.0"

    def link(self, rel: str) -> Link | None:
        """The first document-level link with this relation, if any."""
        return next((ln for ln in self.links if ln.rel == rel), None)

    def iter_changes(self) -> Iterator[Entry]:
        """Entries in document order (Change Lists are forward chronological, §12.1)."""
        return iter(self.entries)

    def __eq__(self, other: object) -> bool:
        # Parse bookkeeping (problems, size) is not part of the document's content.
        if not isinstance(other, Document):
            return NotImplemented
        return (self.root, self.md, self.links, self.entries) == (
            other.root,
            other.md,
            other.links,
            other.entries,
        )

    __hash__ = None  # type: ignore[assignment]
