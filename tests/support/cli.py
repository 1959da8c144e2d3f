"""The ``rs-subscribe`` console script of this environment, run as an operator runs it: a
subprocess that exits by itself, with its exit status, stdout and stderr."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from tests.support.waiting import TIMEOUT_SCALE

RS_SUBSCRIBE = Path(sys.executable).parent / "rs-subscribe"


COMMAND_TIMEOUT_S = 30
"""A command that should finish by itself (baseline, audit, status) does so within this."""


async def rs_subscribe(*args: str, timeout: float = COMMAND_TIMEOUT_S) -> tuple[int, str, str]:
    """Run a command that exits by itself: (exit status, stdout, stderr)."""
    process = await asyncio.create_subprocess_exec(
        RS_SUBSCRIBE,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
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
