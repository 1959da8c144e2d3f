"""Change List fragments built from command-line changes (``rs-publish --created URL=FILE``):
each change's metadata computed from the file, its time from a clock that never repeats.

Pure apart from reading the files it is given (:func:`file_facts`). Z39.99 §7 (Table 3):
``length`` in bytes, ``hash`` as ``algorithm:hex-digest`` tokens, ``type`` a media type;
§12.1: a Change List's entries in forward chronological order, so one call's changes get
strictly increasing times in the order they are listed.
"""

from __future__ import annotations

import hashlib
import mimetypes
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import BinaryIO

from rspush.resourcesync.hashes import HashValue
from rspush.resourcesync.models import Capability, Change, Document, Entry, Metadata
from rspush.resourcesync.serialiser import serialise

from .errors import ChangeArgumentError

READ_CHUNK_BYTES = 1024 * 1024


@dataclass(frozen=True)
class FileFacts:
    """What a fragment says of a resource's content: Z39.99 §7 ``length``, ``hash``, ``type``."""

    length: int
    md5: str
    sha256: str
    media_type: str | None


@dataclass(frozen=True)
class CommandChange:
    """One change as given: its kind, its URI and, unless deleted, the file holding its
    content now."""

    change: Change
    loc: str
    path: Path | None = None


def parse_with_file(change: Change, value: str) -> CommandChange:
    """``URL=FILE`` (split at the last ``=``: URLs may hold ``=`` in their query)."""
    loc, sep, path = value.rpartition("=")
    if not sep or not loc or not path:
        raise ChangeArgumentError(f"--{change.value} {value!r}: expected URL=FILE")
    return CommandChange(change, _uri(change, loc), Path(path))


def parse_deleted(value: str) -> CommandChange:
    return CommandChange(Change.DELETED, _uri(Change.DELETED, value))


def _uri(change: Change, loc: str) -> str:
    if not loc.startswith(("http://", "https://")):
        raise ChangeArgumentError(f"--{change.value} {loc!r}: the resource's URI must be http(s)")
    return loc


def file_facts(path: Path) -> FileFacts:
    """Length, MD5 and SHA-256 of ``path`` read in chunks; its media type guessed from its
    name. OSError if it cannot be read."""
    with path.open("rb") as handle:
        return handle_facts(handle, path.name)


def handle_facts(handle: BinaryIO, name: str) -> FileFacts:
    """Length, MD5 and SHA-256 of what is left to read of ``handle``; the media type guessed
    from ``name``."""
    md5, sha256, length = hashlib.md5(usedforsecurity=False), hashlib.sha256(), 0
    while chunk := handle.read(READ_CHUNK_BYTES):
        md5.update(chunk)
        sha256.update(chunk)
        length += len(chunk)
    media_type, _ = mimetypes.guess_type(name)
    return FileFacts(length, md5.hexdigest(), sha256.hexdigest(), media_type)


class IncreasingClock:
    """``now`` in UTC, strictly later than the time it returned before (the wall clock may
    give the same microsecond twice, or step back)."""

    def __init__(
        self,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        after: datetime | None = None,
    ) -> None:
        self._now = now
        self._last: datetime | None = after
        """No time returned is at or before this one (``after``: the last time a previous run
        may have posted, so a clock stepped back never dates a change backwards)."""

    @property
    def last(self) -> datetime | None:
        return self._last

    def __call__(self) -> datetime:
        moment = self._now()
        if self._last is not None and moment <= self._last:
            moment = self._last + timedelta(microseconds=1)
        self._last = moment
        return moment


def build_fragment(
    changes: Iterable[tuple[CommandChange, FileFacts | None]], clock: Callable[[], datetime]
) -> bytes:
    """A Change List fragment (what the hub's ``/changes`` accepts) of ``changes``, in order,
    each stamped by ``clock``."""
    entries = []
    for given, facts in changes:
        if facts is None:
            md = Metadata(change=given.change.value, datetime=clock())
        else:
            md = Metadata(
                change=given.change.value,
                datetime=clock(),
                length=facts.length,
                hash=(HashValue("md5", facts.md5), HashValue("sha-256", facts.sha256)),
                type=facts.media_type,
            )
        entries.append(Entry(loc=given.loc, md=md))
    if not entries:
        raise ChangeArgumentError("no changes given")
    return serialise(
        Document(md=Metadata(capability=Capability.CHANGELIST.value), entries=tuple(entries))
    )
