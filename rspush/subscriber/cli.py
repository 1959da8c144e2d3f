"""``rs-subscribe``: the Destination agent's command line (thin: options → one coroutine).

Exit status: 0 done (or stopped by SIGINT/SIGTERM with the checkpoint committed); 1 the
mirror differs from the Source (``audit``) or the Source became unusable; 2 usage or
discovery error (several topics and no ``--topic``, say); 3 history insufficient (``watch``);
4 refused by the hub (unauthorised, unknown topic); 5 the state file is in use; 130 a second
SIGINT/SIGTERM (quit at once). Every command maps the errors it ends with to these codes
through one table (:func:`exit_status`).

One module for the whole Typer app (hence its length): each command's options, help text and
ending are read together; the options they share live in :mod:`rspush.subscriber.cli_options`.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import sys
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Final

import httpx
import typer
from pydantic import ValidationError

from rspush.protocol import CloseCode, FrameworkFrame, ProtocolError, TopicRequest
from rspush.remote.deadlines import DEFAULT_GRACE, DEFAULT_MIN_RATE
from rspush.remote.discovery import discover
from rspush.resourcesync.console import PlainCommand
from rspush.resourcesync.console import run as run_app
from rspush.resourcesync.w3cdt import format_w3c_datetime

from .agent import Agent, AgentConfig
from .appliers import ExecApplier
from .audit import audit as run_audit
from .checkpoint import list_topics, recent_failures
from .cli_options import (
    EXIT_CLOSED,
    EXIT_FAILED,
    EXIT_HISTORY,
    EXIT_INTERRUPTED,
    EXIT_LOCKED,
    EXIT_REFUSED,
    EXIT_USAGE,
    Collection,
    Concurrency,
    Debug,
    DescribedBy,
    Dest,
    Exclude,
    Include,
    JsonLogs,
    Maps,
    MinRate,
    Profile,
    SourceUrl,
    StateFile,
    Token,
    Topic,
    TransferGrace,
    build_config,
)
from .errors import DiscoveryError, StateLockedError, SubscriberError, TopicNotFound
from .logs import EventWriter, setup_logging
from .push import (
    Change,
    HistoryInsufficientError,
    PushError,
    RefusedError,
    framework_line,
    push_changes,
)
from .push_failures import guarded
from .source_auth import push_token, source_auth

app = typer.Typer(
    add_completion=False,
    rich_markup_mode=None,  # docstrings are plain text: single line breaks are re-wrapped
    pretty_exceptions_show_locals=False,  # tokens live in locals
    no_args_is_help=True,
    help="Keep a Destination in step with a ResourceSync Source: baseline, live push, "
    "polling fallback, archive catch-up, audit.",
)


@app.callback()
def _root() -> None:
    """Keep a Destination in step with a ResourceSync Source."""


_EXITS: Final[tuple[tuple[type[Exception], int, str], ...]] = (
    # (error, exit status, prefix of its one-line message): the first that matches counts.
    (DiscoveryError, EXIT_USAGE, ""),
    (ProtocolError, EXIT_USAGE, ""),
    (StateLockedError, EXIT_LOCKED, ""),
    (HistoryInsufficientError, EXIT_HISTORY, ""),
    (RefusedError, EXIT_REFUSED, "refused: "),
    (PushError, EXIT_CLOSED, ""),
    (SubscriberError, EXIT_FAILED, ""),
)
ENDING_ERRORS: Final = tuple(kind for kind, _, _ in _EXITS)
"""What a command catches and turns into an exit status; anything else is a bug."""
_REFUSING_CLOSE_CODES: Final = frozenset({CloseCode.UNAUTHORISED, CloseCode.UNKNOWN_TOPIC})


_PRIVATE_HINT: Final = (
    " (a hub lists a private topic only to its subscribers: --token or RSPUSH_SUBSCRIBER_TOKEN)"
)


def exit_status(exc: Exception) -> tuple[int, str]:
    """The exit status and one-line message for an error a command ends with (one of
    :data:`ENDING_ERRORS`). A push channel the hub closed as unauthorised or for an unknown
    topic is a refusal too."""
    for kind, code, prefix in _EXITS:
        if isinstance(exc, kind):
            if isinstance(exc, PushError) and exc.code in _REFUSING_CLOSE_CODES:
                code = EXIT_REFUSED
            if isinstance(exc, TopicNotFound):
                return code, prefix + str(exc) + _PRIVATE_HINT
            return code, prefix + str(exc)
    raise TypeError(f"no exit status for {type(exc).__name__}") from exc


@app.command(cls=PlainCommand)
def run(
    source_url: SourceUrl,
    dest: Dest,
    state: StateFile = None,
    topic: Topic = None,
    events: Annotated[
        str | None,
        typer.Option(
            metavar="FILE|-",
            help="Write one JSON line per applied change to FILE (or - for stdout): uri, "
            "change, time, position, channel (baseline|push|poll|archive|retry), applied.",
        ),
    ] = None,
    maps: Maps = None,
    include: Include = None,
    exclude: Exclude = None,
    collection: Collection = None,
    describedby: DescribedBy = None,
    profile: Profile = None,
    keep_deleted: Annotated[
        bool, typer.Option("--keep-deleted", help="Keep files of deleted resources.")
    ] = False,
    exec_cmd: Annotated[
        str | None,
        typer.Option(
            "--exec",
            metavar="CMD",
            help="Instead of writing files, run CMD for each change with it as JSON on stdin "
            "(content_file names the verified bytes). A non-zero exit is a failed change.",
        ),
    ] = None,
    poll_interval: Annotated[
        float,
        typer.Option(
            metavar="SECONDS", min=0.05, help="Seconds between polls when push is unavailable."
        ),
    ] = 5.0,
    rebaseline_interval: Annotated[
        float,
        typer.Option(
            metavar="SECONDS",
            min=0,
            help="At most one rebaseline per this many seconds; meanwhile the agent follows "
            "the Change Lists it can read.",
        ),
    ] = 3600.0,
    concurrency: Concurrency = 8,
    token: Token = None,
    no_dump: Annotated[
        bool,
        typer.Option(
            "--no-dump",
            help="Baseline from the Resource List even if the Source offers a Resource Dump.",
        ),
    ] = False,
    min_rate: MinRate = DEFAULT_MIN_RATE,
    transfer_grace: TransferGrace = DEFAULT_GRACE,
    json_logs: JsonLogs = False,
    debug: Debug = False,
) -> None:
    """Mirror a Source and stay in step with it.

    Baseline on the first run, then live push; polling the Change Lists while push is down;
    catching up through the Change List Archive after a long absence. Stop with Ctrl-C or
    SIGTERM: the files being written are finished and the checkpoint committed; the next run
    resumes from it (a second signal quits at once)."""
    config = build_config(
        source_url,
        dest,
        state,
        topic,
        maps,
        include,
        exclude,
        collection,
        describedby,
        profile,
        token,
        concurrency,
        keep_deleted=keep_deleted,
        poll_interval=poll_interval,
        rebaseline_interval=rebaseline_interval,
        use_dump=not no_dump,
        min_rate=min_rate,
        transfer_grace=transfer_grace,
    )
    raise typer.Exit(_agent(config, events, exec_cmd, json_logs, debug, baseline_only=False))


@app.command(cls=PlainCommand)
def baseline(
    source_url: SourceUrl,
    dest: Dest,
    state: StateFile = None,
    topic: Topic = None,
    events: Annotated[
        str | None, typer.Option(metavar="FILE|-", help="JSON lines of applied changes.")
    ] = None,
    maps: Maps = None,
    include: Include = None,
    exclude: Exclude = None,
    collection: Collection = None,
    describedby: DescribedBy = None,
    profile: Profile = None,
    concurrency: Concurrency = 8,
    token: Token = None,
    no_dump: Annotated[bool, typer.Option("--no-dump", help="Use the Resource List.")] = False,
    min_rate: MinRate = DEFAULT_MIN_RATE,
    transfer_grace: TransferGrace = DEFAULT_GRACE,
    json_logs: JsonLogs = False,
    debug: Debug = False,
) -> None:
    """Make (or remake) the baseline copy, then exit.

    From the Source's Resource Dump when it offers one, else its Resource List; records where
    incremental sync starts (the list's at)."""
    config = build_config(
        source_url,
        dest,
        state,
        topic,
        maps,
        include,
        exclude,
        collection,
        describedby,
        profile,
        token,
        concurrency,
        use_dump=not no_dump,
        min_rate=min_rate,
        transfer_grace=transfer_grace,
    )
    raise typer.Exit(_agent(config, events, None, json_logs, debug, baseline_only=True))


def _agent(
    config: AgentConfig,
    events: str | None,
    exec_cmd: str | None,
    json_logs: bool,
    debug: bool,
    *,
    baseline_only: bool,
) -> int:
    reporter = setup_logging(json_logs=json_logs, debug=debug)
    try:
        writer = EventWriter(events) if events else None
    except OSError as exc:
        return _fail(f"--events {events}: {exc.strerror or exc}", EXIT_USAGE, debug)
    applier = ExecApplier(exec_cmd) if exec_cmd else None
    agent = Agent(config, applier=applier, events=writer, reporter=reporter)
    try:
        return asyncio.run(_run_agent(agent, baseline_only, debug))
    finally:
        if writer is not None:
            writer.close()


async def _run_agent(agent: Agent, baseline_only: bool, debug: bool) -> int:
    loop = asyncio.get_running_loop()
    signals = 0

    def on_signal() -> None:
        nonlocal signals
        signals += 1
        if signals == 1:
            typer.echo("rs-subscribe: stopping (again to quit at once)", err=True)
            agent.stop()
        else:
            # The operator insists: the checkpoint is crash-safe (SQLite WAL), so whatever
            # was not committed is simply done again by the next run.
            os._exit(EXIT_INTERRUPTED)

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, on_signal)
    try:
        await agent.run(baseline_only=baseline_only)
    except ENDING_ERRORS as exc:
        return _fail_with(exc, debug)
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
    if agent.mirror is not None and agent.mirror.stats["failed"] and baseline_only:
        return _fail(f"{agent.mirror.stats['failed']} resources failed", EXIT_FAILED, debug)
    return 0


def _fail_with(exc: Exception, debug: bool) -> int:
    code, message = exit_status(exc)
    return _fail(message, code, debug)


def _fail(message: str, code: int, debug: bool) -> int:
    if debug:
        import traceback

        traceback.print_exc()
    typer.echo(f"rs-subscribe: {message}", err=True)
    return code


@app.command(cls=PlainCommand)
def audit(
    source_url: SourceUrl,
    dest: Dest,
    state: StateFile = None,
    topic: Topic = None,
    maps: Maps = None,
    include: Include = None,
    exclude: Exclude = None,
    collection: Collection = None,
    describedby: DescribedBy = None,
    profile: Profile = None,
    repair: Annotated[
        bool, typer.Option("--repair", help="Fetch missing/different files, delete extra ones.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="The report as one JSON object.")] = False,
    json_logs: JsonLogs = False,
    debug: Debug = False,
) -> None:
    """Compare the mirror with the Source's Resource List.

    Lists missing, different and extra files (and URIs no --map covers); --repair fetches
    what is missing or different and deletes what is extra. Exit 0 when identical (or all
    repaired), 1 otherwise."""
    config = build_config(
        source_url,
        dest,
        state,
        topic,
        maps,
        include,
        exclude,
        collection,
        describedby,
        profile,
        None,
        8,
    )
    reporter = setup_logging(json_logs=json_logs, debug=debug)
    try:
        report = asyncio.run(run_audit(config, repair=repair, reporter=reporter))
    except ENDING_ERRORS as exc:
        raise typer.Exit(_fail_with(exc, debug)) from None
    for line in [json.dumps(report.as_json())] if as_json else report.lines(repair=repair):
        typer.echo(line)
    fixed = repair and not report.repair_failures and not report.unmapped
    raise typer.Exit(0 if report.in_sync or fixed else EXIT_FAILED)


@app.command(cls=PlainCommand)
def status(
    state: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE", help="The checkpoint file to read (default: the one under --dest)."
        ),
    ] = None,
    dest: Annotated[
        Path | None,
        typer.Option(
            "--dest",
            "-d",
            metavar="DIR",
            help="The mirror directory whose default state file (as run uses) to read.",
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="A JSON list: one object per Source and topic."),
    ] = False,
) -> None:
    """Show where a state file's Sources and topics stand.

    Epoch, position and change time of the watermark, the last baseline, counts of
    resources, tombstones and failures, and the latest failures with their reasons (a later
    change of the resource, a retry or audit --repair clears them). Reads without the lock:
    works while the agent runs."""
    if state is None:
        if dest is None:
            typer.echo("rs-subscribe: status needs --state FILE or --dest DIR", err=True)
            raise typer.Exit(EXIT_USAGE)
        state = AgentConfig(source_url="", dest=dest).state_path
    try:
        topics = list_topics(state)
    except OSError as exc:
        typer.echo(f"rs-subscribe: {exc}", err=True)
        raise typer.Exit(EXIT_USAGE) from None
    except sqlite3.DatabaseError as exc:
        typer.echo(f"rs-subscribe: {state} is not an rs-subscribe state file ({exc})", err=True)
        raise typer.Exit(EXIT_USAGE) from None
    rows: list[dict[str, Any]] = []
    for item, counts in topics:
        rows.append(
            {
                "source": item.source,
                "topic": item.topic,
                "epoch": item.watermark.epoch,
                "position": item.watermark.position,
                "last_change_time": _iso(item.watermark.last_time),
                "baseline_at": _iso(item.baseline_at),
                "updated": _iso(item.updated),
                **counts,
                "recent_failures": [
                    {"uri": f.uri, "change": f.change, "time": _iso(f.time), "reason": f.reason}
                    for f in recent_failures(state, item.source, item.topic)
                ],
            }
        )
    if as_json:
        typer.echo(json.dumps(rows))
        return
    if not rows:
        typer.echo(f"{state}: no Sources yet")
    for row in rows:
        typer.echo(f"{row['source']} (topic {row['topic']})")
        for key, value in row.items():
            if key not in ("source", "topic", "recent_failures"):
                typer.echo(f"  {key:17} {value if value is not None else '-'}")
        for failure in row["recent_failures"]:
            typer.echo(f"  failed {failure['change']} {failure['uri']}: {failure['reason']}")


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else format_w3c_datetime(moment)


@app.command(cls=PlainCommand)
def watch(
    source_url: SourceUrl,
    topic: Topic = None,
    since: Annotated[
        str | None,
        typer.Option(
            metavar="POSITION|DATETIME",
            help="Resume point: a stream position (1700000000000-0) or a W3C "
            "datetime; default: only changes from now on.",
        ),
    ] = None,
    epoch: Annotated[
        str | None, typer.Option(metavar="EPOCH", help="The epoch the position came from.")
    ] = None,
    fmt: Annotated[
        str, typer.Option("--format", metavar="json|xml", help="Frames to ask for: json or xml.")
    ] = "json",
    token: Annotated[
        str | None,
        typer.Option(
            metavar="TOKEN", help="Token for private topics (or RSPUSH_SUBSCRIBER_TOKEN)."
        ),
    ] = None,
    framework: Annotated[
        bool,
        typer.Option(
            "--framework",
            help="Also print framework notifications (a Change List closed or opened, the "
            "Resource List or Capability List updated…), one line each with type "
            '"framework"; needs a hub that advertises a framework-notification channel.',
        ),
    ] = False,
) -> None:
    """Print pushed changes as JSON lines (debugging).

    One line per change: topic, epoch, position, loc, change, datetime (and hash, length,
    type when given). With --framework, also one line per framework notification: topic,
    position and its changes (loc, change, capability, datetime, index).

    Exit status: 1 channel closed, 2 usage/discovery error, 3 history insufficient (catch up
    from the archive it names), 4 refused (unauthorised, unknown topic).
    """
    if fmt not in ("json", "xml"):
        typer.echo("rs-subscribe: --format is json or xml", err=True)
        raise typer.Exit(EXIT_USAGE)
    try:
        # Before any network: a resume point the protocol cannot carry is a usage error.
        _request(topic or "any-topic", since, epoch)
    except ValueError as exc:
        typer.echo(f"rs-subscribe: {exc}", err=True)
        raise typer.Exit(EXIT_USAGE) from None
    token = token or os.environ.get("RSPUSH_SUBSCRIBER_TOKEN")
    raise typer.Exit(
        asyncio.run(_watch(source_url, topic, since, epoch, fmt, token, framework=framework))
    )


async def _watch(
    source_url: str,
    topic: str | None,
    since: str | None,
    epoch: str | None,
    fmt: str,
    token: str | None,
    *,
    framework: bool = False,
) -> int:
    try:
        async with httpx.AsyncClient(
            timeout=30, follow_redirects=True, auth=source_auth(source_url, token)
        ) as client:
            endpoints = await discover(client, source_url, topic)
        if endpoints.push_url is None:
            typer.echo(
                f"rs-subscribe: {endpoints.capability_list} advertises no push "
                "channel (a pull-only Source)",
                err=True,
            )
            return EXIT_USAGE
        if framework and endpoints.framework is None:
            typer.echo(
                f"rs-subscribe: {endpoints.capability_list} advertises no "
                "framework-notification channel (--framework needs one)",
                err=True,
            )
            return EXIT_USAGE
        request = _request(endpoints.topic, since, epoch)
    except ENDING_ERRORS as exc:
        return _fail_with(exc, debug=False)
    except ValueError as exc:  # --since/--epoch the hub's protocol cannot carry
        return _fail(str(exc), EXIT_USAGE, debug=False)
    try:
        url = endpoints.push_url
        token = push_token(url, source_url, token)
        stream = push_changes(url, [request], fmt=fmt, token=token, framework=framework)
        async for item in guarded(stream, url):
            if isinstance(item, Change):
                sys.stdout.write(json.dumps(item.as_json(), separators=(",", ":")) + "\n")
                sys.stdout.flush()
            elif isinstance(item, FrameworkFrame):
                sys.stdout.write(json.dumps(framework_line(item), separators=(",", ":")) + "\n")
                sys.stdout.flush()
            elif item.get("type") == "subscribed":
                typer.echo(
                    f"rs-subscribe: subscribed to {item['topic']} (epoch {item['epoch']}, "
                    f"after position {item['position']})",
                    err=True,
                )
    except ENDING_ERRORS as exc:
        return _fail_with(exc, debug=False)
    return EXIT_CLOSED


def _request(topic: str, since: str | None, epoch: str | None) -> TopicRequest:
    """The subscription asked for; a ValueError in one line naming the option otherwise."""
    try:
        if since is None:
            return TopicRequest(topic=topic)
        if since[:1].isdigit() and "-" in since and "T" not in since and ":" not in since:
            return TopicRequest(topic=topic, position=since, epoch=epoch)
        return TopicRequest(topic=topic, since=since)
    except ValidationError as exc:
        # pydantic's own rendering spans several lines and names its internals.
        first = exc.errors()[0]
        option = "--epoch" if first["loc"][:1] == ("epoch",) else "--since"
        message = str(first["msg"]).removeprefix("Value error, ")
        raise ValueError(f"{option}: {message}") from None


def main() -> None:
    """The ``rs-subscribe`` console script."""
    run_app(app, "rs-subscribe")
