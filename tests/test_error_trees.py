"""Each package's exception tree, drawn in its errors module's docstring, is the tree the code
has: every subclass of the root that the package defines is named in the drawing (so an error
added later is added there too)."""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

import pytest

import rspush.hub.errors
import rspush.remote.errors
import rspush.resourcesync.errors
import rspush.source.errors
import rspush.subscriber.errors


def _import_all(package: str) -> None:
    """Import every module of ``package``, so every exception class it defines exists."""
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
        importlib.import_module(info.name)


def _subclasses(root: type) -> set[type]:
    found: set[type] = set()
    pending = [root]
    while pending:
        for kind in pending.pop().__subclasses__():
            if kind not in found:
                found.add(kind)
                pending.append(kind)
    return found


def missing_from_tree(root: type, packages: tuple[str, ...], drawing: str) -> list[str]:
    """The subclasses of ``root`` defined under ``packages`` whose name ``drawing`` lacks."""
    return sorted(
        f"{kind.__module__}.{kind.__name__}"
        for kind in _subclasses(root)
        if kind.__module__.startswith(packages) and kind.__name__ not in drawing.split()
    )


# (errors module, root, where its subclasses are defined); the agent's root is the remote
# reader's root under another name, so its tree draws both packages' errors.
TREES: list[tuple[ModuleType, type, tuple[str, ...]]] = [
    (rspush.hub.errors, rspush.hub.errors.HubError, ("rspush.hub",)),
    (rspush.remote.errors, rspush.remote.errors.RemoteError, ("rspush.remote",)),
    (
        rspush.subscriber.errors,
        rspush.subscriber.errors.SubscriberError,
        ("rspush.subscriber", "rspush.remote"),
    ),
    (
        rspush.resourcesync.errors,
        rspush.resourcesync.errors.ResourceSyncError,
        ("rspush.resourcesync",),
    ),
    (rspush.source.errors, rspush.source.errors.PublishError, ("rspush.source",)),
]


@pytest.mark.parametrize(
    ("module", "root", "packages"), TREES, ids=lambda v: getattr(v, "__name__", "")
)
def test_the_drawn_tree_names_every_error(
    module: ModuleType, root: type, packages: tuple[str, ...]
) -> None:
    for package in packages:
        _import_all(package)
    drawing = module.__doc__ or ""
    assert "Tree::" in drawing or "::\n\n" in drawing, "the docstring draws the tree"
    assert missing_from_tree(root, packages, drawing) == []


def test_every_other_hub_exception_is_drawn_too() -> None:
    # The hub's exceptions outside HubError (process, bridge, WebSub and push internals) are
    # listed in the same docstring; private ones (a leading underscore) are control flow.
    _import_all("rspush.hub")
    drawing = rspush.hub.errors.__doc__ or ""
    others = _subclasses(Exception) - _subclasses(rspush.hub.errors.HubError)
    missing = sorted(
        f"{kind.__module__}.{kind.__name__}"
        for kind in others
        if kind.__module__.startswith("rspush.hub")
        and not kind.__name__.startswith("_")
        and kind.__name__ not in drawing.split()
    )
    assert missing == []


def test_an_error_left_out_of_the_drawing_is_found() -> None:
    class Planted(rspush.hub.errors.HubError):
        pass

    drawing = rspush.hub.errors.__doc__ or ""
    assert missing_from_tree(rspush.hub.errors.HubError, ("tests",), drawing) == [
        f"{__name__}.Planted"
    ]
    assert missing_from_tree(rspush.hub.errors.HubError, ("tests",), drawing + " Planted") == []
