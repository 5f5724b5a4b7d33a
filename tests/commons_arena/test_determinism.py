"""Same scenario + seed + actions → the same trajectory, in this process and in another one;
different seeds → different trajectories when the scenario draws anything at random."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import commons_arena
from tests import trajectory_digests
from tests.sweeps import swept

SCENARIOS = commons_arena.list_scenarios()
ROOT = Path(__file__).resolve().parents[2]

# Runs here (exec) and in a fresh interpreter (python -c), so both use the same code.
ROLLOUT = r'''
import hashlib
import numpy as np
import commons_arena

def trajectory_hash(scenario, seed, episodes=2):
    """sha256 of every observation, reward, flag and reward term of `episodes` episodes,
    actions drawn from a generator seeded with `seed` (independent of the env)."""
    env = commons_arena.parallel_env(scenario=scenario)
    h = hashlib.sha256()
    rng = np.random.default_rng(seed + 10_000)
    for episode in range(episodes):
        obs, infos = env.reset(seed=seed + episode)
        for agent in sorted(obs):
            h.update(agent.encode()); h.update(obs[agent].tobytes())
        while env.agents:
            actions = {a: rng.integers(0, env.action_space(a).nvec) for a in env.agents}
            obs, rewards, term, trunc, infos = env.step(actions)
            for agent in sorted(obs):
                h.update(agent.encode())
                h.update(obs[agent].tobytes())
                h.update(float(rewards[agent]).hex().encode())
                h.update(f"{term[agent]}{trunc[agent]}".encode())
                for name, value in sorted(infos[agent]["reward_terms"].items()):
                    h.update(name.encode()); h.update(float(value).hex().encode())
            h.update(repr(infos["allocator"]["events"]).encode())
            h.update(repr(sorted(infos["allocator"]["repairs"].items())).encode())
        state = env.hidden_state()
        h.update(float(state.budget).hex().encode()); h.update(float(state.carbon_used).hex().encode())
    return h.hexdigest()
'''


def _local() -> dict:
    namespace: dict = {}
    exec(ROLLOUT, namespace)  # noqa: S102 - our own constant
    return namespace


trajectory_hash = _local()["trajectory_hash"]


@pytest.mark.parametrize("name", swept(SCENARIOS))
def test_same_seed_same_trajectory(name: str) -> None:
    """Another seed played in between leaves nothing behind in the process (a module-level generator,
    a cache), and the seed decides the episode (another gives another trajectory)."""
    first = trajectory_hash(name, 3)
    other = trajectory_hash(name, 4)
    assert trajectory_hash(name, 3) == first
    assert other != first


@pytest.mark.slow
def test_same_trajectory_in_another_process(unusual_scenario: Path) -> None:
    """One subprocess (with another hash seed) replays every shipped scenario and an unusual one."""
    cases = [(name, 5) for name in SCENARIOS] + [(str(unusual_scenario), 6)]
    expected = {f"{s}:{seed}": trajectory_hash(s, seed) for s, seed in cases}
    code = ROLLOUT + (
        "\nimport json, sys\n"
        f"cases = {cases!r}\n"
        "print(json.dumps({f'{s}:{seed}': trajectory_hash(s, seed) for s, seed in cases}))\n"
    )
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == expected


def _draws_at_random(config: commons_arena.ScenarioConfig) -> bool:
    return (
        any(team.generator is not None and team.generator.rate > 0 for team in config.teams)
        or any(job.value_noise > 0 for team in config.teams for job in team.jobs)
        or any(shock.rate for shock in config.shocks)
    )


RANDOM_SCENARIOS = [n for n in SCENARIOS if _draws_at_random(commons_arena.load_scenario(n))]


def test_some_shipped_scenario_draws_at_random() -> None:
    assert "standard" in RANDOM_SCENARIOS


@pytest.mark.parametrize("name", swept(RANDOM_SCENARIOS))
def test_different_seeds_different_trajectories(name: str) -> None:
    hashes = {trajectory_hash(name, seed, episodes=1) for seed in (0, 1, 2)}
    assert len(hashes) > 1


def test_different_seeds_draw_different_jobs() -> None:
    """The generators themselves (not only the actions) depend on the reset seed."""
    env = commons_arena.parallel_env("standard")

    def jobs_of(seed: int) -> list:
        env.reset(seed=seed)
        return [(j.id, j.gpus, j.work, j.deadline, j.value) for team in env.hidden_state().jobs for j in team]

    assert jobs_of(0) == jobs_of(0)
    assert jobs_of(0) != jobs_of(1)


def test_reset_seed_alone_fixes_the_episode() -> None:
    """A used env reset with seed s replays exactly what a fresh env does with seed s."""
    assert trajectory_hash("standard", 9, episodes=1) != trajectory_hash("standard", 10, episodes=1)  # seeds matter
    used = commons_arena.parallel_env("standard")
    used.reset(seed=123)
    for _ in range(5):
        used.step({})
    fresh = commons_arena.parallel_env("standard")
    obs_used, _ = used.reset(seed=9)
    obs_fresh, _ = fresh.reset(seed=9)
    for _ in range(12):
        if not fresh.agents:
            break
        a, *_ = used.step({})
        b, *_ = fresh.step({})
        for agent in a:
            assert (a[agent] == b[agent]).all()
    assert used.hidden_state().carbon_used == fresh.hidden_state().carbon_used


# ---------------------------------------------------------------- recorded digests
# Recorded before the issue-11 refactor (tests/trajectory_digests.py says how they are made
# and regenerated): any change of observations, rewards, terms, ends or infos, in any
# shipped scenario, with random, scripted or oracle players, fails here.
RECORDED = trajectory_digests.load()


def test_every_shipped_scenario_has_recorded_digests() -> None:
    assert sorted(RECORDED) == sorted(trajectory_digests.key(*case) for case in trajectory_digests.cases())


@pytest.mark.parametrize("name", trajectory_digests.golden_scenarios())  # every golden scenario, in the fast loop too
def test_trajectories_match_recorded_digests(name: str) -> None:
    cases = [case for case in trajectory_digests.cases() if case[0] == name]
    changed = [trajectory_digests.key(*case) for case in cases
               if trajectory_digests.digest(*case) != RECORDED[trajectory_digests.key(*case)]]
    assert not changed, f"behaviour changed for {changed}; if deliberate, bump the env version and regenerate"
