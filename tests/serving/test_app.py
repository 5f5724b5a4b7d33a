"""The server, for real: uvicorn on 127.0.0.1 (a free port), played through HTTP and WebSocket.

Everything here goes over the wire: the project's client for full episodes, and raw
``httpx`` / ``websockets`` for malformed traffic, as an outside client would send it.
"""

from __future__ import annotations

import json
import time

import httpx
import numpy as np
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

import commons_arena
from commons_arena.recording import RecordEpisode, read_recording
from policies.focal import run_episode
from policies.population import Population
from policies.registry import make_policy
from serving.app import create_app, running_server
from serving.client import (
    ArenaClient,
    RemotePolicy,
    ServerError,
    agent_app,
    play_episode,
    policy_agent,
)
from serving.session import ServerLimits, ServeSettings
from serving.wire import decode_observation, seat_spec

# a real server; the fast loop keeps one quick test of it (a whole episode over HTTP and WebSocket)
pytestmark = pytest.mark.server

LIMITS = ServerLimits(max_sessions=6, idle_seconds=60.0, max_body_bytes=4096)


@pytest.fixture(scope="module")
def url():
    with running_server(ServeSettings(limits=LIMITS)) as base:
        yield base


@pytest.fixture
def http(url):
    with httpx.Client(base_url=url, timeout=10) as client:
        yield client
    # every test leaves the server empty (the capacity test counts on it)


def ws_url(url: str) -> str:
    return "ws" + url.removeprefix("http") + "/ws"


def ws_call(ws, kind, data=None):
    ws.send(json.dumps({"type": kind, **({"data": data} if data is not None else {})}))
    return json.loads(ws.recv(timeout=10))


def sid_of(body):
    """The session id of a /reset body (openenv's ResetResponse: ours ride in observation.metadata)."""
    return body["observation"]["metadata"]["session_id"]


def close_all(http, *session_ids):
    for sid in session_ids:
        http.post("/close", json={"session_id": sid})


# ------------------------------------------------------------------ info endpoints
@pytest.mark.slow
def test_health_metadata_schema(http):
    assert http.get("/health").json()["status"] == "healthy"
    assert http.get("/metadata").json()["name"] == "commons_arena_v0"
    info = http.get("/info").json()
    assert info["default_seats"] == ["allocator"] and info["limits"]["max_sessions"] == LIMITS.max_sessions
    assert {s["name"] for s in info["scenarios"]} == set(commons_arena.list_scenarios())
    schema = http.get("/schema", params={"seat": "search"}).json()
    assert set(schema) == {"action", "observation", "state"}
    request = schema["action"]["properties"]["request"]
    config = commons_arena.load_scenario("standard")
    highs = [item["maximum"] for item in request["anyOf"][0]["prefixItems"]]
    assert highs == commons_arena.action_layout(config, "search").high[:3].astype(int).tolist()
    assert request["x-axes"] == {"tier": list(config.tier_names)}
    assert "jobs" in schema["observation"]["properties"]
    bad = http.get("/schema", params={"seat": "nobody"})
    assert bad.status_code == 422 and "allocator" in bad.json()["error"]["allowed"]


# ------------------------------------------------------------------ full episodes
@pytest.mark.parametrize("transport", ["ws", "http"])
def test_full_episode_same_as_in_process(url, tmp_path, transport):
    """Same seed over the wire (remote allocator + server's background) = the same episode in-process."""
    config = commons_arena.load_scenario("standard")
    with ArenaClient(url, transport=transport) as client:
        out = play_episode(client, {"allocator": make_policy("max_min_fair", config, "allocator")}, seed=11,
                           record=True)
        remote = read_recording_text(client.recording(), tmp_path / "remote.jsonl")
    env = RecordEpisode(commons_arena.parallel_env("standard"), tmp_path / "local.jsonl")
    local = run_episode(env, Population.default(config).with_agent("allocator", "max_min_fair"), seed=11)
    env.close()
    assert out["done"] and out["step_count"] == config.max_ticks
    assert out["returns"]["allocator"] == pytest.approx(local["allocator"]["return"], abs=1e-9)
    assert out["metadata"]["info"]["allocator"]["episode"] == pytest.approx(local["allocator"])
    expected = read_recording(tmp_path / "local.jsonl")[0]
    assert remote["ticks"] == expected["ticks"] and remote["summary"] == expected["summary"]


def read_recording_text(text, path):
    path.write_text(text)
    return read_recording(path)[0]


@pytest.mark.slow
def test_two_concurrent_sessions_are_independent(url):
    """Interleaved steps of two sessions give what each gives alone."""
    def trajectory(clients_and_seeds):
        results = {i: [c.reset(seed=s).observation] for i, (c, s) in enumerate(clients_and_seeds)}
        for _ in range(5):
            for i, (c, _) in enumerate(clients_and_seeds):
                results[i].append(c.step({"grant": {"search": {"small": 1 + i}}, "buy": [i, 0, 0]}).observation)
        return results

    with ArenaClient(url) as a, ArenaClient(url, transport="http") as b:
        together = trajectory([(a, 1), (b, 2)])
    with ArenaClient(url) as a:
        alone_a = trajectory([(a, 1)])[0]
    with ArenaClient(url) as a, ArenaClient(url) as dummy:  # b's seed alone, in the same seat position
        dummy.reset(seed=99)
        alone_b = trajectory([(dummy, 99), (a, 2)])[1]
    assert together[0] == alone_a and together[1] == alone_b
    assert together[0] != together[1]


@pytest.mark.slow
def test_multi_seat_session(url):
    with ArenaClient(url) as client:
        result = client.reset(seed=3, seats=["allocator", "broker"], population={"roles": {"team": "truthful"}})
        assert set(result.observation) == {"allocator", "broker"}
        with pytest.raises(ServerError) as err:
            client.step({"allocator": {}})
        assert err.value.code == "INVALID_ACTION" and err.value.data["allowed"] == ["allocator", "broker"]
        result = client.step({"allocator": {"grant": {"search": {"small": 1}}},
                              "broker": {"quantity": [1, 1, 0], "price_level": [5, 5, 0]}})
        assert set(result.metadata["rewards"]) == {"allocator", "broker"}
        assert result.reward == pytest.approx(sum(result.metadata["rewards"].values()))


# ------------------------------------------------------------------ bad requests
@pytest.mark.slow
def test_malformed_json_http_and_ws(http, url):
    for path in ("/reset", "/step", "/close"):
        response = http.post(path, content=b'{"seed": 1', headers={"content-type": "application/json"})
        assert response.status_code == 400 and response.json()["error"]["code"] == "INVALID_JSON"
    response = http.post("/reset", json=[1, 2])
    assert response.status_code == 422
    with connect(ws_url(url)) as ws:
        ws.send("{not json")
        assert json.loads(ws.recv(timeout=10))["data"]["code"] == "INVALID_JSON"
        assert ws_call(ws, "dance")["data"]["code"] == "UNKNOWN_TYPE"
        ws.send(json.dumps([1]))
        assert json.loads(ws.recv(timeout=10))["data"]["code"] == "INVALID_MESSAGE"
        assert ws_call(ws, "step", {"grant": {}})["data"]["code"] == "NOT_RESET"
        # the connection is still usable
        assert ws_call(ws, "reset", {"seed": 1})["type"] == "observation"


@pytest.mark.slow
def test_unknown_sessions(http):
    for response in (
        http.post("/step", json={"session_id": "no-such-session", "action": {}}),
        http.get("/state", params={"session_id": "no-such-session"}),
        http.post("/close", json={"session_id": "no-such-session"}),
        http.post("/reset", json={"session_id": "no-such-session"}),
        http.get("/sessions/no-such-session/recording"),
    ):
        assert response.status_code == 404, response.text
        assert response.json()["error"]["code"] == "UNKNOWN_SESSION"
    assert http.post("/step", json={"action": {}}).status_code == 422  # no session_id at all
    assert http.get("/state").status_code == 422


@pytest.mark.slow
def test_oversized_bodies(http, url):
    big = {"seed": 1, "episode_id": "x" * 5000}
    response = http.post("/reset", json=big)
    assert response.status_code == 413 and response.json()["error"]["code"] == "PAYLOAD_TOO_LARGE"
    # a body streamed without a length is cut off too
    response = http.post("/reset", content=iter([b'{"seed": 1, "episode_id": "', b"x" * 5000, b'"}']))
    assert response.status_code == 413
    with connect(ws_url(url)) as ws:
        assert ws_call(ws, "reset", big)["data"]["code"] == "PAYLOAD_TOO_LARGE"
        assert ws_call(ws, "reset", {"seed": 1})["type"] == "observation"
    assert http.get("/info").json()["sessions"] == 0


@pytest.mark.slow
def test_out_of_range_actions_leave_the_episode_unchanged(http, url):
    first = http.post("/reset", json={"seed": 5}).json()
    sid = sid_of(first)
    bad_actions = [
        ({"grant": {"search": {"small": 99}}}, "grant.search.small", [0, 6]),
        ({"buy": [-1, 0, 0]}, "buy.small", [0, 2]),
        ({"buy": [0.5, 0, 0]}, "buy.small", [0, 2]),
        ({"buy": [1, 1]}, "buy", ["small", "medium", "large"]),
        ({"grant": {"marketing": {"small": 1}}}, "grant", ["search", "robotics", "safety"]),
        ({"gift": 1}, "gift", ["buy", "grant"]),
    ]
    for action, field, allowed in bad_actions:
        response = http.post("/step", json={"session_id": sid, "action": action})
        assert response.status_code == 422, action
        error = response.json()["error"]
        assert error["field"] == field and error["allowed"] == allowed, error
    state = http.get("/state", params={"session_id": sid}).json()
    assert state["step_count"] == 0 and state["invalid_actions"] == {"INVALID_ACTION": len(bad_actions)}
    good = {"grant": {"search": {"small": 2}}}
    after = http.post("/step", json={"session_id": sid, "action": good}).json()
    # a fresh session that never saw the bad actions
    fresh = http.post("/reset", json={"seed": 5}).json()
    clean = http.post("/step", json={"session_id": sid_of(fresh), "action": good}).json()
    assert after["observation"].pop("metadata")["session_id"] == sid
    clean["observation"].pop("metadata")
    assert after["observation"] == clean["observation"] and after["reward"] == clean["reward"]
    with connect(ws_url(url)) as ws:
        ws_call(ws, "reset", {"seed": 5})
        frame = ws_call(ws, "step", {"stance": 1})
        assert frame["type"] == "error" and frame["data"]["field"] == "stance"
        assert ws_call(ws, "state")["data"]["step_count"] == 0
    close_all(http, sid, sid_of(fresh))


@pytest.mark.slow
def test_bad_reset_parameters(http):
    cases = [
        ({"seed": -1}, "seed"), ({"seed": "7"}, "seed"), ({"scenario": "../../etc/passwd"}, "scenario"),
        ({"seats": ["allocator", "allocator"]}, "seats"), ({"seats": ["mallory"]}, "seats"),
        ({"population": {"roles": {"team": "oracle"}}}, "population"),
        ({"population": {"agents": {"broker": "learned:/tmp/x"}}}, "population"),
        ({"on_invalid": "ignore"}, "on_invalid"), ({"sede": 1}, "sede"), ({"text": "yes"}, "text"),
    ]
    for body, field in cases:
        response = http.post("/reset", json=body)
        assert response.status_code == 422, body
        assert response.json()["error"]["field"] == field, response.json()
    assert http.get("/info").json()["sessions"] == 0  # refused resets leave no session behind


@pytest.mark.slow
def test_episode_end_and_recording(http):
    sid = http.post("/reset", json={"seed": 2, "record": True, "scenario": "crisis"}).json()
    sid = sid_of(sid)
    assert http.get(f"/sessions/{sid}/recording").status_code == 409  # hidden truth: only at the end
    done, steps = False, 0
    while not done:
        done = http.post("/step", json={"session_id": sid, "action": {}}).json()["done"]
        steps += 1
    response = http.post("/step", json={"session_id": sid, "action": {}})
    assert response.status_code == 409 and response.json()["error"]["code"] == "EPISODE_DONE"
    text = http.get(f"/sessions/{sid}/recording")
    assert text.status_code == 200 and "attachment" in text.headers["content-disposition"]
    lines = [json.loads(line) for line in text.text.splitlines()]
    assert lines[0]["type"] == "header" and lines[0]["scenario"] == "crisis" and lines[0]["seed"] == 2
    assert len([x for x in lines if x["type"] == "tick"]) == steps and lines[-1]["complete"] is True
    assert http.post("/close", json={"session_id": sid}).status_code == 200
    assert http.get("/state", params={"session_id": sid}).status_code == 404


# ------------------------------------------------------------------ text seats
@pytest.mark.slow
def test_text_seat(http):
    first = http.post("/reset", json={"seed": 4, "seats": "search", "text": True}).json()
    sid, briefing = sid_of(first), first["observation"]["briefing"]
    assert "Your team is search" in briefing and "request" in briefing and "0..6" in briefing
    answer = 'I need two small GPUs.\n```json\n{"request": {"small": 2}, "stance": "accept"}\n```'
    step = http.post("/step", json={"session_id": sid, "action": {"text": answer}}).json()
    assert step["observation"]["metadata"]["tick"] == 1 and "Tick 1" in step["observation"]["briefing"]
    bad = http.post("/step", json={"session_id": sid, "action": {"text": "I would like some GPUs please"}})
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "UNPARSEABLE_TEXT"
    bad = http.post("/step", json={"session_id": sid, "action": {"text": '{"request": [9, 0, 0]}'}})
    assert bad.json()["error"]["field"] == "request.small"
    state = http.get("/state", params={"session_id": sid}).json()
    assert state["invalid_actions"] == {"UNPARSEABLE_TEXT": 1, "INVALID_ACTION": 1} and state["step_count"] == 1
    # on_invalid=noop: the failure is counted, reported, and the no-op is played
    noop = http.post("/reset", json={"session_id": sid, "seed": 4, "seats": "search", "text": True,
                                     "on_invalid": "noop"}).json()
    step = http.post("/step", json={"session_id": sid, "action": {"text": "no idea"}}).json()
    assert step["observation"]["metadata"]["played_noop"]["search"].startswith("no JSON action")
    assert step["observation"]["metadata"]["invalid_actions"] == {"UNPARSEABLE_TEXT": 1}
    assert "was not a valid action" in step["observation"]["briefing"]
    assert noop["observation"]["metadata"]["tick"] == 0
    close_all(http, sid)


@pytest.mark.slow
def test_briefing_shows_only_what_the_seat_may_know(http):
    config = commons_arena.load_scenario("standard")
    job_ids = {job.id for team in config.teams for job in team.jobs}
    for seat in config.agents:
        first = http.post("/reset", json={"seed": 4, "seats": seat, "text": True}).json()
        briefing = first["observation"]["briefing"]
        assert not any(job_id in briefing for job_id in job_ids), seat
        assert set(first["observation"]) == {p.name for p in seat_spec(config, seat).observations} | {"briefing",
                                                                                                       "metadata"}
        close_all(http, sid_of(first))


# ------------------------------------------------------------------ limits
def wait_until(condition, timeout=10.0):
    """Poll for what only a real server's own timers decide (the store's rule itself is tested by its clock)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


class PassedClock:
    """Seconds that pass only when the test says so: the server's idle rule reads this clock."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.slow
def test_capacity_and_idle_expiry():
    # the passed clock decides what is idle; the limit (0.5) only sets how often, in real time, the server looks
    clock = PassedClock()
    settings = ServeSettings(limits=ServerLimits(max_sessions=2, idle_seconds=0.5), clock=clock)
    app = create_app(settings)

    with running_server(settings, app=app) as base, \
            httpx.Client(base_url=base, timeout=10) as http:
        a = sid_of(http.post("/reset", json={"seed": 1}).json())
        with connect(ws_url(base)) as ws:
            assert ws_call(ws, "reset", {"seed": 1})["type"] == "observation"
            full = http.post("/reset", json={"seed": 1})
            assert full.status_code == 503 and full.json()["error"]["code"] == "CAPACITY_REACHED"
            with connect(ws_url(base)) as refused:
                assert json.loads(refused.recv(timeout=10))["data"]["code"] == "CAPACITY_REACHED"
            # however long that took, nothing is idle until the clock moves past the limit
            assert set(app.state.store.sessions) >= {a} and len(app.state.store.sessions) == 2
            clock.now += 0.51
            # idle: the server's reaper closes the HTTP session, and the server closes the WebSocket
            wait_until(lambda: a not in app.state.store.sessions)
            assert http.get("/state", params={"session_id": a}).status_code == 404
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=10)  # the close frame, without asking first
            assert "idle" in closed.value.rcvd.reason
        assert http.get("/info").json()["sessions"] == 0


# ------------------------------------------------------------------ remote agents as policies
@pytest.mark.slow
def test_remote_policy_in_a_population(tmp_path):
    """An agent behind HTTP, placed in an in-process population, plays what the local policy plays."""
    config = commons_arena.load_scenario("standard")
    agent = agent_app(policy_agent(lambda cfg, seat: make_policy("edf", cfg, seat)))
    with running_server(app=agent) as agent_url:
        remote = RemotePolicy(agent_url, config, "allocator")
        env = commons_arena.parallel_env("standard")
        policies = Population.default(config).build(config, env=env)
        local = run_episode(env, {**policies, "allocator": make_policy("edf", config, "allocator")}, seed=21)
        played = run_episode(env, {**policies, "allocator": remote}, seed=21)
        assert played == local and remote.invalid == 0
        remote.close()

    def nonsense(request):
        return {} if "observation" not in request else {"text": "no"}

    with running_server(app=agent_app(nonsense)) as agent_url:
        remote = RemotePolicy(agent_url, config, "allocator", text=True)
        run_episode(env, {**policies, "allocator": remote}, seed=21)
        assert remote.invalid == config.max_ticks and "no JSON action" in remote.errors[0]
        remote.close()


# ------------------------------------------------------------------ the command line
@pytest.mark.slow
def test_serve_command_starts_a_server(serve_command):
    with serve_command("--seats", "broker", "--max-sessions", "3") as (base, _):
        info = httpx.get(base + "/info", timeout=5).json()
        assert info["limits"]["max_sessions"] == 3
        with ArenaClient(base) as client:
            first = client.reset(seed=1)
            assert first.metadata["seats"] == ["broker"]
            assert decode_observation(seat_spec(commons_arena.load_scenario("standard"), "broker"),
                                      first.observation).dtype == np.float32


@pytest.mark.slow
def test_sessions_come_and_go_without_growth():
    """Opening and closing many sessions keeps no session and at most a bounded pool of idle tables."""
    import tracemalloc

    from serving.session import SessionStore

    store = SessionStore(ServeSettings())

    def churn(n):
        for i in range(n):
            session = store.open("http")
            session.reset({"seed": i, "record": i % 2 == 0})
            session.step({})
            store.close(session.id)

    churn(20)  # warm: tables built, caches filled
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    churn(60)
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert store.sessions == {} and len(store.pool) <= store.pool.per_key
    assert grown < 2_000_000, f"{grown} bytes kept after 60 sessions"
