"""The files of a watched tree: which names are skipped, and what is there now.

A path is the tree-relative POSIX path (``a/b c.txt``). A name is skipped when any of its
segments matches a skip pattern (``fnmatch``, case-sensitive): ``.*`` leaves out hidden files
and everything under a hidden folder (``.git/``). Symbolic links are never followed, neither
to files nor to folders: a link may lead out of the tree, and changes to its target are not
events of the link. Names no Destination could write back are skipped too: names that are
not valid UTF-8 (a URI of them would not name the same file at the mirror) and names with a
backslash (a path separator elsewhere, which rs-subscribe refuses).
"""

from __future__ import annotations

import fnmatch
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

DEFAULT_SKIPS = (".*", "*~", "*.tmp", "*.swp", "*.part", "#*#")
"""Hidden files and folders, editor backups and swap files, downloads and writes in progress."""


@dataclass(frozen=True, slots=True)
class Skips:
    """Glob patterns; a path is skipped when one matches any of its segments."""

    patterns: tuple[str, ...] = DEFAULT_SKIPS

    def skipped(self, relative: str) -> bool:
        return any(
            fnmatch.fnmatchcase(segment, pattern)
            for segment in relative.split("/")
            for pattern in self.patterns
        ) or not _portable(relative)


def _portable(name: str) -> bool:
    if "\\" in name:
        return False
    try:
        name.encode()
    except UnicodeEncodeError:  # surrogate escapes: bytes that are not UTF-8
        return False
    return True


@dataclass(frozen=True, slots=True)
class Stat:
    """What tells a file changed without reading it."""

    size: int
    mtime_ns: int
    ino: int

    @classmethod
    def of(cls, result: os.stat_result) -> Stat:
        return cls(result.st_size, result.st_mtime_ns, result.st_ino)


def regular_stat(path: Path) -> Stat | None:
    """The :class:`Stat` of ``path`` if it is a regular file (not a link), else None."""
    try:
        result = os.lstat(path)
    except OSError:
        return None
    return Stat.of(result) if stat.S_ISREG(result.st_mode) else None


def relative(root: Path, path: Path) -> str | None:
    """``path`` relative to ``root`` as a POSIX string; None outside the tree or the root."""
    try:
        rel = path.relative_to(root).as_posix()
    except ValueError:
        return None
    return None if rel in ("", ".") else rel


def scan(
    root: Path, skips: Skips, under: str = "", exclude: Iterable[Path] = ()
) -> dict[str, Stat]:
    """Every regular, non-skipped file of the tree (or of its folder ``under``), by path."""
    excluded = {os.path.abspath(p) for p in exclude}
    found: dict[str, Stat] = {}
    start = root / under if under else root
    for folder, dirs, files in os.walk(start, followlinks=False):
        here = Path(folder)
        # Pruned in place: os.walk does not descend into skipped or excluded folders.
        dirs[:] = [
            d for d in dirs if not skips.skipped(d) and os.path.abspath(here / d) not in excluded
        ]
        for name in files:
            path = here / name
            rel = relative(root, path)
            if rel is None or skips.skipped(rel) or os.path.abspath(path) in excluded:
                continue
            facts = regular_stat(path)
            if facts is not None:
                found[rel] = facts
    return found
