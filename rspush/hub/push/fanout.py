"""One frame, framed once, written to many connections.

A hub-to-client frame is the same on the wire for every connection of the push port: a
server's frames are not masked (RFC 6455 §5.1, §5.3) and the port negotiates no extension
(``compression=None``), so the header and payload bytes depend on the payload alone. They
are built once per frame (:func:`wire_text`) and the same bytes object is handed to every
connection's transport (:func:`write_text`), where ``websockets.broadcast`` builds, frames
and copies a message per connection. What ``broadcast`` checks per connection is kept: a
connection not open, or in the middle of sending a fragmented message, is skipped; one with
an extension (never, on this port) goes through websockets' own framing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from websockets.asyncio.server import ServerConnection
from websockets.frames import Frame, Opcode
from websockets.protocol import State

log = logging.getLogger("rspush.hub.push")


def wire_text(payload: bytes) -> bytes:
    """``payload`` (UTF-8 already) as one unmasked, final text frame (RFC 6455 §5.2), header
    and payload as they go on the wire from a server without extensions."""
    return Frame(Opcode.TEXT, payload).serialize(mask=False, extensions=[])


def write_text(connections: Iterable[ServerConnection], payload: bytes, wire: bytes) -> int:
    """Write one text frame to every open connection of ``connections``: ``wire`` (from
    :func:`wire_text` of ``payload``) as it is, or ``payload`` framed by websockets for a
    connection that negotiated an extension. Returns how many connections it was written
    to. Like ``websockets.broadcast``, no backpressure: the caller bounds each connection's
    send buffer before calling.

    Unlike ``broadcast``, a connection the frame cannot be written to is dropped rather than
    skipped: it must not go on receiving the frames after the one it missed. Its client
    resumes from the last position it has."""
    written = 0
    for connection in connections:
        protocol = connection.protocol
        # Closing or closed: the close frame may be out, nothing may follow it (RFC 6455
        # §5.5.1). Sending a fragmented message: a frame may not go between its fragments.
        if protocol.state is not State.OPEN or connection.send_in_progress is not None:
            continue
        try:
            if protocol.extensions:
                protocol.send_text(payload)
                connection.send_data()
            else:
                connection.transport.write(wire)
        except Exception as exc:
            log.warning("push write failed, dropping the connection: %s", exc)
            connection.transport.abort()
            continue
        written += 1
    return written
