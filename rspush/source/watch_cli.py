"""``rs-publish watch DIR``: the command line of :mod:`.watcher`."""

from __future__ import annotations

import signal
import sqlite3
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from rspush.resourcesync.console import PlainCommand

from .errors import HubRefused, StateError, TreeGone
from .posting import FIRST_WAIT_S, MAX_WAIT_S, Poster
from .publish import source_token
from .state import State
from .tree import DEFAULT_SKIPS, Skips
from .uris import base_url as checked_base_url
from .watcher import DEFAULT_BATCH_ENTRIES, DEFAULT_QUIET_S, Options, Watcher

STATE_DIR = ".rs-publish"
STATE_NAME = "state.sqlite"

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode=None,
)


def _log(message: str) -> None:
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    print(f"{stamp} rs-publish watch: {message}", file=sys.stderr, flush=True)


def _fail(message: str, code: int) -> NoReturn:
    print(f"rs-publish watch: {message}", file=sys.stderr, flush=True)
    raise typer.Exit(code)


@app.command(cls=PlainCommand)
def watch(
    directory: Annotated[
        Path,
        typer.Argument(
            metavar="DIR", help="The tree to publish: every file under it, recursively."
        ),
    ],
    base_url: Annotated[
        str,
        typer.Option(
            metavar="URL",
            help="The URL DIR is served at: a file's URI is this plus its path under DIR "
            "(percent-encoded).",
        ),
    ],
    hub: Annotated[
        str, typer.Option(metavar="URL", help="The hub's base URL, e.g. https://hub.example.org.")
    ],
    topic: Annotated[str, typer.Option(metavar="NAME", help="The topic to post to.")],
    token_file: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE", help="File holding the Source's bearer token (else RSPUSH_TOKEN)."
        ),
    ] = None,
    state: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help=f"What was published, kept across restarts [default: DIR/{STATE_DIR}/"
            f"{STATE_NAME}]. One per tree and topic.",
            show_default=False,
        ),
    ] = None,
    quiet: Annotated[
        float,
        typer.Option(
            metavar="SECONDS",
            min=0.0,
            help="Seconds a file must stay unchanged before it is published (writes in "
            "progress are not).",
        ),
    ] = DEFAULT_QUIET_S,
    skip: Annotated[
        list[str] | None,
        typer.Option(
            metavar="GLOB",
            help="Also skip names matching GLOB (any path segment). Repeatable. Skipped by "
            f"default: {' '.join(DEFAULT_SKIPS)}",
            show_default=False,
        ),
    ] = None,
    default_skips: Annotated[
        bool, typer.Option(help="Skip the default patterns (hidden, temporary, backup files).")
    ] = True,
    batch: Annotated[
        int,
        typer.Option(metavar="N", min=1, max=10_000, help="At most this many changes per post."),
    ] = DEFAULT_BATCH_ENTRIES,
    once: Annotated[
        bool,
        typer.Option(help="Publish the difference since the last run, then exit (for cron)."),
    ] = False,
    poll: Annotated[
        bool,
        typer.Option(help="Poll the tree instead of OS events (network file systems)."),
    ] = False,
    retry_wait: Annotated[
        float,
        typer.Option(
            metavar="SECONDS", min=0.0, help="Seconds before the first retry of a failed post."
        ),
    ] = FIRST_WAIT_S,
    max_retry_wait: Annotated[
        float,
        typer.Option(
            metavar="SECONDS", min=0.0, help="Longest wait between retries (jitter included)."
        ),
    ] = MAX_WAIT_S,
) -> None:
    """Publish a directory tree to a hub, and keep publishing it as it changes.

    Example: the tree /srv/www/data, served by a web server at https://data.example.org/,
    published to the topic "data" of a hub; every mirror follows with rs-subscribe:

    \b
      export RSPUSH_TOKEN=...   # the Source's token, known to the hub
      rs-publish watch /srv/www/data --base-url https://data.example.org/ \\
          --hub https://hub.example.org --topic data
      rs-subscribe run https://hub.example.org --topic data --dest /srv/mirror \\
          --map https://data.example.org/=

    Each file created, updated or deleted is posted as a change with its length, md5 and
    sha-256, dated now, once it has been quiet for --quiet seconds; a rename is a deletion
    and a creation. Hidden and temporary files are skipped (--skip adds patterns), and so
    are symbolic links.

    What was published is kept in the state file: a restart first publishes what changed
    while it was stopped, exactly once, then watches. Posts the hub cannot take now
    (unreachable, 5xx, 429) are retried with backoff until it does; nothing is dropped.

    Exit status: 0 stopped (Ctrl-C, SIGTERM) or --once done; 1 the hub refused a post
    (bad token, unknown topic; its message is printed); 2 usage or state file errors, or
    DIR itself gone (moved, deleted, unmounted: its files are not published as deleted).
    """
    root = directory.resolve()
    if not root.is_dir():
        _fail(f"{directory}: not a directory", 2)
    try:
        base = checked_base_url(base_url)
    except ValueError as exc:
        _fail(f"--base-url: {exc}", 2)
    token = source_token(token_file)
    state_path = (state or root / STATE_DIR / STATE_NAME).absolute()
    patterns = (*(DEFAULT_SKIPS if default_skips else ()), *(skip or ()))
    options = Options(
        root=root,
        base_url=base,
        skips=Skips(patterns),
        # The state file and its companions are never published, whatever the patterns.
        exclude=(state_path.parent if state is None else state_path,)
        + tuple(state_path.with_name(state_path.name + s) for s in ("-wal", "-shm", ".lock")),
        quiet_s=quiet,
        batch_entries=batch,
        force_polling=poll,
    )
    try:
        opened = State(state_path, topic=topic, base_url=base)
    except StateError as exc:
        _fail(str(exc), 2)
    except OSError as exc:
        _fail(f"cannot open the state file: {exc.strerror}", 2)
    except sqlite3.Error as exc:
        _fail(f"cannot use the state file: {exc}", 2)
    poster = Poster(hub, topic, token, first_wait_s=retry_wait, max_wait_s=max_retry_wait, log=_log)
    watcher = Watcher(options, poster, opened, _log)
    stop = threading.Event()

    def terminate(signum: int, frame: object) -> None:
        # Like Ctrl-C: the post in flight is abandoned; its batch stays pending in the
        # state and is posted again, with the same key, by the next run.
        stop.set()
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminate)
    try:
        if once:
            watcher.once()
            _log(f"done: {watcher.posted} changes accepted")
        else:
            _log(f"watching {root} for {poster.url}")
            watcher.run(stop)
    except KeyboardInterrupt:
        _log(f"stopped: {watcher.posted} changes accepted")
    except HubRefused as exc:
        _fail(f"the hub refused a post: {exc}", 1)
    except TreeGone as exc:
        _fail(str(exc), 2)
    finally:
        poster.close()
        opened.close()
