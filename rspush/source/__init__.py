"""The Source side of rspush: ``rs-publish``, what a Source runs to tell a hub of its changes.

- :mod:`.publish`: one post (a fragment file, or changes given as options);
- ``rs-publish watch`` (:mod:`.watch_cli`, :mod:`.watcher`): a directory tree published as it
  changes, with restart catch-up (:mod:`.state`) exactly once.

Errors: :mod:`.errors` (one root, :class:`~.errors.PublishError`).

Part of the base install: it needs neither the hub's server dependencies nor the subscriber,
and imports neither (tests/test_layering.py).
"""
