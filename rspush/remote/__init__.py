"""Reading a remote, pull-only ResourceSync Source over HTTP: discovery (Z39.99 §6) and
capped, conditional, deadline-bound document reads.

Shared by the Destination agent (``rspush.subscriber``) and the hub's ResourceSync bridge
(``rspush.hub.bridges``); it imports neither. The pure parts (links, pages, candidate URLs)
are in :mod:`.links` and :mod:`.retry` (``Retry-After``, also read by the Source-side
``rs-publish``); :mod:`.discovery` and :mod:`.reader` do the I/O.
"""
