"""Log lines and event lines: where they go and how they look."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from rich.console import Console
from rich.logging import RichHandler

from .progress import LogReporter, Reporter, RichReporter


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "message": record.getMessage(),
        }
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data)


def setup_logging(*, json_logs: bool, debug: bool) -> Reporter:
    """Log to stderr; return the progress reporter that fits (rich bars on a terminal)."""
    handler: logging.Handler
    reporter: Reporter = LogReporter()
    if json_logs:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(_JsonFormatter())
    elif sys.stderr.isatty():
        # One console for log lines and progress bars: lines print above the live bars.
        console = Console(stderr=True)
        handler = RichHandler(console=console, show_path=False, rich_tracebacks=debug)
        reporter = RichReporter(console)
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(
            logging.Formatter("%(asctime)s rs-subscribe %(levelname)s %(message)s", "%H:%M:%S")
        )
    logger = logging.getLogger("rs_subscribe")
    logger.handlers[:] = [handler]
    logger.setLevel(logging.DEBUG if debug else logging.INFO)
    logger.propagate = False
    return reporter


class EventWriter:
    """``--events FILE|-``: one JSON object per line, flushed at once (for ``tail -f`` and
    pipes)."""

    def __init__(self, target: str) -> None:
        self._owned = target != "-"
        self._out: IO[str] = (
            sys.stdout if target == "-" else Path(target).open("a", encoding="utf-8")  # noqa: SIM115 - closed by close()
        )

    def __call__(self, event: dict[str, Any]) -> None:
        self._out.write(json.dumps(event, separators=(",", ":")) + "\n")
        self._out.flush()

    def close(self) -> None:
        if self._owned:
            self._out.close()
