"""Whether a change needs applying, given what the mirror holds (pure).

Apply is idempotent on (URI, change time, change type) and never goes back in time: a change
older than the resource's recorded state is skipped (delivery is at least once, apply is
idempotent). A deletion leaves a tombstone, so a late replay of an older ``created``
cannot resurrect the resource.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from rspush.resourcesync.hashes import HashValue, parse_hashes

from .changes import ChangeType, ResourceChange


@dataclass(frozen=True, slots=True)
class ResourceState:
    """What the checkpoint records per resource."""

    uri: str
    time: datetime
    change: str
    length: int | None
    hash: str | None
    """The Source's ``hash`` attribute as given (any encoding), or our own ``sha256:`` hex."""
    path: str | None

    @property
    def hashes(self) -> tuple[HashValue, ...]:
        return parse_hashes(self.hash) if self.hash else ()


_new = object.__new__
_set_uri, _set_time, _set_change, _set_length, _set_hash, _set_path = (
    getattr(ResourceState, f).__set__ for f in ResourceState.__dataclass_fields__
)


def new_state(
    uri: str, time: datetime, change: str, length: int | None, hash: str | None, path: str | None
) -> ResourceState:
    """``ResourceState(uri, time, change, length, hash, path)`` for a run's thousands: its
    fields set through their slots, not by name as a frozen dataclass's ``__init__`` does."""
    made: ResourceState = _new(ResourceState)
    _set_uri(made, uri)
    _set_time(made, time)
    _set_change(made, change)
    _set_length(made, length)
    _set_hash(made, hash)
    _set_path(made, path)
    return made


class Decision(StrEnum):
    APPLY = "apply"
    SKIP_OLDER = "skip-older"
    SKIP_DUPLICATE = "skip-duplicate"
    SAME_CONTENT = "same-content"
    """The mirror already holds these bytes (same length and hash): record, do not fetch."""


def decide(stored: ResourceState | None, change: ResourceChange) -> Decision:
    if stored is None:
        return Decision.APPLY
    if change.time < stored.time:
        return Decision.SKIP_OLDER
    # The same change again — unless it announces other bytes than we hold: Sources may give
    # two updates one time (times only must not go backwards), and the later one wins.
    same_change = change.time == stored.time and change.change == stored.change
    if same_change and not _conflicts(change, stored):
        return Decision.SKIP_DUPLICATE
    if (
        change.change != ChangeType.DELETED
        and stored.change != ChangeType.DELETED
        and change.length is not None
        and change.length == stored.length
        and _same_digest(change.hashes, stored.hashes)
    ):
        return Decision.SAME_CONTENT
    return Decision.APPLY


def _conflicts(change: ResourceChange, stored: ResourceState) -> bool:
    """True when the change's length or a digest comparable with ours differs."""
    if change.change == ChangeType.DELETED:
        return False
    if change.length is not None and stored.length is not None and change.length != stored.length:
        return True
    return _comparable(change.hashes, stored.hashes) and not _same_digest(
        change.hashes, stored.hashes
    )


def _comparable(announced: tuple[HashValue, ...], held: tuple[HashValue, ...]) -> bool:
    names = {h.hashlib_name or h.algorithm.lower() for h in held}
    return any((h.hashlib_name or h.algorithm.lower()) in names for h in announced)


def _same_digest(announced: tuple[HashValue, ...], held: tuple[HashValue, ...]) -> bool:
    """True when some algorithm appears in both with the same digest (hex or base64)."""
    for new in announced:
        for old in held:
            # "sha-256" (the spec's name) and "sha256" are one algorithm.
            if (new.hashlib_name or new.algorithm.lower()) != (
                old.hashlib_name or old.algorithm.lower()
            ):
                continue
            raw = old.raw
            if raw is not None and new.matches_digest(raw):
                return True
    return False
