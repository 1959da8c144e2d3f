"""When a file is quiet enough to publish: pure, the caller gives the clock and the stats.

A path is *touched* by every event naming it, with the file's stat at that moment (None when
it is gone or not a regular file). It is *due* once ``quiet_s`` passed since its last touch;
the caller then compares the stat now with the stat of that touch: the same → the file has
been stable for the whole quiet period, publish it; different → touch it again and wait.
A writer that pauses longer than the quiet period between writes is seen as done: writing
under a skipped name (``*.part``, ``*.tmp``) and renaming is what makes a file appear whole.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .tree import Stat


@dataclass
class Debouncer:
    quiet_s: float
    _touched: dict[str, tuple[float, Stat | None]] = field(default_factory=dict)

    def touch(self, path: str, stat: Stat | None, now: float) -> None:
        self._touched[path] = (now, stat)

    def due(self, now: float) -> list[tuple[str, Stat | None]]:
        """The paths quiet for ``quiet_s``, with their stat at the last touch, in path order;
        they stay pending until :meth:`done` (or a new touch)."""
        return sorted(
            (
                (path, stat)
                for path, (when, stat) in self._touched.items()
                if now - when >= self.quiet_s
            ),
            key=lambda item: item[0],
        )

    def done(self, path: str) -> None:
        self._touched.pop(path, None)

    def pending(self) -> list[str]:
        return sorted(self._touched)

    def __len__(self) -> int:
        return len(self._touched)
