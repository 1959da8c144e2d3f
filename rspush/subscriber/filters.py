"""Which resources a Destination wants (pure).

The OAI-PMH "sets" and "metadata formats" of ResourceSync: URI patterns, collections
(``rs:ln rel="collection"``, Z39.99 §8.2 linking), metadata records chosen by what they
describe or by their profile (``rs:ln rel="profile"`` or, in 1.1, ``rs:ln@profile``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from .changes import ResourceChange


@dataclass(frozen=True)
class ChangeFilter:
    include: tuple[re.Pattern[str], ...] = ()
    exclude: tuple[re.Pattern[str], ...] = ()
    collection: str | None = None
    describedby: str | None = None
    profile: str | None = None

    @classmethod
    def build(
        cls,
        include: Sequence[str] = (),
        exclude: Sequence[str] = (),
        collection: str | None = None,
        describedby: str | None = None,
        profile: str | None = None,
    ) -> ChangeFilter:
        def compile_all(patterns: Sequence[str], option: str) -> tuple[re.Pattern[str], ...]:
            try:
                return tuple(re.compile(p) for p in patterns)
            except re.error as exc:
                raise ValueError(f"{option} {exc.pattern!r}: {exc}") from None

        return cls(
            compile_all(include, "--include"),
            compile_all(exclude, "--exclude"),
            collection,
            describedby,
            profile,
        )

    @cached_property
    def active(self) -> bool:
        return bool(
            self.include or self.exclude or self.collection or self.describedby or self.profile
        )

    def wants(self, change: ResourceChange) -> bool:
        """True when the change concerns a resource this Destination mirrors.

        ``--include``: the URI matches one of them (search, not full match); ``--exclude``:
        it matches none; ``--collection``: a ``collection`` link to that URI;
        ``--describedby``: a ``describedby`` link whose href starts with that URI (resources
        that have a metadata record there); ``--profile``: a metadata record in that format.
        """
        if not self.active:
            return True  # no filter: every change (and no generator per change to say so)
        if not self.wants_uri(change.uri):
            return False
        links = change.links
        if self.collection is not None and not any(
            ln.rel == "collection" and ln.href == self.collection for ln in links
        ):
            return False
        if self.describedby is not None and not any(
            ln.rel == "describedby" and ln.href.startswith(self.describedby) for ln in links
        ):
            return False
        return self.profile is None or any(
            (ln.rel == "profile" and ln.href == self.profile) or ln.profile == self.profile
            for ln in links
        )

    def wants_uri(self, uri: str) -> bool:
        """``--include`` and ``--exclude`` alone: what a URI says, without the change's links
        (also asked of a redirect's target)."""
        if self.include and not any(p.search(uri) for p in self.include):
            return False
        return not any(p.search(uri) for p in self.exclude)
