"""Bridges: the hub polls a pull-only remote (an OAI-PMH repository, a ResourceSync Source)
and is the only Source of a topic (docs/bridges.md). The contract is in :mod:`.base`."""
