"""The document layer stays I/O-free: only the command-line edge (rs-validate's ``cli.py``
and ``console.py``, the manner all four commands share) may touch the network, processes,
event loops or the terminal."""

from __future__ import annotations

import ast
from pathlib import Path

import rspush.resourcesync as resourcesync

PACKAGE = Path(resourcesync.__file__).parent
EDGE = {"cli.py", "console.py"}
FORBIDDEN_MODULES = {
    "asyncio",
    "httpx",
    "redis",
    "requests",
    "socket",
    "subprocess",
    "urllib.request",
    "websockets",
    "threading",
    "time",
}
FORBIDDEN_CALLS = {"open", "print", "input"}


def _violations(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            names = []
        found += [
            f"{path.name}:{node.lineno} imports {n}"
            for n in names
            if n in FORBIDDEN_MODULES or n.split(".")[0] in FORBIDDEN_MODULES
        ]
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in FORBIDDEN_CALLS
        ):
            found.append(f"{path.name}:{node.lineno} calls {node.func.id}()")
    return found


def test_document_modules_do_no_io() -> None:
    modules = [p for p in PACKAGE.glob("*.py") if p.name not in EDGE]
    assert len(modules) >= 10
    problems = [v for module in modules for v in _violations(module)]
    assert problems == []


def test_the_checker_sees_io() -> None:
    # The CLI does I/O, so the same check must flag it: the test above is not vacuous.
    assert any("httpx" in v for v in _violations(PACKAGE / "cli.py"))
