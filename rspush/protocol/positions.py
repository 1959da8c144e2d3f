"""Stream positions (docs/protocol.md, "Positions and epochs").

A position is the Redis stream id ``ms-seq`` of a change in its topic's stream: totally
ordered, so a client can resume *after* the last one it received and de-duplicate a seam. An
epoch (an opaque string) names one life of a stream: positions of different epochs are not
comparable.
"""

from __future__ import annotations

from dataclasses import dataclass

from .closing import ProtocolError

MAX_SEQ = 2**64 - 1
"""A stream id's sequence part is an unsigned 64-bit integer."""
MAX_MS = 2**64 - 1
"""So is its milliseconds part: Redis refuses a larger one, so the parser does first."""


@dataclass(frozen=True, order=True, slots=True)
class Position:
    """A Redis stream id ``ms-seq``, ordered numerically (``9-0`` < ``10-0``)."""

    ms: int
    seq: int

    @classmethod
    def parse(cls, text: str) -> Position:
        ms, sep, seq = text.partition("-")
        if not (ms.isascii() and ms.isdigit() and (not sep or (seq.isascii() and seq.isdigit()))):
            raise ProtocolError(f"position {text!r} is not a stream id like 1700000000000-0")
        # 2**64 - 1 has 20 digits: longer text is out of range before int() reads it.
        if len(ms) > 20 or len(seq) > 20 or int(ms) > MAX_MS or int(seq or 0) > MAX_SEQ:
            raise ProtocolError(
                f"position {text!r} is out of range: both parts are unsigned 64-bit integers"
            )
        return cls(int(ms), int(seq or 0))

    def __str__(self) -> str:
        return f"{self.ms}-{self.seq}"

    def predecessor(self) -> Position:
        """The greatest position before this one: resuming *after* it replays this one."""
        if self.seq > 0:
            return Position(self.ms, self.seq - 1)
        return Position(self.ms - 1, MAX_SEQ) if self.ms > 0 else self


ZERO = Position(0, 0)
"""Before every change: resuming after it replays the whole stream."""
