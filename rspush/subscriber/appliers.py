"""Where verified changes go: the file system (default), a command, or nowhere.

An :class:`Applier` gets each change that passed filtering, ordering and verification, with
the verified bytes in a temp file for created/updated. It must be idempotent: after a crash a
change may be handed over again.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path, PurePosixPath
from typing import Protocol

from .changes import ChangeType, ResourceChange
from .errors import ApplyError, UnmappedURIError

__all__ = ["Applier", "ApplyError", "ExecApplier", "FilesystemApplier", "NullApplier"]


class Applier(Protocol):
    async def apply(
        self, change: ResourceChange, relative: PurePosixPath, content: Path | None
    ) -> None:
        """Make the Destination reflect ``change``. ``relative`` is the mapped path;
        ``content`` the verified bytes (None for deletions)."""
        ...


def current_umask() -> int:
    """The process's umask. ``os.umask`` can only be read by setting it, process-wide: set
    back at once, and read once, when an applier starts (not per file, from threads)."""
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


class FilesystemApplier:
    """Atomic writes: the verified temp file is renamed over the target (same file system:
    temp files live in ``<dest>/.rs-subscribe/tmp``), so a reader sees the old file or the
    new one, never half of one.

    Files and folders get the modes any program's would (``0666``/``0777`` less the umask):
    temp files are created private (``0600``), so each is given its final mode before the
    rename makes it visible."""

    def __init__(self, dest: Path, *, keep_deleted: bool = False) -> None:
        self.dest = dest
        self.root = dest.resolve()
        self.keep_deleted = keep_deleted
        umask = current_umask()
        self.file_mode = 0o666 & ~umask
        self.dir_mode = 0o777 & ~umask

    def target(self, change_uri: str, relative: PurePosixPath) -> Path:
        """The real path, refusing one that escapes the destination through a symlink."""
        path = self.dest.joinpath(*relative.parts)
        parent = path.parent.resolve()
        if not parent.is_relative_to(self.root) or (
            path.is_symlink() and not path.resolve().is_relative_to(self.root)
        ):
            raise UnmappedURIError(change_uri, f"{relative} leads outside {self.dest}")
        return path

    async def apply(
        self, change: ResourceChange, relative: PurePosixPath, content: Path | None
    ) -> None:
        path = self.dest.joinpath(*relative.parts)
        if change.change == ChangeType.DELETED:
            if not self.keep_deleted:
                self.target(change.uri, relative)
                path.unlink(missing_ok=True)
            return
        assert content is not None
        # Check before creating anything: mkdir(parents=True) through a symlinked directory
        # would make directories outside the destination even if the write is then refused.
        existing = path.parent
        while not existing.exists() and existing != self.dest:
            existing = existing.parent
        if not existing.resolve().is_relative_to(self.root):
            raise UnmappedURIError(change.uri, f"{relative} leads outside {self.dest}")
        path.parent.mkdir(mode=self.dir_mode, parents=True, exist_ok=True)
        target = self.target(change.uri, relative)
        if target.is_dir():
            raise ApplyError(f"{change.uri}: {target} is a directory")
        os.chmod(content, self.file_mode)
        os.replace(content, target)


class ExecApplier:
    """``--exec CMD``: the command gets the change as one JSON object on stdin (with
    ``content_file`` naming the verified bytes, deleted after it exits) and must exit 0."""

    def __init__(self, command: str, *, timeout: float = 300) -> None:
        self.command = command
        self.timeout = timeout

    async def apply(
        self, change: ResourceChange, relative: PurePosixPath, content: Path | None
    ) -> None:
        message = change.as_json() | {
            "path": str(relative),
            "content_file": None if content is None else str(content),
        }
        process = await asyncio.create_subprocess_shell(
            self.command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            async with asyncio.timeout(self.timeout):
                _, err = await process.communicate(json.dumps(message).encode() + b"\n")
        except TimeoutError:
            process.kill()
            await process.wait()
            raise ApplyError(
                f"--exec timed out after {self.timeout:.0f} s on {change.uri}"
            ) from None
        finally:
            if content is not None:
                content.unlink(missing_ok=True)
        if process.returncode != 0:
            tail = err.decode(errors="replace").strip().splitlines()[-1:] or [""]
            raise ApplyError(
                f"--exec exited {process.returncode} on {change.uri}: {tail[0]}".rstrip(": ")
            )


class NullApplier:
    """Records changes in the checkpoint only (metadata-only sync; used by the benchmark)."""

    async def apply(
        self, change: ResourceChange, relative: PurePosixPath, content: Path | None
    ) -> None:
        if content is not None:
            content.unlink(missing_ok=True)
