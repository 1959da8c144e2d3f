"""One hub, hence one embedded server and one AOF, per data dir: real ``rs-hub serve``
processes and real valkey-server processes, found through ``/proc``.

- A hub killed with SIGKILL takes its embedded server with it.
- A second hub on a data dir in use is refused at once (exit 2, one line naming the dir) and
  the first one keeps serving: its socket, its server, its data untouched.
- A server left behind by a killed hub is stopped (after flushing its AOF) before the next
  hub starts its own; a pid file naming some other process stops nothing.
- A port in use is named, with the listener and the option that moves it (exit 2), before
  any server is started.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from rspush.hub import embedded
from tests.support.processes import (
    SOURCE_TOKEN,
    HubProcess,
    alive,
    kill_all,
    valkey_pids,
    wait_until,
    write_config,
)
from tests.support.waiting import TIMEOUT_SCALE

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
]


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    """A data dir; any server still running on it at the end is killed (and fails the test
    only through its own assertions)."""
    path = tmp_path / "data"
    yield path
    kill_all(valkey_pids(path))


@pytest.fixture
def hubs(tmp_path: Path) -> Iterator[list[HubProcess]]:
    started: list[HubProcess] = []
    yield started
    for hub in started:
        hub.kill()


def hub(
    hubs: list[HubProcess], tmp_path: Path, data_dir: Path, name: str, **config: object
) -> HubProcess:
    cfg = write_config(tmp_path / f"{name}.toml", **config)  # type: ignore[arg-type]
    process = HubProcess(tmp_path / f"{name}.log", "--config", cfg, "--data-dir", data_dir)
    hubs.append(process)
    return process.start()


def fragment(loc: str) -> bytes:
    """One created change, stamped by the hub (no datetime: the hub's clock)."""
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
        'xmlns:rs="http://www.openarchives.org/rs/terms/"><rs:md capability="changelist"/>'
        f'<url><loc>{loc}</loc><rs:md change="created" length="1" type="text/plain"/></url>'
        "</urlset>"
    ).encode()


def post(url: str, loc: str) -> httpx.Response:
    return httpx.post(
        f"{url}/topics/dataset1/changes",
        content=fragment(loc),
        headers={"Authorization": f"Bearer {SOURCE_TOKEN}", "Content-Type": "application/xml"},
        timeout=30,
    )


def listed(url: str) -> str:
    reply = httpx.get(f"{url}/topics/dataset1/changelist.xml", timeout=30)
    assert reply.status_code == 200, reply.text
    return reply.text


def test_the_data_dir_lock_is_exclusive_and_names_its_holder(tmp_path: Path) -> None:
    first = embedded.DataDirLock(tmp_path)
    first.acquire()
    second = embedded.DataDirLock(tmp_path)
    with pytest.raises(embedded.DataDirBusyError) as refused:
        second.acquire()
    assert refused.value.holder == os.getpid()
    assert refused.value.directory == tmp_path.resolve()
    first.release()
    second.acquire()  # free again once released
    second.release()


def test_a_killed_hub_takes_its_embedded_server_with_it(
    hubs: list[HubProcess], tmp_path: Path, data_dir: Path
) -> None:
    running = hub(hubs, tmp_path, data_dir, "hub")
    running.wait_serving()
    servers = valkey_pids(data_dir)
    assert len(servers) == 1, servers
    running.kill()
    wait_until(
        lambda: not valkey_pids(data_dir), "the embedded server to exit with its hub", timeout=20
    )


def test_a_second_hub_on_a_busy_data_dir_is_refused_and_the_first_keeps_serving(
    hubs: list[HubProcess], tmp_path: Path, data_dir: Path
) -> None:
    first = hub(hubs, tmp_path, data_dir, "first")
    url, _ = first.wait_serving()
    assert post(url, "http://example.com/before").status_code == 202
    servers = valkey_pids(data_dir)
    sockets = sorted(p.name for p in (data_dir / "redis").iterdir() if p.is_socket())

    second = hub(hubs, tmp_path, data_dir, "second")
    try:
        code = second.wait_exit(timeout=20)
    except subprocess.TimeoutExpired:
        pytest.fail(f"a second hub on a busy data dir kept running:\n{second.log}")
    assert code == 2, second.log
    lines = second.log.strip().splitlines()
    assert len(lines) == 1, lines
    assert str(data_dir.resolve()) in lines[0]
    assert "--data-dir" in lines[0] and "--redis-url" in lines[0]
    assert f"pid {first.pid}" in lines[0]

    # Nothing of the first hub's was touched: same server, same socket; it still serves.
    assert valkey_pids(data_dir) == servers
    assert sorted(p.name for p in (data_dir / "redis").iterdir() if p.is_socket()) == sockets
    assert post(url, "http://example.com/after").status_code == 202
    changes = listed(url)
    assert "http://example.com/before" in changes and "http://example.com/after" in changes
    assert httpx.get(f"{url}/readyz", timeout=30).status_code == 200
    # And it stops cleanly, taking its server with it.
    assert first.stop() == 0, first.log
    assert not valkey_pids(data_dir)


def leftover_server(redis_dir: Path) -> subprocess.Popen[bytes]:
    """A server of ``redis_dir`` as a killed hub would leave it: the embedded server's
    socket, dir and pid file, no parent to stop it."""
    redis_dir.mkdir(parents=True)
    return subprocess.Popen(
        [
            str(embedded.server_binary()),
            "--port",
            "0",
            "--unixsocket",
            str(redis_dir / "valkey.sock"),
            "--dir",
            str(redis_dir),
            "--pidfile",
            str(redis_dir / "valkey.pid"),
            "--appendonly",
            "yes",
            "--save",
            "",
            "--logfile",
            str(redis_dir / "leftover.log"),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def ping(socket_path: Path) -> bool:
    client = redis.Redis(unix_socket_path=str(socket_path))
    try:
        return bool(client.ping())
    except (redis.RedisError, OSError):
        return False
    finally:
        client.close()


def test_a_leftover_server_is_stopped_before_the_next_hub_starts_its_own(
    hubs: list[HubProcess], tmp_path: Path, data_dir: Path
) -> None:
    redis_dir = data_dir / "redis"
    leftover = leftover_server(redis_dir)
    try:
        wait_until(lambda: ping(redis_dir / "valkey.sock"), "the leftover server", timeout=20)
        wait_until(lambda: (redis_dir / "valkey.pid").exists(), "its pid file")
        # It holds data nobody flushed yet (everysec): stopping it must not lose it.
        client = redis.Redis(unix_socket_path=str(redis_dir / "valkey.sock"))
        client.set("written-by-the-killed-hub", b"1")
        client.close()

        running = hub(hubs, tmp_path, data_dir, "hub")
        url, _ = running.wait_serving()
        assert leftover.wait(20 * TIMEOUT_SCALE) == 0  # stopped by SIGTERM: a clean exit
        servers = valkey_pids(data_dir)
        assert len(servers) == 1 and leftover.pid not in servers, servers
        assert "leftover embedded server" in running.log
        client = redis.Redis(unix_socket_path=str(redis_dir / "valkey.sock"))
        try:
            assert client.get("written-by-the-killed-hub") == b"1"
        finally:
            client.close()
        assert post(url, "http://example.com/x").status_code == 202
    finally:
        if leftover.poll() is None:
            leftover.kill()
        leftover.wait(30)


def test_a_pid_file_naming_another_program_stops_nothing(
    hubs: list[HubProcess], tmp_path: Path, data_dir: Path
) -> None:
    """A pid is reused once its process is gone: only a server of this directory is stopped."""
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        (data_dir / "redis").mkdir(parents=True)
        (data_dir / "redis" / "valkey.pid").write_text(f"{bystander.pid}\n")
        running = hub(hubs, tmp_path, data_dir, "hub")
        url, _ = running.wait_serving()
        assert bystander.poll() is None and alive(bystander.pid)
        assert post(url, "http://example.com/x").status_code == 202
    finally:
        bystander.send_signal(signal.SIGKILL)
        bystander.wait(30)


@pytest.mark.parametrize(
    ("listener", "option", "config"),
    [
        ("HTTP", "--port", "port"),
        ("push", "[push] port", "push_port"),
    ],
)
def test_a_busy_port_is_named_with_its_option_before_anything_starts(
    hubs: list[HubProcess],
    tmp_path: Path,
    data_dir: Path,
    listener: str,
    option: str,
    config: str,
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        refused = hub(hubs, tmp_path, data_dir, "hub", **{config: port})
        assert refused.wait_exit(timeout=30) == 2, refused.log
    lines = refused.log.strip().splitlines()
    assert len(lines) == 1, lines
    line = lines[0]
    assert f"127.0.0.1:{port}" in line and "address already in use" in line, line
    assert f"for {listener} on" in line and option in line, line
    assert not valkey_pids(data_dir)  # refused before the embedded server was started
