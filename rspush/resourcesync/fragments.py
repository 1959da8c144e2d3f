"""What a Change List *fragment* must satisfy: the document a Source posts to a hub.

A fragment is Change-List-format (``<urlset>``, capability ``changelist``) or a change
notification (change notification spec §4: ``change-notification``, or the draft's
``changelist-notification``), lists at least one change, and breaks no rule of Z39.99 except
two: ``rs:md@from`` and ``@until`` may be missing (Appendix A asks them of a Change List the
Source publishes; the hub, not the Source, decides the intervals of the lists it publishes).

The hub's ingest applies the same rules (its own limits — entries per request, the future
tolerance of its clock, one push frame per change — come on top: they depend on its settings).
"""

from __future__ import annotations

from .models import Capability, Document
from .validator import validate
from .violations import Severity, Violation

FRAGMENT_CAPABILITIES = frozenset(
    {
        Capability.CHANGELIST.value,
        Capability.CHANGE_NOTIFICATION.value,
        Capability.CHANGELIST_NOTIFICATION.value,
    }
)
RELAXED_FOR_FRAGMENTS = frozenset({"time-from-missing", "time-until-missing"})
"""Rules a fragment need not follow: the hub assigns from/until to what it publishes."""
_NOT_ASKED = RELAXED_FOR_FRAGMENTS | {"up-link"}
"""Nor is the ``up`` link to a Capability List asked of a fragment (a warning for lists):
the hub links what it publishes to its own Capability List."""
SECTION = "change notification §4"


def fragment_violations(document: Document) -> list[Violation]:
    """Every reason a hub would refuse ``document`` as a posted fragment, before its own
    limits; warnings of the spec's rules are kept as warnings."""
    found: list[Violation] = []
    if document.capability not in FRAGMENT_CAPABILITIES or document.is_index:
        found.append(
            Violation(
                rule="fragment-capability",
                message="a fragment is a <urlset> with capability 'changelist' (or a change "
                f"notification); got <{document.root}> capability={document.capability!r}",
                section=SECTION,
            )
        )
    if not document.entries:
        found.append(
            Violation(
                rule="fragment-empty", message="the fragment lists no changes", section=SECTION
            )
        )
    found += [v for v in validate(document) if v.rule not in _NOT_ASKED]
    return found


def is_valid_fragment(document: Document) -> bool:
    return not any(v.severity is Severity.ERROR for v in fragment_violations(document))
