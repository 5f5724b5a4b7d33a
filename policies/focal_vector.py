"""The focal seats of N arenas as a Gymnasium vector env; the background acts inside the batch.

:class:`FocalVectorEnv` is :class:`~policies.focal.FocalEnv` at any batch size: the batched core
(``commons_arena.vector_env``) of one or several scenarios, every seat that is not focal played by
its batched policy (:func:`policies.registry.batch_policy`) inside ``step``, reseeded by the one
rule (:func:`policies.focal.policy_seed`) whenever an arena starts an episode. A researcher trains
one seat on it as on any ``gymnasium.vector.VectorEnv``::

    env = FocalVectorEnv("standard", num_envs=1024, focal="allocator")    # the scenario's background
    obs, infos = env.reset(seed=0)                    # (1024, obs_dim) float32
    obs, rewards, terminated, truncated, infos = env.step(env.action_space.sample())

=================  ==========================================================================
focal              one seat (``"allocator"``): single spaces, arrays; several seats: dicts by seat
observations       float32 ``(N, obs_dim)``, the seat's raw observation (``docs/environment.md``);
                   :func:`seat_observation_scale` is a divisor that makes every feature O(1)
actions            int64 ``(N, act_dim)`` in the seat's ``MultiDiscrete`` space
rewards            float64 ``(N,)``; terminated / truncated bool ``(N,)``
autoreset          Gymnasium's ``NEXT_STEP``: the step after an arena's last step ignores its actions,
                   returns its reset observation, reward 0 and no flags (``infos["_restarted"]``)
infos              ``reward_terms`` term -> ``(N,)``; ``episode`` key -> ``(N,)`` with mask ``_episode``
                   (the reference's ``episode_summary`` for arenas that just ended); ``episode_seed``
                   ``(N,)``; ``scenario_index`` ``(N,)`` (several seats: one such dict per seat)
seeds              ``reset(seed=s)``: arena *i* plays seed ``s + i``; a list: one per arena; later
                   episodes: the arena's previous seed + its scenario's arena count
several scenarios  ``scenario=[...]`` with ``weights``: arenas split in proportion (largest remainder),
                   each arena keeping its scenario; every scenario must give the focal seats the same spaces
=================  ==========================================================================

Arena *i* plays exactly the episode :class:`~policies.focal.FocalEnv` plays with the same seed,
background and actions (``tests/policies/test_focal_vector.py``). RLlib's batched samplers read
the same class (:mod:`experiments.training.batched_env`, :mod:`experiments.training.lean`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

import commons_arena
from commons_arena.rewards import Rubric
from commons_arena.scenario import ScenarioConfig, load_scenario
from commons_arena.spaces import make_action_space, make_observation_space, role_of
from policies.batch import BatchPolicy
from policies.focal import policy_seed
from policies.learned import observation_scale as learned_scale
from policies.population import Population, draw, thresholds
from policies.registry import batch_policy, policy_spec


def split_arenas(num_envs: int, weights: Sequence[float]) -> list[int]:
    """Arenas per scenario in proportion to ``weights`` (largest remainder; ties to the earlier
    scenario), each scenario at least one arena when there are enough."""
    if num_envs < len(weights):
        raise ValueError(f"{num_envs} envs cannot hold {len(weights)} scenarios: give at least one each")
    total = float(sum(weights))
    quotas = [num_envs * w / total for w in weights]
    counts = [max(1, int(q)) for q in quotas]
    while sum(counts) > num_envs:  # the floor of one arena each went over: take from the largest
        counts[int(np.argmax(counts))] -= 1
    order = sorted(range(len(weights)), key=lambda i: (-(quotas[i] - int(quotas[i])), i))
    for i in order[: num_envs - sum(counts)]:
        counts[i] += 1
    return counts


Background = Population | Mapping[str, Any] | None  # None: each scenario's own population


@dataclass(frozen=True)
class BackgroundMixture:
    """Backgrounds drawn per episode: every arena, when it starts an episode, plays entry *k* (named ``names[k]``)
    with probability ``weights[k] / sum(weights)``, drawn from its episode seed (:func:`entry_of`)."""

    names: tuple[str, ...]
    backgrounds: tuple[Background, ...]
    weights: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.backgrounds or not len(self.names) == len(self.weights) == len(self.backgrounds):
            raise ValueError(f"a mixture needs one name and one weight per background, got {len(self.names)} names "
                             f"and {len(self.weights)} weights for {len(self.backgrounds)}")
        if not all(math.isfinite(w) and w >= 0 for w in self.weights) or sum(self.weights) <= 0:
            raise ValueError(f"mixture weights must be non-negative with a positive sum, got {list(self.weights)}")


MIXTURE_STREAM = 0x313C  # an episode's mixture entry: its own stream of the episode seed


def entry_of(episode_seed: int, cuts: Sequence[float]) -> int:
    """The mixture entry the episode of ``episode_seed`` plays (boundaries ``cuts``: :func:`thresholds`)."""
    return draw(np.random.default_rng([int(episode_seed), MIXTURE_STREAM]), cuts)


def _population(background: Background, config: ScenarioConfig) -> Population:
    return background if isinstance(background, Population) else (
        Population.from_dict(background) if background else Population.default(config))


class FocalGroup:
    """The arenas of one scenario: rows ``offset .. offset + size`` of the batch, its core and background
    (one set of batched policies per entry of a mixture; each arena's entry drawn per episode)."""

    def __init__(self, config: ScenarioConfig, size: int, offset: int, focal: Sequence[str],
                 background: Population | Sequence[Population], weights: Sequence[float] = (1.0,)) -> None:
        self.config, self.size, self.offset = config, size, offset
        self.rows = slice(offset, offset + size)
        self.core = commons_arena.vector_env(scenario=config, num_envs=size)
        self.seat_index = {a: i for i, a in enumerate(config.agents)}
        unknown = [seat for seat in focal if seat not in self.seat_index]
        if unknown:
            raise ValueError(f"focal seat(s) {unknown} are not seats of {config.name!r} ({list(config.agents)})")
        populations = [background] if isinstance(background, Population) else list(background)
        self.backgrounds = [self._policies(p, focal) for p in populations]
        self.cuts = thresholds(weights)
        self.entry = np.zeros(size, dtype=np.int64)  # the mixture entry each arena's episode plays
        self.raw: dict[str, np.ndarray] = {}  # every seat's last observation (the background acts on it)
        self.ended = np.zeros(size, dtype=bool)  # arenas whose episode ended at the last step (NEXT_STEP)

    def _policies(self, background: Population, focal: Sequence[str]) -> dict[str, BatchPolicy]:
        entries = background.resolve(self.config, strict=False)
        policies: dict[str, BatchPolicy] = {}
        for seat in self.config.agents:
            if seat in focal:
                continue
            entry = entries[seat]
            if policy_spec(entry.policy).needs_env:
                raise ValueError(f"{entry.policy!r} in {seat!r} reads the hidden state of one arena: it cannot play "
                                 "in a batch (give the seat another policy)")
            policies[seat] = batch_policy(entry.policy, self.config, seat, self.size, **dict(entry.params))
        return policies

    def start(self, arenas: np.ndarray) -> None:
        """The background policies of ``arenas`` start the core's episodes there (the one seeding rule; a
        mixture's entry drawn from the episode seed)."""
        seeds = [self.core.episode_seeds[i] for i in arenas.tolist()]
        if len(self.backgrounds) > 1:
            self.entry[arenas] = [entry_of(s, self.cuts) for s in seeds]
        for policies in self.backgrounds:
            for seat, policy in policies.items():
                policy.reset([policy_seed(s, self.seat_index[seat]) for s in seeds], arenas)

    def act(self) -> dict[str, np.ndarray]:
        """Every background seat's action in every arena (a mixture: each arena's entry's)."""
        if len(self.backgrounds) == 1:
            return {seat: policy.act(self.raw[seat]) for seat, policy in self.backgrounds[0].items()}
        rows = np.arange(self.size)
        return {seat: np.stack([p[seat].act(self.raw[seat]) for p in self.backgrounds])[self.entry, rows]
                for seat in self.backgrounds[0]}


@dataclass
class GroupStep:
    """One tick of one scenario's arenas: seat -> ``(size, ...)`` arrays (infos: the core's, by seat)."""

    obs: dict[str, np.ndarray]
    reward: dict[str, np.ndarray]
    terminated: dict[str, np.ndarray]
    truncated: dict[str, np.ndarray]
    info: dict[str, dict[str, Any]]


class FocalVectorEnv(VectorEnv):
    """The focal seats of ``num_envs`` arenas, the background acting in the batch (module docstring)."""

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, scenario: str | ScenarioConfig | Sequence[str | ScenarioConfig] = "standard",
                 num_envs: int = 1, focal: str | Sequence[str] = "allocator",
                 background: Background | BackgroundMixture = None,
                 weights: Sequence[float] | None = None, shapes: str = "same",
                 cache: dict[tuple[str, int], FocalGroup] | None = None) -> None:
        if shapes not in ("same", "any"):
            raise ValueError(f"shapes must be 'same' or 'any', got {shapes!r}")
        if isinstance(num_envs, bool) or not isinstance(num_envs, int | np.integer) or not 1 <= num_envs <= 1 << 20:
            raise ValueError(f"num_envs must be an integer in 1..{1 << 20}, got {num_envs!r}")
        self.single_seat = isinstance(focal, str)
        self.focal = [focal] if isinstance(focal, str) else list(focal)
        if not self.focal or len(set(self.focal)) != len(self.focal):
            raise ValueError(f"focal must name one seat or several distinct seats, got {focal!r}")
        listed = [scenario] if isinstance(scenario, str | ScenarioConfig) else list(scenario)
        configs = [load_scenario(s) for s in listed]
        if not configs:
            raise ValueError("scenario names no scenario: give at least one")
        weights = [1.0] * len(configs) if weights is None else [float(w) for w in weights]
        if len(weights) != len(configs) or not (min(weights) >= 0 and sum(weights) > 0):
            raise ValueError(f"weights must be {len(configs)} non-negative numbers with a positive sum, got {weights}")
        self.num_envs = int(num_envs)
        self.groups: list[FocalGroup] = []
        for config, size in zip(configs, split_arenas(self.num_envs, weights), strict=True):
            offset = sum(g.size for g in self.groups)
            key = (config.content_hash, size)
            if cache is not None and key in cache and cache[key] not in self.groups:  # reused in a new place
                group = cache[key]
                group.offset, group.rows = offset, slice(offset, offset + size)
            else:
                mixture = (background if isinstance(background, BackgroundMixture)
                           else BackgroundMixture(("background",), (background,), (1.0,)))
                group = FocalGroup(config, size, offset, self.focal, [_population(b, config) for b in mixture.backgrounds],
                                   mixture.weights)
                if cache is not None:
                    cache.setdefault(key, group)
            self.groups.append(group)
        first = configs[0]
        self.seat_observation_spaces = {a: make_observation_space(first, a) for a in self.focal}
        self.seat_action_spaces = {a: make_action_space(first, a) for a in self.focal}
        self.same_shapes = all(make_observation_space(c, a).shape == self.seat_observation_spaces[a].shape
                               and make_action_space(c, a) == self.seat_action_spaces[a]
                               for c in configs[1:] for a in self.focal)
        if not self.same_shapes and shapes == "same":
            odd = next(c for c in configs[1:] for a in self.focal
                       if make_observation_space(c, a).shape != self.seat_observation_spaces[a].shape
                       or make_action_space(c, a) != self.seat_action_spaces[a])
            raise ValueError(f"scenario {odd.name!r} gives the focal seats other spaces than {first.name!r} "
                             "(shapes='any' steps them by scenario: step_groups)")
        self.term_names = {a: self._term_names(a) for a in self.focal}
        if self.single_seat:
            self.single_observation_space = self.seat_observation_spaces[self.focal[0]]
            self.single_action_space = self.seat_action_spaces[self.focal[0]]
        else:
            self.single_observation_space = spaces.Dict(dict(self.seat_observation_spaces))  # type: ignore[arg-type]
            self.single_action_space = spaces.Dict(dict(self.seat_action_spaces))  # type: ignore[arg-type]
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.scenario_of = np.concatenate([np.full(g.size, k, dtype=np.int64) for k, g in enumerate(self.groups)])
        """Each arena's scenario: an index into :attr:`groups`."""
        self.restarted = np.zeros(self.num_envs, dtype=bool)  # rows of the last step that are an arena's reset
        self._started = False

    def _term_names(self, seat: str) -> tuple[str, ...]:
        names: list[str] = []
        for group in self.groups:
            names += [n for n in Rubric(group.config.rewards).term_names(role_of(group.config, seat)) if n not in names]
        return tuple(names)

    # ------------------------------------------------------------------ api
    @property
    def mixture_entry(self) -> np.ndarray:
        """Each arena's mixture entry this episode (all 0 without a mixture)."""
        return np.concatenate([g.entry for g in self.groups])

    @property
    def episode_seeds(self) -> list[int]:
        """Each arena's current episode seed."""
        return [s for group in self.groups for s in group.core.episode_seeds]

    def episode_seed(self, arena: int) -> int:
        """Arena ``arena``'s current episode seed."""
        group = self.groups[int(self.scenario_of[arena])]
        return group.core.episode_seeds[arena - group.offset]

    def reset(self, *, seed: int | Sequence[int] | None = None, options: dict | None = None):
        """Every arena's first observation and infos (``seed``: module docstring)."""
        self._check_shapes()
        self.reset_groups(seed)
        infos = {a: {"episode_seed": np.asarray(self.episode_seeds, dtype=np.int64), "scenario_index": self.scenario_of}
                 for a in self.focal}
        return self._out({a: np.concatenate([g.raw[a] for g in self.groups]) for a in self.focal}), self._out(infos)

    def step(self, actions: Any):
        """One tick of every arena: ``actions`` is ``(N, act_dim)`` for one focal seat, else seat -> that."""
        self._check_shapes()
        by_seat = {self.focal[0]: actions} if self.single_seat else dict(actions)
        missing = [a for a in self.focal if a not in by_seat]
        unknown = [a for a in by_seat if a not in self.focal]
        if missing or unknown:
            raise ValueError(f"step takes actions for the focal seats {self.focal}: missing {missing}, unknown {unknown}")
        by_seat = {a: np.asarray(v) for a, v in by_seat.items()}
        for a, v in by_seat.items():
            if v.shape[:1] != (self.num_envs,):
                raise ValueError(f"actions of {a!r} must have one row per arena ({self.num_envs}), got shape {v.shape}")
        steps = self.step_groups([{a: v[g.rows] for a, v in by_seat.items()} for g in self.groups])
        obs = {a: np.concatenate([step.obs[a] for step in steps]) for a in self.focal}
        rewards, terminated, truncated, infos = self.merge(steps)
        return self._out(obs), self._out(rewards), self._out(terminated), self._out(truncated), self._out(infos)

    # ------------------------------------------------------------------ by scenario (any shapes)
    def reset_groups(self, seed: int | Sequence[int] | None = None) -> None:
        """Reset every arena; each group's raw observations are then its ``raw``."""
        if seed is None:
            seed = int(np.random.SeedSequence().generate_state(1)[0] >> 1)
        if isinstance(seed, int | np.integer) and not isinstance(seed, bool):
            seeds = [int(seed) + i for i in range(self.num_envs)]
        else:
            seeds = [int(s) for s in seed]  # type: ignore[union-attr]
            if len(seeds) != self.num_envs:
                raise ValueError(f"reset got {len(seeds)} seeds for {self.num_envs} arenas: give one per arena")
        for group in self.groups:
            group.raw, _ = group.core.reset(seed=seeds[group.rows])
            group.ended[:] = False
            group.start(np.arange(group.size))
        self.restarted[:] = False
        self._started = True

    def step_groups(self, actions: Sequence[Mapping[str, np.ndarray] | None]) -> list[GroupStep]:
        """One tick of every arena from each group's focal actions (seat -> ``(size, act_dim)``). A group whose
        actions are None is not stepped: its arenas keep their state, and its part of the result is their last
        observation with zero rewards and no flags (a sampler whose arenas of that scenario are done with it)."""
        if not self._started:
            raise commons_arena.EpisodeStateError("step() called before reset(); call reset(seed=...) first")
        return [self._idle_group(group) if part is None else self._step_group(group, dict(part))
                for group, part in zip(self.groups, actions, strict=True)]

    def merge(self, steps: Sequence[GroupStep]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray],
                                                          dict[str, np.ndarray], dict[str, dict[str, Any]]]:
        """Rewards, terminated, truncated and infos of every arena (seat -> ``(N,)`` arrays) from the groups' steps."""
        cat = np.concatenate
        rewards = {a: cat([step.reward[a] for step in steps]) for a in self.focal}
        terminated = {a: cat([step.terminated[a] for step in steps]) for a in self.focal}
        truncated = {a: cat([step.truncated[a] for step in steps]) for a in self.focal}
        infos = {a: self._seat_info(a, [step.info[a] for step in steps]) for a in self.focal}
        return rewards, terminated, truncated, infos

    def observation_scale(self, seat: str | None = None, seed: int = 0) -> np.ndarray:
        """A divisor per feature of ``seat``'s observation (default: the first focal seat) that makes every
        feature O(1): :func:`seat_observation_scale` of this env's first scenario and background."""
        return seat_observation_scale(self.groups[0].config, seat or self.focal[0], seed=seed)

    def close_extras(self, **kwargs: Any) -> None:
        for group in getattr(self, "groups", ()):
            group.core.close()

    # ------------------------------------------------------------------ helpers
    def _check_shapes(self) -> None:
        if not self.same_shapes:
            raise ValueError("the scenarios give the focal seats different shapes: step them by scenario "
                             "(reset_groups, step_groups)")

    def _idle_group(self, group: FocalGroup) -> GroupStep:
        self.restarted[group.rows] = False
        none = np.zeros(group.size, dtype=bool)
        return GroupStep({a: group.raw[a] for a in self.focal}, {a: np.zeros(group.size) for a in self.focal},
                         dict.fromkeys(self.focal, none), dict.fromkeys(self.focal, none),
                         {a: {"reward_terms": {}} for a in self.focal})

    def _step_group(self, group: FocalGroup, focal_actions: dict[str, np.ndarray]) -> GroupStep:
        restarting = np.flatnonzero(group.ended)  # NEXT_STEP: the core resets these in this call
        joint = {**group.act(), **focal_actions}
        obs, reward, terminated, truncated, info = group.core.step(joint)
        group.raw = obs
        if restarting.size:
            group.start(restarting)
        self.restarted[group.rows] = group.ended
        focal = self.focal[0]  # every seat ends on the same step
        group.ended = terminated[focal] | truncated[focal]
        return GroupStep({a: obs[a] for a in self.focal}, {a: reward[a] for a in self.focal},
                         {a: terminated[a] for a in self.focal}, {a: truncated[a] for a in self.focal},
                         {a: info[a] for a in self.focal})

    def _seat_info(self, seat: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
        terms = {n: np.concatenate([p["reward_terms"].get(n, np.zeros(g.size)) for p, g in zip(parts, self.groups,
                                                                                                  strict=True)])
                 for n in self.term_names[seat]}
        info: dict[str, Any] = {"reward_terms": terms, "_restarted": self.restarted.copy(),
                                "episode_seed": np.asarray(self.episode_seeds, dtype=np.int64),
                                "scenario_index": self.scenario_of}
        if any("episode" in p for p in parts):
            keys = next(p["episode"] for p in parts if "episode" in p)
            info["episode"] = {k: np.concatenate([p["episode"][k] if "episode" in p else np.zeros(g.size)
                                                  for p, g in zip(parts, self.groups, strict=True)]) for k in keys}
            info["_episode"] = np.concatenate([p.get("_episode", np.zeros(g.size, dtype=bool))
                                               for p, g in zip(parts, self.groups, strict=True)])
        return info

    def _out(self, by_seat: dict[str, Any]) -> Any:
        return by_seat[self.focal[0]] if self.single_seat else by_seat


def seat_observation_scale(scenario: str | ScenarioConfig, seat: str, seed: int = 0, arenas: int = 64,
                      background: Population | Mapping[str, Any] | None = None) -> np.ndarray:
    """A positive divisor per observation feature of ``seat`` that puts every feature in about [-1, 1]:
    the largest magnitude seen in one episode of ``arenas`` arenas where ``seat`` acts uniformly at random
    (seeds ``seed ..``), at least 1 (:func:`policies.learned.observation_scale`, the rule training fits its
    scales with). The space's bounds are no scale: a price's bound is ~1e30."""
    env = FocalVectorEnv(scenario, num_envs=arenas, focal=seat, background=background)
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    seen = [obs]
    for _ in range(env.groups[0].config.max_ticks):
        obs, *_ = env.step(env.action_space.sample())
        seen.append(obs)
    return learned_scale(np.concatenate(seen))


__all__ = ["FocalGroup", "FocalVectorEnv", "GroupStep", "BackgroundMixture", "entry_of", "seat_observation_scale", "split_arenas"]
