"""``--map`` targets as the destination-relative folders the URI map takes (pure)."""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest

from rspush.subscriber.mapping import map_target

DEST = PurePosixPath("/srv/mirror")


@pytest.mark.parametrize(
    ("given", "relative"),
    [
        ("", ""),
        ("docs", "docs"),
        ("/srv/mirror", ""),
        ("/srv/mirror/", ""),
        ("/srv/mirror/docs", "docs"),
        ("/srv/mirror/a/../docs", "docs"),
        ("/srv/mirror/./docs/", "docs"),
    ],
)
def test_targets_inside_the_destination(given: str, relative: str) -> None:
    assert map_target(given, DEST) == relative


@pytest.mark.parametrize("given", ["/srv", "/srv/mirror-2", "/srv/mirror/../x", "/"])
def test_absolute_targets_outside_are_refused(given: str) -> None:
    with pytest.raises(ValueError, match="outside the destination"):
        map_target(given, DEST)
