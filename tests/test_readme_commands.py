"""Every command line of the ``sh`` blocks of README.md and docs/*.md uses only options its
command has: each
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
OPTIONAL_SUBCOMMANDS = {"rs-publish": {"watch"}}
"""``rs-publish FILE`` posts once; ``rs-publish watch DIR`` is a command of its own."""
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
            required = name in WITH_SUBCOMMANDS and rest and not rest[0].startswith("-")
            if required or (rest and rest[0] in OPTIONAL_SUBCOMMANDS.get(name, ())):
                command, rest = (name, rest[0]), rest[1:]
        else:
            continue
        stop = next((j for j, w in enumerate(rest) if w in ("|", "&&", ";", "&")), len(rest))
        options = [w.split("=", 1)[0] for w in rest[:stop] if w.startswith("-") and w != "-"]
        found.append((command, options))
    return found


README_LINES = command_lines((REPO / "README.md").read_text(encoding="utf-8"))
DOC_LINES = [
    f"{doc.name}: {line}"
    for doc in sorted((REPO / "docs").glob("*.md"))
    for line in command_lines(doc.read_text(encoding="utf-8"))
    if invocations(line)
]


def test_the_readme_has_commands_to_check() -> None:
    ran = {cmd for line in README_LINES for cmd, _ in invocations(line)}
    assert {("rs-publish",), ("rs-validate",), ("rs-subscribe", "run"), ("rs-hub", "serve")} <= ran
    assert ("rs-publish", "watch") in ran


@pytest.mark.parametrize(
    "line", [f"README.md: {line}" for line in README_LINES if invocations(line)] + DOC_LINES
)
def test_every_option_in_the_readme_and_docs_exists(line: str) -> None:
    for command, options in invocations(line.split(": ", 1)[1]):
        listed = set(OPTION.findall(help_of(*command)))
        missing = [o for o in options if o not in listed]
        assert not missing, f"{' '.join(command)} has no {missing} ({line})"


def test_the_docs_have_commands_to_check() -> None:
    ran = {cmd for line in DOC_LINES for cmd, _ in invocations(line.split(": ", 1)[1])}
    assert {("rs-hub", "serve"), ("rs-subscribe", "run"), ("rs-publish", "watch")} <= ran


def test_option_parsing_finds_a_missing_option() -> None:
    # The check above can fail: a made-up option is reported.
    [(command, options)] = invocations(".venv/bin/rs-publish --hub x --no-such-option=1 f.xml")
    assert command == ("rs-publish",) and options == ["--hub", "--no-such-option"]
    assert "--no-such-option" not in OPTION.findall(help_of(*command))
    [(command, options)] = invocations("rs-publish watch d --base-url u --created x")
    assert command == ("rs-publish", "watch") and options == ["--base-url", "--created"]
    assert "--created" not in OPTION.findall(help_of(*command))


HELPS = [
    ("rs-hub",),
    ("rs-hub", "serve"),
    ("rs-hub", "token", "new"),
    ("rs-publish",),
    ("rs-publish", "watch"),
    ("rs-validate",),
    ("rs-subscribe",),
    ("rs-subscribe", "run"),
    ("rs-subscribe", "watch"),
    ("rs-subscribe", "status"),
    ("rs-subscribe", "baseline"),
    ("rs-subscribe", "audit"),
]
# An option or argument shown with its Python type instead of a word that says what to give
# ("--hub <str>", "--retries <int range>", "SOURCE_URL <str>"): every option taking a value
# names it with a metavar, and arguments show their name alone.
TYPE_METAVAR = re.compile(
    r"^\s+(?:-|[A-Z])[^<\n]*<(?:str|bool|int|float|path|list|file|dir)\b[^>]*>", re.M
)


@pytest.mark.parametrize("command", HELPS, ids=" ".join)
def test_help_is_plain_text(command: tuple[str, ...]) -> None:
    text = help_of(*command)
    assert text.startswith("Usage: "), text
    assert "<bool>" not in text and "╭" not in text and "│" not in text, text
    assert TYPE_METAVAR.findall(text) == [], text


def test_a_type_shown_as_metavar_is_found() -> None:
    assert TYPE_METAVAR.findall("Options:\n  --hub <str>  The hub.\n")
    assert TYPE_METAVAR.findall("  -c, --config <path>  TOML file.\n")
    assert TYPE_METAVAR.findall("  --retries <int range>  Retries.\n")
    assert TYPE_METAVAR.findall("Arguments:\n  SOURCE_URL <str>  The Source.\n")
    assert TYPE_METAVAR.findall("  PATH_OR_URL... <list[str]>  Files.\n")
    assert not TYPE_METAVAR.findall("  --hub URL  The hub.\n  --map URI=DIR  <link> kept\n")


def test_bracketed_words_survive_in_help() -> None:
    text = help_of("rs-hub", "serve")
    assert "TOML file with [hub], topics, sources, bridges." in text
    assert "[[bridges]] in the config" in text
    assert "[hub] base_url" in text


def test_status_json_help_says_what_it_prints() -> None:
    assert "A JSON list: one object per Source and topic." in help_of("rs-subscribe", "status")


USAGE_ERRORS = [
    (("rs-hub", "serve", "--port", "abc"), "rs-hub serve: Invalid value for '--port'"),
    (("rs-hub", "serve", "--no-such-option"), "rs-hub serve: No such option: --no-such-option"),
    (("rs-publish", "--no-such-option"), "rs-publish: No such option: --no-such-option"),
    (("rs-publish", "watch"), "rs-publish watch: Missing argument 'DIR'"),
    (("rs-validate", "--no-such-option"), "rs-validate: No such option: --no-such-option"),
    (("rs-subscribe", "run"), "rs-subscribe run: Missing argument 'SOURCE_URL'"),
    (("rs-subscribe", "no-such-command"), "rs-subscribe: No such command 'no-such-command'"),
]


@pytest.mark.parametrize(("command", "start"), USAGE_ERRORS, ids=lambda v: " ".join(v)[:40])
def test_a_usage_error_is_one_line(command: tuple[str, ...], start: str) -> None:
    """One line naming the command and where its help is, exit status 2, nothing on stdout
    (click's own form is four: usage, a hint, a blank line and the error)."""
    done = subprocess.run(
        [str(BIN / command[0]), *command[1:]], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(start), lines[0]
    assert lines[0].endswith(f"(see {start.split(':')[0]} --help)"), lines[0]


@pytest.mark.parametrize(
    "command", [("rs-hub",), ("rs-hub", "token"), ("rs-subscribe",)], ids=" ".join
)
def test_a_group_without_its_command_shows_its_help_page(command: tuple[str, ...]) -> None:
    done = subprocess.run(
        [str(BIN / command[0]), *command[1:]], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done
    assert done.stderr.startswith(f"Usage: {' '.join(command)} "), done.stderr
    assert "Commands:" in done.stderr and len(done.stderr.splitlines()) > 5, done.stderr
