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

pytestmark = [pytest.mark.slow, pytest.mark.server]  # the MCP SDK's client over streamable HTTP


@pytest.fixture(scope="module")
def url():
    with running_server(ServeSettings()) as base:
        yield base


async def call(client, tool, **arguments):
    result = await client.call_tool(tool, arguments)
    text = result.content[0].text
    return result.is_error, (text if result.is_error or tool == "preview" else json.loads(text))


def test_tools_play_the_in_process_episode(url):
    """A full episode through the tools equals the in-process one; the briefing is the text seat's."""
    config = commons_arena.load_scenario("standard")
    spec = seat_spec(config, "allocator")
    policy = make_policy("max_min_fair", config, "allocator")
    policy.reset(policy_seed(11, config.agents.index("allocator")))

    async def play():
        async with Client(url + "/mcp") as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert set(tools) == {"start_episode", "observe", "act", "preview", "episode_state", "end_episode"}
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
            assert seen["tick"] == config.max_ticks and seen["done"] and "observation" not in seen
            assert seen["your_totals"] == view["your_totals"] and seen["references"] == view["references"]
            error, state = await call(client, "episode_state", session_id=sid)
            assert (await call(client, "end_episode", session_id=sid)) == (False, {"closed": sid})
            return rewards, view, state

    rewards, last, state = asyncio.run(play())
    local = run_episode(commons_arena.parallel_env("standard"),
                        Population.default(config).with_agent("allocator", "max_min_fair"), seed=11)
    assert len(rewards) == config.max_ticks and state["done"]
    assert sum(rewards) == pytest.approx(local["allocator"]["return"], abs=1e-9)
    totals = {**last["your_totals"], **last["episode_totals"]}
    assert totals == pytest.approx(local["allocator"], abs=1e-4)
    assert last["your_totals"]["return"] == pytest.approx(state["returns"]["allocator"], abs=1e-4)
    assert set(last["references"]) == {"proportional", "planner", "oracle"}


def test_a_bad_action_is_a_tool_error_and_changes_nothing(url):
    async def play():
        async with Client(url + "/mcp") as client:
            _, first = await call(client, "start_episode", seat="search", seed=5)
            sid = first["session_id"]
            error, text = await call(client, "act", session_id=sid, action={"request": {"small": 99}})
            assert error and "request.small = 99 is outside its allowed range [0, 6]" in text and "call act again" in text
            error, text = await call(client, "act", session_id=sid, action="I would like GPUs, please")
            assert error and "UNPARSEABLE_TEXT" in text
            error, text = await call(client, "start_episode", seat="mallory")
            assert error and "seat must be one of" in text and "search" in text
            error, text = await call(client, "observe", session_id="no-such-session")
            assert error and "UNKNOWN_SESSION" in text and "Call start_episode" in text and "reset" not in text
            error, text = await call(client, "act", action={})
            assert error and "needs session_id" in text and "validation error" not in text
            error, text = await call(client, "start_episode", seed="seven")
            assert error and "seed must be a whole number" in text and "validation error" not in text
            _, state = await call(client, "episode_state", session_id=sid)
            assert state["step_count"] == 0 and state["invalid_actions"] == {"INVALID_ACTION": 1, "UNPARSEABLE_TEXT": 1}
            # the same session plays on: a text answer with the JSON inside
            error, view = await call(client, "act", session_id=sid,
                                     action='Two small, please.\n```json\n{"request": {"small": 2}, "stance": "accept"}\n```')
            assert not error and view["tick"] == 1 and "briefing" not in view and view["this_tick"]
            await call(client, "end_episode", session_id=sid)

    asyncio.run(play())
    assert httpx.get(url + "/info").json()["sessions"] == 0


def test_the_servers_metadata_is_what_a_client_reads(url):
    """serverInfo carries the package version; no prompts or resources are advertised (there are none); tool
    descriptions are plain text, not docstring indentation; the arguments a tool cannot do without are required;
    a refused preview names preview, not act, as the call to make again."""
    async def look():
        async with Client(url + "/mcp") as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            _, first = await call(client, "start_episode", seat="search", seed=5)
            error, text = await call(client, "preview", session_id=first["session_id"], action={"request": {"small": 99}})
            await call(client, "end_episode", session_id=first["session_id"])
            return client.server_info, client.server_capabilities, tools, error, text

    info, capabilities, tools, error, text = asyncio.run(look())
    assert info.name == "commons_arena" and info.version == commons_arena.__version__
    assert capabilities.tools is not None and capabilities.prompts is None and capabilities.resources is None
    for name, tool in tools.items():
        assert "\n " not in tool.description and tool.description == tool.description.strip(), name
        needed = {"session_id"} if name != "start_episode" else set()
        if name in ("act", "preview"):
            needed.add("action")
        assert set(tool.input_schema.get("required", [])) == needed, name
    assert error and "call preview again" in text and "call act again" not in text


def test_non_jsonrpc_post_gets_a_jsonrpc_error(url):
    """openenv validate's probe: POST /mcp {} → 200 and a JSON-RPC 2.0 error object."""
    response = httpx.post(url + "/mcp", json={})
    body = response.json()
    assert response.status_code == 200 and body["jsonrpc"] == "2.0" and body["error"]["code"] == -32600
    assert "initialize" in body["error"]["message"]
    response = httpx.post(url + "/mcp", content=b"x" * 70_000, headers={"content-type": "application/json"})
    assert response.status_code == 413 and response.json()["jsonrpc"] == "2.0"


TOOL_BUDGET_BYTES = 25_000  # tool output of one allocator episode after the first briefing (docs/for_players.md)


def test_a_client_that_reads_only_the_text_plays_an_episode(url):
    """A rule-based client learns everything from the tool descriptions and the returned text: which tool opens an
    episode and its seats (the schema's enum), the action's parts and labels (the briefing's answer format), each
    tick's declarations (the observation); it grants what was declared, scaled to the GPUs online, and reads its
    score against the references at the end. The whole episode after the briefing stays within the byte budget."""
    import re

    async def play():
        async with Client(url + "/mcp") as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            opener = next(n for n, t in tools.items() if "Open an episode" in (t.description or ""))
            seat_schema = tools[opener].input_schema["properties"]["seat"]
            assert seat_schema["description"] and "allocator" in seat_schema["enum"]
            assert "enum" in tools[opener].input_schema["properties"]["scenario"]
            player = next(n for n, t in tools.items() if "Play one tick" in (t.description or ""))
            result = await client.call_tool(opener, {"seat": "allocator", "seed": 7})
            first = json.loads(result.content[0].text)
            briefing = first["briefing"]
            # the answer format, read from the briefing: "- grant: ...; per team (a, b, c), per tier: small 0..6, ..."
            grant_line = next(line for line in briefing.splitlines() if line.startswith("- grant:"))
            teams = re.search(r"per team \(([^)]*)\)", grant_line).group(1).split(", ")
            tiers = re.findall(r"(\w+) 0\.\.\d+", grant_line.split("per tier:")[1])
            assert "Placement:" in briefing and "operating cost" in briefing and "About this scenario" in briefing
            sid, view, used, rewards, invalid = first["session_id"], first, 0, [], 0
            while not view["done"]:
                obs = view["observation"]
                declared, online = obs["declared"], obs["online"]
                grant = {}
                for r, team in enumerate(teams):
                    row = {}
                    for t, tier in enumerate(tiers):
                        total = sum(d[t] for d in declared)
                        ask = int(declared[r][t])
                        row[tier] = ask if total <= online[t] else int(ask * online[t] // total)
                    grant[team] = row
                result = await client.call_tool(player, {"session_id": sid, "action": {"grant": grant}})
                assert not result.is_error, result.content[0].text
                used += len(result.content[0].text.encode())
                view = json.loads(result.content[0].text)
                rewards.append(view["reward"])
                invalid += view.get("cut_as_invalid", {}).get("grant_over_capacity", 0)
            return view, used, rewards, invalid

    view, used, rewards, invalid = asyncio.run(play())
    assert used <= TOOL_BUDGET_BYTES, used
    assert invalid == 0  # the client read the ranges right: nothing it granted was cut
    assert set(view["references"]) == {"proportional", "planner", "oracle"}
    assert view["how_you_did"].startswith("Your return") and "oracle scored" in view["how_you_did"]
    assert view["your_totals"]["return"] == pytest.approx(sum(rewards), abs=1e-2)
    # the references are the server's: the oracle, computed with the same engine and seed, tops the allocators
    assert view["references"]["oracle"] >= max(view["references"].values()) - 1e-9
    # each reference's reward terms beside the seat's, and per reference the term the seat lost the most on
    for name, terms in view["reference_terms"].items():
        assert sum(terms.values()) == pytest.approx(view["references"][name], abs=1e-2)
        gaps = {t[5:]: view["your_totals"].get(t, 0.0) - v for t, v in terms.items()}
        loss = view["biggest_loss"][name]
        if loss is None:
            assert min(gaps.values()) > -0.06
        else:
            assert gaps[loss["term"]] == pytest.approx(min(gaps.values()), abs=1e-3) and loss["behind"] > 0


def test_a_team_that_declares_its_need_scores_what_truthful_scores(url):
    """The references are the same engine and seed: a team seat that requests its true need and accepts (what the
    truthful archetype does) scores exactly the truthful reference; its totals are split from the episode's."""
    async def play():
        async with Client(url + "/mcp") as client:
            _, view = await call(client, "start_episode", seat="search", seed=7)
            sid = view["session_id"]
            assert "Your jobs' tiers:" in view["briefing"]
            text = (await client.call_tool("preview", {"session_id": sid, "action": {"request": {"large": 1}}})).content[0].text
            assert "would" in text and "idle" in text
            while not view["done"]:
                need = [int(v) for v in view["observation"]["need"]]
                error, view = await call(client, "act", session_id=sid, action={"request": need, "stance": "accept"})
                assert not error, view
            error, after = await call(client, "act", session_id=sid, action={})
            assert error and "call observe" in after.lower()
            _, seen = await call(client, "observe", session_id=sid)
            return view, seen

    view, seen = asyncio.run(play())
    assert set(view["references"]) == {"truthful", "greedy_bluffer", "declares_nothing"} and seen["references"] == view["references"]
    assert view["your_totals"]["return"] == pytest.approx(view["references"]["truthful"], abs=1e-3)
    assert "term/credibility" in view["your_totals"] and "completed" in view["episode_totals"]
    assert not set(view["your_totals"]) & set(view["episode_totals"])
