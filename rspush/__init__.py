"""rspush: ResourceSync with push.

The packages, in the order data flows through them (each imports only those above it):

- ``rspush.resourcesync``: the document layer, I/O-free (models, the hardened parser, the
  serialiser, the validator) and ``rs-validate``.
- ``rspush.protocol``: the push contract both ends share, sans-I/O.
- ``rspush.remote``: reading a remote, pull-only ResourceSync Source over HTTP (discovery,
  capped conditional document reads), shared by the hub's ResourceSync bridge and the agent.
- ``rspush.hub``: the service (ingest, the Redis store, push, materialised documents, HTTP
  edge, ``rs-hub``); needs the ``hub`` extra.
- ``rspush.subscriber``: ``rs-subscribe``, the Destination agent.
- ``rspush.source``: ``rs-publish``, what a Source runs (one post, or ``rs-publish watch``
  publishing a directory tree); base install.

The hub, the subscriber and the source never import each other.
"""
