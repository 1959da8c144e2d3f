"""The package layering of rspush/__init__.py, checked on every module's imports (parsed
with ``ast``, nothing is imported):

- ``rspush.resourcesync`` imports no other rspush package;
- ``rspush.protocol`` imports only the standard library (none of its I/O modules), pydantic
  and ``rspush.resourcesync``: it is sans-I/O, shared by both ends;
- ``rspush.hub`` and ``rspush.subscriber`` never import each other.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import rspush

ROOT = Path(rspush.__file__).parent
IO_MODULES = frozenset(
    {
        "asyncio",
        "http",
        "httpx",
        "redis",
        "requests",
        "select",
        "selectors",
        "socket",
        "socketserver",
        "ssl",
        "subprocess",
        "threading",
        "time",
        "urllib",
        "websockets",
    }
)
PROTOCOL_THIRD_PARTY = frozenset({"pydantic", "pydantic_core", "typing_extensions"})
ALLOWED_RSPUSH = {
    "resourcesync": {"resourcesync"},
    "protocol": {"protocol", "resourcesync"},
    "hub": {"hub", "protocol", "resourcesync"},
    "subscriber": {"subscriber", "protocol", "resourcesync"},
}


def imported_names(module: str, source: str, *, is_package: bool = False) -> list[tuple[int, str]]:
    """Every module ``module`` imports, as absolute names, with its line (relative imports
    resolved against ``module``'s package)."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                base = node.module or ""
            else:
                parts = package[: len(package) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            found.append((node.lineno, base))
            # ``from . import x`` may import a submodule x.
            if node.module is None:
                found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def violations(module: str, source: str, *, is_package: bool = False) -> list[str]:
    """What ``module`` imports against the layering."""
    layer = module.split(".")[1]
    problems = []
    for line, name in imported_names(module, source, is_package=is_package):
        top = name.split(".")[0]
        where = f"{module}:{line} imports {name}"
        if top == "rspush":
            parts = name.split(".")
            if len(parts) > 1 and parts[1] not in ALLOWED_RSPUSH[layer]:
                problems.append(where)
        elif layer == "protocol" and (
            top in IO_MODULES
            or (top not in sys.stdlib_module_names and top not in PROTOCOL_THIRD_PARTY)
        ):
            problems.append(where)
    return problems


def _modules() -> list[tuple[str, Path]]:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        if len(parts) > 2 and parts[1] in ALLOWED_RSPUSH:
            found.append((".".join(parts), path))
    return found


def test_every_layer_is_checked() -> None:
    layers = {module.split(".")[1] for module, _ in _modules()}
    assert layers == set(ALLOWED_RSPUSH)
    assert len(_modules()) >= 40


def test_the_packages_respect_the_layering() -> None:
    problems = []
    for module, path in _modules():
        is_package = path.name == "__init__.py"
        name = module.removesuffix(".__init__")
        problems += violations(name, path.read_text(), is_package=is_package)
    assert problems == []


def test_the_checker_flags_violations() -> None:
    # The same check must see each kind of breach: the test above is not vacuous.
    assert violations("rspush.resourcesync.x", "from rspush.protocol import Position") != []
    assert violations("rspush.resourcesync.x", "from ..hub import store") != []
    assert violations("rspush.protocol.x", "import asyncio") != []
    assert violations("rspush.protocol.x", "from time import monotonic") != []
    assert violations("rspush.protocol.x", "import websockets.client") != []
    assert violations("rspush.protocol.x", "from redis.asyncio import Redis") != []
    assert violations("rspush.protocol.x", "import lxml") != []  # not the protocol's to use
    assert violations("rspush.protocol.x", "from ..subscriber import push") != []
    assert violations("rspush.protocol", "from ..hub import x", is_package=True) != []
    assert violations("rspush.hub.push.x", "from ...subscriber.push import Change") != []
    assert violations("rspush.hub.x", "from rspush.subscriber import agent") != []
    assert violations("rspush.subscriber.x", "import rspush.hub.store") != []
    assert violations("rspush.subscriber.x", "from ..hub.push import server") != []
    # …and lets the allowed imports through.
    allowed = "import json\nfrom pydantic import BaseModel\nfrom rspush.resourcesync import Entry"
    assert violations("rspush.protocol.x", allowed) == []
    assert violations("rspush.protocol.x", "from .positions import Position") == []
    assert violations("rspush.hub.x", "from rspush.protocol import Position\nimport redis") == []
    assert violations("rspush.subscriber.x", "from ..protocol import TopicRequest") == []
