"""Exceptions of the document layer.

One root, so callers can catch everything this package raises with one clause::

    ResourceSyncError
    └── DocumentError            the bytes are not a usable ResourceSync document
        ├── UnsafeXMLError       DTD / entity declarations (XXE, "billion laughs")
        ├── DocumentTooLargeError  over the byte cap
        ├── MalformedXMLError    not well-formed XML, or not UTF-8
        ├── WrongNamespaceError  root element outside the Sitemap namespace
        └── NotResourceSyncError well-formed Sitemap XML, but not a ResourceSync document

Rule violations inside a usable document are not exceptions: they are
:class:`rspush.resourcesync.violations.Violation` values returned by the validator, so a caller
sees every one of them at once.
"""

from __future__ import annotations


class ResourceSyncError(Exception):
    """Root of every exception raised by :mod:`rspush.resourcesync`."""


class DocumentError(ResourceSyncError):
    """The input cannot be read as a ResourceSync document.

    ``line`` is the 1-based source line where the problem was found, when known.
    """

    def __init__(self, message: str, *, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line

    def __str__(self) -> str:
        if self.line is not None:
            return f"line {self.line}: {self.message}"
        return self.message


class UnsafeXMLError(DocumentError):
    """The document declares a DTD or entities; ResourceSync documents never need them."""


class DocumentTooLargeError(DocumentError):
    """The document is larger than the byte cap the caller allowed."""


class MalformedXMLError(DocumentError):
    """The bytes are not well-formed UTF-8 XML."""


class WrongNamespaceError(DocumentError):
    """The root element is not ``<urlset>``/``<sitemapindex>`` in the Sitemap namespace."""


class NotResourceSyncError(DocumentError):
    """A Sitemap without the ResourceSync ``<rs:md capability="...">`` root metadata."""
