"""``/mcp``: a seat as Model Context Protocol tools, driven by the ``mcp`` SDK's own client over streamable HTTP."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from mcp import Client

import commons_arena
from policies.focal import policy_seed, run_episode
from policies.population import Population
from policies.registry import make_policy
from serving.app import running_server
from serving.session import ServeSettings
from serving.wire import decode_observation, encode_action, seat_spec


@pytest.fixture(scope="module")
def url():
    with running_server(ServeSettings()) as base:
        yield base


async def call(client, tool, **arguments):
    result = await client.call_tool(tool, arguments)
    return result.is_error, (result.content[0].text if result.is_error else json.loads(result.content[0].text))


def test_tools_play_the_in_process_episode(url):
    """A full episode through the tools equals the in-process one; the briefing is the text seat's."""
    config = commons_arena.load_scenario("standard")
    spec = seat_spec(config, "allocator")
    policy = make_policy("max_min_fair", config, "allocator")
    policy.reset(policy_seed(11, config.agents.index("allocator")))

    async def play():
        async with Client(url + "/mcp") as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert set(tools) == {"start_episode", "observe", "act", "episode_state", "end_episode"}
            assert "action" in tools["act"].input_schema["properties"]
            error, first = await call(client, "start_episode", seed=11)
            assert not error and first["tick"] == 0 and first["max_ticks"] == config.max_ticks
            assert first["briefing"].startswith("You are the ALLOCATOR")
            sid, view, rewards = first["session_id"], first, []
            while not view["done"]:
                action = encode_action(spec, policy.act(decode_observation(spec, view["observation"])))
                error, view = await call(client, "act", session_id=sid, action=action)
                assert not error, view
                rewards.append(view["reward"])
            error, seen = await call(client, "observe", session_id=sid)
            assert seen["tick"] == config.max_ticks and seen["done"] and seen["observation"] == view["observation"]
            error, state = await call(client, "episode_state", session_id=sid)
            assert (await call(client, "end_episode", session_id=sid)) == (False, {"closed": sid})
            return rewards, view, state

    rewards, last, state = asyncio.run(play())
    local = run_episode(commons_arena.parallel_env("standard"),
                        Population.default(config).with_agent("allocator", "max_min_fair"), seed=11)
    assert len(rewards) == config.max_ticks and state["done"]
    assert sum(rewards) == pytest.approx(local["allocator"]["return"], abs=1e-9)
    assert last["episode"] == pytest.approx(local["allocator"]) and last["returns"] == state["returns"]


def test_a_bad_action_is_a_tool_error_and_changes_nothing(url):
    async def play():
        async with Client(url + "/mcp") as client:
            _, first = await call(client, "start_episode", seat="search", seed=5)
            sid = first["session_id"]
            error, text = await call(client, "act", session_id=sid, action={"request": {"small": 99}})
            assert error and "request.small = 99 is outside its allowed range [0, 6]" in text
            error, text = await call(client, "act", session_id=sid, action="I would like GPUs, please")
            assert error and "UNPARSEABLE_TEXT" in text
            error, text = await call(client, "start_episode", seat="mallory")
            assert error and "seats must be" in text
            error, text = await call(client, "observe", session_id="no-such-session")
            assert error and "UNKNOWN_SESSION" in text
            _, state = await call(client, "episode_state", session_id=sid)
            assert state["step_count"] == 0 and state["invalid_actions"] == {"INVALID_ACTION": 1, "UNPARSEABLE_TEXT": 1}
            # the same session plays on: a text answer with the JSON inside
            error, view = await call(client, "act", session_id=sid,
                                     action='Two small, please.\n```json\n{"request": {"small": 2}, "stance": "accept"}\n```')
            assert not error and view["tick"] == 1 and "Tick 1" in view["briefing"]
            await call(client, "end_episode", session_id=sid)

    asyncio.run(play())
    assert httpx.get(url + "/info").json()["sessions"] == 0


def test_non_jsonrpc_post_gets_a_jsonrpc_error(url):
    """openenv validate's probe: POST /mcp {} → 200 and a JSON-RPC 2.0 error object."""
    response = httpx.post(url + "/mcp", json={})
    body = response.json()
    assert response.status_code == 200 and body["jsonrpc"] == "2.0" and body["error"]["code"] == -32600
    assert "initialize" in body["error"]["message"]
    response = httpx.post(url + "/mcp", content=b"x" * 70_000, headers={"content-type": "application/json"})
    assert response.status_code == 413 and response.json()["jsonrpc"] == "2.0"
