"""``rs-hub serve --workers 2``: real processes — a parent holding the ports and the embedded
server, an HTTP worker and a push worker. Posts and subscriptions work across them, the
metrics add up the workers, a killed worker is restarted in its role, and SIGTERM, Ctrl-C
(SIGINT to the whole process group) and SIGKILL of the parent leave no process behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from rspush.hub.workers import RestartBudget, worker_roles
from tests.support.fragments import Times, change_fragment
from tests.support.processes import (
    SOURCE_TOKEN,
    HubProcess,
    alive,
    children_of,
    clean_env,
    kill_all,
    rs_hub,
    valkey_pids,
    wait_until,
    write_config,
)
from tests.support.push import subscribed
from tests.support.waiting import eventually

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
]
STARTED = re.compile(r"worker (\d) \((http|push)\) started: pid (\d+)")
AUTH = {"Authorization": f"Bearer {SOURCE_TOKEN}", "Content-Type": "application/xml"}


def test_roles_split_the_processes() -> None:
    assert worker_roles(1, push=True) == ["both"]
    assert worker_roles(2, push=True) == ["http", "push"]
    assert worker_roles(3, push=True) == ["http", "http", "push"]
    assert worker_roles(4, push=True) == ["http", "http", "push", "push"]
    assert worker_roles(2, push=False) == ["http", "http"]


def test_restarts_are_bounded_per_window() -> None:
    budget = RestartBudget(limit=2, window_s=10)
    assert budget.allow(0) and budget.allow(1)
    assert not budget.allow(2)
    assert budget.allow(11.5)  # the first two left the window


def workers_of(hub: HubProcess) -> dict[int, tuple[str, int]]:
    """Worker index -> (role, pid), the latest start of each, from the log."""
    return {int(i): (role, int(pid)) for i, role, pid in STARTED.findall(hub.log)}


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[HubProcess]:
    config = write_config(tmp_path / "hub.toml")
    data = tmp_path / "data"
    process = HubProcess(
        tmp_path / "hub.log", "--config", config, "--data-dir", data, "--workers", "2"
    )
    process.start()
    yield process
    pids = {pid for _, pid in workers_of(process).values()}
    process.kill()
    kill_all({p for p in pids if alive(p)} | valkey_pids(data))


def post(url: str, times: Times, name: str, count: int) -> dict[str, object]:
    body = change_fragment(
        *[(f"http://example.com/{name}/{i}", "created", times.next()) for i in range(count)]
    )
    reply = httpx.post(f"{url}/topics/dataset1/changes", content=body, headers=AUTH, timeout=30)
    assert reply.status_code == 202, reply.text
    receipt: dict[str, object] = reply.json()
    return receipt


def metric(url: str, line_start: str) -> float | None:
    for line in httpx.get(f"{url}/metrics", timeout=30).text.splitlines():
        if line.startswith(line_start):
            return float(line.rsplit(" ", 1)[1])
    return None


async def test_two_workers_ingest_and_push(hub: HubProcess) -> None:
    url, push_url = hub.wait_serving(60)
    workers = workers_of(hub)
    assert sorted(role for role, _ in workers.values()) == ["http", "push"]
    assert {pid for _, pid in workers.values()} <= children_of(hub.pid)
    times = Times()
    async with subscribed(push_url) as sub:
        post(url, times, "a", 3)
        await eventually(lambda: len(sub.changes()) == 3, what="pushed by the push worker")
        # /metrics on the HTTP worker adds up the push worker's series.
        subscribers = 'rspush_push_subscribers{topic="dataset1"}'
        await eventually(lambda: metric(url, subscribers) == 1, what="summed subscriber gauge")
        assert metric(url, 'rspush_push_changes_sent_total{topic="dataset1"}') == 3
        assert metric(url, 'rspush_accepted_changes_total{topic="dataset1"}') == 3
        status = httpx.get(f"{url}/status", headers={"Accept": "application/json"}, timeout=30)
        [topic] = status.json()["topics"]
        assert topic["subscribers"] == 1 and topic["push_lag"]["batches"] >= 1


async def test_a_killed_worker_is_restarted_in_its_role(hub: HubProcess) -> None:
    url, push_url = hub.wait_serving(60)
    [(index, pid)] = [(i, p) for i, (role, p) in workers_of(hub).items() if role == "push"]
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: workers_of(hub)[index][1] != pid, "the push worker restarted", 60)
    assert "exited with status -9" in hub.log
    assert hub.exited() is None
    times = Times()
    async with subscribed(push_url) as sub:
        post(url, times, "after", 2)
        await eventually(lambda: len(sub.changes()) == 2, what="pushed by the new worker")


def test_sigterm_stops_every_process(hub: HubProcess, tmp_path: Path) -> None:
    hub.wait_serving(60)
    family = children_of(hub.pid)
    assert len(family) >= 3  # two workers and the embedded server (and spawn's helper)
    assert hub.stop() == 0
    wait_until(lambda: not any(alive(p) for p in family), "every child gone", 30)
    assert not valkey_pids(tmp_path / "data")


def test_ctrl_c_stops_every_process(tmp_path: Path) -> None:
    """Ctrl-C in a terminal sends SIGINT to the whole foreground process group."""
    config = write_config(tmp_path / "hub.toml")
    log = (tmp_path / "hub.log").open("wb")
    process = subprocess.Popen(
        [
            *rs_hub(),
            "serve",
            "--config",
            str(config),
            "--data-dir",
            str(tmp_path / "data"),
            "--workers",
            "2",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=log,
        env=clean_env(),
        start_new_session=True,
    )
    family: set[int] = set()
    try:
        wait_until(
            lambda: "rspush hub serving" in (tmp_path / "hub.log").read_text(), "serving", 60
        )
        family = children_of(process.pid)
        os.killpg(process.pid, signal.SIGINT)
        assert process.wait(60) == 0
        wait_until(lambda: not any(alive(p) for p in family), "every child gone", 30)
        assert "restarted" not in (tmp_path / "hub.log").read_text()
        assert not re.search(
            r"worker \d \(\w+\) started: pid \d+",
            (tmp_path / "hub.log").read_text().split("serving", 1)[1],
        )
    finally:
        if process.poll() is None:
            process.kill()
        kill_all({p for p in family if alive(p)})
        log.close()


def test_sigkill_of_the_parent_leaves_no_orphans(hub: HubProcess, tmp_path: Path) -> None:
    hub.wait_serving(60)
    family = children_of(hub.pid)
    hub.kill()
    wait_until(lambda: not any(alive(p) for p in family), "every child gone", 30)
    assert not valkey_pids(tmp_path / "data")
