"""Recorded digests of whole trajectories, to catch any change of behaviour bit for bit.

A digest is the sha256 of everything an episode gives out: every observation (its
bytes), reward (``float.hex``), termination and truncation flag, and every info
(reward terms, repairs, events, the end-of-episode summary), plus the final budget,
carbon and job statuses. It is taken for every shipped scenario and every test-data scenario
(``tests/data/scenarios``, e.g. a hard carbon cap no shipped one has), over several seeds,
with three kinds of players:

* ``random``: uniformly random actions from a generator seeded apart from the env;
* ``population``: the scenario's scripted background population (its ``[population]``
  table), seeded as :func:`policies.focal.run_episode` seeds it;
* ``oracle``: the same population with the privileged oracle allocator (one seed), so
  that the oracle's reading of the rules is pinned too.

``tests/data/trajectory_digests.json`` holds the digests recorded before a refactor;
``tests/commons_arena/test_determinism.py`` recomputes them. A deliberate change of the rules regenerates
the file (and bumps the env version, see docs/rules.md)::

    python -m tests.trajectory_digests --write
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

import commons_arena
from tests.golden.make import golden_scenarios, scenario_source

DIGESTS = Path(__file__).resolve().parent / "data" / "trajectory_digests.json"
SEEDS = (0, 1, 2)
ORACLE_SEEDS = (0,)
PLAYERS = ("random", "population", "oracle")


def _canonical(value: Any) -> Iterator[str]:
    """A text form of an info value in which floats keep every bit (``float.hex``)."""
    if isinstance(value, Mapping):
        yield "{"
        for key, item in value.items():  # insertion order is part of what is pinned
            yield repr(key)
            yield ":"
            yield from _canonical(item)
            yield ","
        yield "}"
    elif isinstance(value, np.ndarray):
        yield f"array{value.dtype}{value.shape}{value.tobytes().hex()}"
    elif isinstance(value, list | tuple):
        yield "["
        for item in value:
            yield from _canonical(item)
            yield ","
        yield "]"
    elif isinstance(value, bool | np.bool_):
        yield repr(bool(value))
    elif isinstance(value, float | np.floating):
        yield float(value).hex()
    elif isinstance(value, int | np.integer):
        yield str(int(value))
    else:
        yield repr(value)


def _actor(env, player: str, seed: int) -> Callable[[dict[str, np.ndarray]], dict[str, Any]]:
    """How the agents choose actions in this episode."""
    if player == "random":
        rng = np.random.default_rng(seed + 10_000)
        return lambda obs: {a: rng.integers(0, env.action_space(a).nvec) for a in env.agents}
    from policies.focal import policy_seed
    from policies.population import Population

    population = Population.default(env.config)
    if player == "oracle":
        population = population.with_agent("allocator", "oracle")
    policies = population.build(env.config, env=env)
    for index, agent in enumerate(env.possible_agents):
        policies[agent].reset(policy_seed(seed, index))
    return lambda obs: {a: policies[a].act(obs[a]) for a in env.agents}


def digest(scenario: str, seed: int, player: str) -> str:
    """sha256 of one episode of ``scenario`` from ``reset(seed=seed)`` played by ``player``."""
    env = commons_arena.parallel_env(scenario=scenario_source(scenario))
    h = hashlib.sha256()

    def feed(*parts: Any) -> None:
        for part in parts:
            h.update("".join(_canonical(part)).encode())

    obs, infos = env.reset(seed=seed)
    act = _actor(env, player, seed)
    feed(obs, infos)
    while env.agents:
        obs, rewards, terminations, truncations, infos = env.step(act(obs))
        feed(obs, rewards, terminations, truncations, infos)
    state = env.hidden_state()
    feed(state.t, state.budget, state.carbon_used, state.credibility, state.streak, state.revealed)
    feed([[(job.id, int(job.status), job.remaining, job.done_tick) for job in team] for team in state.jobs])
    return h.hexdigest()


def cases() -> list[tuple[str, int, str]]:
    """(scenario, seed, player) of every recorded digest."""
    out = []
    for scenario in golden_scenarios():
        for player in PLAYERS:
            for seed in ORACLE_SEEDS if player == "oracle" else SEEDS:
                out.append((scenario, seed, player))
    return out


def key(scenario: str, seed: int, player: str) -> str:
    return f"{scenario}:{player}:{seed}"


def compute_all() -> dict[str, str]:
    return {key(*case): digest(*case) for case in cases()}


def load() -> dict[str, str]:
    return json.loads(DIGESTS.read_text(encoding="utf-8"))


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.trajectory_digests --write   (regenerates " + str(DIGESTS) + ")")
    DIGESTS.parent.mkdir(parents=True, exist_ok=True)
    DIGESTS.write_text(json.dumps(compute_all(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {DIGESTS}")
