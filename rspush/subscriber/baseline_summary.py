"""What a finished baseline says (pure): how many resources it kept, filtered out and
refused, and whether it wrote nothing at all because every resource was refused — a
``--map`` that covers none of the Source's resources, which an operator must hear about
rather than see an agent that follows an empty mirror forever."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from .errors import SubscriberError, UnmappedURIError


class NothingWrittenError(SubscriberError):
    """Every resource of the baseline was refused: nothing was written (exit 1)."""

    retryable = False


@dataclass(frozen=True, slots=True)
class BaselineCounts:
    listed: int
    """Resources the Resource List (or Dump) named."""
    filtered: int
    """Left out by --include/--exclude/--collection/--describedby/--profile."""
    refused: int
    """Not writable where they map (no --map covers them, or a path that would escape)."""
    written: int
    """Changes recorded: written, deleted, or found already the same."""

    @classmethod
    def between(cls, listed: int, before: Counter[str], after: Counter[str]) -> BaselineCounts:
        """From the mirror's counters before and after the baseline."""
        return cls(
            listed,
            after["filtered"] - before["filtered"],
            after["refused"] - before["refused"],
            after["applied"] - before["applied"],
        )

    @property
    def kept(self) -> int:
        """Resources neither filtered out nor refused: what the mirror now follows."""
        return max(self.listed - self.filtered - self.refused, 0)

    def line(self, at: str) -> str:
        return (
            f"baseline complete: {self.kept} resources ({self.filtered} filtered out, "
            f"{self.refused} refused) as of {at}"
        )

    def nothing_written(self, first_refused: SubscriberError | None) -> NothingWrittenError | None:
        """The error ending the run when every resource was refused, else None."""
        if self.written or not self.refused:
            return None
        if isinstance(first_refused, UnmappedURIError):
            if first_refused.reason.startswith("no --map covers"):
                why = f"no --map covers {first_refused.uri}"
            else:
                why = f"{first_refused.uri}: {first_refused.reason}"
        else:
            why = str(first_refused) if first_refused is not None else "see the log"
        return NothingWrittenError(f"0 written, {self.refused} refused: {why}")
