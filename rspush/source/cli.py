"""The ``rs-publish`` console script: ``rs-publish watch DIR …`` publishes a directory tree
as it changes (:mod:`.watch_cli`); anything else is one post (:mod:`.publish`), the command
line it always had (``rs-publish FILE``, ``rs-publish --created URL=FILE …``)."""

from __future__ import annotations

import sys

from . import publish, watch_cli


def main() -> None:
    if sys.argv[1:2] == ["watch"]:
        watch_cli.app(args=sys.argv[2:], prog_name="rs-publish watch")
    else:
        publish.app(prog_name="rs-publish")
