"""The peer benchmark stays runnable: ``bench.bench_peers`` in its tiniest mode, rspush only
(a real hub, the Node clients and publisher), produces well-formed results. Skipped where the
bench's own Node packages are not installed (``bench/peers/setup``)."""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.support.cli import run_script

REPO = Path(__file__).resolve().parent.parent
NODE_PACKAGES = REPO / "bench" / "peers" / "node" / "node_modules"

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not NODE_PACKAGES.is_dir(),
    reason="the peer bench's Node packages are not installed (bench/peers/setup)",
)

TINY = [
    *("--systems", "rspush", "--quick", "--runs", "1", "--client-procs", "1"),
    *("--subscribers", "3", "--per-message", "1,10", "--changes", "100", "--messages", "10"),
    *("--idle", "10", "--latency-subscribers", "3", "--latency-seconds", "0.5", "--rate", "200"),
    *("--phase-timeout", "20"),
]


async def test_the_peer_bench_measures_rspush_in_its_tiniest_mode(tmp_path: Path) -> None:
    out = tmp_path / "peers.json"
    env = os.environ | {"PYTHONPATH": str(REPO)}
    status, stdout, stderr = await run_script(
        Path(sys.executable),
        "-m",
        "bench.bench_peers",
        *TINY,
        "--json",
        str(out),
        env=env,
        timeout=60,
    )
    assert status == 0, stderr[-2000:]
    results = json.loads(out.read_text())
    (run,) = results["runs"]["rspush"]
    assert "error" not in run, run
    fanout = {(r["subscribers"], r["changes_per_message"]): r for r in run["fanout"]}
    assert set(fanout) == {(3, 1), (3, 10)}
    for row in fanout.values():
        # Every subscriber got every change: the figure counts what was delivered.
        assert row["complete_clients"] == 3
        assert row["delivered_changes"] == 3 * row["messages"] * row["changes_per_message"]
        assert row["deliveries_per_s"] > 0
    latency = run["latency"]
    assert latency["samples"] == latency["expected_samples"] > 0
    assert 0 <= latency["accept_to_receive_ms"]["p50"] <= latency["accept_to_receive_ms"]["p99"]
    calls = latency["publish_call_back_to_back_ms"]
    assert 0 < calls["p50"] <= calls["max"], calls
    # The hub's own share, read from its histograms of the latency topic.
    for share in ("hub_lag_ms", "hub_write_ms"):
        assert 0 <= latency[share]["p50"] <= latency[share]["p99"] < 1000, latency[share]
    assert latency["publish_call_ms"]["p50"] > 0
    assert run["memory"]["subscribers"] == 10
    medians = results["summary"]["median"]["rspush"]
    assert all(math.isfinite(medians[k]) for k in ("deliveries_n3_x1", "accept_p50", "idle_kb"))
    assert "deliveries/s, N=3, 10/msg" in stdout
    assert results["environment"]["command"].startswith(".venv/bin/python -m bench.bench_peers")
