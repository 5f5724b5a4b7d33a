"""RecordEpisode: JSONL lines per tick, hidden truth marked, plain JSON, transparent wrapper."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pettingzoo.test import parallel_api_test

import commons_arena
from commons_arena.enums import ShockKind
from commons_arena.recording import RecordEpisode, jsonable, read_recording


def _strict_lines(path):
    """Every line parses as strict JSON (no NaN/Infinity)."""

    def reject(name):
        raise AssertionError(f"non-standard JSON constant {name}")

    return [json.loads(line, parse_constant=reject) for line in path.read_text().splitlines()]


def _play(env, seed, n_episodes=1):
    """Random play; returns per episode the (rewards, infos) of every step."""
    played = []
    for episode in range(n_episodes):
        env.reset(seed=seed + episode)
        for agent in env.possible_agents:
            env.action_space(agent).seed(seed + episode)
        steps = []
        while env.agents:
            actions = {a: env.action_space(a).sample() for a in env.agents}
            _, rewards, _, _, infos = env.step(actions)
            steps.append((actions, rewards, infos))
        played.append(steps)
    return played


def test_lines_header_ticks_summary(tmp_path):
    path = tmp_path / "run.jsonl"
    env = RecordEpisode(commons_arena.parallel_env("standard"), path)
    (steps,) = _play(env, seed=7)
    env.close()
    lines = _strict_lines(path)
    header, ticks, summary = lines[0], lines[1:-1], lines[-1]
    config = commons_arena.load_scenario("standard")

    assert header["type"] == "header"
    assert header["scenario"] == "standard" and header["scenario_hash"] == config.content_hash
    assert header["seed"] == 7 and header["episode"] == 0
    assert header["agents"] == list(config.agents) and header["teams"] == list(config.team_names)
    assert [t["name"] for t in header["tiers"]] == list(config.tier_names)
    assert set(header["hidden"]) == {"true_need", "jobs"}

    assert [t["type"] for t in ticks] == ["tick"] * len(steps)
    assert [t["tick"] for t in ticks] == list(range(len(steps)))
    N, T = len(config.teams), len(config.gpu_tiers)
    for record, (actions, rewards, infos) in zip(ticks, steps, strict=True):
        assert record["rewards"] == pytest.approx(rewards)
        assert record["reward_terms"]["allocator"] == pytest.approx(infos["allocator"]["reward_terms"])
        assert record["outcome"]["repairs"] == infos["allocator"]["repairs"]
        assert record["outcome"]["events"] == jsonable(infos["allocator"]["events"])
        assert np.shape(record["outcome"]["granted"]) == (N, T)
        assert np.shape(record["seen"]["declared"]) == (N, T)
        # actions split into named parts, equal to what was played
        assert np.array_equal(np.ravel(record["actions"]["allocator"]["grant"]), actions["allocator"][T:])
        assert record["actions"]["allocator"]["buy"] == actions["allocator"][:T].tolist()
        assert record["actions"]["broker"]["price_level"] == actions["broker"][T:].tolist()
        # hidden truth lives under "hidden", never in the public sections
        assert np.shape(record["hidden"]["true_need"]) == (N, T)
        assert set(record["hidden"]["jobs"]) == set(config.team_names)
        for section in ("seen", "outcome", "after"):
            assert "true_need" not in record[section] and "jobs" not in record[section]
        assert "observations" not in record

    assert summary["type"] == "summary" and summary["complete"] is True
    assert summary["ticks"] == len(steps)
    final_infos = steps[-1][2]
    for agent in config.agents:
        assert summary["episode_info"][agent] == pytest.approx(jsonable(final_infos[agent]["episode"]))
        assert summary["returns"][agent] == pytest.approx(sum(s[1][agent] for s in steps))


def test_declared_seen_is_what_was_requested_the_tick_before(tmp_path):
    path = tmp_path / "run.jsonl"
    env = RecordEpisode(commons_arena.parallel_env("standard"), path)
    (steps,) = _play(env, seed=3)
    env.close()
    ticks = read_recording(path)[0]["ticks"]
    assert ticks[0]["seen"]["declared"] == np.zeros_like(ticks[0]["seen"]["declared"]).tolist()
    for before, now in zip(ticks, ticks[1:], strict=False):
        assert now["seen"]["declared"] == before["after"]["declared_next"]
        assert now["seen"]["declared"] == [before["actions"][team]["request"] for team in before["actions"]
                                           if team in now["hidden"]["jobs"]]


def test_wrapper_changes_nothing(tmp_path):
    plain = _play(commons_arena.parallel_env("standard"), seed=11, n_episodes=2)
    recorded = _play(RecordEpisode(commons_arena.parallel_env("standard"), tmp_path / "r.jsonl"), seed=11, n_episodes=2)
    for a, b in zip(plain, recorded, strict=True):
        assert len(a) == len(b)
        for (_, ra, _), (_, rb, _) in zip(a, b, strict=True):
            assert ra == rb


def test_several_episodes_and_abandoned_one(tmp_path):
    path = tmp_path / "run.jsonl"
    env = RecordEpisode(commons_arena.parallel_env("standard"), path)
    _play(env, seed=0, n_episodes=2)
    env.reset(seed=5)
    env.step({a: env.action_space(a).sample() for a in env.agents})
    env.close()  # third episode abandoned after one tick
    episodes = read_recording(path)
    assert [e["header"]["episode"] for e in episodes] == [0, 1, 2]
    assert [e["header"]["seed"] for e in episodes] == [0, 1, 5]
    assert episodes[0]["summary"]["complete"] and episodes[1]["summary"]["complete"]
    assert episodes[2]["summary"]["complete"] is False and episodes[2]["summary"]["ticks"] == 1
    assert all(t["episode"] == 2 for t in episodes[2]["ticks"])


def test_include_observations(tmp_path):
    path = tmp_path / "run.jsonl"
    env = RecordEpisode(commons_arena.parallel_env("standard"), path, include_observations=True)
    obs, _ = env.reset(seed=1)
    nxt, *_ = env.step({a: env.action_space(a).sample() for a in env.agents})
    env.close()
    episode = read_recording(path)[0]
    config = env.unwrapped.config
    first = episode["header"]["observations"]["allocator"]
    layout = commons_arena.observation_layout(config, "allocator")
    assert set(first) == {f.name for f in layout.fields}
    assert np.allclose(np.concatenate([np.ravel(first[f.name]) for f in layout.fields]), obs["allocator"])
    team = config.team_names[0]
    tick_obs = episode["ticks"][0]["observations"][team]
    assert np.allclose(tick_obs["need"], nxt[team][commons_arena.observation_layout(config, team).slices["need"]])


def test_invalid_action_writes_no_line(tmp_path):
    path = tmp_path / "run.jsonl"
    env = RecordEpisode(commons_arena.parallel_env("standard"), path)
    env.reset(seed=0)
    with pytest.raises(ValueError):
        env.step({"allocator": np.array([1, 2])})
    env.close()
    episode = read_recording(path)[0]
    assert episode["ticks"] == [] and episode["summary"]["complete"] is False


def test_pettingzoo_parallel_api_through_the_wrapper(tmp_path):
    env = RecordEpisode(commons_arena.parallel_env("standard"), tmp_path / "api.jsonl")
    parallel_api_test(env, num_cycles=50)
    env.close()
    assert len(read_recording(tmp_path / "api.jsonl")) >= 2


def test_jsonable_converts_numpy_and_non_finite():
    value = {
        "i": np.int64(3), "f": np.float32(0.5), "b": np.bool_(True), "a": np.arange(3), "nan": float("nan"),
        "inf": np.float64(np.inf), "t": (1, 2), "kind": ShockKind.GRID_SPIKE, 4: [np.array([[1.5]])],
    }
    out = jsonable(value)
    assert out == {"i": 3, "f": 0.5, "b": True, "a": [0, 1, 2], "nan": None, "inf": None, "t": [1, 2],
                   "kind": "grid_spike", "4": [[[1.5]]]}
    assert type(out["i"]) is int and type(out["f"]) is float
    json.dumps(out, allow_nan=False)
    assert not any(isinstance(v, float) and not math.isfinite(v) for v in out.values())


def test_read_recording_rejects_bad_files(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "tick"}\n')
    with pytest.raises(ValueError, match="before any header"):
        read_recording(bad)
    bad.write_text("not json\n")
    with pytest.raises(ValueError, match="not a JSON line"):
        read_recording(bad)
    bad.write_text("")
    with pytest.raises(ValueError, match="no episodes"):
        read_recording(bad)


@pytest.mark.parametrize(("key", "value", "match"), [
    ("tick", 1e30, "tick must be 1 (its place in the episode), got 1e+30"),
    ("tick", 5, "tick must be 1"), ("tick", True, "tick must be 1"), ("tick", -1, "tick must be 1"),
    ("episode", 7, "episode must be its header's (0)"),
])
def test_a_tick_line_out_of_place_is_not_a_recording(tmp_path, key, value, match):
    """Issue 44: verify said "differs" for ``tick: 1e30``; a line a recording never holds is refused as such."""
    path = tmp_path / "run.jsonl"
    env = RecordEpisode(commons_arena.parallel_env("standard"), path)
    _play(env, seed=3)
    env.close()
    lines = path.read_text().splitlines()
    record = json.loads(lines[2])
    record[key] = value
    lines[2] = json.dumps(record)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=re.escape(match)):
        read_recording(path)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(line=st.one_of(st.text(max_size=60), st.binary(max_size=60).map(lambda b: b.decode("latin-1")),
                      st.builds(lambda n: "[" * n + "]" * n, st.integers(0, 3000)),
                      st.dictionaries(st.sampled_from(["type", "tick", "episode", "seed"]),
                                      st.one_of(st.sampled_from(["header", "tick", "summary"]), st.integers(),
                                                st.floats(), st.none()), max_size=4).map(json.dumps)))
def test_any_line_is_read_or_refused_in_one_line(tmp_path, line):
    """A property of the recording format: whatever a line holds, reading is a list of episodes or a ValueError."""
    path = tmp_path / "any.jsonl"
    path.write_text('{"type": "header", "episode": 0}\n' + line.replace("\n", " ") + "\n", encoding="utf-8")
    try:
        read_recording(path)
    except ValueError as err:
        assert "\n" not in str(err).strip()
