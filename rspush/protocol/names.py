"""The protocol's version and the names it adds to ResourceSync (docs/protocol.md,
"Finding the endpoint" and "Change frames")."""

from __future__ import annotations

PROTOCOL_VERSION = 2
"""The newest version of the protocol; a hub refuses a ``subscribe`` naming one it does not
speak (:data:`SUPPORTED_VERSIONS`)."""

BASE_VERSION = 1
"""The version a ``subscribe`` message names when it asks for nothing newer: version 1
clients and hubs are unaffected by what later versions add."""

FRAMEWORK_VERSION = 2
"""The first version with framework frames (a client asks for them with ``"framework":
true``; docs/protocol.md, "Framework frames")."""

SUPPORTED_VERSIONS = frozenset({BASE_VERSION, FRAMEWORK_VERSION})
"""Every version this hub speaks."""

PUSH_REL = "urn:rspush:websocket"
"""Link relation advertising the WebSocket endpoint (a URI, as RFC 8288 §2.1.2 allows for
extension relations): in Capability Lists (``rs:ln`` on the change-notification entry) and in
HTTP Link headers. The WebSub ``rel="hub"`` keeps pointing at the HTTP hub URI."""

RSPUSH_NS = "urn:rspush:1"
"""Namespace of the position/topic/epoch attributes added to pushed XML notifications
(Z39.99 §7 allows attributes in other namespaces)."""
