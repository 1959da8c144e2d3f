"""The watermark: where a topic's sync stands — every change up to it is done.

Changes are submitted in stream order and finish in any order (different URIs apply
concurrently). :class:`WatermarkTracker` numbers them as they are submitted and moves the
watermark only over the gap-free prefix of finished ones, so after a crash nothing before
the watermark is missing and everything after it is simply submitted again (and skipped
where already applied: :func:`rspush.subscriber.decide.decide`). Pure: no I/O, no event loop; the
mirror writes what it reports to the checkpoint.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from .changes import Channel, ResourceChange


@dataclass(frozen=True, slots=True)
class Watermark:
    """Where a topic's sync stands: everything at or before it is applied."""

    epoch: str | None
    position: str | None
    """The hub's stream position, when the last change came by push; None after polling."""
    last_time: datetime | None


NO_WATERMARK = Watermark(None, None, None)


class WatermarkTracker:
    """Feed it submitted and finished changes; :attr:`watermark` is where the gap-free
    prefix of finished ones stands."""

    def __init__(self, watermark: Watermark = NO_WATERMARK) -> None:
        self.watermark = watermark
        self.epoch: str | None = watermark.epoch
        """The stream's epoch as last heard (from a change or a subscription)."""
        self._order: deque[int] = deque()
        self._pending: dict[int, ResourceChange] = {}
        self._done: set[int] = set()
        self._seq = 0

    def submitted(self, change: ResourceChange) -> int:
        """Number ``change`` (the order of submission is the order of the stream)."""
        self._seq += 1
        self._order.append(self._seq)
        self._pending[self._seq] = change
        return self._seq

    def submitted_many(self, changes: list[ResourceChange]) -> list[int]:
        """:meth:`submitted` of each of ``changes``, in order: their numbers."""
        first = self._seq + 1
        self._seq += len(changes)
        seqs = range(first, self._seq + 1)
        self._order.extend(seqs)
        self._pending.update(zip(seqs, changes, strict=True))
        return list(seqs)

    def finished(self, seq: int) -> bool:
        """The change numbered ``seq`` is done (applied, skipped, failed or superseded —
        whatever became of it); True when the watermark moved."""
        self._done.add(seq)
        return self._advance()

    def finished_many(self, seqs: Iterable[int]) -> bool:
        """:meth:`finished` of several changes at once (a run of them: one new watermark)."""
        self._done.update(seqs)
        return self._advance()

    def _advance(self) -> bool:
        moved = False
        last: ResourceChange | None = None
        latest = self.watermark.last_time
        while self._order and self._order[0] in self._done:
            first = self._order.popleft()
            self._done.discard(first)
            change = self._pending.pop(first)
            moved = True
            if change.channel == Channel.RETRY:
                continue  # the prefix advanced; where the stream stands did not
            if change.epoch is not None:
                self.epoch = change.epoch
            last = change
            if latest is None or change.time > latest:
                latest = change.time  # never back in time
        if last is not None:
            # position: None for polled/archived changes: resume by time then.
            self.watermark = Watermark(self.epoch, last.position, latest)
        return moved

    def note_epoch(self, epoch: str | None) -> bool:
        """The hub named the stream's epoch (a subscription began). It is kept with the
        watermark even before a change moves it: a later resume by time sends it, so a
        recreated stream is noticed instead of being taken for a continuation. True when
        the watermark changed."""
        changed = bool(epoch) and self.watermark.epoch is None
        if changed:
            self.watermark = Watermark(epoch, self.watermark.position, self.watermark.last_time)
        self.epoch = epoch or self.epoch
        return changed

    def reset(self, watermark: Watermark) -> None:
        """Move the watermark without a change (a baseline's ``at``, where the lists start).
        Only when nothing is in flight."""
        self.watermark = watermark
        self.epoch = watermark.epoch
