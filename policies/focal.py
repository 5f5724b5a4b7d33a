"""Focal and background seats: one substrate for every place a population plays (docs/rules.md §9).

Every agent id is a *seat*. :class:`FocalEnv` wraps the arena so that only the *focal*
seats (the ones being trained, evaluated or played by a person) are visible: it is an
ordinary PettingZoo ``ParallelEnv`` of those seats, and the *background* policies act
inside ``step`` (Melting Pot's scenario idea: bots inside, focal players outside)::

    env = FocalEnv.from_scenario("standard", focal=["allocator"])   # scenario's background
    obs, infos = env.reset(seed=7)
    while env.agents:
        obs, rewards, terms, truncs, infos = env.step({"allocator": my_policy.act(obs["allocator"])})

The one seeding rule
    ``reset(seed=s)`` resets the arena with ``s`` and every background policy with
    ``policy_seed(s, i)``, ``i`` the seat's index in the arena's ``possible_agents``. So the
    same seed is the same episode wherever it is played: ``run_episode``, the single-agent
    view, ``commons-arena play``, training envs, evaluation, tournaments, serving. A reset
    without a seed draws the episode seed from a generator seeded by the last seeded reset
    (unseeded at first), so a run seeded once (as RLlib does) stays reproducible; the seed
    of every episode is in ``episode_seed`` and in each focal seat's reset info.

With no focal seats the whole population is background: ``agents`` is empty and
:attr:`FocalEnv.episode_over` says when to stop calling ``step({})`` (this is how
:func:`run_episode` plays). The arena's full per-step output for every
seat stays readable: :attr:`seat_observations`, :attr:`seat_rewards`, :attr:`seat_infos`,
and the joint action of the last step, :attr:`seat_actions` (analyses read them).
Time spent in the arena and in each background policy is summed in :attr:`env_seconds` and
:attr:`act_seconds` (the benchmarks read them).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from pettingzoo import ParallelEnv

from commons_arena.arena import ArenaEnv
from commons_arena.scenario import ScenarioConfig
from policies.base import Policy
from policies.population import Population, PopulationError


def policy_seed(seed: int | None, seat_index: int) -> int | None:
    """The seed of the policy in seat number ``seat_index`` (env order) in the episode of ``seed``."""
    if seed is None:
        return None
    return int(np.random.SeedSequence([int(seed), int(seat_index)]).generate_state(1)[0])


def _arena_of(env: Any) -> ArenaEnv:
    """The :class:`ArenaEnv` under ``env``'s wrappers (``env`` itself if it has none)."""
    arena: ArenaEnv = getattr(env, "unwrapped", env)
    return arena


class FocalEnv(ParallelEnv):
    """The focal seats of an arena as a ``ParallelEnv``; background policies act inside.

    ``env`` is an :class:`~commons_arena.arena.ArenaEnv` or a wrapper of one (e.g.
    ``RecordEpisode``: it then records every seat). ``focal`` names the exposed seats (any
    order; exposed in env order). ``background`` is a
    :class:`~policies.population.Population` (built here for ``env``; its entries for focal
    seats are ignored) or already-built policies by seat (reused; entries for focal seats
    are ignored; every other seat needs one).
    """

    metadata = {"name": "commons_arena_focal_v0", "is_parallelizable": True}

    def __init__(
        self,
        env: ArenaEnv | Any,
        focal: Sequence[str],
        background: Population | Mapping[str, Policy] | None = None,
    ) -> None:
        self.env = env
        self.arena = _arena_of(env)
        self.config: ScenarioConfig = self.arena.config
        seats = list(self.arena.possible_agents)
        focal = list(focal)
        unknown = [a for a in focal if a not in seats]
        if unknown:
            raise ValueError(f"focal seat(s) {unknown} are not seats of scenario {self.config.name!r}; seats: {seats}")
        if len(set(focal)) != len(focal):
            raise ValueError(f"focal seats repeat: {focal}")
        self.possible_agents = [a for a in seats if a in focal]
        self.agents: list[str] = []
        self.seat_index = {a: i for i, a in enumerate(seats)}
        if background is None:
            background = Population.default(self.config)
        if isinstance(background, Population):
            built = background.build(self.config, env=self.arena, strict=False)
            self.background: dict[str, Policy] = {a: p for a, p in built.items() if a not in focal}
        else:
            missing = [a for a in seats if a not in focal and a not in background]
            if missing:
                raise PopulationError(
                    f"no policy for agent(s) {missing}: every seat that is not focal needs a background policy "
                    f"(focal seats: {focal})"
                )
            self.background = {a: background[a] for a in seats if a not in focal}
        self.render_mode = getattr(env, "render_mode", None)
        self.episode_seed: int | None = None
        self._seeds = np.random.default_rng()  # draws the seeds of unseeded resets
        self.seat_observations: dict[str, np.ndarray] = {}
        self.seat_rewards: dict[str, float] = {}
        self.seat_infos: dict[str, Any] = {}
        self.seat_actions: dict[str, Any] = {}
        self.env_seconds = 0.0
        self.act_seconds: dict[str, float] = dict.fromkeys(self.background, 0.0)

    @classmethod
    def from_scenario(
        cls,
        scenario: str | ScenarioConfig,
        focal: Sequence[str],
        background: Population | Mapping[str, Policy] | None = None,
        **env_kwargs: Any,
    ) -> FocalEnv:
        """A new arena of ``scenario`` (``env_kwargs`` go to it); ``background`` defaults to
        the scenario's own population."""
        return cls(ArenaEnv(scenario=scenario, **env_kwargs), focal, background)

    # ------------------------------------------------------------------ spaces
    def observation_space(self, agent: str) -> Any:
        return self.arena.observation_space(agent)

    def action_space(self, agent: str) -> Any:
        return self.arena.action_space(agent)

    # ------------------------------------------------------------------ api
    @property
    def episode_over(self) -> bool:
        """True before the first reset and once the arena's episode has ended."""
        return not self.arena.agents

    def reset(self, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self._seeds = np.random.default_rng(seed)
            episode_seed = int(seed)
        else:
            episode_seed = int(self._seeds.integers(2**31 - 1))
        self.episode_seed = episode_seed
        for seat, policy in self.background.items():
            policy.reset(policy_seed(episode_seed, self.seat_index[seat]))
        start = time.perf_counter()
        observations, infos = self.env.reset(seed=episode_seed, options=options)
        self.env_seconds += time.perf_counter() - start
        self.seat_observations, self.seat_rewards, self.seat_infos, self.seat_actions = observations, {}, infos, {}
        self.agents = [a for a in self.possible_agents if a in self.arena.agents]
        focal_infos = {a: {**infos.get(a, {}), "episode_seed": episode_seed} for a in self.agents}
        return {a: observations[a] for a in self.agents}, focal_infos

    def step(self, actions: Mapping[str, Any]):
        if self.episode_over:
            raise RuntimeError("step() called with no episode running; call reset(seed=...) first")
        unknown = [a for a in actions if a not in self.possible_agents]
        if unknown:
            raise ValueError(f"actions for non-focal seat(s) {unknown}; focal seats are {self.possible_agents}")
        joint = dict(actions)
        observations = self.seat_observations
        for seat, policy in self.background.items():
            start = time.perf_counter()
            joint[seat] = policy.act(observations[seat])
            self.act_seconds[seat] += time.perf_counter() - start
        start = time.perf_counter()
        observations, rewards, terminations, truncations, infos = self.env.step(joint)
        self.env_seconds += time.perf_counter() - start
        self.seat_observations, self.seat_rewards, self.seat_infos = observations, rewards, infos
        self.seat_actions = joint
        exposed = [a for a in self.possible_agents if a in rewards]
        self.agents = [a for a in self.possible_agents if a in self.arena.agents]
        return (
            {a: observations[a] for a in exposed if a in observations},
            {a: rewards[a] for a in exposed},
            {a: terminations[a] for a in exposed},
            {a: truncations[a] for a in exposed},
            {a: infos[a] for a in exposed},
        )

    def play_out(self) -> dict[str, Any]:
        """Step with no focal actions until the episode ends (focal seats, if any, play
        all-zero no-ops); returns every seat's last infos."""
        while not self.episode_over:
            self.step({})
        return self.seat_infos

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()

    @property
    def unwrapped(self) -> ArenaEnv:  # type: ignore[override]
        return self.arena

    def state(self) -> np.ndarray:
        raise NotImplementedError("the arena has no global state array; use arena.hidden_state() (privileged)")


def run_episode(
    env: ArenaEnv,
    population: Population | Mapping[str, Policy],
    seed: int | None,
    strict: bool = True,
) -> dict[str, dict[str, float]]:
    """Play one episode of ``env`` from ``reset(seed=seed)``; return ``infos[agent]["episode"]`` per agent.

    ``env`` is the arena, a wrapper of it, or a :class:`FocalEnv` (then its own arena: ``population`` plays
    every seat, focal or not).

    ``population`` is a :class:`Population` (its policies are built for ``env``) or
    already-built policies by agent id (reused: each is ``reset`` here). Every seat is
    background in a :class:`FocalEnv`, so every policy is seeded by the one
    rule (:func:`policy_seed` of the episode seed and its seat) and the episode is a
    function of ``seed`` alone.
    """
    if isinstance(env, FocalEnv):  # its focal/background split gives way to ``population``'s: every seat plays
        env = env.env
    unwrapped = _arena_of(env)
    if isinstance(population, Population):
        population = population.build(unwrapped.config, env=unwrapped, strict=strict)
    episode = FocalEnv(env, (), population)
    episode.reset(seed=seed)
    infos = episode.play_out()
    return {agent: info["episode"] for agent, info in infos.items()}


__all__ = ["FocalEnv", "policy_seed", "run_episode"]
