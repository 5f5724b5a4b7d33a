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

    def flat(routes: list) -> list:  # an included router (serving.app.routes) is one entry of app.routes
        return [r for route in routes
                for r in (flat(route.original_router.routes) if hasattr(route, "original_router") else [route])]

    endpoints = [route.endpoint for route in flat(app.routes) if hasattr(route, "endpoint") and hasattr(route, "methods")
                 or type(route).__name__ == "APIWebSocketRoute"]
    handlers = [e if inspect.isfunction(e) else e.__call__ for e in endpoints]  # /mcp: an ASGI app
    assert len(handlers) > 10 and all(inspect.iscoroutinefunction(h) for h in handlers), \
        [h.__qualname__ for h in handlers if not inspect.iscoroutinefunction(h)]
    tools = asyncio.run(build_mcp(ServeSettings(), SessionStore(ServeSettings())).list_tools())
    assert {t.name for t in tools} == {"start_episode", "observe", "act", "preview", "episode_state", "end_episode"}
    server = build_mcp(ServeSettings(), SessionStore(ServeSettings()))
    assert all(server._tool_manager.get_tool(t.name).is_async for t in tools)


def test_every_seats_last_tick_names_the_shocks_that_touch_it_and_each_credibility_loss():
    """A team hears of audits, market crises and the job shocks aimed at it; the broker of crises; the allocator of
    every shock; no event runs past the episode's last tick; every credibility loss carries its causes in words."""
    import commons_arena
    from policies.focal import FocalEnv
    from policies.population import Population
    from serving.session import SEEN_BY_TEAMS, seat_tick_info
    from serving.wire import decode_action, seat_spec

    config = commons_arena.load_scenario("standard")
    causes_seen: set[str] = set()
    for seed in range(4):
        env = FocalEnv(commons_arena.parallel_env(config), ("search",), Population.default(config))
        env.reset(seed=seed)
        escalate = decode_action(seat_spec(config, "search"), {"stance": "escalate"})  # escalates when not starved too
        while not env.episode_over:
            env.step({"search": escalate})
            report = env.arena.last_tick
            for seat in config.agents:
                info = seat_tick_info(config, report, seat, {"reward_terms": {}})
                events = info.get("events", [])
                assert all(e["until"] <= config.max_ticks - 1 for e in events)
                kinds = [e["kind"] for e in events]
                if seat == "allocator":
                    assert kinds == [e["kind"] for e in report.events]
                elif seat == "broker":
                    assert set(kinds) <= {"market_crisis"}
                else:
                    assert all(k in SEEN_BY_TEAMS or e.get("team") == seat for k, e in zip(kinds, events, strict=True))
                    assert len(events) == sum(e.get("team") == seat or e["kind"] in SEEN_BY_TEAMS for e in report.events)
                    i = config.team_names.index(seat)
                    lost = info.get("credibility_lost")
                    assert (lost is not None) == (report.outcome.credibility_lost[i] > 0)
                    if lost:
                        assert len(lost["causes"]) == report.exposed_bluffs[i] + report.unjustified[i] >= 1
                        causes_seen.update(c.split(" ")[1] for c in lost["causes"])
    assert causes_seen == {"compliance", "escalated"}  # both causes met on these seeds
