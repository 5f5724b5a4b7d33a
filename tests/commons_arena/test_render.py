"""Render modes: PettingZoo's render_test, the rgb_array dashboard, frames from recordings."""

from __future__ import annotations

import numpy as np
import pytest
from pettingzoo.test import render_test

import commons_arena
from commons_arena.recording import RecordEpisode
from commons_arena.render import frames_from_recording


def test_metadata_lists_every_mode():
    assert commons_arena.parallel_env().metadata["render_modes"] == ["human", "ansi", "rgb_array"]


@pytest.mark.slow
def test_pettingzoo_render_test():
    render_test(commons_arena.env)  # every mode in metadata: "human", "ansi" and "rgb_array"


def _random_step(env):
    return env.step({a: env.action_space(a).sample() for a in env.agents})


@pytest.mark.slow  # the fast loop keeps one dashboard test
def test_rgb_array_frames():
    env = commons_arena.parallel_env("standard", render_mode="rgb_array")
    before = env.render()  # before reset: a frame that says so, not an exception
    assert before.dtype == np.uint8 and before.ndim == 3 and before.shape[2] == 3
    env.reset(seed=4)
    for agent in env.possible_agents:
        env.action_space(agent).seed(4)
    frames = [env.render()]
    while env.agents:
        _random_step(env)
        frames.append(env.render())
    shapes = {f.shape for f in frames}
    assert len(shapes) == 1
    h, w, c = shapes.pop()
    assert c == 3 and h >= 400 and w >= 700
    assert all(f.dtype == np.uint8 for f in frames)
    # frames change from tick to tick and are not blank
    assert all(not np.array_equal(a, b) for a, b in zip(frames, frames[1:], strict=False))
    assert all(f.std() > 10 for f in frames)
    # a new episode starts a fresh dashboard
    env.reset(seed=5)
    assert env.render().shape == frames[0].shape


def test_rgb_array_survives_skipped_ticks_and_reuses_one_figure():
    env = commons_arena.parallel_env("standard", render_mode="rgb_array")
    env.reset(seed=2)
    first = env.render()
    figure = env._dashboard.fig
    _random_step(env)
    _random_step(env)  # tick 0 never rendered: a gap in the time series
    assert env.render().shape == first.shape
    _random_step(env)
    assert env.render().shape == first.shape
    assert env._dashboard.fig is figure
    ticks = env._dashboard._ticks
    assert [t["tick"] for t in ticks] == [1, 2]
    # what the allocator saw comes with the tick report, rendered or not
    assert all(t["seen"] is not None for t in ticks)


def test_ansi_is_text():
    env = commons_arena.parallel_env("standard", render_mode="ansi")
    env.reset(seed=0)
    _random_step(env)
    text = env.render()
    assert isinstance(text, str) and "tick 1/" in text


@pytest.mark.slow
def test_frames_from_recording(tmp_path):
    path = tmp_path / "run.jsonl"
    env = RecordEpisode(commons_arena.parallel_env("standard"), path)
    env.reset(seed=1)
    n = 0
    while env.agents:
        _random_step(env)
        n += 1
    env.close()
    frames = list(frames_from_recording(path))
    assert len(frames) == n + 1  # the reset state, then one per tick
    assert all(f.dtype == np.uint8 and f.shape == frames[0].shape for f in frames)


@pytest.mark.slow
@pytest.mark.parametrize("scenario", commons_arena.list_scenarios())
def test_every_scenario_renders(scenario):
    env = commons_arena.parallel_env(scenario, render_mode="rgb_array")
    env.reset(seed=0)
    for _ in range(3):
        if env.agents:
            _random_step(env)
    frame = env.render()
    assert frame.ndim == 3 and frame.shape[2] == 3


def test_human_mode_prints_each_tick_once(capsys):
    env = commons_arena.parallel_env("standard", render_mode="human")
    env.reset(seed=0)
    env.step({})
    env.step({})
    out = capsys.readouterr().out
    assert out.count("played tick") == 2  # one block per step, nothing else
    assert "None" not in out
