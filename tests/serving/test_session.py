"""The session store's idle rule, by its clock: no server, no waiting (test_app.py plays it for real)."""

from __future__ import annotations

import pytest

from serving.session import ServeError, ServerLimits, ServeSettings, SessionStore


def test_idle_http_sessions_close_past_the_limit_and_not_before():
    store = SessionStore(ServeSettings(limits=ServerLimits(idle_seconds=30)))
    session = store.open("http")
    last = session.last_active
    assert store.expire(now=last + 29.9) == [] and store.expire(now=last + 30) == []
    assert store.expire(now=last + 30.01) == [session.id]
    assert store.sessions == {}
    with pytest.raises(ServeError) as gone:
        store.get(session.id)
    assert gone.value.code == "UNKNOWN_SESSION" and "30 s idle" in gone.value.message


def test_a_request_restarts_the_idle_clock():
    store = SessionStore(ServeSettings(limits=ServerLimits(idle_seconds=30)))
    session = store.open("http")
    now = session.last_active
    session.last_active = now - 100  # its last request, 100 s ago
    assert store.get(session.id) is session  # a request now
    assert store.expire(now=now + 1) == [] and set(store.sessions) == {session.id}


def test_websocket_sessions_are_left_to_their_socket():
    """A WebSocket session is closed by its connection's own idle timer, never by the store's sweep."""
    store = SessionStore(ServeSettings(limits=ServerLimits(idle_seconds=30)))
    socket = store.open("ws")
    assert store.expire(now=socket.last_active + 3600) == []
    assert set(store.sessions) == {socket.id}
    store.close(socket.id)
    assert store.sessions == {}


@pytest.mark.slow  # builds the app
def test_everything_that_touches_a_session_runs_on_the_event_loop():
    """One session, one thread (issue 33): every HTTP route and WebSocket handler and every MCP tool is a
    coroutine; a plain function would run in a worker thread beside the loop (the MCP SDK and FastAPI both
    do that), and two calls on one session could interleave inside the environment."""
    import asyncio
    import inspect

    from serving.app import create_app
    from serving.mcp_seat import build_mcp

    app = create_app(ServeSettings())
    endpoints = [route.endpoint for route in app.routes if hasattr(route, "endpoint") and hasattr(route, "methods")
                 or type(route).__name__ == "APIWebSocketRoute"]
    handlers = [e if inspect.isfunction(e) else e.__call__ for e in endpoints]  # /mcp: an ASGI app
    assert len(handlers) > 10 and all(inspect.iscoroutinefunction(h) for h in handlers), \
        [h.__qualname__ for h in handlers if not inspect.iscoroutinefunction(h)]
    tools = asyncio.run(build_mcp(ServeSettings(), SessionStore(ServeSettings())).list_tools())
    assert {t.name for t in tools} == {"start_episode", "observe", "act", "preview", "episode_state", "end_episode"}
    server = build_mcp(ServeSettings(), SessionStore(ServeSettings()))
    assert all(server._tool_manager.get_tool(t.name).is_async for t in tools)
