"""Every command line of README.md's ``sh`` blocks uses only options its command has: each
``rs-*`` invocation (and ``scripts/hub``, which runs ``rs-hub serve``) is parsed and its
options looked up in that command's ``--help``. And the four commands' help is one plain
style: no rich boxes, no ``<bool>`` metavars, bracketed words kept."""

from __future__ import annotations

import functools
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
COMMANDS = ("rs-hub", "rs-publish", "rs-validate", "rs-subscribe")
WITH_SUBCOMMANDS = {"rs-hub", "rs-subscribe"}
SH_BLOCK = re.compile(r"^```sh\n(.*?)^```", re.DOTALL | re.MULTILINE)
OPTION = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


@functools.cache
def help_of(*command: str) -> str:
    done = subprocess.run(
        [str(BIN / command[0]), *command[1:], "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def command_lines(markdown: str) -> list[str]:
    """The commands of the ``sh`` blocks: continuation lines joined, comments dropped."""
    lines = []
    for block in SH_BLOCK.findall(markdown):
        for line in block.replace("\\\n", " ").splitlines():
            code = line.split(" #", 1)[0].strip()
            if code and not code.startswith("#"):
                lines.append(code)
    return lines


def invocations(line: str) -> list[tuple[tuple[str, ...], list[str]]]:
    """(command, options) of each rspush command run on ``line``."""
    words = shlex.split(line, comments=True)
    found = []
    for i, word in enumerate(words):
        name = Path(word).name
        if word == "scripts/hub":
            command: tuple[str, ...] = ("rs-hub", "serve")
            rest = words[i + 1 :]
        elif name in COMMANDS:
            rest = words[i + 1 :]
            command = (name,)
            if name in WITH_SUBCOMMANDS and rest and not rest[0].startswith("-"):
                command, rest = (name, rest[0]), rest[1:]
        else:
            continue
        stop = next((j for j, w in enumerate(rest) if w in ("|", "&&", ";", "&")), len(rest))
        options = [w.split("=", 1)[0] for w in rest[:stop] if w.startswith("-") and w != "-"]
        found.append((command, options))
    return found


README_LINES = command_lines((REPO / "README.md").read_text(encoding="utf-8"))


def test_the_readme_has_commands_to_check() -> None:
    ran = {cmd for line in README_LINES for cmd, _ in invocations(line)}
    assert {("rs-publish",), ("rs-validate",), ("rs-subscribe", "run"), ("rs-hub", "serve")} <= ran


@pytest.mark.parametrize("line", [line for line in README_LINES if invocations(line)])
def test_every_option_in_the_readme_exists(line: str) -> None:
    for command, options in invocations(line):
        listed = set(OPTION.findall(help_of(*command)))
        missing = [o for o in options if o not in listed]
        assert not missing, f"{' '.join(command)} has no {missing} (README: {line})"


def test_option_parsing_finds_a_missing_option() -> None:
    # The check above can fail: a made-up option is reported.
    [(command, options)] = invocations(".venv/bin/rs-publish --hub x --no-such-option=1 f.xml")
    assert command == ("rs-publish",) and options == ["--hub", "--no-such-option"]
    assert "--no-such-option" not in OPTION.findall(help_of(*command))


HELPS = [
    ("rs-hub",),
    ("rs-hub", "serve"),
    ("rs-hub", "token", "new"),
    ("rs-publish",),
    ("rs-validate",),
    ("rs-subscribe",),
    ("rs-subscribe", "run"),
    ("rs-subscribe", "watch"),
    ("rs-subscribe", "status"),
]


@pytest.mark.parametrize("command", HELPS, ids=" ".join)
def test_help_is_plain_text(command: tuple[str, ...]) -> None:
    text = help_of(*command)
    assert text.startswith("Usage: "), text
    assert "<bool>" not in text and "╭" not in text and "│" not in text, text


def test_bracketed_words_survive_in_help() -> None:
    text = help_of("rs-hub", "serve")
    assert "TOML file with [hub], topics, sources, bridges." in text
    assert "[[bridges]] in the config" in text
    assert "[hub] base_url" in text


def test_status_json_help_says_what_it_prints() -> None:
    assert "A JSON list: one object per Source and topic." in help_of("rs-subscribe", "status")
