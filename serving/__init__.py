"""Serving: the arena over HTTP/WebSocket (remote seats)."""
