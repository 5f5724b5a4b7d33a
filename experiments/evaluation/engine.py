"""The one engine: the only episode loop of experiments/.

**What to play** (:func:`play`): a scenario (or an env), a *lineup* for every seat (a
:class:`~policies.population.Population` of registry names, already-built policies, or a
factory ``env -> policies``) and seeds; an optional :class:`Observer` sees every tick (what each
seat observed, the joint action, who acted) and every finished :class:`Episode`. Every seat is
background in one :class:`policies.focal.FocalEnv`, so each policy is seeded by the one rule
and the same seed gives the same episode whatever plays it: training's held-out evaluation,
traces, fixed codes, best-response reports, the codec measurements, ``evaluate`` and the
``play`` command all play through here (``tests/test_layout.py`` finds any other
``run_episode`` / ``FocalEnv`` call).

**Which path** :func:`play` takes is its own choice: a scenario played by a population whose every
seat has a batched form (:func:`policies.registry.has_batch_form`: the scripted teams, brokers and
allocators, ``planner``, learned checkpoints), on at least :data:`MIN_ARENAS` seeds (below, the per-arena
path is faster), with no observer and no recording, plays on the batched core (``commons_arena.vector_env``,
batches of up to :data:`MAX_ARENAS` arenas, arena k playing seed k, every seat reset by the one
seeding rule), giving the per-arena path's episodes bit for bit. Everything else (the oracle,
fixed codes, policy sets, built policies, a uniformly random seat, observers, recordings) plays per arena.
``batched=False`` or ``COMMONS_ARENA_PER_ARENA=1`` force the per-arena path (tests, A/B timing).

**Groups**: a :class:`Group` is one player in the focal seat of one
:class:`~experiments.evaluation.roster.EvaluationScenario` (scenario x seat x background), on some
seeds; :func:`group_results` plays it (its policies built once) into rows for the results store.
A row's store key is derived where rows are written (:mod:`experiments.evaluation.results`, which
also spreads groups over workers through :mod:`experiments.evaluation.workers`).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import commons_arena
from commons_arena.arena import ArenaEnv
from commons_arena.enums import ALLOCATOR, BROKER
from commons_arena.recording import RecordEpisode
from commons_arena.scenario import ScenarioConfig
from experiments.evaluation.roster import Player, focal_agents
from policies.base import Policy, uniform_random_policies
from policies.batch import BatchPolicy
from policies.focal import FocalEnv, policy_seed
from policies.population import Entry, Population
from policies.registry import batch_policy, has_batch_form

MAX_ARENAS = 256  # the batched path plays its seeds in batches of at most this many arenas
# ...and only at least this many seeds: below it the per-arena path is faster (in-process, warm, edf,
# proportional and best_fit on `standard` and `crisis`, each a batch of one per arena, load ~4: batched /
# per-arena episodes/s 0.39-0.49x at 1 seed, 0.56-0.86x at 2, 0.99-1.30x at 4, 1.8-2.3x at 8)
MIN_ARENAS = 4
PER_ARENA_ENV = "COMMONS_ARENA_PER_ARENA"  # set to 1: every play takes the per-arena path (tests, A/B timing)


# --------------------------------------------------------------------------- the episode loop

Lineup = Population | Mapping[str, Policy] | Callable[[ArenaEnv], Mapping[str, Policy]]
"""Who sits in every seat: a population (built here for the env, ``strict=False``), built policies
(reused, reset per episode) or a factory given the env (for privileged policies that read it)."""


@dataclass(frozen=True)
class Tick:
    """One tick of an episode, as an :class:`Observer` sees it (after the step)."""

    seed: int  # the episode's seed
    index: int  # 0 for the episode's first step
    observations: Mapping[str, np.ndarray]  # what every seat observed when it acted
    actions: Mapping[str, Any]  # the joint action
    policies: Mapping[str, Policy]  # who acted (a learned policy's ``last_module_action`` is its code)
    env: FocalEnv  # the episode after the step (``seat_infos``, ``seat_rewards``, ``unwrapped``)


@dataclass(frozen=True)
class Episode:
    """One finished episode."""

    seed: int
    summaries: dict[str, dict[str, float]]  # every agent's infos["episode"]
    wall_seconds: float

    def returns(self) -> dict[str, float]:
        return {agent: float(summary["return"]) for agent, summary in self.summaries.items()}


class Observer:
    """Sees every tick and every episode :func:`play` plays (override what you need; it must
    not act: trajectories are the same with or without it)."""

    def begin(self, seed: int) -> None:
        """A new episode of ``seed`` was reset."""

    def tick(self, tick: Tick) -> None:
        """One tick was played."""

    def end(self, episode: Episode) -> None:
        """The episode ended."""


def lineup_policies(lineup: Lineup, env: ArenaEnv) -> dict[str, Policy]:
    """Every seat's policy for ``env`` (see :data:`Lineup`)."""
    if isinstance(lineup, Population):
        return lineup.build(env.config, env=env, strict=False)
    if callable(lineup):
        return dict(lineup(env))
    return dict(lineup)


def arena_for(env: ArenaEnv | ScenarioConfig | str) -> Any:
    """``env`` itself if it is an arena (or a wrapper of one), else a new arena of that scenario."""
    return commons_arena.parallel_env(scenario=env) if isinstance(env, str | ScenarioConfig) else env


def play(env: ArenaEnv | ScenarioConfig | str, lineup: Lineup, seeds: Iterable[int],
         observer: Observer | None = None, record: Path | None = None, batched: bool = True) -> Iterator[Episode]:
    """The one episode loop: every seed's episode in order, every seat played by ``lineup``
    (policies built once, reset per episode by the one seeding rule of
    :class:`~policies.focal.FocalEnv`), each yielded as soon as it ends. ``env``: an arena
    (or a wrapper of one) to play on, or a scenario to make one of; ``record``: write the
    episodes to this JSONL recording. On the batched core when it can (module docstring)."""
    seeds = [int(seed) for seed in seeds]
    chosen = None if observer is not None or record is not None else batched_entries(env, lineup, len(seeds), batched)
    if chosen is None:
        return per_arena_episodes(env, lineup, seeds, observer, record)
    return batched_episodes(*chosen, seeds)


def batched_entries(env: ArenaEnv | ScenarioConfig | str, lineup: Lineup, num_seeds: int,
                    batched: bool = True) -> tuple[ScenarioConfig, dict[str, Entry]] | None:
    """The scenario and every seat's entry when :func:`play` takes the batched core: asked to (``batched``,
    and :data:`PER_ARENA_ENV` unset or 0), at least :data:`MIN_ARENAS` seeds, a scenario (not an env) and a
    population giving every seat a policy with a batched form; else None."""
    if not batched or os.environ.get(PER_ARENA_ENV, "") not in ("", "0") or num_seeds < MIN_ARENAS:
        return None
    if not isinstance(env, str | ScenarioConfig) or not isinstance(lineup, Population):
        return None
    config = commons_arena.load_scenario(env)
    entries = lineup.resolve(config, strict=False)
    if set(entries) != set(config.agents) or not all(has_batch_form(entry.policy, config, agent)
                                                      for agent, entry in entries.items()):
        return None
    return config, entries


def per_arena_episodes(env: ArenaEnv | ScenarioConfig | str, lineup: Lineup, seeds: Sequence[int],
                       observer: Observer | None = None, record: Path | None = None) -> Iterator[Episode]:
    """:func:`play` one arena at a time (a recording is closed when the last episode is played)."""
    base = arena_for(env)
    policies = lineup_policies(lineup, base.unwrapped)
    played = base if record is None else RecordEpisode(base, record)
    episode = FocalEnv(played, (), policies)
    try:
        for seed in seeds:
            start = time.perf_counter()
            episode.reset(seed=seed)
            if observer is not None:
                observer.begin(seed)
            index = 0
            while not episode.episode_over:
                observed = episode.seat_observations
                episode.step({})
                if observer is not None:
                    observer.tick(Tick(seed, index, observed, episode.seat_actions, policies, episode))
                index += 1
            result = Episode(seed, {agent: info["episode"] for agent, info in episode.seat_infos.items()},
                             time.perf_counter() - start)
            if observer is not None:
                observer.end(result)
            yield result
    finally:
        if record is not None:
            played.close()


def batched_episodes(config: ScenarioConfig, entries: Mapping[str, Entry], seeds: Sequence[int]) -> Iterator[Episode]:
    """:func:`play` on the batched core: the seeds split evenly into batches of at most :data:`MAX_ARENAS`
    arenas (every seat's batched policy built per batch), a batch's wall time shared by its episodes."""
    for part in np.array_split(np.asarray(seeds, dtype=np.int64), -(-len(seeds) // MAX_ARENAS)):
        began = time.perf_counter()
        batch = part.tolist()
        policies = {agent: batch_policy(entry.policy, config, agent, len(batch), **dict(entry.params))
                    for agent, entry in entries.items()}
        summaries = batch_summaries(config, policies, batch)
        seconds = (time.perf_counter() - began) / len(batch)
        for seed, summary in zip(batch, summaries, strict=True):
            yield Episode(seed, summary, seconds)


def batch_summaries(config: ScenarioConfig, policies: Mapping[str, BatchPolicy],
                    seeds: Sequence[int]) -> list[dict[str, dict[str, float]]]:
    """One episode per seed on the batched core, arena k playing ``seeds[k]`` (``policies`` in
    ``len(seeds)`` arenas, reset by the one seeding rule of :class:`~policies.focal.FocalEnv`):
    every agent's episode totals per seed, as the per-arena path gives them (what an arena plays
    after its first episode ends is ignored; it stops when every arena has ended)."""
    env = commons_arena.vector_env(config, num_envs=len(seeds))
    seat_index = {agent: i for i, agent in enumerate(env.possible_agents)}
    for agent, policy in policies.items():
        policy.reset([policy_seed(seed, seat_index[agent]) for seed in seeds])
    observations, _ = env.reset(seed=[int(seed) for seed in seeds])
    summaries: list[dict[str, dict[str, float]] | None] = [None] * len(seeds)
    pending = np.ones(len(seeds), dtype=bool)
    while pending.any():
        actions = {agent: policy.act(observations[agent]) for agent, policy in policies.items()}
        observations, _, _, _, infos = env.step(actions)
        for k in np.flatnonzero(pending & infos[env.possible_agents[0]].get("_episode", False)).tolist():
            summaries[k] = {agent: {key: float(values[k]) for key, values in infos[agent]["episode"].items()}
                            for agent in env.possible_agents}
            pending[k] = False
    return [summary for summary in summaries if summary is not None]


def returns_of(episodes: Iterable[Episode], seat: str) -> list[float]:
    """``seat``'s return in each episode."""
    return [float(e.summaries[seat]["return"]) for e in episodes]


# --------------------------------------------------------------------------- groups


@dataclass(frozen=True)
class EvaluationScenario:
    """A game scenario, the focal seat and the background that fills every other seat."""

    config: ScenarioConfig
    seat: str  # allocator | broker | teams | team:<name>
    background_name: str
    background: Population

    @property
    def name(self) -> str:
        """``<scenario>@<background>`` (``/<seat>`` added for a team seat): unique within a suite."""
        team = "" if self.seat in (ALLOCATOR, BROKER) else f"/{self.seat.removeprefix('team:')}"
        return f"{self.config.name}{team}@{self.background_name}"

    @property
    def focal_agents(self) -> tuple[str, ...]:
        return focal_agents(self.seat, self.config)


@dataclass(frozen=True)
class Group:
    """One player in the focal seat of one evaluation scenario, on some seeds: its policies are built once."""

    evaluation: EvaluationScenario
    player: Player
    seeds: tuple[int, ...]
    record: Path | None = None  # write the group's episodes to this JSONL recording (in-process only)


@dataclass(frozen=True)
class EpisodeResult:
    """One played episode of a group, as the results store takes it (its key is derived where it is written)."""

    seed: int
    policy: str  # the player's policy name (and parameters) as JSON
    focal_return: float
    episode: str  # JSON of every agent's infos["episode"], encoded where it was played
    wall_seconds: float


def focal_population(background: Population, agents: Sequence[str], player: Player) -> Population:
    """The background with every focal agent played by ``player`` (uniform random: left to the caller)."""
    population = background
    if not player.uniform_random:
        for agent in agents:
            population = population.with_agent(agent, player.entry.policy, **dict(player.entry.params))
    return population


def focal_policies(group: Group, env: Any) -> dict[str, Policy]:
    """Every seat's policy for ``group``: the background, and the player in the focal seat (built
    once, reset per episode); a uniformly random player acts through :func:`policies.base.uniform_random_policies`."""
    evaluation = group.evaluation
    agents = evaluation.focal_agents
    policies: dict[str, Policy] = focal_population(evaluation.background, agents, group.player).build(evaluation.config,
                                                                                                      env=env)
    if group.player.uniform_random:
        policies.update(uniform_random_policies(env, agents))
    return policies


def group_lineup(group: Group) -> Lineup:
    """Who sits in every seat of ``group``'s episodes: the background with the player in the focal seat (a
    population), or, for a uniformly random player, a factory."""
    if group.player.uniform_random:
        return lambda env: focal_policies(group, env)
    return focal_population(group.evaluation.background, group.evaluation.focal_agents, group.player)


def on_batched_core(group: Group, batched: bool = True) -> bool:
    """Whether :func:`group_results` plays ``group`` on the batched core (:func:`play`'s choice)."""
    evaluation = group.evaluation
    return group.record is None and batched_entries(evaluation.config, group_lineup(group), len(group.seeds),
                                                    batched) is not None


def group_results(group: Group, batched: bool = True) -> Iterator[EpisodeResult]:
    """``group``'s episodes through :func:`play`, in seed order, as rows for the store (the focal seat's
    mean return, the episode as JSON)."""
    agents = group.evaluation.focal_agents
    policy = json.dumps({"policy": group.player.entry.policy, **dict(group.player.entry.params)}, sort_keys=True)
    for episode in play(group.evaluation.config, group_lineup(group), group.seeds, record=group.record, batched=batched):
        focal = sum(episode.summaries[a]["return"] for a in agents) / len(agents)
        yield EpisodeResult(episode.seed, policy, float(focal), json.dumps(episode.summaries, sort_keys=True),
                            episode.wall_seconds)


__all__ = ["MAX_ARENAS", "MIN_ARENAS", "PER_ARENA_ENV", "Episode", "EpisodeResult", "EvaluationScenario", "Group", "Lineup", "Observer",
           "Tick", "arena_for", "focal_policies", "group_results", "lineup_policies", "on_batched_core", "play", "returns_of"]
