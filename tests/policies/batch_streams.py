"""Observation streams for the batched-policy equivalence tests (tests/policies/test_batch_*.py).

:func:`episodes` plays reference-env episodes of one seat (the scenario's background in the
other seats) and keeps the seat's observations; :func:`schedule` deals them to ``N`` arenas
as a vector env would: every arena starts an episode at step 0, each episode is cut at a
random length, and an arena whose episode ended starts the next one in place, so resets
name a few arenas mid-batch. Per step it gives ``(index, seeds, observations)``: the arenas
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


def episodes(config: ScenarioConfig, agent: str, seeds: range | list[int],
             actor: Callable[[int, np.ndarray, np.random.Generator], np.ndarray]) -> list[Episode]:
    """One episode per seed with ``actor(episode number, observation, rng)`` in ``agent``'s seat."""
    env = FocalEnv.from_scenario(config, [agent], Population.default(config))
    rng = np.random.default_rng(len(seeds))
    played = []
    for number, seed in enumerate(seeds):
        obs, _ = env.reset(seed=seed)
        seen = []
        while not env.episode_over:
            seen.append(np.array(obs[agent], copy=True))
            obs, *_ = env.step({agent: actor(number, obs[agent], rng)})
        played.append((seed, seen))
    return played


def schedule(played: list[Episode], num_envs: int, seed: int = 0) -> Iterator[Step]:
    """``played`` dealt to ``num_envs`` arenas (module docstring); runs until the episodes run out
    (an arena without a next episode replays its first)."""
    rng = np.random.default_rng(seed)
    queue = iter(range(len(played)))
    current: list[tuple[int, list[np.ndarray]]] = []
    for arena in range(num_envs):
        seed_, seen = played[next(queue, arena % len(played))]
        current.append((seed_, seen[: int(rng.integers(1, len(seen) + 1))]))
    position = [0] * num_envs
    index, seeds = np.arange(num_envs), [s for s, _ in current]
    while True:
        yield index, seeds, np.stack([seen[p] for (_, seen), p in zip(current, position, strict=True)])
        position = [p + 1 for p in position]
        ended = [a for a in range(num_envs) if position[a] >= len(current[a][1])]
        following = [next(queue, None) for _ in ended]
        if None in following:
            return
        for a, e in zip(ended, following, strict=True):
            assert e is not None
            seed_, seen = played[e]
            current[a] = (seed_, seen[: int(rng.integers(1, len(seen) + 1))])
            position[a] = 0
        index, seeds = np.array(ended, dtype=np.int64), [current[a][0] for a in ended]
