"""The push process's heap as it stands once serving starts, kept out of garbage collection.

What exists when the push endpoint has started (the imported modules, settings, feeds, the
server) lives as long as the process. CPython's full collections still scan all of it, each
time: with the hub's modules that is some 70,000 objects, and a full collection paused the
event loop — every delivery — for tens of milliseconds on a busy machine, which is what the
slowest percent of deliveries waited for. Moved to the permanent generation
(:func:`gc.freeze`), they are no longer scanned, and a full collection only looks at what
came after (connections, batches): a few milliseconds. Garbage is collected first, so none of
it is kept for ever.
"""

from __future__ import annotations

import gc

_frozen = False


def freeze_startup_heap() -> bool:
    """Collect, then freeze every object that is left; only the first call of a process does
    anything (a later server of the same process, e.g. in tests, freezes nothing more).
    True when this call froze."""
    global _frozen
    if _frozen:
        return False
    _frozen = True
    gc.collect()
    gc.freeze()
    return True
