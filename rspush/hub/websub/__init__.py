"""The W3C WebSub hub of the change-notification channels (notification spec §4.2-§4.4).

Pure parts, no I/O: :mod:`.form` (subscription requests), :mod:`.leases` (lease arithmetic),
:mod:`.signature` (``X-Hub-Signature``), :mod:`.batches` (notification documents),
:mod:`.backoff` (retry schedule), :mod:`.addresses` (callback address policy),
:mod:`.channels` (topic URI -> topic and channel). I/O: :mod:`.callbacks` (requests to
callbacks), :mod:`.subscriptions` (verification of intent), :mod:`.delivery` (one task per
subscription). Subscriptions, cursors and leases are in Redis through :mod:`..store`.
"""
