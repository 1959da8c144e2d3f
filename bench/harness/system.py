"""Processes and the machine: ports, fd limit, child processes, CPU and memory from /proc,
waiting with a deadline."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
"""The repository root: helper processes run ``python -m bench.…`` from here."""
CLK_TCK = os.sysconf("SC_CLK_TCK")


def raise_nofile() -> None:
    """Soft fd limit up to the hard limit (5,000 sockets need more than the usual 1,024)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop_process(process: subprocess.Popen[Any], timeout: float = 30) -> None:
    """SIGTERM, then SIGKILL if it is still there after ``timeout`` seconds."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


class JsonLinesProcess:
    """A helper process spoken to in JSON lines: commands on its stdin, one JSON line back
    per command and one when it is ready (kept in ``ready``). It stops at the end of its
    stdin. An answer ``{"error": …}`` raises RuntimeError."""

    def __init__(self, command: list[str], name: str, cwd: Path = ROOT) -> None:
        self.module = name
        self.process = subprocess.Popen(
            command,
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            preexec_fn=raise_nofile,
        )
        try:
            self.ready = self.ask_blocking(None)
        except BaseException:
            stop_process(self.process, timeout=5)
            raise

    def ask_blocking(self, command: dict[str, Any] | None) -> dict[str, Any]:
        """Send ``command`` (``None``: nothing) and read one answer."""
        assert self.process.stdin is not None and self.process.stdout is not None
        if command is not None:
            self.process.stdin.write(json.dumps(command) + "\n")
            self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.module} exited")
        answer = dict(json.loads(line))
        if "error" in answer:
            raise RuntimeError(f"{self.module}: {answer['error']}")
        return answer

    async def ask(self, **command: Any) -> dict[str, Any]:
        return await asyncio.to_thread(self.ask_blocking, command)

    def stop(self, timeout: float = 20) -> None:
        with contextlib.suppress(OSError, ValueError):
            assert self.process.stdin is not None
            self.process.stdin.close()
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_process(self.process, timeout=10)


class HelperProcess(JsonLinesProcess):
    """``python -m <module> <arguments>`` run from the repository root, spoken to in JSON
    lines (see :class:`JsonLinesProcess`)."""

    def __init__(self, module: str, *arguments: str) -> None:
        super().__init__([sys.executable, "-m", module, *arguments], module)


# --- /proc -----------------------------------------------------------------------------------


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (0 once it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, their children, …)."""
    found = children(pid)
    for child in list(found):
        found += descendants(child)
    return found


def command_name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def tree_rss_kb(pid: int, *, exclude: Iterable[str] = ()) -> int:
    """VmRSS of ``pid`` and every process below it, leaving out processes whose command name
    is in ``exclude`` (e.g. an embedded valkey-server) and processes already gone."""
    skip = set(exclude)
    total = 0
    for member in [pid, *descendants(pid)]:
        if command_name(member) in skip:
            continue
        with contextlib.suppress(OSError, RuntimeError):
            total += rss_kb(member)
    return total


def machine_busy_s() -> tuple[float, float]:
    """(busy, softirq) CPU seconds of the whole machine, all cores, from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return (sum(values[:8]) - idle) / CLK_TCK, values[6] / CLK_TCK


class Cpu:
    """CPU seconds of named groups of processes between construction and :meth:`used`, as a
    share of one core (%, one decimal). With ``machine``, also the whole machine's busy time
    (``machine``, out of 100 x cores) and its softirq share (loopback TCP processing, partly
    charged to no process of ours)."""

    def __init__(self, groups: Mapping[str, Iterable[int]], *, machine: bool = True) -> None:
        self.groups = {name: list(pids) for name, pids in groups.items()}
        self.before = {name: sum(cpu_s(p) for p in pids) for name, pids in self.groups.items()}
        self.machine = machine_busy_s() if machine else None
        self.started = time.monotonic()

    def used(self) -> dict[str, float]:
        wall = time.monotonic() - self.started
        used = {
            name: round(100 * (sum(cpu_s(p) for p in pids) - self.before[name]) / wall, 1)
            for name, pids in self.groups.items()
        }
        if self.machine is not None:
            busy, softirq = machine_busy_s()
            used["machine"] = round(100 * (busy - self.machine[0]) / wall, 1)
            used["softirq"] = round(100 * (softirq - self.machine[1]) / wall, 1)
        return used


# --- waiting ---------------------------------------------------------------------------------


def wait_until(
    predicate: Callable[[], bool], what: str, timeout: float, interval: float = 0.05
) -> None:
    """Poll ``predicate`` (blocking) until it holds; RuntimeError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


async def until(predicate: Callable[[], bool], what: str, timeout: float) -> None:
    """:func:`wait_until` on the event loop, polling every 10 ms."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(0.01)


class Pacer:
    """Open-loop pacing: step ``k`` falls due at ``started + k * interval`` whatever the steps
    before it took (a slow system is not given a slower load); a step already due when it is
    reached counts as ``late``."""

    def __init__(self, count: int, interval: float, *, lead: float = 0.05) -> None:
        self.count = count
        self.interval = interval
        self.lead = lead
        self.late = 0
        self.started = time.monotonic() + lead

    async def steps(self) -> AsyncIterator[int]:
        self.started = time.monotonic() + self.lead
        for k in range(self.count):
            delay = self.started + k * self.interval - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                self.late += 1
            yield k
