"""The ResourceSync document layer: models, hardened parsing, serialisation, the spec's rules.

No I/O here (``resourcesync.cli`` is the one edge): functions take bytes or models and return
bytes, models or violations.

>>> from rspush.resourcesync import parse_document, validate, serialise
>>> doc = parse_document(data)          # raises DocumentError for unusable input
>>> [str(v) for v in validate(doc)]     # every rule violation, with entry and section
>>> serialise(doc)                      # XSD-valid XML bytes
"""

from .errors import (
    DocumentError,
    DocumentTooLargeError,
    MalformedXMLError,
    NotResourceSyncError,
    ResourceSyncError,
    UnsafeXMLError,
    WrongNamespaceError,
)
from .fragments import fragment_violations, is_valid_fragment
from .framework import FrameworkChange, framework_changes, framework_notification
from .hashes import DigestEncoding, HashValue, parse_hashes
from .models import (
    Capability,
    Change,
    Document,
    DocumentType,
    Entry,
    Link,
    Metadata,
    document_type,
)
from .namespaces import MAX_DOCUMENT_BYTES, MAX_ENTRIES, RS_NS, SITEMAP_NS
from .parser import DocumentHead, parse_chunks, parse_document, stream_document
from .serialiser import iter_serialise, serialise
from .split import SplitResult, split_entries
from .validator import is_valid, validate
from .violations import Severity, Violation
from .w3cdt import format_w3c_datetime, parse_w3c_datetime

__all__ = [
    "MAX_DOCUMENT_BYTES",
    "MAX_ENTRIES",
    "RS_NS",
    "SITEMAP_NS",
    "Capability",
    "Change",
    "DigestEncoding",
    "Document",
    "DocumentError",
    "DocumentHead",
    "DocumentTooLargeError",
    "DocumentType",
    "Entry",
    "FrameworkChange",
    "HashValue",
    "Link",
    "MalformedXMLError",
    "Metadata",
    "NotResourceSyncError",
    "ResourceSyncError",
    "Severity",
    "SplitResult",
    "UnsafeXMLError",
    "Violation",
    "WrongNamespaceError",
    "document_type",
    "format_w3c_datetime",
    "framework_changes",
    "framework_notification",
    "fragment_violations",
    "is_valid_fragment",
    "is_valid",
    "iter_serialise",
    "parse_chunks",
    "parse_document",
    "parse_hashes",
    "parse_w3c_datetime",
    "serialise",
    "split_entries",
    "stream_document",
    "validate",
]
