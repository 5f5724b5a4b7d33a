"""The small items: seed errors say "seed", huge action values are reported as given, the
oracle keeps stdout clean, observation bounds are finite and shared by the curriculum tiers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import commons_arena
from commons_arena.enums import ALLOCATOR
from tests.sweeps import swept


@pytest.mark.parametrize("seed", [-1, 1.5, "3", True, -(2**70)])
def test_bad_seed_says_seed(seed):
    env = commons_arena.parallel_env("standard")
    with pytest.raises(ValueError, match=r"seed must be a non-negative integer or None"):
        env.reset(seed=seed)


def test_numpy_integer_seeds_still_work():
    env = commons_arena.parallel_env("standard")
    a, _ = env.reset(seed=np.int64(7))
    b, _ = env.reset(seed=7)
    assert all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize(
    "value", [2**64 - 1, 2**63, 2**70, np.uint64(2**64 - 1), -(2**63), 1e300]
)
def test_overflowing_action_values_are_reported_as_given(value):
    env = commons_arena.parallel_env("standard")
    env.reset(seed=0)
    nvec = env.action_space(ALLOCATOR).nvec
    action = [0] * len(nvec)
    action[2] = value
    arrays = [action, np.array(action, dtype=np.uint64)] if isinstance(value, np.uint64) else [action]
    for given in arrays:
        with pytest.raises(ValueError, match=rf"at index 2: {int(value)} not in \[0, {nvec[2] - 1}\]"):
            env.step({ALLOCATOR: given})


def test_finite_bounds_identical_across_tiers_and_observations_unchanged():
    spaces = {}
    for tier in ("standard", "elevated", "crisis"):
        env = commons_arena.parallel_env(tier)
        spaces[tier] = {a: env.observation_space(a) for a in env.possible_agents}
        for space in spaces[tier].values():
            assert np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))
            assert np.all(space.high - space.low > 0)  # SuperSuit's normalize_obs divides by this
    for agent, space in spaces["standard"].items():
        for tier in ("elevated", "crisis"):
            assert np.array_equal(space.low, spaces[tier][agent].low)
            assert np.array_equal(space.high, spaces[tier][agent].high)


@pytest.mark.parametrize("scenario", swept(commons_arena.list_scenarios()))
def test_observations_stay_inside_the_finite_bounds(scenario):
    env = commons_arena.parallel_env(scenario)
    for seed in range(3):
        for agent in env.possible_agents:
            env.action_space(agent).seed(seed)
        obs, _ = env.reset(seed=seed)
        while env.agents:
            for agent, o in obs.items():
                space = env.observation_space(agent)
                assert space.contains(o), (agent, np.flatnonzero((o < space.low) | (o > space.high)))
                normalised = (o - space.low) / (space.high - space.low)  # what normalize_obs_v0 computes
                assert np.all(np.isfinite(normalised))
            obs, *_ = env.step({a: env.action_space(a).sample() for a in env.agents})


@pytest.mark.slow
def test_native_output_is_silenced_and_python_output_kept(tmp_path):
    """HiGHS prints with C printf; the oracle's guard drops exactly that."""
    script = (
        "import ctypes, sys\n"
        "from policies.oracle import native_stdout_silenced\n"
        "print('before')\n"
        "libc = ctypes.CDLL(None)\n"
        "with native_stdout_silenced():\n"
        "    libc.printf(b'HighsMipSolverData noise\\n')\n"
        "print('after')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["before", "after"]
