"""The server as openenv-core's own tools see it: its validator, its response models, its client.

openenv-core is a test dependency (the ``dev`` extra): it pulls gradio, fastmcp and openai,
so the server itself never imports it. Every body of the openenv routes must parse as
openenv's response model (they forbid extra fields), ``openenv validate --url`` must pass,
and its ``GenericEnvClient``, unmodified, must play a full episode that is the in-process one.
"""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import jsonschema
import pytest
from openenv.core import GenericEnvClient
from openenv.core.env_server.types import (
    EnvironmentMetadata,
    HealthResponse,
    ResetResponse,
    SchemaResponse,
    State,
    StepResponse,
    WSErrorResponse,
    WSObservationResponse,
    WSStateResponse,
)
from websockets.sync.client import connect

import commons_arena
from policies.focal import policy_seed, run_episode
from policies.population import Population
from policies.registry import make_policy
from serving.app import running_server
from serving.session import ServeSettings
from serving.wire import decode_observation, encode_action, seat_spec

pytestmark = [pytest.mark.slow, pytest.mark.server]  # openenv validate and its client against the serve command


@pytest.fixture(scope="module")
def url():
    with running_server(ServeSettings()) as base:
        yield base


def test_openenv_validate_passes_against_the_serve_command(serve_command):
    """``openenv validate --url`` (openenv's CLI, as a user runs it) against ``commons-arena serve``."""
    with serve_command() as (base, _):
        run = subprocess.run([sys.executable, "-m", "openenv.cli", "validate", "--url", base],
                             capture_output=True, text=True, timeout=120)
    report = json.loads(run.stdout[run.stdout.index("{"):])
    failed = [c for c in report["criteria"] if not c["passed"]]
    assert report["passed"] is True and failed == [], failed
    assert report["summary"]["required_passed_count"] == 6 and run.returncode == 0


def test_every_http_body_fits_openenv_models(url):
    with httpx.Client(base_url=url, timeout=10) as http:
        HealthResponse.model_validate(http.get("/health").json())
        EnvironmentMetadata.model_validate(http.get("/metadata").json())
        schemas = {}
        for seat in ("allocator", "search", "broker"):
            schemas[seat] = http.get("/schema", params={"seat": seat}).json()
            SchemaResponse.model_validate(schemas[seat])
        # what rides inside the observation is in the observation's schema too
        body = http.post("/reset", json={"seed": 1, "seats": "search", "text": True}).json()
        jsonschema.Draft202012Validator(schemas["search"]["observation"]).validate(body["observation"])
        assert {"briefing", "metadata"} <= set(schemas["search"]["observation"]["properties"])
        http.post("/close", json={"session_id": body["observation"]["metadata"]["session_id"]})
        bodies = [{"seed": 1}, {"seed": 2, "seats": "search", "text": True, "on_invalid": "noop"},
                  {"seed": 3, "seats": ["allocator", "broker"], "scenario": "crisis", "record": True}]
        for body in bodies:
            first = http.post("/reset", json=body).json()
            ResetResponse.model_validate(first)
            sid = first["observation"]["metadata"]["session_id"]
            State.model_validate(http.get("/state", params={"session_id": sid}).json())
            done, steps = False, 0
            while not done:
                action = ({"allocator": {}, "broker": {}} if isinstance(body.get("seats"), list)
                          else {"text": "no idea"} if body.get("text") else {})
                step = http.post("/step", json={"session_id": sid, "action": action}).json()
                StepResponse.model_validate(step)
                done, steps = step["done"], steps + 1
            assert step["observation"]["metadata"]["tick"] == steps
            State.model_validate(http.get("/state", params={"session_id": sid}).json())
            http.post("/close", json={"session_id": sid}).raise_for_status()
        with pytest.raises(ValueError):  # the models do refuse what they do not know
            StepResponse.model_validate({**step, "metadata": {}})


def test_websocket_frames_fit_openenv_models(url):
    with connect("ws" + url.removeprefix("http") + "/ws") as ws:
        def call(kind, data=None):
            ws.send(json.dumps({"type": kind, **({} if data is None else {"data": data})}))
            return json.loads(ws.recv(timeout=10))

        reset = WSObservationResponse.model_validate(call("reset", {"seed": 4}))
        ResetResponse.model_validate(reset.data)
        StepResponse.model_validate(WSObservationResponse.model_validate(call("step", {"buy": [1, 0, 0]})).data)
        State.model_validate(WSStateResponse.model_validate(call("state")).data)
        error = WSErrorResponse.model_validate(call("step", {"buy": [9, 0, 0]}))
        assert error.data["field"] == "buy.small"


def test_generic_env_client_plays_the_in_process_episode(url):
    """openenv's GenericEnvClient, unmodified: the same seed and policy give the in-process episode's rewards."""
    config = commons_arena.load_scenario("standard")
    spec = seat_spec(config, "allocator")
    policy = make_policy("max_min_fair", config, "allocator")
    policy.reset(policy_seed(11, config.agents.index("allocator")))
    rewards = []
    with GenericEnvClient(base_url=url).sync() as env:
        result = env.reset(seed=11)
        metadata = result.observation["metadata"]
        assert metadata["seats"] == ["allocator"] and len(metadata["session_id"]) == 32
        while not result.done:
            action = encode_action(spec, policy.act(decode_observation(spec, result.observation)))
            result = env.step(action)
            rewards.append(result.reward)
        state = env.state()
        summary = result.observation["metadata"]["info"]["allocator"]["episode"]
    local = run_episode(commons_arena.parallel_env("standard"),
                        Population.default(config).with_agent("allocator", "max_min_fair"), seed=11)
    assert len(rewards) == config.max_ticks == state["step_count"]
    assert sum(rewards) == pytest.approx(local["allocator"]["return"], abs=1e-9)
    assert summary == pytest.approx(local["allocator"])
