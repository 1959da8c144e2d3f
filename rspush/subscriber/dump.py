"""Reading Resource Dump packages safely (Z39.99 §11.1, §11.2).

A Resource Dump points at ZIP packages; each holds its bitstreams and a Resource Dump Manifest
named ``manifest.xml`` at the top level, whose entries give each bitstream's URI (``<loc>``),
its place in the package (``rs:md@path``, "relative to root of the package and ... expressed
with a leading slash", §11.2) and optionally its ``length`` and ``hash``.

Pure apart from the ZIP file and the one target file it is told to write: no network, no
clocks, no event loop. The flow for the agent::

    package = open_package(path, package_name=url)           # DumpError: not a ZIP
    for member in read_manifest(package, package_name=url):   # DumpError: unusable package
        length, digests = extract_member(package, member, tmp, max_bytes=limit)
        problem = verify(member, length, digests)             # None, or why it is wrong
        ...  # rename tmp into place when problem is None, else delete it

Safety:

- the manifest goes through the project's one hardened XML parser, streamed from the ZIP and
  capped at :data:`MAX_MANIFEST_BYTES` however far it inflates;
- a path is only ever a ZIP member name, never joined to a file-system path here, and odd
  ones are refused anyway (``..``/``.``/empty segments, absolute, backslashes, drive letters,
  control characters) so no consumer can be tricked into treating them as one;
- only stored and DEFLATE members are read: zipfile bounds what one DEFLATE read inflates,
  but inflates a whole BZIP2/LZMA block at once (a memory bomb); encrypted members and names
  that occur twice in the ZIP (which copy would be "the" bitstream?) are refused;
- a member is streamed in :data:`CHUNK_BYTES` pieces and refused as soon as more than the
  manifest ``length`` or the caller's ``max_bytes`` would be written, whatever the ZIP header
  claims: a zip bomb costs at most one chunk of memory and ``limit`` bytes of disk.

Errors: every problem is a :class:`DumpError` naming the package (and the member or manifest
entry) and saying why; zipfile/zlib errors are translated at this boundary.
"""

from __future__ import annotations

import hashlib
import os
import re
import zipfile
import zlib
from collections import Counter
from collections.abc import Generator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

from rspush.resourcesync import DocumentError, DocumentType, Entry, parse_chunks
from rspush.resourcesync.namespaces import MAX_DOCUMENT_BYTES

from .errors import SourceError

MANIFEST_NAME: Final = "manifest.xml"
"""Z39.99 §11.2: "The file must be named manifest.xml and must be located at the top level"."""

MAX_MANIFEST_BYTES: Final = MAX_DOCUMENT_BYTES
"""The manifest is a Sitemap: the protocol's 50 MB document limit applies (Z39.99 §7)."""

CHUNK_BYTES: Final = 64 * 1024
"""Bytes read (and, for DEFLATE, inflated) per step: the memory one extraction costs."""

SUPPORTED_COMPRESSION: Final = frozenset({zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED})

# Parser problems that drop a fixity value from an entry: reading on would skip a check the
# Source asked for, so the package is refused instead.
_FIXITY_RULES: Final = frozenset({"hash-syntax", "length-integer"})
_DRIVE = re.compile(r"[A-Za-z]:")
# What reading a damaged package raises (found by fuzzing zipfile): bad headers and CRCs
# (BadZipFile), corrupt or truncated DEFLATE streams (zlib.error, EOFError), features zipfile
# does not read (NotImplementedError), bad offsets (ValueError/OSError from seek), undecodable
# names (UnicodeDecodeError), encryption flagged only in a local header (RuntimeError). Only
# reads of the package are wrapped, so an OSError writing the target still means the disk.
PACKAGE_ERRORS: Final = (
    zipfile.BadZipFile,
    zlib.error,
    EOFError,
    NotImplementedError,
    RuntimeError,
    ValueError,
    OSError,
)


class DumpError(SourceError):
    """A package is unusable; the message says which package (and member) and why.

    ``package`` names the package, ``member`` the ZIP member or manifest entry concerned
    (None when the problem is the package as a whole) and ``reason`` the bare cause.
    """

    def __init__(self, reason: str, *, package: str = "", member: str | None = None) -> None:
        where = [part for part in (package, member) if part]
        super().__init__(": ".join([*where, reason]))
        self.reason = reason
        self.package = package
        self.member = member


@dataclass(frozen=True)
class DumpMember:
    """One bitstream of a package, as its manifest describes it."""

    entry: Entry
    """The manifest entry: ``loc``, ``lastmod`` and ``md`` (hash, length, path, type…)."""
    path: str
    """The member name inside the ZIP: ``rs:md@path`` without its leading ``/``."""


def open_package(file: str | os.PathLike[str] | IO[bytes], *, package_name: str) -> zipfile.ZipFile:
    """Open a downloaded package, translating "not a ZIP" into :class:`DumpError`."""
    try:
        return zipfile.ZipFile(file)
    except PACKAGE_ERRORS as exc:
        raise DumpError(f"not a usable ZIP file ({exc})", package=package_name) from exc


def read_manifest(
    package: zipfile.ZipFile,
    *,
    package_name: str,
    max_manifest_bytes: int = MAX_MANIFEST_BYTES,
) -> list[DumpMember]:
    """The package's bitstreams, in manifest order, each checked to be readable.

    Refuses (:class:`DumpError`) the whole package when ``manifest.xml`` is missing, is not a
    Resource Dump Manifest, drops a malformed hash or length, or has an entry without
    ``<loc>`` or ``rs:md@path``, with an odd path, or whose member is missing, duplicated,
    encrypted or compressed with a method other than stored/DEFLATE.
    """
    counts = Counter(package.namelist())
    if not counts[MANIFEST_NAME]:
        raise DumpError(
            f"no {MANIFEST_NAME} at the top level of the ZIP (every package must contain its "
            "Resource Dump Manifest there, Z39.99 §11.2)",
            package=package_name,
        )
    info = _member_info(package, MANIFEST_NAME, package_name, label=MANIFEST_NAME, counts=counts)
    # The parser stops pulling chunks once past its byte cap: inflation stays bounded.
    with closing(_read_member(package, info, package_name, MANIFEST_NAME)) as chunks:
        try:
            document = parse_chunks(chunks, max_bytes=max_manifest_bytes)
        except DocumentError as exc:
            raise DumpError(
                f"not a usable manifest: {exc}", package=package_name, member=MANIFEST_NAME
            ) from exc

    if document.type is not DocumentType.RESOURCE_DUMP_MANIFEST:
        raise DumpError(
            f"a <{document.root}> with capability={document.capability!r}; a Resource Dump "
            'Manifest is a <urlset> with capability="resourcedump-manifest" (Z39.99 §11.2)',
            package=package_name,
            member=MANIFEST_NAME,
        )
    for problem in document.problems:
        if problem.rule in _FIXITY_RULES and problem.entry is not None:
            raise DumpError(
                f"{MANIFEST_NAME} entry {problem.entry}: {problem.message}; the bitstream "
                "could not be verified",
                package=package_name,
            )

    members = []
    for index, entry in enumerate(document.entries):
        where = f"{MANIFEST_NAME} entry {index}" + (f" ({entry.loc})" if entry.loc else "")
        if not entry.loc:
            raise DumpError(
                "has no <loc> (mandatory, Z39.99 §11.2)", package=package_name, member=where
            )
        path = entry.md.path if entry.md is not None else None
        if not path:
            raise DumpError(
                "has no rs:md path attribute (mandatory in a Resource Dump Manifest, Z39.99 §11.2)",
                package=package_name,
                member=where,
            )
        name = _member_name(path, package_name, where)
        _member_info(package, name, package_name, label=where, counts=counts)
        members.append(DumpMember(entry=entry, path=name))
    return members


def extract_member(
    package: zipfile.ZipFile,
    member: DumpMember,
    target: Path,
    *,
    max_bytes: int,
    package_name: str | None = None,
) -> tuple[int, dict[str, bytes]]:
    """Stream one bitstream into ``target`` (opened ``'wb'``), hashing as it is written.

    Hashes with every algorithm of the entry's ``hash`` attribute that :mod:`hashlib` knows.
    Refuses (:class:`DumpError`) as soon as more than ``max_bytes``, or more than the
    manifest ``length`` when there is one, would be written, so ``target`` never grows past
    that limit; on any :class:`DumpError` ``target`` may hold a partial write, which the
    caller deletes. Returns the bytes written and ``{hashlib name: raw digest}``; check them
    with :func:`verify`. ``package_name`` names the package in errors (default: its file
    name).
    """
    package_name = package_name or package.filename or "<package>"
    info = _member_info(package, member.path, package_name, label=member.path)
    declared = member.entry.length
    limit = max_bytes if declared is None else min(max_bytes, declared)
    hashers = {
        name: hashlib.new(name, usedforsecurity=False)
        for name in {value.hashlib_name for value in member.entry.hashes}
        if name is not None
    }
    written = 0
    chunks = _read_member(package, info, package_name, member.path)
    with closing(chunks), target.open("wb") as sink:
        for chunk in chunks:
            if written + len(chunk) > limit:
                raise DumpError(
                    f"inflates to more than {limit} bytes ({_limits(declared, max_bytes)}; "
                    f"the ZIP header says {info.file_size}): refused before writing more",
                    package=package_name,
                    member=member.path,
                )
            sink.write(chunk)
            for hasher in hashers.values():
                hasher.update(chunk)
            written += len(chunk)
    return written, {name: hasher.digest() for name, hasher in hashers.items()}


def verify(member: DumpMember, length: int, digests: dict[str, bytes]) -> str | None:
    """None when ``length`` and ``digests`` match the manifest entry, else what differs.

    Hash values are compared in hex or base64 (:meth:`HashValue.matches_digest`); algorithms
    :mod:`hashlib` does not know are skipped, as the document layer never rejects them.
    """
    problems = []
    declared = member.entry.length
    if declared is not None and length != declared:
        problems.append(f"{length} bytes, the manifest says length={declared}")
    for value in member.entry.hashes:
        name = value.hashlib_name
        if name is None:
            continue
        digest = digests.get(name)
        if digest is None:
            problems.append(f"no {name} digest was computed to check {value}")
        elif not value.matches_digest(digest):
            problems.append(f"{value.algorithm} is {digest.hex()}, the manifest says {value}")
    if not problems:
        return None
    return f"{member.path} ({member.entry.loc}): " + "; ".join(problems)


def _read_member(
    package: zipfile.ZipFile, info: zipfile.ZipInfo, package_name: str, label: str
) -> Generator[bytes, None, None]:
    """A member's bytes in chunks of at most :data:`CHUNK_BYTES` (zipfile inflates DEFLATE
    data only as far as each read asks), with read errors translated to :class:`DumpError`."""
    try:
        with package.open(info) as source:
            while chunk := source.read(CHUNK_BYTES):
                yield chunk
    except PACKAGE_ERRORS as exc:
        raise DumpError(f"damaged ZIP entry ({exc})", package=package_name, member=label) from exc


def _member_name(path: str, package_name: str, where: str) -> str:
    """The ZIP member name for an ``rs:md@path``; odd paths raise :class:`DumpError`.

    §11.2 writes the path with a leading slash; the reference client ``resync`` writes it
    without one, so both are accepted.
    """
    name = path.removeprefix("/")
    reason = None
    if not name:
        reason = "names no file"
    elif name.startswith("/") or _DRIVE.match(name):
        reason = "is absolute"
    elif any(ord(char) < 32 or ord(char) == 127 for char in name):
        reason = "contains a control character"
    elif "\\" in name:
        reason = "contains a backslash"
    elif any(segment in ("", ".", "..") for segment in name.split("/")):
        reason = "has an empty, '.' or '..' segment"
    if reason is not None:
        raise DumpError(
            f"path {path!r} {reason}; a path is relative to the package root, written "
            "'/dir/file' (Z39.99 §11.2)",
            package=package_name,
            member=where,
        )
    return name


def _member_info(
    package: zipfile.ZipFile,
    name: str,
    package_name: str,
    *,
    label: str,
    counts: Counter[str] | None = None,
) -> zipfile.ZipInfo:
    """The ZipInfo of a member about to be read, refusing what must not be read.

    ``counts`` (name → occurrences) lets :func:`read_manifest` refuse duplicate names once per
    package rather than once per member.
    """

    def refuse(reason: str) -> DumpError:
        return DumpError(reason, package=package_name, member=label)

    if counts is not None and counts[name] > 1:
        raise refuse(f"{name!r} occurs {counts[name]} times in the ZIP: which one is meant?")
    try:
        info = package.getinfo(name)
    except KeyError:
        raise refuse(f"{name!r} is not in the package") from None
    if info.flag_bits & 0x1:
        raise refuse(f"{name!r} is encrypted")
    if info.compress_type not in SUPPORTED_COMPRESSION:
        raise refuse(
            f"{name!r} uses ZIP compression method {info.compress_type}; only stored (0) and "
            "DEFLATE (8) are read"
        )
    return info


def _limits(declared: int | None, max_bytes: int) -> str:
    if declared is None:
        return f"limit {max_bytes}"
    return f"manifest length {declared}, limit {max_bytes}"
