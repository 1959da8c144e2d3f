"""The package layering of rspush/__init__.py, checked on every module's imports (parsed
with ``ast``, nothing is imported):

- ``rspush.resourcesync`` imports no other rspush package;
- ``rspush.protocol`` imports only the standard library (none of its I/O modules), pydantic
  and ``rspush.resourcesync``: it is sans-I/O, shared by both ends;
- ``rspush.remote`` (reading a remote Source: discovery, documents) imports only
  ``rspush.protocol`` and ``rspush.resourcesync``, never the hub or the subscriber, which
  both may import it;
- ``rspush.hub`` and ``rspush.subscriber`` never import each other;
- ``rspush.source`` (``rs-publish``, base install) imports only ``rspush.remote`` and
  ``rspush.resourcesync``;

and the same split in the tests (each test above also checks it):

- a test module under ``tests/hub/`` never imports ``rspush.subscriber``, one under
  ``tests/subscriber/`` never imports ``rspush.hub``, directly or through the support modules
  it imports; one under ``tests/source/`` imports neither; only ``tests/e2e/`` runs them
  together;
- a test module imports shared support from ``tests.support``, never from another test folder.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable
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
    "remote": {"remote", "protocol", "resourcesync"},
    "hub": {"hub", "remote", "protocol", "resourcesync"},
    "subscriber": {"subscriber", "remote", "protocol", "resourcesync"},
    "source": {"source", "remote", "resourcesync"},
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
    _every_test_folder_with_a_rule_is_checked()


def test_the_packages_respect_the_layering() -> None:
    problems = []
    for module, path in _modules():
        is_package = path.name == "__init__.py"
        name = module.removesuffix(".__init__")
        problems += violations(name, path.read_text(), is_package=is_package)
    assert problems == []
    _the_tests_respect_the_layering()


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
    assert violations("rspush.remote.x", "from rspush.subscriber import errors") != []
    assert violations("rspush.remote.x", "from ..hub import store") != []
    assert violations("rspush.resourcesync.x", "from ..remote import reader") != []
    # …and lets the allowed imports through.
    allowed = "import json\nfrom pydantic import BaseModel\nfrom rspush.resourcesync import Entry"
    assert violations("rspush.protocol.x", allowed) == []
    assert violations("rspush.protocol.x", "from .positions import Position") == []
    assert violations("rspush.hub.x", "from rspush.protocol import Position\nimport redis") == []
    assert violations("rspush.subscriber.x", "from ..protocol import TopicRequest") == []
    assert violations("rspush.source.x", "from rspush.hub import settings") != []
    assert violations("rspush.source.x", "from ..subscriber import mapping") != []
    assert violations("rspush.hub.x", "from rspush.source import publish") != []
    assert violations("rspush.source.x", "from rspush.resourcesync import serialise") == []
    assert violations("rspush.source.x", "from rspush.remote.retry import retry_after_s") == []
    assert violations("rspush.source.x", "from rspush.protocol import Position") != []
    assert violations("rspush.hub.x", "from rspush.remote.discovery import discover") == []
    assert violations("rspush.subscriber.x", "from rspush.remote import reader") == []
    _the_checker_flags_violations_in_tests()


# --- the test folders ------------------------------------------------------------------------
#
# The same rule for the tests: a test of the hub never runs the subscriber, a test of the
# subscriber never runs a hub, and only the end-to-end tests run both. A test module imports
# shared support from tests.support only (never another test folder), and what it reaches
# through tests.support counts as its own import.

TESTS = Path(__file__).resolve().parent
FORBIDDEN_IN_TESTS = {
    "hub": ("rspush.subscriber",),
    "subscriber": ("rspush.hub",),
    "source": ("rspush.hub", "rspush.subscriber"),
}
SHARED_TESTS = "tests.support"


def _test_source(module: str) -> str | None:
    """The source of ``module`` if it is a module of the tests package, else None."""
    parts = module.split(".")
    if parts[0] != "tests":
        return None
    base = TESTS.parent.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate.read_text()
    return None


def _imports_of(module: str, source: str) -> list[tuple[int, str]]:
    """What ``module`` imports, with ``from package import name`` also read as the module
    ``package.name`` (it may be a submodule)."""
    found = imported_names(module, source)
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return found


def violations_in_tests(
    module: str, source: str, read: Callable[[str], str | None] = _test_source
) -> list[str]:
    """What the test module ``module`` imports, itself or through the tests modules it
    imports (``read`` gives their source), against the rule of its folder."""
    folder = module.split(".")[1]
    forbidden = FORBIDDEN_IN_TESTS.get(folder, ())
    problems = []
    seen = {module}
    pending = [(module, source, "")]
    while pending:
        current, text, via = pending.pop()
        for line, name in _imports_of(current, text):
            where = f"{module} imports {name}" + (f" (through {via})" if via else f" (line {line})")
            if any(name == f or name.startswith(f + ".") for f in forbidden):
                problems.append(where)
            if (
                current == module
                and name.startswith("tests.")
                and not name.startswith((SHARED_TESTS, f"tests.{folder}."))
            ):
                problems.append(where)
            if name.startswith("tests.") and name not in seen:
                seen.add(name)
                imported = read(name)
                if imported is not None:
                    pending.append((name, imported, via or name))
    return sorted(set(problems))


def _test_modules() -> list[tuple[str, Path]]:
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        parts = path.relative_to(TESTS.parent).with_suffix("").parts
        if len(parts) > 2 and parts[1] in FORBIDDEN_IN_TESTS:
            found.append((".".join(parts).removesuffix(".__init__"), path))
    return found


def _every_test_folder_with_a_rule_is_checked() -> None:
    folders = {module.split(".")[1] for module, _ in _test_modules()}
    assert folders == set(FORBIDDEN_IN_TESTS)
    assert len(_test_modules()) >= 20


def _the_tests_respect_the_layering() -> None:
    problems = []
    for module, path in _test_modules():
        problems += violations_in_tests(module, path.read_text())
    assert problems == []


def _the_checker_flags_violations_in_tests() -> None:
    # Direct imports of the other side, and of another test folder.
    assert (
        violations_in_tests("tests.hub.test_x", "from rspush.subscriber.push import Change") != []
    )
    assert violations_in_tests("tests.hub.test_x", "import rspush.subscriber") != []
    assert (
        violations_in_tests("tests.subscriber.test_x", "from rspush.hub.server import bind") != []
    )
    assert violations_in_tests("tests.subscriber.test_x", "from tests.hub import conftest") != []
    assert violations_in_tests("tests.source.test_x", "import rspush.hub.store") != []
    assert violations_in_tests("tests.source.test_x", "from tests.support.agents import x") != []
    assert violations_in_tests("tests.source.test_x", "from rspush.source import tree") == []
    assert violations_in_tests("tests.hub.test_x", "from tests.e2e.test_agent import x") != []
    # Indirect imports, through a support module: real ones, and one given here.
    assert violations_in_tests("tests.hub.test_x", "from tests.support.agents import x") != []
    assert violations_in_tests("tests.subscriber.test_x", "from tests.support.hubs import x") != []
    assert violations_in_tests("tests.subscriber.test_x", "from tests.support import hubs") != []
    fake = {
        "tests.support.fake": "from tests.support.deeper import y",
        "tests.support.deeper": "import rspush.hub",
    }
    assert (
        violations_in_tests("tests.subscriber.test_x", "import tests.support.fake", fake.get) != []
    )
    # …and lets the allowed imports through.
    assert (
        violations_in_tests("tests.subscriber.test_x", "from tests.support.origin import x") == []
    )
    assert (
        violations_in_tests("tests.subscriber.test_x", "from tests.support.agents import x") == []
    )
    assert violations_in_tests("tests.hub.test_x", "from tests.support.hubs import x") == []
    assert violations_in_tests("tests.hub.test_x", "from tests.support.push import x") == []
    both = "from rspush.hub.server import bind\nfrom rspush.subscriber.push import Change"
    assert (
        violations_in_tests("tests.e2e.test_x", both + "\nfrom tests.support.agents import x") == []
    )
