"""The filesystem applier writes inside the destination only: a symlinked directory leading out
of it is refused, and nothing is created outside."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

import pytest

from rspush.subscriber.appliers import FilesystemApplier
from rspush.subscriber.changes import ChangeType, Channel, ResourceChange
from rspush.subscriber.errors import UnmappedURIError


async def test_symlinked_directory_is_refused_and_nothing_is_created_outside(
    tmp_path: Path,
) -> None:
    """A symlinked directory leading out of the destination is refused; nothing is created
    outside."""
    dest, outside = tmp_path / "mirror", tmp_path / "outside"
    dest.mkdir()
    outside.mkdir()
    (dest / "link").symlink_to(outside, target_is_directory=True)
    applier = FilesystemApplier(dest)

    def change(path: str) -> tuple[ResourceChange, Path]:
        content = tmp_path / f"{path.replace('/', '_')}.part"
        content.write_bytes(b"x")
        uri = f"http://s/{path}"
        return ResourceChange(uri, ChangeType.CREATED, datetime.now(UTC), Channel.PUSH), content

    inside, content = change("sub/deep/er/f")  # the same depth, no symlink: written
    await applier.apply(inside, PurePosixPath("sub/deep/er/f"), content)
    assert (dest / "sub/deep/er/f").read_bytes() == b"x"

    escaping, content = change("link/deep/er/f")
    with pytest.raises(UnmappedURIError, match="outside"):
        await applier.apply(escaping, PurePosixPath("link/deep/er/f"), content)
    assert list(outside.iterdir()) == []
