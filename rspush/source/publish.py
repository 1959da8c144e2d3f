"""``rs-publish``: post a Change List fragment (or a baseline Resource List) to a hub.

The fragment is a file (``rs-publish FILE``), or is built from the changes given as options
(``--created URL=FILE``, ``--updated URL=FILE``, ``--deleted URL``; :mod:`.fragment`): length,
MD5 and SHA-256 computed from each file, the change time now, strictly increasing within one
call.

Every post carries an ``Idempotency-Key`` — the one given, else one derived from the topic and
the body (:func:`derived_key`) — and is retried on connection errors and on 502/503/504, with
exponential backoff, at most ``--retries`` times. A post the hub committed but whose answer
was lost is then answered by the hub's stored receipt (``"replayed": true``) instead of being
written twice, and a post that never arrived is sent again: exactly once either way.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated

import httpx
import typer

from rspush.resourcesync.console import PlainCommand
from rspush.resourcesync.models import Change

from .errors import ChangeArgumentError
from .fragment import (
    CommandChange,
    FileFacts,
    IncreasingClock,
    build_fragment,
    file_facts,
    parse_deleted,
    parse_with_file,
)
from .posting import derived_key

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode=None,  # plain help, the same style as every rspush command
)

TIMEOUT_S = 60.0
DEFAULT_RETRIES = 5
"""Attempts after the first one."""
DEFAULT_RETRY_WAIT_S = 0.5
"""The first backoff; each next one doubles, up to :data:`MAX_RETRY_WAIT_S`."""
MAX_RETRY_WAIT_S = 10.0
RETRY_STATUSES = frozenset({502, 503, 504})
"""The hub (or a proxy before it) could not handle the post now: worth sending again."""


def backoff_s(attempt: int, first_s: float, retry_after: str | None = None) -> float:
    """How long to wait before retry ``attempt`` (0-based): ``Retry-After`` seconds when the
    answer gave some (RFC 9110 §10.2.3), else ``first_s`` doubled per attempt; capped."""
    if retry_after is not None and retry_after.strip().isdigit():
        return min(float(retry_after.strip()), MAX_RETRY_WAIT_S)
    return float(min(first_s * 2**attempt, MAX_RETRY_WAIT_S))


@app.command(cls=PlainCommand)
def main(
    hub: Annotated[
        str, typer.Option(metavar="URL", help="The hub's base URL, e.g. http://127.0.0.1:8080.")
    ],
    topic: Annotated[str, typer.Option(metavar="NAME", help="The topic to post to.")],
    file: Annotated[
        str | None,
        typer.Argument(
            metavar="FILE|-",
            help="The XML to post; - for stdin. Or give the changes as options instead.",
            show_default=False,
        ),
    ] = None,
    created: Annotated[
        list[str] | None,
        typer.Option(
            metavar="URL=FILE",
            help="A resource created, its content now in FILE (length, md5 and sha-256 "
            "computed). Repeatable.",
            show_default=False,
        ),
    ] = None,
    updated: Annotated[
        list[str] | None,
        typer.Option(
            metavar="URL=FILE",
            help="A resource updated, its content now in FILE. Repeatable.",
            show_default=False,
        ),
    ] = None,
    deleted: Annotated[
        list[str] | None,
        typer.Option(metavar="URL", help="A resource deleted. Repeatable.", show_default=False),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(metavar="FILE", help="File holding the bearer token (else RSPUSH_TOKEN)."),
    ] = None,
    baseline: Annotated[
        bool, typer.Option(help="Post a Resource List: a new topic's baseline state.")
    ] = False,
    idempotency_key: Annotated[
        str | None,
        typer.Option(
            metavar="KEY",
            help="Key making retries a no-op (default: the SHA-256 of topic and body).",
        ),
    ] = None,
    retries: Annotated[
        int, typer.Option(metavar="N", min=0, help="Retries on connection errors and 502/503/504.")
    ] = DEFAULT_RETRIES,
    retry_wait: Annotated[
        float,
        typer.Option(
            metavar="SECONDS", min=0.0, help="Seconds before the first retry; doubled per retry."
        ),
    ] = DEFAULT_RETRY_WAIT_S,
) -> None:
    """Post changes to the hub and print its JSON receipt.

    To publish a whole directory tree as it changes, see: rs-publish watch --help

    The changes are FILE (a Change List fragment, or with --baseline a Resource List), or the
    --created, --updated and --deleted options: a fragment is built with each file's length,
    md5 and sha-256, and the time now (strictly increasing, created first, then updated,
    then deleted, each in the order given).

    Exit status: 0 accepted; 1 the hub refused (its message is printed); 2 usage, file or
    connection errors (after the retries).
    """
    given = [*(created or []), *(updated or []), *(deleted or [])]
    if (file is None) == (not given):
        typer.echo(
            "rs-publish: give a FILE to post, or changes with --created/--updated/--deleted "
            "(not both)",
            err=True,
        )
        raise typer.Exit(2)
    if given and baseline:
        typer.echo("rs-publish: --baseline posts a Resource List FILE, not changes", err=True)
        raise typer.Exit(2)
    token = source_token(token_file)
    if file is None:
        body = _fragment(created or [], updated or [], deleted or [])
    else:
        body = sys.stdin.buffer.read() if file == "-" else _read(Path(file))
    path = "baseline" if baseline else "changes"
    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/xml",
        "Idempotency-Key": idempotency_key or derived_key(topic, body),
    }
    url = f"{hub.rstrip('/')}/topics/{topic}/{path}"
    with httpx.Client(timeout=TIMEOUT_S) as client:
        reply = _post(client, url, body, headers, retries=retries, retry_wait=retry_wait)
    if reply.status_code >= 400:
        typer.echo(f"rs-publish: {reply.status_code} {_message(reply)}", err=True)
        raise typer.Exit(1)
    typer.echo(reply.text)


def _post(
    client: httpx.Client,
    url: str,
    body: bytes,
    headers: dict[str, str],
    *,
    retries: int,
    retry_wait: float,
) -> httpx.Response:
    """The hub's answer, after up to ``retries`` retries; exit 2 if it never answered."""
    for attempt in range(retries + 1):
        last = attempt == retries
        try:
            reply = client.post(url, content=body, headers=headers)
        except httpx.TransportError as exc:
            # Connection refused, reset, or closed before the answer: the hub may or may not
            # have committed the post; the same key makes sending it again safe.
            if last:
                typer.echo(f"rs-publish: POST {url}: {exc}", err=True)
                raise typer.Exit(2) from exc
            wait = backoff_s(attempt, retry_wait)
            typer.echo(f"rs-publish: POST {url}: {exc}; retrying in {wait:g} s", err=True)
        else:
            if reply.status_code not in RETRY_STATUSES or last:
                return reply
            wait = backoff_s(attempt, retry_wait, reply.headers.get("retry-after"))
            typer.echo(f"rs-publish: {reply.status_code}; retrying in {wait:g} s", err=True)
        time.sleep(wait)
    raise AssertionError("unreachable: the last attempt returns or exits")


def _fragment(created: list[str], updated: list[str], deleted: list[str]) -> bytes:
    """The fragment of the changes given as options; exit 2 naming the first unusable one."""
    try:
        changes = [
            *(parse_with_file(Change.CREATED, v) for v in created),
            *(parse_with_file(Change.UPDATED, v) for v in updated),
            *(parse_deleted(v) for v in deleted),
        ]
    except ChangeArgumentError as exc:
        typer.echo(f"rs-publish: {exc}", err=True)
        raise typer.Exit(2) from exc
    described: list[tuple[CommandChange, FileFacts | None]] = []
    for change in changes:
        if change.path is None:
            described.append((change, None))
            continue
        try:
            described.append((change, file_facts(change.path)))
        except OSError as exc:
            typer.echo(f"rs-publish: cannot read {change.path}: {exc.strerror}", err=True)
            raise typer.Exit(2) from exc
    return build_fragment(described, IncreasingClock())


def source_token(token_file: Path | None) -> str:
    """The Source's bearer token: from ``token_file``, else ``RSPUSH_TOKEN``; exit 2 if none."""
    if token_file is not None:
        try:
            return token_file.read_text().strip()
        except OSError as exc:
            typer.echo(f"rs-publish: cannot read {token_file}: {exc.strerror}", err=True)
            raise typer.Exit(2) from exc
    token = os.environ.get("RSPUSH_TOKEN", "").strip()
    if not token:
        typer.echo("rs-publish: no token: use --token-file or set RSPUSH_TOKEN", err=True)
        raise typer.Exit(2)
    return token


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        typer.echo(f"rs-publish: cannot read {path}: {exc.strerror}", err=True)
        raise typer.Exit(2) from exc


def _message(reply: httpx.Response) -> str:
    try:
        data = json.loads(reply.text)
    except ValueError:
        return reply.text.strip()[:500]
    message = str(data.get("message", data))
    violations = data.get("violations") or []
    lines = [message] + [
        f"  {v.get('severity')}: entry {v.get('entry')}: [{v.get('rule')}, {v.get('section')}] "
        f"{v.get('message')}"
        for v in violations[:20]
    ]
    return "\n".join(lines)
