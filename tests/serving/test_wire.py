"""The wire format of a seat (named JSON actions/observations, schemas) and the text seat, without a server."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest

import commons_arena
from commons_arena.scenario import load_scenario
from serving.briefing import parse_text_action, render_briefing
from serving.wire import (
    ActionError,
    action_schema,
    decode_action,
    decode_observation,
    encode_action,
    encode_observation,
    observation_schema,
    seat_spec,
)
from tests.sweeps import swept


@pytest.fixture(params=swept(commons_arena.list_scenarios()))
def shipped(request):
    return load_scenario(request.param)


def _roundtrips(config, seed=0):
    env = commons_arena.parallel_env(config)
    observations, _ = env.reset(seed=seed)
    for seat in env.possible_agents:
        spec = seat_spec(config, seat)
        space = env.action_space(seat)
        space.seed(seed)
        a_schema, o_schema = action_schema(spec), observation_schema(spec)
        actions, observations_ok = jsonschema.Draft202012Validator(a_schema), jsonschema.Draft202012Validator(o_schema)
        for _ in range(5):
            action = space.sample()
            named = json.loads(json.dumps(encode_action(spec, action)))
            actions.validate(named)
            assert decode_action(spec, named) == action.tolist()
        view = json.loads(json.dumps(encode_observation(spec, observations[seat]), allow_nan=False))
        observations_ok.validate(view)
        # exact: the float32 vector comes back bit for bit
        assert decode_observation(spec, view).tobytes() == observations[seat].tobytes()
        # what an over-the-top action looks like to the schema and to the decoder
        too_big = encode_action(spec, space.nvec - 1)
        first = spec.actions[0].name
        too_big[first] = (np.asarray(too_big[first]) + 1).tolist() if spec.actions[0].axes else too_big[first] + 1
        with pytest.raises(jsonschema.ValidationError):
            actions.validate(too_big)
        with pytest.raises(ActionError, match="outside its allowed range"):
            decode_action(spec, too_big)


def test_schemas_are_valid_json_schemas():
    config = load_scenario("standard")
    for seat in config.agents:
        jsonschema.Draft202012Validator.check_schema(action_schema(seat_spec(config, seat)))
        jsonschema.Draft202012Validator.check_schema(observation_schema(seat_spec(config, seat)))


def test_every_seat_of_every_shipped_scenario_roundtrips(shipped):
    _roundtrips(shipped)


def test_unusual_shapes_roundtrip(unusual_scenario):
    _roundtrips(load_scenario(unusual_scenario), seed=3)


def test_named_objects_equal_lists():
    config = load_scenario("standard")
    spec = seat_spec(config, "allocator")
    named = decode_action(spec, {"buy": {"medium": 1}, "grant": {"search": {"small": 2}, "safety": [0, 0, 1]}})
    assert named == decode_action(spec, {"buy": [0, 1, 0], "grant": [[2, 0, 0], [0, 0, 0], [0, 0, 1]]})
    assert decode_action(spec, {}) == [0] * spec.action_size  # missing parts: the no-op
    team = seat_spec(config, "robotics")
    assert decode_action(team, {"stance": "Escalate"}) == decode_action(team, {"stance": [2]}) == [0, 0, 0, 2]
    assert decode_action(team, {"request": [1.0, 0, 0]}) == [1, 0, 0, 0]  # whole floats are whole numbers


@pytest.mark.parametrize(("action", "field", "allowed", "words"), [
    ({"grant": {"search": {"small": 7}}}, "grant.search.small", [0, 6], "outside its allowed range [0, 6]"),
    ({"grant": [[0, 0, 0]]}, "grant", ["search", "robotics", "safety"], "must list 3 entries"),
    ({"grant": [[0, 0], [0, 0, 0, 0], [0, 0, 0]]}, "grant.search", ["small", "medium", "large"], "must list 3"),
    ({"grant": [[0, 0, 0], [0, 7, 0], [0, 0, 0]]}, "grant.robotics.medium", [0, 5], "outside its allowed range"),
    ({"grant": {"search": "lots"}}, "grant.search", ["small", "medium", "large"], "must be a list of 3"),
    ({"buy": {"small": None}}, "buy.small", [0, 2], "must be an integer"),
    ({"buy": [float("nan"), 0, 0]}, "buy.small", [0, 2], "whole number"),
    ({"buy": ["1", 0, 0]}, "buy.small", [0, 2], "must be an integer"),
    ({"Buy": [0, 0, 0]}, "Buy", ["buy", "grant"], "has no part 'Buy'"),
])
def test_action_errors_name_the_entry_and_range(action, field, allowed, words):
    spec = seat_spec(load_scenario("standard"), "allocator")
    with pytest.raises(ActionError) as err:
        decode_action(spec, action)
    assert err.value.field == field and list(err.value.allowed) == allowed and words in err.value.message


def test_text_parser():
    spec = seat_spec(load_scenario("standard"), "broker")
    assert parse_text_action(spec, 'Sure! {"quantity": [1, 1, 0], "price_level": [3, 3, 0]}') == \
        {"quantity": [1, 1, 0], "price_level": [3, 3, 0]}
    # a fenced block; other JSON around it (a plan, a dict of thoughts) is not the action
    text = 'Plan: {"goal": "profit"}\n```json\n{"quantity": {"small": 2}}\n```\nThen {"note": 1}'
    assert parse_text_action(spec, text) == {"quantity": {"small": 2}}
    for bad in ("no json here", '{"goal": "profit"}', "{broken", ""):
        with pytest.raises(ActionError) as err:
            parse_text_action(spec, bad)
        assert err.value.code == "UNPARSEABLE_TEXT"
    with pytest.raises(ActionError):
        parse_text_action(spec, 42)


def test_briefing_is_a_function_of_the_observation_alone():
    """Two episodes whose hidden truth differs but whose observation of a seat is equal brief it the same."""
    config = load_scenario("standard")
    env = commons_arena.parallel_env(config)
    a, _ = env.reset(seed=1)
    b, _ = env.reset(seed=2)
    spec = seat_spec(config, "allocator")
    # at tick 0 the allocator sees no declarations: its observations of different seeds may be equal
    view_a, view_b = encode_observation(spec, a["allocator"]), encode_observation(spec, b["allocator"])
    if view_a == view_b:
        assert render_briefing(spec, view_a) == render_briefing(spec, view_b)
    text = render_briefing(spec, view_a, reward=1.25, invalid="grant.search.small = 9 is outside")
    assert "reward last tick: 1.250" in text and "was not a valid action" in text
    for team in config.teams:  # no job of any team, no true need
        for job in team.jobs:
            assert job.id not in text
