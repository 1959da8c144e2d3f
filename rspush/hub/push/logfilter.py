"""Rate-limited logging for errors that can repeat thousands of times a second under attack
or resource exhaustion (``accept()`` failing with "Too many open files", failed handshakes):
each distinct message is logged at most once per interval, with how many were dropped."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


class RateLimitFilter(logging.Filter):
    """Let through the first record of each (logger, message template) per ``interval_s``;
    the next one let through says how many were suppressed meanwhile."""

    def __init__(self, interval_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.interval_s = interval_s
        self.clock = clock
        self._last: dict[tuple[str, str], float] = {}
        self._dropped: dict[tuple[str, str], int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        # The first line names the error; the rest (asyncio adds the socket, its descriptor
        # and address) differs from one occurrence to the next.
        key = (record.name, str(record.msg).split("\n", 1)[0])
        now = self.clock()
        last = self._last.get(key)
        if last is not None and now - last < self.interval_s:
            self._dropped[key] = self._dropped.get(key, 0) + 1
            return False
        self._last[key] = now
        dropped = self._dropped.pop(key, 0)
        if dropped:
            record.msg = f"{record.msg} (and {dropped} more like it in the last interval)"
        return True
