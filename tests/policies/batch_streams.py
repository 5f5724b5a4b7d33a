"""Observation streams for the batched-policy equivalence tests (tests/policies/test_batch_*.py).

:func:`episodes` plays reference-env episodes of one seat (the scenario's background in the
other seats) and keeps the seat's observations; :func:`schedule` deals them to ``N`` arenas
as a vector env would: every arena starts an episode at step 0, each episode is cut at a
random length, and an arena whose episode ended starts the next one in place, so resets
name a few arenas mid-batch (an arena may replay an episode another played: the policies'
state is per arena). Per step it gives ``(index, seeds, observations)``: the arenas
to reset first (with their seeds; empty when none) and the ``(N, obs_dim)`` observations.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from commons_arena.scenario import ScenarioConfig
from policies import Population
from policies.focal import FocalEnv

Episode = tuple[int, list[np.ndarray]]  # (seed, the seat's observations, tick by tick)
Step = tuple[np.ndarray, list[int], np.ndarray]  # (arenas reset, their seeds, observations of every arena)


Actor = Callable[[np.ndarray], np.ndarray]  # one episode's player: observation -> action


def episodes(config: ScenarioConfig, agent: str, seeds: range | list[int], actor: Callable[[int], Actor]) -> list[Episode]:
    """One episode per seed with ``actor(episode number)`` in ``agent``'s seat."""
    env = FocalEnv.from_scenario(config, [agent], Population.default(config))
    played = []
    for number, seed in enumerate(seeds):
        obs, _ = env.reset(seed=seed)
        act = actor(number)
        seen = []
        while not env.episode_over:
            seen.append(np.array(obs[agent], copy=True))
            obs, *_ = env.step({agent: act(obs[agent])})
        played.append((seed, seen))
    return played


def mixed_actor(config: ScenarioConfig, agent: str, codec_name: str, seed: int = 0) -> Callable[[int], Actor]:
    """Episodes played three ways in turn: uniform random actions, the codec's zero code (its
    base policy; none: random codes) and random codes of the codec (``policies.codecs``)."""
    from policies.codecs import make_codec

    rng = np.random.default_rng(seed)
    nvec = config_nvec(config, agent)

    def start(number: int) -> Actor:
        if number % 3 == 0:
            return lambda obs: rng.integers(0, nvec)
        codec = make_codec(codec_name, config, agent)
        codec.reset()
        zero = codec.zero_code
        if number % 3 == 1 and zero is not None:
            return lambda obs: codec.decode(obs, zero)
        return lambda obs: codec.decode(obs, rng.integers(0, codec.nvec))

    return start


def config_nvec(config: ScenarioConfig, agent: str) -> np.ndarray:
    from commons_arena.spaces import make_action_space

    return np.asarray(make_action_space(config, agent).nvec, dtype=np.int64)


def schedule(played: list[Episode], num_envs: int, seed: int = 0, steps: int = 40) -> Iterator[Step]:
    """``played`` dealt in turn to ``num_envs`` arenas (module docstring), again from the first
    when they run out, for ``steps`` steps."""
    rng = np.random.default_rng(seed)
    dealt = 0

    def deal() -> tuple[int, list[np.ndarray]]:
        nonlocal dealt
        seed_, seen = played[dealt % len(played)]
        dealt += 1
        return seed_, seen[: int(rng.integers(1, len(seen) + 1))]

    current = [deal() for _ in range(num_envs)]
    position = [0] * num_envs
    index, seeds = np.arange(num_envs), [s for s, _ in current]
    for _ in range(steps):
        yield index, seeds, np.stack([seen[p] for (_, seen), p in zip(current, position, strict=True)])
        position = [p + 1 for p in position]
        ended = [a for a in range(num_envs) if position[a] >= len(current[a][1])]
        for a in ended:
            current[a], position[a] = deal(), 0
        index, seeds = np.array(ended, dtype=np.int64), [current[a][0] for a in ended]


# ---------------------------------------------------------------------- scenarios by case name

BROAD_SEED = 40  # the generated broad scenarios of these tests: generate_one(broad, BROAD_SEED, i)
FAST_CASES = ("standard", "crisis", "broad:0", "duo_one_tier_hard")  # the planner's fast loop


def case_config(case: str) -> ScenarioConfig:
    """A shipped scenario by name, ``broad:<i>`` (the i-th generated ``broad`` scenario) or an
    unusual shape of tests/conftest.py."""
    import commons_arena
    from commons_arena.family import generate_one, load_family
    from commons_arena.scenario import scenario_from_dict
    from tests.conftest import UNUSUAL

    if case.startswith("broad:"):
        return generate_one(load_family("broad"), BROAD_SEED, int(case.split(":")[1]))
    if case in UNUSUAL:
        return scenario_from_dict(UNUSUAL[case]())
    return commons_arena.load_scenario(case)


def cases(broad: int, fast: tuple[str, ...] = FAST_CASES) -> list[object]:
    """Every case, those outside ``fast`` marked slow: every shipped scenario, the unusual shapes
    and ``broad`` generated scenarios."""
    import pytest

    import commons_arena
    from tests.conftest import UNUSUAL

    names = [*commons_arena.list_scenarios(), *sorted(UNUSUAL), *(f"broad:{i}" for i in range(broad))]
    return [name if name in fast else pytest.param(name, marks=pytest.mark.slow) for name in names]
