"""The README's tour, run as written: its ``sh`` blocks, in the README's order, through bash,
in a scratch copy of the repository's ``scripts/`` and ``examples/`` (``.venv`` linked to the
environment running the tests), with only the ports replaced by free ones — the hub's
8080/8081 (9000/9001 in the ``--port`` example) and the origins' 8000/8001.

Each block is matched by a line it starts with; every block of the README must be one of
:data:`RUN` or :data:`NOT_RUN` (with the reason and the test that covers it), so a new block
cannot be left out unnoticed."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx
import pytest

from tests.support.processes import clean_env
from tests.support.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
SH_BLOCK = re.compile(r"^```sh\n(.*?)^```", re.DOTALL | re.MULTILINE)
TOKEN_ENV = "RSPUSH_TOKEN"

# The blocks the tour runs, by their first line (its start), in README order.
HUB = "scripts/hub --port 9000 --push-port 9001"
FRAGMENT = ".venv/bin/rs-validate --fragment examples/changes.xml"
PUBLISH = "RSPUSH_TOKEN=demo-token-change-me .venv/bin/rs-publish --hub http://127.0.0.1:8080"
WATCH = ".venv/bin/rs-subscribe watch http://127.0.0.1:8080"
MIRROR = "python3 -m http.server 8000"
EDIT = 'echo "hello again" >> examples/origin/hello.txt'
AUDIT = ".venv/bin/rs-subscribe audit"
TREE = "mkdir -p site"
VALIDATE = ".venv/bin/rs-validate changelist.xml"
RUN = (HUB, FRAGMENT, PUBLISH, WATCH, MIRROR, EDIT, AUDIT, TREE, VALIDATE)
NOT_RUN = {
    "scripts/hub             # run the hub": "the hub with its defaults (ports 8080/8081, taken "
    "on a shared machine): the --port form is run; scripts/test is CI itself",
    ".venv/bin/rs-hub serve --config hub.toml": "needs the reader's own OAI-PMH repository; "
    "the bridge with a real one: tests/e2e/test_oai_bridge.py",
    "rs-hub token new": "needs a container engine; compose.yaml and the Dockerfile are "
    "checked by tests/test_deployment.py",
}


def blocks() -> list[str]:
    return SH_BLOCK.findall((REPO / "README.md").read_text(encoding="utf-8"))


def block(start: str) -> str:
    (found,) = [b for b in blocks() if b.startswith(start)]
    return found


def commands(text: str) -> list[str]:
    """The block's commands, comments and continuation lines joined: one string each."""
    joined = re.sub(r"\\\n\s*", "", text)
    lines = [line.split("  #")[0].rstrip() for line in joined.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Tour:
    def __init__(self, workdir: Path, stack: ExitStack) -> None:
        self.workdir = workdir
        self.stack = stack
        self.ports = {p: free_port() for p in ("8080", "8081", "8000", "8001")}
        self.ports["9000"], self.ports["9001"] = self.ports["8080"], self.ports["8081"]
        self.hub = f"http://127.0.0.1:{self.ports['8080']}"
        self.env = {**clean_env(), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}

    def text(self, block_text: str) -> str:
        """The block with the tour's ports."""
        return re.sub(
            r"(?<![\d.])(8080|8081|8000|8001|9000|9001)(?!\d)",
            lambda m: str(self.ports[m.group(1)]),
            block_text,
        )

    def run(self, block_text: str) -> subprocess.CompletedProcess[str]:
        """The block as one bash script (stops at the first failing command)."""
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", self.text(block_text)],
            cwd=self.workdir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, f"{block_text}\n--- stdout\n{done.stdout}\n{done.stderr}"
        return done

    def start(self, script: str, name: str) -> Path:
        """``script`` in the background (its own process group, killed at the end); returns
        the file its output goes to."""
        log = self.workdir / f"{name}.log"
        out = self.stack.enter_context(log.open("w"))
        process = subprocess.Popen(
            ["bash", "-c", self.text(script)],
            cwd=self.workdir,
            env=self.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.stack.callback(_stop_group, process)
        return log


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    for signum in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, signum)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            continue


@contextmanager
def tour_in(tmp_path: Path) -> Iterator[Tour]:
    workdir = tmp_path / "repo"
    workdir.mkdir(parents=True)
    shutil.copytree(REPO / "scripts", workdir / "scripts")
    shutil.copytree(REPO / "examples", workdir / "examples")
    (workdir / ".venv").symlink_to(Path(sys.prefix))
    with ExitStack() as stack:
        yield Tour(workdir, stack)


def test_every_readme_block_is_run_or_says_why_not() -> None:
    starts = [b.splitlines()[0] for b in blocks()]
    unclassified = [s for s in starts if not any(s.startswith(k) for k in (*RUN, *NOT_RUN))]
    assert unclassified == []
    for start in (*RUN, *NOT_RUN):
        assert sum(s.startswith(start) for s in starts) == 1, start


def test_commands_joins_continuations_and_drops_comments() -> None:
    text = "a --x \\\n    --y  # what\n# a comment\nb\n"
    assert commands(text) == ["a --x --y", "b"]


@pytest.mark.timeout(600)
def test_the_readme_tour_runs_as_written(tmp_path: Path) -> None:
    with tour_in(tmp_path) as tour:
        (hub_line,) = commands(block(HUB))
        hub_log = tour.start(hub_line, "hub")

        def ready() -> bool:
            return httpx.get(f"{tour.hub}/readyz", timeout=2).status_code == 200

        wait_for(ready, "the hub of the tour", ignoring=(httpx.HTTPError,))
        # What the --port example says the hub prints.
        wait_for(lambda: "Source Description:" in hub_log.read_text(), "the hub's banner")
        assert f"http://127.0.0.1:{tour.ports['8080']} (HTTP)" in hub_log.read_text()

        # Push: the first watch line, in the background while the tour posts.
        watch_log = tour.start(commands(block(WATCH))[0], "watch")
        wait_for(lambda: "subscribed to" in watch_log.read_text(), "the watch subscription")

        tour.run(block(FRAGMENT))
        published = tour.run(block(PUBLISH))
        receipts = [json.loads(line) for line in published.stdout.splitlines() if line[:1] == "{"]
        assert receipts and receipts[0]["accepted"] == 2
        assert "<urlset" in published.stdout  # the curls: documents
        assert "valid" in published.stdout  # rs-validate --schema of the served Change List

        def watched() -> list[str]:
            lines = watch_log.read_text().splitlines()
            return [json.loads(line)["loc"] for line in lines if line.startswith("{")]

        wait_for(
            lambda: (
                {"http://example.com/res1.html", "http://example.com/res1.txt"} <= set(watched())
            ),
            "the watched changes",
            ignoring=(ValueError, KeyError),
        )

        # Mirroring: origin, announcement, agent (in the background: it follows the hub).
        tour.start(block(MIRROR), "mirror")
        mirror = tour.workdir / "mirror"
        origin = tour.workdir / "examples" / "origin"

        def mirrored(name: str) -> bool:
            target = mirror / name
            return target.exists() and target.read_bytes() == (origin / name).read_bytes()

        wait_for(lambda: mirrored("hello.txt") and mirrored("articles/first.html"), "the mirror")
        tour.run(block(EDIT))
        assert b"hello again" in (origin / "hello.txt").read_bytes()
        wait_for(lambda: mirrored("hello.txt"), "the edited file in the mirror")
        audited = tour.run(block(AUDIT))
        assert "Usage:" in audited.stdout  # the run --help line

        # A directory published as it changes, mirrored by another agent.
        tour.start(block(TREE), "tree")
        site, copy = tour.workdir / "site", tour.workdir / "site-mirror"
        wait_for(
            lambda: (
                (copy / "hello.txt").exists()
                and (copy / "hello.txt").read_bytes() == (site / "hello.txt").read_bytes()
            ),
            "the watched directory's mirror",
        )

    # Validation: the second line (the first one names a file, a URL and standard input as
    # they would be given: the forms tests/resourcesync/test_cli.py runs).
    with tour_in(tmp_path / "validate") as tour:
        tour.run(commands(block(VALIDATE))[1])
