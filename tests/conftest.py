"""Shared test configuration.

``RSPUSH_TIMEOUT_SCALE`` multiplies condition-wait timeouts on slow machines.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

TIMEOUT_SCALE = float(os.environ.get("RSPUSH_TIMEOUT_SCALE", "1"))

REPO = Path(__file__).resolve().parent.parent


def _find_spec() -> Path:
    """The spec folder: ../shared/spec beside the clone (as in CI), or RSPUSH_SPEC_DIR."""
    configured = os.environ.get("RSPUSH_SPEC_DIR")
    candidates = [Path(configured)] if configured else []
    candidates += [REPO.parent / "shared" / "spec", REPO / "spec"]
    for candidate in candidates:
        if (candidate / "examples").is_dir():
            return candidate
    raise RuntimeError(
        "spec examples not found: set RSPUSH_SPEC_DIR to the folder holding examples/"
    )


@pytest.fixture(scope="session")
def spec_dir() -> Path:
    return _find_spec()
