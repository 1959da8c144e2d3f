"""Logging, percentiles, and what a benchmark's results record: the command line, the
checkout measured, JSON output."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .system import ROOT


def log(message: str, *values: Any) -> None:
    """A timestamped progress line on stderr (stdout carries the report)."""
    print(f"[{time.strftime('%H:%M:%S')}] " + message % values, file=sys.stderr, flush=True)


def percentile(ordered: Sequence[float] | array[float], q: float) -> float:
    """The ``q`` quantile (0..1) of sorted values, nearest rank; NaN for none."""
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def quantiles(
    ordered: Sequence[float] | array[float], points: Sequence[float] = (0.5, 0.9, 0.99)
) -> dict[str, float]:
    """``{"p50": …, "p90": …, "p99": …, "max": …}`` of sorted values (``points`` as
    fractions; 0.999 is named ``p99.9``)."""
    summary = {f"p{round(q * 100, 3):g}": percentile(ordered, q) for q in points}
    summary["max"] = ordered[-1] if ordered else float("nan")
    return summary


def command_line(module: str) -> str:
    """How this run was started, as a reader would type it from the repository root."""
    return shlex.join([".venv/bin/python", "-m", module, *sys.argv[1:]])


def git_state() -> str:
    """The checkout measured: commit, and whether files differ from it."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return "unknown"
    return commit + (" (modified)" if dirty else "")


def write_json(target: str | Path, results: Any) -> None:
    """The results as indented JSON in ``target`` (``-``: stdout); values JSON does not know
    (datetimes, paths) are written as text."""
    text = json.dumps(results, indent=2, default=str) + "\n"
    if str(target) == "-":
        sys.stdout.write(text)
    else:
        Path(target).write_text(text, encoding="utf-8")


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain-text table: the first column left-aligned, the others right-aligned, each as
    wide as its widest cell."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        first, *rest = (str(c) for c in cells)
        return "  ".join(
            [first.ljust(widths[0]), *(c.rjust(w) for c, w in zip(rest, widths[1:], strict=True))]
        )

    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def median(values: Sequence[float]) -> float:
    """The median of the values that are numbers (NaN for none)."""
    numbers = sorted(v for v in values if isinstance(v, int | float) and v == v)
    if not numbers:
        return float("nan")
    middle = len(numbers) // 2
    return numbers[middle] if len(numbers) % 2 else (numbers[middle - 1] + numbers[middle]) / 2
