"""Real ``rs-hub serve`` processes for whole-system tests, and what they leave running.

A hub's output goes to a file (no pipe to fill up); tests wait on what appears there, or on
processes coming and going, never for a fixed time. ``valkey_pids`` finds the servers of a
directory from ``/proc`` (Linux), whatever started them.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from rspush.hub.auth import token_sha256
from tests.support.waiting import TIMEOUT_SCALE

SOURCE_TOKEN = "chaos-source-token"
SERVING = re.compile(r"serving \S+ on (http://127\.0\.0\.1:\d+), push on (\S+)")

HUB_CONFIG = """
host = "127.0.0.1"
port = {port}
rotation_interval_s = 0.2
lease_ttl_s = 1.0
appendfsync = "always"
{redis_line}

[hub]
base_url = "{base_url}"

[push]
port = {push_port}
{push_url_line}

[limits]
changelist_max_entries = {max_entries}

[[topics]]
name = "dataset1"

[[sources]]
name = "a"
token_sha256 = "{token_sha256}"
topics = ["dataset1"]
"""


def write_config(
    path: Path,
    *,
    port: int = 0,
    push_port: int = 0,
    base_url: str = "http://127.0.0.1:8080",
    push_url: str | None = None,
    redis_url: str | None = None,
    max_entries: int = 10_000,
) -> Path:
    path.write_text(
        HUB_CONFIG.format(
            port=port,
            push_port=push_port,
            base_url=base_url,
            push_url_line="" if push_url is None else f'url = "{push_url}"',
            redis_line="" if redis_url is None else f'redis_url = "{redis_url}"',
            max_entries=max_entries,
            token_sha256=token_sha256(SOURCE_TOKEN),
        ),
        encoding="utf-8",
    )
    return path


def rs_hub() -> list[str]:
    script = Path(sys.executable).parent / "rs-hub"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from rspush.hub.cli import app; app()"]


def clean_env() -> dict[str, str]:
    """This environment without ``RSPUSH_*`` settings (they would override the config)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("RSPUSH_")}


class HubProcess:
    """``rs-hub serve ARGS`` with its stderr (where it logs) in ``log_path``."""

    def __init__(self, log_path: Path, *args: str | Path) -> None:
        self.log_path = log_path
        self.args = [str(a) for a in args]
        self.process: subprocess.Popen[bytes] | None = None
        self._seen = 0

    def start(self) -> HubProcess:
        """Start (or restart: the log is appended to) the process."""
        self._seen = len(SERVING.findall(self.log)) if self.log_path.exists() else 0
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [*rs_hub(), "serve", *self.args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=clean_env(),
                cwd=self.log_path.parent,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def exited(self) -> int | None:
        assert self.process is not None
        return self.process.poll()

    def wait_serving(self, timeout: float = 30) -> tuple[str, str]:
        """(HTTP URL, push URL) of this run, once it logs that it serves; fails at once with
        its log if it exits first."""
        assert self.process is not None
        deadline = time.monotonic() + timeout * TIMEOUT_SCALE
        while True:
            found = SERVING.findall(self.log)
            if len(found) > self._seen:
                url, push = found[-1]
                return url, push
            code = self.process.poll()
            if code is not None:
                raise AssertionError(f"rs-hub exited {code} before serving:\n{self.log}")
            if time.monotonic() > deadline:
                raise AssertionError(f"rs-hub not serving after {timeout} s:\n{self.log}")
            time.sleep(0.02)

    def wait_exit(self, timeout: float = 30) -> int:
        assert self.process is not None
        return self.process.wait(timeout * TIMEOUT_SCALE)

    def kill(self) -> None:
        """SIGKILL (a crash: nothing of the hub's shutdown runs) and reap."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        if self.process is not None:
            self.process.wait(30)

    def stop(self) -> int | None:
        """SIGTERM and wait; SIGKILL if it does not stop in time."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                return self.process.wait(30 * TIMEOUT_SCALE)
            except subprocess.TimeoutExpired:
                self.process.kill()
        return self.process.wait(30)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] != b"Z"


def valkey_pids(directory: Path) -> set[int]:
    """Live valkey/redis servers (by executable) whose command line names ``directory``
    (Linux /proc; a server's own process title names its socket, inside the directory)."""
    needle = os.fsencode(str(directory.resolve()))
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdecimal():
            continue
        try:
            program = Path(os.readlink(entry / "exe")).name
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        servers = ("valkey-server", "redis-server")
        if program in servers and needle in cmdline and alive(int(entry.name)):
            found.add(int(entry.name))
    return found


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout * TIMEOUT_SCALE
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def kill_all(pids: set[int]) -> None:
    """Clean-up: SIGKILL servers a failed test left behind (only the ones it found)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def children_of(pid: int) -> set[int]:
    """Live processes whose parent is ``pid`` (Linux /proc)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdecimal():
            continue
        try:
            stat = (entry / "stat").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()
        if int(fields[1]) == pid and alive(int(entry.name)):
            found.add(int(entry.name))
    return found
