"""Ctrl-C during a large baseline: ``rs-subscribe run`` ends within about a second, and only
the transfers already running may finish — the queued ones are dropped, not fetched."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.support.cli import applied, running, status_of
from tests.support.static_source import (
    T0,
    capability_list,
    running_source,
    serve_resource_list,
)
from tests.support.waiting import TIMEOUT_SCALE

RESOURCES = 3000
STARTED = 50
"""Resources fetched before the interrupt: the baseline is well under way."""


def fetched(requests: dict[str, int]) -> int:
    return sum(n for path, n in requests.items() if path.startswith("/r/"))


@pytest.mark.timeout(120)
async def test_ctrl_c_during_a_baseline_stops_within_a_second_fetching_nothing_queued(
    tmp_path: Path,
) -> None:
    resources = {f"/r/{n:05d}.txt": f"resource {n}".encode() for n in range(RESOURCES)}
    dest = tmp_path / "mirror"
    async with running_source() as source:
        capability_list(source, {"resourcelist": "/resourcelist.xml"})
        serve_resource_list(source, resources, at=T0, lastmod=T0)
        args = [
            source.uri("/capabilitylist.xml"),
            "--dest",
            str(dest),
            "--map",
            f"{source.url}/=",
            "--concurrency",
            "1",
        ]
        async with running(tmp_path, *args) as agent:
            await agent.until(lambda: fetched(source.requests) >= STARTED, "the baseline under way")
            at_signal = fetched(source.requests)
            started = time.monotonic()
            code = await agent.stop(signal.SIGINT, timeout=10)
            elapsed = time.monotonic() - started
            after = fetched(source.requests) - at_signal
    assert code == 0, agent.log
    assert elapsed < 1.5 * TIMEOUT_SCALE, f"{elapsed:.2f} s to stop:\n{agent.log}"
    # At the signal at most one transfer (--concurrency 1) was running, and one more may have
    # been starting as the signal arrived; nothing queued behind them was fetched.
    assert after <= 2, f"{after} resources fetched after the interrupt"
    assert at_signal + after < RESOURCES
    # The checkpoint is consistent: the baseline is not complete, and what was applied is
    # recorded, so the next run goes on from there.
    row = await status_of(dest / ".rs-subscribe" / "state.sqlite")
    assert row["baseline_at"] is None
    assert row["resources"] == len(applied(agent.events, "baseline")) >= STARTED
