"""``rs-publish``: post a Change List fragment (or a baseline Resource List) to a hub."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated

import httpx
import typer

app = typer.Typer(add_completion=False, pretty_exceptions_show_locals=False)

TIMEOUT_S = 60.0


@app.command()
def main(
    file: Annotated[str, typer.Argument(metavar="FILE|-", help="The XML to post; - for stdin.")],
    hub: Annotated[str, typer.Option(help="The hub's base URL, e.g. http://127.0.0.1:8080.")],
    topic: Annotated[str, typer.Option(help="The topic to post to.")],
    token_file: Annotated[
        Path | None,
        typer.Option(help="File holding the bearer token (else RSPUSH_TOKEN)."),
    ] = None,
    baseline: Annotated[
        bool, typer.Option(help="Post a Resource List as the topic's baseline state.")
    ] = False,
    idempotency_key: Annotated[
        str | None, typer.Option(help="Make retries of this post a no-op.")
    ] = None,
) -> None:
    """Post FILE to the hub and print its JSON receipt; exit 1 with the hub's message if
    it refuses, 2 on usage or connection errors."""
    token = _token(token_file)
    body = sys.stdin.buffer.read() if file == "-" else _read(Path(file))
    path = "baseline" if baseline else "changes"
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/xml"}
    if idempotency_key:
        headers["Idempotency-Key"] = idempotency_key
    url = f"{hub.rstrip('/')}/topics/{topic}/{path}"
    try:
        reply = httpx.post(url, content=body, headers=headers, timeout=TIMEOUT_S)
    except httpx.HTTPError as exc:
        typer.echo(f"rs-publish: POST {url}: {exc}", err=True)
        raise typer.Exit(2) from exc
    if reply.status_code >= 400:
        typer.echo(f"rs-publish: {reply.status_code} {_message(reply)}", err=True)
        raise typer.Exit(1)
    typer.echo(reply.text)


def _token(token_file: Path | None) -> str:
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
