"""Where the repository and the spec's examples are."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def find_spec() -> Path:
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
    return find_spec()
