"""The WebSocket push channel (protocol in docs/protocol.md)."""
