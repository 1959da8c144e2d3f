"""URI → file path mapping (pure: no file system access).

``--map URI=DIR`` pairs map every URI under a prefix onto a directory; by default the Source's
base URI maps onto ``--dest``. A URI is refused — reported, never written — when no prefix
covers it (a foreign host), or when its path would leave the directory: ``..`` or ``.``
segments (also percent-encoded), empty segments (``a//b``), encoded slashes or backslashes,
NUL bytes, or names the agent keeps for itself. A fragment (``#f``) or an empty query (``?``)
names the same resource, so the same file. Whatever the mapping says, the applier checks
once more, on the real file system, that the final path (symlinks resolved) stays inside the
destination.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import PurePosixPath
from urllib.parse import SplitResult, quote, unquote, urlsplit

from .errors import UnmappedURIError

STATE_DIR = ".rs-subscribe"
"""Inside the destination: the default state file and in-flight temp files live here."""

INDEX_NAME = "index"
"""The file name for a URI whose path ends in ``/`` (a directory has no bytes of its own)."""

_DEFAULT_PORTS = {"http": 80, "https": 443}
_MEMO_SIZE = 100_000
"""URIs whose path :meth:`UriMap.path_for` remembers at most (then it starts afresh)."""
_ORIGINS_SIZE = 1000
"""Origins (scheme and authority as written) remembered at most, likewise."""

Origin = tuple[str, str, int | None]


@dataclass(frozen=True, slots=True)
class _Prefix:
    scheme: str
    host: str
    port: int | None
    segments: tuple[str, ...]

    @property
    def origin(self) -> Origin:
        return (self.scheme, self.host, self.port)

    @classmethod
    def parse(cls, uri: str, parts: SplitResult | None = None) -> _Prefix:
        parts = parts or urlsplit(uri)
        if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
            raise ValueError(f"{uri!r} is not an http(s) URI")
        port = parts.port or _DEFAULT_PORTS[parts.scheme]
        return cls(parts.scheme, parts.hostname.lower(), port, _segments(parts.path))


def map_target(directory: str, dest: PurePosixPath) -> str:
    """A ``--map`` target as the destination-relative directory :meth:`UriMap.build` takes:
    a relative target stays relative to ``dest``; an absolute one must be ``dest`` itself
    (``''``) or a folder inside it. ``dest`` is absolute and normalised (symlinks resolved
    by the caller, which does the file system access); a ValueError names a target outside.
    """
    target = PurePosixPath(directory) if directory else PurePosixPath()
    if not target.is_absolute():
        return directory
    normalised = PurePosixPath(posixpath.normpath(target))
    if normalised == dest:
        return ""
    if not normalised.is_relative_to(dest):
        raise ValueError(f"map target {directory!r} is outside the destination {str(dest)!r}")
    return str(normalised.relative_to(dest))


def _segments(path: str) -> tuple[str, ...]:
    return tuple(s for s in path.split("/") if s)


@dataclass(frozen=True)
class UriMap:
    """Prefix → relative directory pairs, most specific prefix first."""

    rules: tuple[tuple[str, PurePosixPath], ...]

    @cached_property
    def _prefixes(self) -> tuple[tuple[Origin, tuple[str, ...], PurePosixPath], ...]:
        # Parsed once: path_for runs for every change (catch-up applies thousands per second).
        parsed = ((_Prefix.parse(uri), directory) for uri, directory in self.rules)
        return tuple((p.origin, p.segments, directory) for p, directory in parsed)

    @classmethod
    def build(cls, pairs: Iterable[tuple[str, str]]) -> UriMap:
        """``pairs`` of (URI prefix, directory relative to the destination, '' for its root)."""
        rules = []
        for uri, directory in pairs:
            _Prefix.parse(uri)  # fail early, with the offending value
            relative = PurePosixPath(directory) if directory else PurePosixPath()
            if relative.is_absolute() or ".." in relative.parts:
                raise ValueError(f"map target {directory!r} must stay inside the destination")
            rules.append((uri, relative))
        # Longest prefix first: "http://x/a/b/" wins over "http://x/".
        rules.sort(key=lambda rule: len(_Prefix.parse(rule[0]).segments), reverse=True)
        return cls(tuple(rules))

    @cached_property
    def _memo(self) -> dict[str, PurePosixPath]:
        return {}

    @cached_property
    def _origins(self) -> dict[tuple[str, str], Origin]:
        """(scheme, authority as written) -> (scheme, host, port): a catch-up maps thousands
        of URIs of a few origins, and parsing an authority is most of a URI's first mapping."""
        return {}

    def _origin(self, uri: str, parts: SplitResult) -> Origin:
        """What ``_Prefix.parse(uri, parts).origin`` is (it depends on the scheme and the
        authority alone); a ValueError as it raises (refusals are not remembered)."""
        key = (parts.scheme, parts.netloc)
        origin = self._origins.get(key)
        if origin is None:
            origin = _Prefix.parse(uri, parts).origin
            if len(self._origins) >= _ORIGINS_SIZE:
                self._origins.clear()
            self._origins[key] = origin
        return origin

    def path_for(self, uri: str) -> PurePosixPath:
        """The destination-relative path for ``uri``; :class:`UnmappedURIError` if none."""
        # Remembered: a resource changes many times, and this runs for every change.
        path = self._memo.get(uri)
        if path is None:
            if len(self._memo) >= _MEMO_SIZE:
                self._memo.clear()
            directory, names = self._place(uri)
            path = self._memo[uri] = directory.joinpath(*names)
        return path

    @cached_property
    def _text_memo(self) -> dict[str, str]:
        return {}

    def text_for(self, uri: str) -> str:
        """``str(self.path_for(uri))``, without building the path: what a checkpoint row
        records, for a catch-up's tens of thousands of changes (the same checks, the same
        refusals)."""
        text = self._text_memo.get(uri)
        if text is None:
            if len(self._text_memo) >= _MEMO_SIZE:
                self._text_memo.clear()
            directory, names = self._place(uri)
            # Each name is one part (no separator, never "." or ".." or empty: _safe_name),
            # so joining the parts is what the path's own text would be.
            text = self._text_memo[uri] = "/".join((*directory.parts, *names))
        return text

    def _place(self, uri: str) -> tuple[PurePosixPath, list[str]]:
        """The directory of the rule that covers ``uri`` and the file names under it."""
        try:
            parts = urlsplit(uri)
            origin = self._origin(uri, parts)
        except ValueError as exc:
            raise UnmappedURIError(uri, str(exc)) from None
        segments = _segments(parts.path)
        inner = parts.path.split("/")[1:-1]  # between the first "/" and the last name
        if "" in inner:
            # "a//b" is another URI than "a/b" but would be the same file.
            raise UnmappedURIError(uri, "an empty path segment ('//') has no file name")
        for prefix_origin, prefix_segments, directory in self._prefixes:
            if prefix_origin != origin:
                continue
            if segments[: len(prefix_segments)] != prefix_segments:
                continue
            rest = list(segments[len(prefix_segments) :])
            if not rest or parts.path.endswith("/"):
                rest.append(INDEX_NAME)
            names = [_safe_name(uri, segment) for segment in rest]
            if parts.query:
                # Keep query strings apart: "a?x=1" → "a%3Fx%3D1", reversible and flat
                # ("%" itself is written "%25", so a literal "%3F" cannot pose as one).
                names[-1] += "%3F" + quote(parts.query, safe="")
                _check_length(uri, names[-1])
            # The path's first part, without building its parts: each name is one part (no
            # separator, never "." or ".." or empty: _safe_name), and there is at least one.
            first = directory.parts[0] if directory.parts else names[0]
            if first == STATE_DIR:
                raise UnmappedURIError(uri, f"maps into the agent's own {STATE_DIR}/ directory")
            return directory, names
        covered = ", ".join(rule[0] for rule in self.rules) or "nothing"
        raise UnmappedURIError(
            uri, f"no --map covers it (mapped: {covered}); add --map {_origin(uri)}=DIR"
        )

    def uri_for(self, path: PurePosixPath) -> str | None:
        """The inverse, for files found in the destination (audit): None when unmapped."""
        for prefix_uri, directory in self.rules:
            if directory.parts and path.parts[: len(directory.parts)] != directory.parts:
                continue
            rest = path.parts[len(directory.parts) :]
            if not rest:
                continue
            names = list(rest)
            query = ""
            if "%3F" in names[-1]:
                names[-1], _, encoded = names[-1].partition("%3F")
                query = "?" + unquote(encoded)
            names = [n.replace("%25", "%") for n in names]
            if names[-1] == INDEX_NAME:
                names[-1] = ""
            base = prefix_uri if prefix_uri.endswith("/") else prefix_uri + "/"
            return base + "/".join(quote(n, safe="!$&'()*+,;=:@~") for n in names) + query
        return None


def _safe_name(uri: str, segment: str) -> str:
    name = unquote(segment)
    if name in (".", ".."):
        raise UnmappedURIError(uri, f"path segment {segment!r} would leave the destination")
    if "/" in name or "\\" in name or "\x00" in name:
        raise UnmappedURIError(uri, f"path segment {segment!r} holds a separator or NUL")
    name = name.replace("%", "%25")
    _check_length(uri, name)
    return name


def _check_length(uri: str, name: str) -> None:
    try:
        size = len(name.encode())
    except UnicodeEncodeError:
        raise UnmappedURIError(uri, "a path segment is not valid Unicode text") from None
    if size > 255:
        raise UnmappedURIError(uri, "a path segment is longer than a file name may be")


def _origin(uri: str) -> str:
    parts = urlsplit(uri)
    return f"{parts.scheme}://{parts.netloc}/"
