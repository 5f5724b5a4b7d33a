"""Equivalence of a batched policy with N per-arena policies (``policies.batch``), on recorded episodes.

:func:`record_episodes` plays reference-env episodes (``commons_arena.parallel_env``) and keeps
every seat's observations tick by tick: half the episodes with the scenario's scripted
background and a scripted allocator (cycling through the baselines), half with every seat
acting uniformly at random (budgets, offers and carbon caps then bind, so the fit step cuts).
:func:`assert_equivalent` replays one seat's episodes through a batched policy and through
:class:`~policies.batch.LoopBatchPolicy` side by side, ``num_envs`` arenas at a time: an arena
whose episode ends resets alone (a new seed, the next episode), and some arenas are reset early,
mid-episode, so partial resets are exercised; every action must be identical.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

import commons_arena
from commons_arena.scenario import ScenarioConfig, load_scenario
from commons_arena.spaces import role_of
from policies.allocators import SCRIPTED_ALLOCATORS
from policies.base import UniformRandomPolicy
from policies.batch import LoopBatchPolicy
from policies.population import Population
from policies.registry import BATCHED, available_policies, batch_policy, make_policy

HARD_CAP = Path(__file__).parents[1] / "data" / "scenarios" / "hard_cap_cluster.toml"
# every policy with a batched form, with overridden parameters where it takes any
CASES: list[tuple[str, dict[str, Any]]] = [
    *((name, {}) for name in BATCHED),
    ("growth", {"bluff": 1.3, "escalate_after": 1}),
    ("truthful", {"bluff": 0.7, "escalate_after": 4}),
    ("demand_priced", {"margin": 1.0, "demand_gain": 5.0, "crisis_levels": 2}),
    ("fixed_price", {"level": 1}),
    ("equal_split", {"pacing": 0.5}),
    ("best_fit", {"defer": False}),
    ("best_fit", {"pacing": 8.0}),
    ("drf", {"pacing": 1.0}),
]

Episodes = dict[str, list[np.ndarray]]  # agent -> episodes, each (ticks, obs_dim)


def record_episodes(config: ScenarioConfig | str, episodes: int, seed: int = 0) -> Episodes:
    """Every seat's observations in ``episodes`` reference-env episodes (seeds ``seed + e``)."""
    config = load_scenario(config)
    env = commons_arena.parallel_env(scenario=config)
    allocators = list(SCRIPTED_ALLOCATORS)
    out: Episodes = {agent: [] for agent in env.possible_agents}
    for e in range(episodes):
        if e % 2:
            policies = dict(zip(env.possible_agents, (UniformRandomPolicy(env.action_space(a).nvec)
                                                      for a in env.possible_agents), strict=True))
        else:
            population = Population.default(config).with_role("allocator", allocators[(e // 2) % len(allocators)])
            policies = population.build(config, env=env)
        for i, policy in enumerate(policies.values()):
            policy.reset(seed + 1000 * e + i)
        observations, _ = env.reset(seed=seed + e)
        seen: dict[str, list[np.ndarray]] = {agent: [] for agent in env.possible_agents}
        while env.agents:
            for agent in env.agents:
                seen[agent].append(np.array(observations[agent]))
            actions = {agent: policies[agent].act(observations[agent]) for agent in env.agents}
            observations, *_ = env.step(actions)
        for agent, rows in seen.items():
            if rows:
                out[agent].append(np.stack(rows))
    return out


def seats_for(config: ScenarioConfig, name: str) -> list[str]:
    """The agents of ``config`` that policy ``name`` can play."""
    role = next(r for r in ("allocator", "team", "broker") if name in available_policies(r))
    return [agent for agent in commons_arena.parallel_env(scenario=config).possible_agents
            if role_of(config, agent) == role]


def assert_equivalent(name: str, config: ScenarioConfig, agent: str, episodes: list[np.ndarray], num_envs: int,
                      seed: int = 0, **params: Any) -> int:
    """Replay ``episodes`` of ``agent`` through ``batch_policy(name)`` and a loop of per-arena policies,
    ``num_envs`` arenas at once with partial resets; every action identical. Returns actions compared."""
    batched = batch_policy(name, config, agent, num_envs, **params)
    assert not isinstance(batched, LoopBatchPolicy), f"{name} has a batched form"
    loop = LoopBatchPolicy(lambda: make_policy(name, config, agent, **params), num_envs)
    rng = np.random.default_rng(seed)
    queue = list(range(len(episodes))) * max(1, -(-2 * num_envs // max(len(episodes), 1)))  # every arena plays twice
    playing = [queue.pop() for _ in range(num_envs)]
    tick = [0] * num_envs
    next_seed = iter(range(seed * 10_000, seed * 10_000 + 10_000_000))
    seeds = [next(next_seed) for _ in range(num_envs)]
    batched.reset(seeds)
    loop.reset(seeds)
    compared = 0
    while any(e is not None for e in playing):
        obs = np.stack([episodes[e][t] if e is not None else episodes[0][0] for e, t in zip(playing, tick, strict=True)])
        got, want = batched.act(obs), loop.act(obs)
        assert got.dtype == np.int64 and got.shape == want.shape
        live = np.array([e is not None for e in playing])
        bad = np.flatnonzero(np.any(got != want, axis=1) & live)
        assert not bad.size, (f"{name}{params} as {agent} of {config.name}: arena {bad[0]} (episode {playing[bad[0]]}, "
                              f"tick {tick[bad[0]]}) batched {got[bad[0]].tolist()} != per arena {want[bad[0]].tolist()}")
        compared += int(live.sum())
        restart = []
        for i, e in enumerate(playing):
            if e is None:
                continue
            tick[i] += 1
            if tick[i] >= len(episodes[e]) or rng.random() < 0.03:  # ended, or reset early
                playing[i] = queue.pop() if queue else None
                tick[i] = 0
                restart.append(i)
        if restart:
            index = np.array(restart)
            new = [next(next_seed) for _ in restart]
            batched.reset(new, index)
            loop.reset(new, index)
    return compared
