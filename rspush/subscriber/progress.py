"""Progress of long phases (baseline, catch-up, audit): rich bars on a terminal, a plain log
line every few seconds otherwise (and always with ``--json-logs``)."""

from __future__ import annotations

import logging
import time
from typing import Protocol

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

log = logging.getLogger("rs_subscribe")


class Phase(Protocol):
    def advance(self, count: int = 1) -> None: ...
    def close(self) -> None: ...


class Reporter(Protocol):
    def phase(self, name: str, total: int | None) -> Phase: ...


class LogPhase:
    EVERY_S = 5.0

    def __init__(self, name: str, total: int | None) -> None:
        self.name, self.total, self.done = name, total, 0
        self.started = self.last = time.monotonic()

    def advance(self, count: int = 1) -> None:
        self.done += count
        now = time.monotonic()
        if now - self.last >= self.EVERY_S:
            self.last = now
            of = f"/{self.total}" if self.total is not None else ""
            log.info("%s: %d%s", self.name, self.done, of)

    def close(self) -> None:
        elapsed = time.monotonic() - self.started
        log.info("%s: %d done in %.1f s", self.name, self.done, elapsed)


class LogReporter:
    def phase(self, name: str, total: int | None) -> Phase:
        return LogPhase(name, total)


class RichPhase:
    def __init__(self, progress: Progress, task: TaskID, name: str) -> None:
        self.progress, self.task, self.name = progress, task, name
        self.done = 0
        self.started = time.monotonic()

    def advance(self, count: int = 1) -> None:
        self.done += count
        self.progress.advance(self.task, count)

    def close(self) -> None:
        self.progress.stop()
        log.info("%s: %d done in %.1f s", self.name, self.done, time.monotonic() - self.started)


class RichReporter:
    def __init__(self, console: Console) -> None:
        self.console = console

    def phase(self, name: str, total: int | None) -> Phase:
        progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
        )
        progress.start()
        return RichPhase(progress, progress.add_task(name, total=total), name)
