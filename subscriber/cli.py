"""``rs-subscribe``: the Destination agent's command line.

``watch`` is the operator's debugging tool: it discovers the Source's push endpoint and
prints every pushed change as one JSON line. (The full agent — baseline, apply, checkpoint,
poll fallback, archive catch-up — is issue #5.)
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Annotated

import httpx
import typer

from hub.push.protocol import ProtocolError, TopicRequest

from .discovery import DiscoveryError, discover
from .push import Change, HistoryInsufficientError, PushError, RefusedError, push_changes

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_show_locals=False,
    no_args_is_help=True,
    help="Keep a Destination in step with a ResourceSync Source.",
)

# Exit codes of `watch`: scripts can tell why it stopped.
EXIT_CLOSED = 1
EXIT_USAGE = 2
EXIT_HISTORY = 3
EXIT_REFUSED = 4


@app.callback()
def _root() -> None:
    """Keep a Destination in step with a ResourceSync Source."""


@app.command()
def watch(
    source_url: Annotated[
        str, typer.Argument(help="Hub or Source URL, its well-known URI, or a Capability List.")
    ],
    topic: Annotated[
        str | None, typer.Option(help="Topic (needed when there are several).")
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            help="Resume point: a stream position (1700000000000-0) or a W3C "
            "datetime; default: only changes from now on."
        ),
    ] = None,
    epoch: Annotated[str | None, typer.Option(help="The epoch the position came from.")] = None,
    fmt: Annotated[str, typer.Option("--format", help="Frames to ask for: json or xml.")] = "json",
    token: Annotated[
        str | None, typer.Option(help="Token for private topics (or RSPUSH_SUBSCRIBER_TOKEN).")
    ] = None,
) -> None:
    """Print each pushed change as one JSON line: topic, epoch, position, loc, change,
    datetime (and hash, length, type when given).

    Exit status: 1 channel closed, 2 usage/discovery error, 3 history insufficient (catch up
    from the archive it names), 4 refused (unauthorised, unknown topic).
    """
    if fmt not in ("json", "xml"):
        typer.echo("rs-subscribe: --format is json or xml", err=True)
        raise typer.Exit(EXIT_USAGE)
    token = token or os.environ.get("RSPUSH_SUBSCRIBER_TOKEN")
    raise typer.Exit(asyncio.run(_watch(source_url, topic, since, epoch, fmt, token)))


async def _watch(
    source_url: str,
    topic: str | None,
    since: str | None,
    epoch: str | None,
    fmt: str,
    token: str | None,
) -> int:
    try:
        async with httpx.AsyncClient(timeout=30, follow_redirects=True) as client:
            endpoints = await discover(client, source_url, topic)
        if endpoints.push_url is None:
            typer.echo(
                f"rs-subscribe: {endpoints.capability_list} advertises no push "
                "channel (a pull-only Source)",
                err=True,
            )
            return EXIT_USAGE
        request = _request(endpoints.topic, since, epoch)
    except (DiscoveryError, ProtocolError, ValueError) as exc:
        typer.echo(f"rs-subscribe: {exc}", err=True)
        return EXIT_USAGE
    try:
        async for item in push_changes(endpoints.push_url, [request], fmt=fmt, token=token):
            if isinstance(item, Change):
                sys.stdout.write(json.dumps(item.as_json(), separators=(",", ":")) + "\n")
                sys.stdout.flush()
            elif item.get("type") == "subscribed":
                typer.echo(
                    f"rs-subscribe: subscribed to {item['topic']} (epoch {item['epoch']}, "
                    f"after position {item['position']})",
                    err=True,
                )
    except HistoryInsufficientError as exc:
        typer.echo(f"rs-subscribe: {exc}", err=True)
        return EXIT_HISTORY
    except RefusedError as exc:
        typer.echo(f"rs-subscribe: refused: {exc}", err=True)
        return EXIT_REFUSED
    except PushError as exc:
        typer.echo(f"rs-subscribe: {exc}", err=True)
        return EXIT_REFUSED if exc.code in (4001, 4004) else EXIT_CLOSED
    return EXIT_CLOSED


def _request(topic: str, since: str | None, epoch: str | None) -> TopicRequest:
    if since is None:
        return TopicRequest(topic=topic)
    if since[:1].isdigit() and "-" in since and "T" not in since and ":" not in since:
        return TopicRequest(topic=topic, position=since, epoch=epoch)
    return TopicRequest(topic=topic, since=since)
