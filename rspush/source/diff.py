"""What changed in a tree since it was last published: pure decisions, no file system.

The state is what the hub acknowledged, path → :class:`Published`. A file whose size or
mtime differs from its published state, a file not published yet and a published file that
is gone are *looked at*; a looked-at file's new content is compared by hash, so a file
touched but not changed (same bytes) is no change — only its stat is refreshed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rspush.resourcesync.models import Change

from .fragment import FileFacts
from .tree import Stat


@dataclass(frozen=True, slots=True)
class Published:
    """A file as the hub last acknowledged it (Z39.99 §7: ``length``, ``hash``)."""

    size: int
    mtime_ns: int
    md5: str
    sha256: str


def to_look_at(scanned: Mapping[str, Stat], state: Mapping[str, Published]) -> list[str]:
    """The paths whose file is new, gone, or not the size and mtime it was published with,
    sorted."""
    looked = {
        path
        for path, now in scanned.items()
        if (was := state.get(path)) is None or (was.size, was.mtime_ns) != (now.size, now.mtime_ns)
    }
    looked.update(path for path in state if path not in scanned)
    return sorted(looked)


def decide(facts: FileFacts | None, published: Published | None) -> Change | None:
    """The change to publish for a file now holding ``facts`` (None: gone) that was last
    published as ``published`` (None: never); None when there is nothing to tell."""
    if facts is None:
        return Change.DELETED if published is not None else None
    if published is None:
        return Change.CREATED
    if (published.sha256, published.size) != (facts.sha256, facts.length):
        return Change.UPDATED
    return None
