"""The ``rs-subscribe`` console script of this environment, run as an operator runs it: a
command that exits by itself (:func:`rs_subscribe`: exit status, stdout, stderr), or
``rs-subscribe run`` in the background (:func:`running`) with its log and ``--events`` file."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.waiting import TIMEOUT_SCALE, eventually

RS_SUBSCRIBE = Path(sys.executable).parent / "rs-subscribe"


COMMAND_TIMEOUT_S = 30
"""A command that should finish by itself (baseline, audit, status) does so within this."""


RS_PUBLISH = Path(sys.executable).parent / "rs-publish"


async def run_script(
    script: Path,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = COMMAND_TIMEOUT_S,
) -> tuple[int, str, str]:
    """Run a console script that exits by itself: (exit status, stdout, stderr)."""
    process = await asyncio.create_subprocess_exec(
        script,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    try:
        async with asyncio.timeout(timeout * TIMEOUT_SCALE):
            out, err = await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def rs_subscribe(*args: str, timeout: float = COMMAND_TIMEOUT_S) -> tuple[int, str, str]:
    """Run an ``rs-subscribe`` command that exits by itself."""
    return await run_script(RS_SUBSCRIBE, *args, timeout=timeout)


WAIT_S = 20
"""Waiting for a running agent to reach a state (subscribed, applied, converged)."""
SUBSCRIBED = "push: subscribed to"


async def status_of(state: Path) -> dict[str, Any]:
    """``rs-subscribe status --json`` of a state file holding one (Source, topic)."""
    code, out, err = await rs_subscribe("status", "--state", str(state), "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert len(rows) == 1, rows
    row: dict[str, Any] = rows[0]
    return row


def read_events(path: Path) -> list[dict[str, Any]]:
    """The complete lines of an ``--events`` file (a line cut short by SIGKILL is left out)."""
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]


def applied(events: Iterable[dict[str, Any]], channel: str | None = None) -> list[dict[str, Any]]:
    return [
        e
        for e in events
        if e.get("event") == "applied" and (channel is None or e.get("channel") == channel)
    ]


def position(value: str) -> tuple[int, int]:
    """A hub stream position (``1700000000000-3``) as a comparable pair."""
    millis, _, seq = value.partition("-")
    return int(millis), int(seq)


class RunningAgent:
    """An ``rs-subscribe run`` subprocess; its output goes to files in ``workdir``."""

    def __init__(self, process: asyncio.subprocess.Process, log: Path, events: Path) -> None:
        self.process = process
        self.log_path = log
        self.events_path = events

    @property
    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    @property
    def events(self) -> list[dict[str, Any]]:
        return read_events(self.events_path)

    async def until(
        self, predicate: Callable[[], bool], what: str, timeout: float = WAIT_S
    ) -> None:
        """Wait until ``predicate()``; fail at once (with the agent's log) if it exits."""

        def done() -> bool:
            if self.process.returncode is not None:
                pytest.fail(
                    f"rs-subscribe exited {self.process.returncode} while waiting for {what}:\n"
                    + self.log
                )
            return predicate()

        try:
            await eventually(done, what, timeout)
        except AssertionError as timed_out:
            pytest.fail(f"{timed_out}; agent log:\n{self.log}")

    async def subscribed(self, times: int = 1) -> None:
        await self.until(lambda: self.log.count(SUBSCRIBED) >= times, "the push subscription")

    async def stop(self, signum: int = signal.SIGTERM, timeout: float = WAIT_S) -> int:
        """Send ``signum``; return the exit status."""
        self.process.send_signal(signum)
        async with asyncio.timeout(timeout * TIMEOUT_SCALE):
            return await self.process.wait()


@asynccontextmanager
async def running(workdir: Path, *args: str, name: str = "agent") -> AsyncIterator[RunningAgent]:
    """``rs-subscribe run ARGS --events WORKDIR/NAME.events.jsonl`` until the block ends; then it
    is killed if it still runs."""
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / f"{name}.log"
    events = workdir / f"{name}.events.jsonl"
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            RS_SUBSCRIBE,
            "run",
            *args,
            "--events",
            str(events),
            stdout=out,
            stderr=out,
            stdin=asyncio.subprocess.DEVNULL,
        )
    try:
        yield RunningAgent(process, log, events)
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()
