"""The command-line manner every rspush command shares (rs-validate, rs-hub, rs-publish,
rs-subscribe): help a person reads, usage errors on one line.

- :class:`PlainCommand`: the help page lists each argument by its name and its help, without
  the Python type label recent typer releases add (``SOURCE_URL <str>``); options name their
  values with ``metavar`` where they are declared.
- :func:`run`: what a console script calls. A usage error (a missing or malformed option, an
  unknown command) is one line on stderr naming the command and where its help is, exit
  status 2 as click gives it; everything else is the command's own business.
"""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import typer
from typer.core import TyperCommand

USAGE_EXIT = 2
"""The status of a usage error (click's ``UsageError.exit_code``, which typer keeps)."""


class PlainCommand(TyperCommand):
    """A typer command whose help lists arguments without a type label."""

    def format_options(self, ctx: Any, formatter: Any) -> None:
        arguments, options = [], []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                name = param.metavar or str(param.name).upper()
                if param.metavar is None and param.nargs != 1:
                    name += "..."
                arguments.append((name, record[1]))
            else:
                options.append(record)
        if arguments:
            with formatter.section("Arguments"):
                formatter.write_dl(arguments)
        if options:
            with formatter.section("Options"):
                formatter.write_dl(options)


def run(app: typer.Typer, prog: str, args: list[str] | None = None) -> NoReturn:
    """Run ``app`` as the console script ``prog`` and exit with its status."""
    try:
        result = app(args=args, prog_name=prog, standalone_mode=False)
    except typer.TyperException as exc:
        # typer's command-line errors (its own copy of click's): usage errors carry status 2
        # and the context of the command whose line was wrong. A group called without its
        # command (``no_args_is_help``) raises one whose message is the whole help page:
        # shown as it is, not folded onto a line.
        code = getattr(exc, "exit_code", 1)
        show = getattr(exc, "show", None)
        if type(exc).__name__ == "NoArgsIsHelpError" and callable(show):
            show()
            sys.exit(code)
        context = getattr(exc, "ctx", None)
        command = context.command_path if context is not None else prog
        if code == USAGE_EXIT:
            print(f"{command}: {_one_line(exc)} (see {command} --help)", file=sys.stderr)
        else:
            print(f"{command}: {_one_line(exc)}", file=sys.stderr)
        sys.exit(code)
    except typer.Abort:
        print(f"{prog}: interrupted", file=sys.stderr)
        sys.exit(130)
    sys.exit(result if isinstance(result, int) else 0)


def _one_line(exc: Exception) -> str:
    format_message = getattr(exc, "format_message", None)
    text = format_message() if callable(format_message) else str(exc)
    return " ".join(str(text).split())
