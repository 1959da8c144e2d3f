"""The options the ``rs-subscribe`` commands share, how they become an
:class:`~rspush.subscriber.config.AgentConfig`, and the exit codes (see
:mod:`rspush.subscriber.cli`)."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath
from typing import Annotated

import typer

from .config import AgentConfig
from .filters import ChangeFilter
from .mapping import UriMap, map_target

EXIT_FAILED = 1
EXIT_CLOSED = 1
EXIT_USAGE = 2
EXIT_HISTORY = 3
EXIT_REFUSED = 4
EXIT_LOCKED = 5
EXIT_INTERRUPTED = 130  # a second SIGINT/SIGTERM: 128 + SIGINT, as shells report it

SourceUrl = Annotated[
    str,
    typer.Argument(
        metavar="SOURCE_URL",
        help="The Source: a hub or Source base URL, its /.well-known/resourcesync, a "
        'Capability List, or any page whose Link header or <link rel="resourcesync"> '
        "points to one.",
        show_default=False,
    ),
]
Dest = Annotated[
    Path,
    typer.Option("--dest", "-d", metavar="DIR", help="The mirror directory.", show_default=False),
]
StateFile = Annotated[
    Path | None,
    typer.Option(
        metavar="FILE", help="Checkpoint file (SQLite). Default: DEST/.rs-subscribe/state.sqlite."
    ),
]
Topic = Annotated[
    str | None, typer.Option(metavar="NAME", help="Topic (needed when the Source has several).")
]
Maps = Annotated[
    list[str] | None,
    typer.Option(
        "--map",
        metavar="URI=DIR",
        help="URI=DIR: files for URIs under URI go to DIR (relative to --dest, or an "
        "absolute folder inside it). Repeatable. "
        "Default: the Source's base URI onto --dest. URIs no map covers are refused.",
    ),
]
Include = Annotated[
    list[str] | None,
    typer.Option(metavar="REGEX", help="Only URIs matching this regex (repeatable: any)."),
]
Exclude = Annotated[
    list[str] | None, typer.Option(metavar="REGEX", help="Never URIs matching this regex.")
]
Collection = Annotated[
    str | None,
    typer.Option(metavar="URI", help='Only resources with rs:ln rel="collection" to this URI.'),
]
DescribedBy = Annotated[
    str | None,
    typer.Option(
        metavar="URI", help='Only resources with a rel="describedby" link starting with this URI.'
    ),
]
Profile = Annotated[
    str | None,
    typer.Option(
        metavar="URI", help='Only metadata records of this profile (rel="profile" / @profile).'
    ),
]
JsonLogs = Annotated[bool, typer.Option("--json-logs", help="Log lines as JSON objects.")]
Debug = Annotated[bool, typer.Option("--debug", help="Verbose logs and tracebacks.")]
Token = Annotated[
    str | None,
    typer.Option(metavar="TOKEN", help="Token for private topics (or RSPUSH_SUBSCRIBER_TOKEN)."),
]
MinRate = Annotated[
    float,
    typer.Option(
        "--min-rate",
        min=1,
        metavar="BYTES/S",
        help="A download (or Source document) averaging less than this after "
        "--transfer-grace fails as timed out (retried later).",
    ),
]
TransferGrace = Annotated[
    float,
    typer.Option(
        "--transfer-grace",
        min=0.1,
        metavar="SECONDS",
        help="Seconds a download may take before --min-rate applies.",
    ),
]
Concurrency = Annotated[
    int,
    typer.Option(
        metavar="N", min=1, max=256, help="Resources fetched at once (per-URI order is kept)."
    ),
]


def build_config(
    source_url: str,
    dest: Path,
    state: Path | None,
    topic: str | None,
    maps: list[str] | None,
    include: list[str] | None,
    exclude: list[str] | None,
    collection: str | None,
    describedby: str | None,
    profile: str | None,
    token: str | None,
    concurrency: int,
    **options: object,
) -> AgentConfig:
    pairs = []
    root = PurePosixPath(dest.resolve())
    for item in maps or []:
        uri, sep, directory = item.partition("=")
        if not sep or not uri:
            _usage(f"--map {item!r}: expected URI=DIR")
        if directory.startswith("/"):
            # Resolved as --dest is: "$PWD/mirror" names the same folder as "mirror".
            directory = str(Path(directory).resolve())
        try:
            pairs.append((uri, map_target(directory, root)))
        except ValueError as exc:
            _usage(f"--map {item!r}: {exc}")
    try:
        change_filter = ChangeFilter.build(
            include or [], exclude or [], collection, describedby, profile
        )
        UriMap.build(pairs)
    except ValueError as exc:
        _usage(str(exc))
    return AgentConfig(
        source_url=source_url,
        dest=dest,
        state=state,
        topic=topic,
        maps=pairs,
        change_filter=change_filter,
        token=token or os.environ.get("RSPUSH_SUBSCRIBER_TOKEN"),
        concurrency=concurrency,
        **options,  # type: ignore[arg-type]
    )


def _usage(message: str) -> None:
    typer.echo(f"rs-subscribe: {message}", err=True)
    raise typer.Exit(EXIT_USAGE)
