"""The ``rs-publish`` console script: ``rs-publish watch DIR …`` publishes a directory tree
as it changes (:mod:`.watch_cli`); anything else is one post (:mod:`.publish`), the command
line it always had (``rs-publish FILE``, ``rs-publish --created URL=FILE …``)."""

from __future__ import annotations

import sys

from rspush.resourcesync.console import run

from . import publish, watch_cli


def main() -> None:
    if sys.argv[1:2] == ["watch"]:
        run(watch_cli.app, "rs-publish watch", sys.argv[2:])
    else:
        run(publish.app, "rs-publish")
