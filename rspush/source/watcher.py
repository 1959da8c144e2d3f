"""``rs-publish watch``: a directory tree published to a hub as it changes.

On start the tree is compared with the state (:mod:`.state`) and the difference published
— after the batch a previous run left pending, if any — then every change the file system
reports is published once the file has been quiet for the quiet period (:mod:`.debounce`).

What is published is what was hashed: a file is read with its length, MD5 and SHA-256, and
stat'ed again afterwards; if it changed meanwhile it waits another quiet period. Changes are
dated now (ResourceSync 1.1 §12.1, forward order), never by mtime: a Destination that took
a baseline of the topic skips changes dated before it, and a file's mtime may be far older
than the moment the hub hears of it. A rename is a deletion and a creation.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from watchfiles import Change as Event
from watchfiles import watch

from rspush.resourcesync.models import Change

from .debounce import Debouncer
from .diff import Published, decide, to_look_at
from .errors import TreeGone
from .fragment import CommandChange, FileFacts, IncreasingClock, build_fragment, handle_facts
from .posting import Poster, derived_key
from .state import Pending, Row, State
from .tree import Skips, Stat, regular_stat, relative, scan
from .uris import uri_of

DEFAULT_QUIET_S = 1.0
DEFAULT_BATCH_ENTRIES = 1000
"""Changes per post: well under the hub's default ``max_entries_per_request`` (10,000) and
``max_body_bytes`` (10 MiB at some 400 bytes an entry)."""
TICK_S = 0.1
"""How often pending files are checked for quiet while no event arrives."""


@dataclass(frozen=True)
class Options:
    root: Path
    base_url: str
    skips: Skips
    exclude: tuple[Path, ...]
    """Never published whatever the patterns say (the state database, when inside)."""
    quiet_s: float = DEFAULT_QUIET_S
    batch_entries: int = DEFAULT_BATCH_ENTRIES
    force_polling: bool = False


@dataclass(frozen=True, slots=True)
class Decided:
    path: str
    change: Change
    facts: FileFacts | None
    stat: Stat | None


def read_facts(path: Path, expected: Stat) -> FileFacts | None:
    """The file's length and hashes if it is still the file ``expected`` describes, before
    and after reading it; None if it changed, was replaced or is gone meanwhile."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        if Stat.of(os.fstat(fd)) != expected:
            return None
        facts = handle_facts(handle, path.name)
    if regular_stat(path) != expected or facts.length != expected.size:
        return None
    return facts


class Watcher:
    def __init__(
        self,
        options: Options,
        poster: Poster,
        state: State,
        log: Callable[[str], None],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.o = options
        self.poster = poster
        self.state = state
        self.log = log
        self.monotonic = monotonic
        self.published = state.files()
        self.clock = IncreasingClock(after=state.last_time())
        self.debouncer = Debouncer(options.quiet_s)
        self.posted = 0
        """Changes acknowledged by the hub in this run."""

    # --- start-up: the pending batch, then the difference --------------------------------

    def catch_up(self) -> None:
        """Post the batch a previous run left pending, then queue the difference between the
        tree and the state; files modified within the quiet period wait their turn."""
        pending = self.state.pending()
        if pending is not None:
            self.log(f"re-posting the batch left pending ({len(pending.rows)} changes)")
            self._post(pending)
        scanned = scan(self.o.root, self.o.skips, exclude=self.o.exclude)
        now_ns = time.time_ns()
        quiet_ns = int(self.o.quiet_s * 1e9)
        look = to_look_at(scanned, self.published)
        for path in look:
            stat = scanned.get(path)
            recent = stat is not None and now_ns - stat.mtime_ns < quiet_ns
            # An old file is as quiet as it gets: due at once. A recent one waits.
            self.debouncer.touch(path, stat, self.monotonic() - (0 if recent else self.o.quiet_s))
        if look:
            self.log(f"catching up: {len(look)} files differ from the published state")
        self.publish_due()

    # --- events ----------------------------------------------------------------------------

    def events(self, changes: Iterable[tuple[Event, str]]) -> None:
        now = self.monotonic()
        for kind, raw in changes:
            path = Path(raw)
            rel = relative(self.o.root, path)
            if rel is None or self._ignored(rel, path):
                continue
            if kind == Event.added and path.is_dir() and not path.is_symlink():
                # A folder created or moved in: its files may predate the watch on it.
                for inner, found in scan(
                    self.o.root, self.o.skips, under=rel, exclude=self.o.exclude
                ).items():
                    self.debouncer.touch(inner, found, now)
                continue
            stat = regular_stat(path)
            self.debouncer.touch(rel, stat, now)
            if stat is None and rel not in self.published and not path.exists():
                # Not a file we published: perhaps a folder deleted or moved away, and what
                # was published under it is gone too.
                prefix = rel + "/"
                for gone in (*self.published, *self.debouncer.pending()):
                    if gone.startswith(prefix):
                        self.debouncer.touch(gone, regular_stat(self.o.root / gone), now)

    def _ignored(self, rel: str, path: Path) -> bool:
        if self.o.skips.skipped(rel):
            return True
        absolute = os.path.abspath(path)
        return any(
            absolute == str(ex) or absolute.startswith(str(ex) + os.sep) for ex in self.o.exclude
        )

    # --- publishing ------------------------------------------------------------------------

    def publish_due(self) -> None:
        """Publish every due file that is still as it was when last touched, in batches."""
        if not self.o.root.is_dir():
            # Its files are not deleted resources: a volume unmounted, a folder moved away
            # by mistake. Telling every mirror to delete everything is not for us to decide.
            raise TreeGone(f"{self.o.root}: the tree is gone; nothing published for it")
        decided: list[Decided] = []
        refreshed: list[Row] = []
        for path, seen in self.debouncer.due(self.monotonic()):
            now = regular_stat(self.o.root / path)
            if now != seen:
                self.debouncer.touch(path, now, self.monotonic())  # still changing
                continue
            facts = None if now is None else read_facts(self.o.root / path, now)
            if now is not None and facts is None:
                self.debouncer.touch(path, regular_stat(self.o.root / path), self.monotonic())
                continue
            self.debouncer.done(path)
            published = self.published.get(path)
            change = decide(facts, published)
            if change is not None:
                decided.append(Decided(path, change, facts, now))
            elif facts is not None and now is not None and published is not None:
                refreshed.append(Row(path, _published(facts, now)))
            if len(decided) >= self.o.batch_entries:
                self._publish(decided)
                decided = []
        if decided:
            self._publish(decided)
        if refreshed:
            self.state.refresh(refreshed)
            self.published.update((r.path, r.published) for r in refreshed if r.published)

    def _publish(self, decided: Sequence[Decided]) -> None:
        body = build_fragment(
            ((CommandChange(d.change, uri_of(self.o.base_url, d.path)), d.facts) for d in decided),
            self.clock,
        )
        rows = tuple(
            Row(d.path, _published(d.facts, d.stat) if d.facts and d.stat else None)
            for d in decided
        )
        pending = Pending(derived_key(self.poster.topic, body), body, rows)
        last = self.clock.last
        assert last is not None  # build_fragment stamped at least one change
        self.state.set_pending(pending, last)
        self._post(pending)
        counts: dict[str, int] = {}
        for d in decided:
            counts[d.change.value] = counts.get(d.change.value, 0) + 1
        self.log(
            "published "
            + ", ".join(f"{n} {kind}" for kind, n in counts.items())
            + f": {_names(d.path for d in decided)}"
        )

    def _post(self, pending: Pending) -> None:
        receipt = self.poster.post(pending.body, pending.key)
        if receipt.get("replayed") or receipt.get("duplicates"):
            # A batch the hub committed before (its answer lost, or this process killed
            # before recording it): answered from its receipt, or its changes held already.
            self.log(
                f"the hub already had this batch (replayed: {bool(receipt.get('replayed'))}, "
                f"duplicates: {int(receipt.get('duplicates') or 0)})"
            )
        self.state.acknowledged()
        for row in pending.rows:
            if row.published is None:
                self.published.pop(row.path, None)
            else:
                self.published[row.path] = row.published
        if not receipt.get("replayed"):
            self.posted += int(receipt.get("accepted", 0))

    # --- the loops -------------------------------------------------------------------------

    def once(self, sleep: Callable[[float], None] = time.sleep) -> None:
        """Publish the difference, waiting for files still being written to settle."""
        self.catch_up()
        while len(self.debouncer):
            sleep(TICK_S)
            self.publish_due()

    def run(self, stop: Any = None) -> None:
        """Catch up, then publish changes as they happen until ``stop`` is set (or a
        signal: KeyboardInterrupt)."""
        batches = self._watching(stop)
        self.events(next(batches))  # the watch is in place: nothing is missed from here on
        self.catch_up()
        for changes in batches:
            self.events(changes)
            self.publish_due()

    def _watching(self, stop: Any) -> Iterator[set[tuple[Event, str]]]:
        return watch(
            self.o.root,
            watch_filter=None,
            debounce=int(TICK_S * 1000),
            step=10,
            rust_timeout=int(TICK_S * 1000),
            yield_on_timeout=True,
            stop_event=stop,
            raise_interrupt=True,
            force_polling=self.o.force_polling,
            ignore_permission_denied=True,
        )


def _published(facts: FileFacts, stat: Stat) -> Published:
    return Published(stat.size, stat.mtime_ns, facts.md5, facts.sha256)


def _names(paths: Iterable[str], most: int = 5) -> str:
    names = list(paths)
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")
