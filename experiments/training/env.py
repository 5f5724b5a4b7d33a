"""The arena as an RLlib ``MultiAgentEnv``: :class:`ArenaRLlibEnv`.

Learning seats see their observations through their network's interface
(:mod:`experiments.training.networks`: scale, codec features, stacked ticks, a shared module's
seat identity; or the padded cell view) and act through it;
the other seats are either exposed to RLlib (run there as ``ScriptedRLModule``s,
``experiments.training.scripted``) or played inside this env by the background population
of a :class:`policies.focal.FocalEnv` (``scripted_in_env``: faster, and a curriculum switch or
a mix brings each scenario's own population).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from ray.rllib.env.multi_agent_env import MultiAgentEnv
from ray.rllib.utils.typing import MultiAgentDict

import commons_arena
from experiments.seeds import SEED_RANGES
from experiments.training.env_config import ArenaEnvConfig, Scenario
from experiments.training.mixture import draw, thresholds
from policies.focal import FocalEnv
from policies.population import Population
from policies.shipping import install


def resolve_obj(obj: Any) -> Any:
    """Turn a ``"package.module:attr"`` string into the object; pass anything else through."""
    if isinstance(obj, str):
        module_name, _, attr = obj.partition(":")
        if not attr:
            raise ValueError(f"expected 'package.module:attr', got {obj!r}")
        return getattr(importlib.import_module(module_name), attr)
    return obj


def scenario_key(scenario: Scenario) -> str:
    return scenario if isinstance(scenario, str) else scenario.content_hash


# A mix of many scenarios (a family's split) keeps this many built (arena, seats, interfaces) per env, the
# most recently used; the others are rebuilt when drawn again (a few ms, against megabytes each kept).
MAX_BUILT = 12
MIX_INFO = "mix_background"  # in every seat's infos of a run with a background mix: 1.0 if this episode plays it
MIXTURE_INFO = "mixture_entry"  # in every seat's infos of a run with a mixture: the index of the entry it plays

# [low, high) of training episode seeds; every evaluation range lies below (experiments/seeds.py)
TRAINING_SEEDS = (SEED_RANGES["training"].first, SEED_RANGES["training"].stop)


class ArenaRLlibEnv(MultiAgentEnv):
    """The commons_arena ``ParallelEnv`` as an RLlib ``MultiAgentEnv``, configured by one
    :class:`~experiments.training.env_config.ArenaEnvConfig` (its fields say what each part does).

    Written instead of RLlib's ``ParallelPettingZooEnv`` because that one orders
    ``possible_agents`` arbitrarily (from a set), never updates ``agents``, and decides the
    episode end with ``all()`` per flag dict, so a last step where some agents are
    terminated and others truncated never sets ``__all__`` and RLlib steps a finished env.

    Learned seats see their observation through their network's interface (scale, codec, history,
    identity; or the padded cell view, whose spaces are the same in every scenario, so a mix may
    change shapes), built per scenario because codecs read the scenario's public parameters.
    A background mix or mixture is drawn per episode (:attr:`mix_background_played`,
    :attr:`mixture_entry`, tagged in every seat's infos so a callback can count them).

    Episode seeds: a seeded ``reset`` reseeds a generator; every episode's seed (and, with
    ``scenarios``, its scenario) is drawn from it and handed to the focal env, whose one
    seeding rule seeds the background policies from it. Training seeds are drawn from
    ``TRAINING_SEEDS`` (2**20 and up), so no training episode ever plays a seed below 2**20:
    the evaluation seeds (training's 900000.., the tournament's 5000.., the paired check's
    7000..) are held out by construction.
    """

    def __init__(self, config: ArenaEnvConfig | Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self.arena_config = cfg = ArenaEnvConfig.of(config)  # RLlib passes an EnvContext: {"arena": the config}
        self._mix = list(cfg.scenarios)
        # drawn as a mixture's entries are (experiments.training.mixture.draw)
        self._scenario_thresholds = None if cfg.scenario_weights is None else thresholds(cfg.scenario_weights)
        self._raw_obs: MultiAgentDict = {}
        # `learned:` background checkpoints arrive as bytes: installed before any policy is built
        install(cfg.checkpoints)
        # the backgrounds a training episode may play (0: `background`) and the draw between them:
        # index `drawn[draw(seeds, thresholds)]` (experiments.training.mixture.draw); none without a mix
        self._backgrounds: list[Any] = [cfg.background]
        self._thresholds: list[float] = []
        self._drawn: list[int] = []
        if cfg.background_mix is not None:  # the mix background when u < share (index 1), else `background`
            self._backgrounds.append(cfg.background_mix.background)
            self._thresholds, self._drawn = [float(cfg.background_mix.share)], [1, 0]
        elif cfg.background_mixture is not None:
            self._backgrounds += list(cfg.background_mixture.backgrounds)
            self._thresholds = thresholds(cfg.background_mixture.weights)
            self._drawn = list(range(1, len(cfg.background_mixture.weights) + 1))
        self._mixture = cfg.background_mixture is not None
        self.mix_background_played = False  # this episode plays the mix background
        self.mixture_entry: int | None = None  # the mixture's entry this episode plays
        self._episode_tag: dict[str, Any] = {}  # what _tag adds to every seat's infos this episode (a mix's draw)
        self._seeds = np.random.default_rng()
        self.episode_seed: int | None = None  # the seed of the episode being played
        # (scenario key, index of its background) -> (arena, seats, interfaces)
        self._envs: dict[tuple[str, int], tuple[Any, Any, dict[str, Any]]] = {}
        self._evicted_seconds = 0.0  # env_seconds of the envs MAX_BUILT let go
        self._next_scenario: Scenario | None = None
        self._use(self._mix[0] if self._mix else cfg.scenario)
        if not self._shape_free:
            for other in self._mix[1:]:
                self._check_same_spaces(other)
        # Env order, not a set: module ids, metrics and tournaments all rely on it.
        agents: list[str] = list(self.seats.possible_agents)
        self.possible_agents, self.agents = list(agents), list(agents)
        obs_spaces = {
            a: self._interfaces[a].observation_space() if a in self._interfaces else self.par_env.observation_space(a)
            for a in agents
        }
        act_spaces = {
            a: self._interfaces[a].action_space() if a in self._interfaces else self.par_env.action_space(a)
            for a in agents
        }
        self.observation_spaces, self.action_spaces = obs_spaces, act_spaces  # type: ignore[assignment]
        # Old-stack code paths (and the env checker's hasattr test) still read these.
        self.observation_space = gym.spaces.Dict(obs_spaces)
        self.action_space = gym.spaces.Dict(act_spaces)

    def _use(self, scenario: Scenario, background: int = 0) -> None:
        """Play ``scenario`` (with background ``background``: 0 the run's, else a mix's) from now on
        (its arena, focal env and interfaces are built once)."""
        self._scenario = scenario
        cfg = self.arena_config
        scenario_hash = scenario_key(scenario)  # this scenario's reward factors, looked up once, not every step
        self._scenario_reward_scale = {a: by_hash[scenario_hash] for a, by_hash in cfg.reward_scale.items()
                                       if scenario_hash in by_hash}
        key = (scenario_hash, background)
        if key not in self._envs:
            par_env = commons_arena.parallel_env(scenario)
            if cfg.scripted_in_env:
                chosen = self._backgrounds[background]
                seats = FocalEnv(par_env, list(cfg.learned_agents),
                                 Population.from_dict(chosen) if chosen else Population.default(par_env.config))
            else:
                seats = FocalEnv(par_env, par_env.possible_agents, {})
            interfaces = {
                agent: cfg.network_of(agent).interface(
                    par_env.config, agent, cfg.observation_scale.get(agent), cfg.action_codec.get(agent),
                    cfg.history.get(agent, 1), cfg.seat_identity.get(agent))
                for agent in cfg.viewed_seats
            }
            if len(self._envs) >= MAX_BUILT:  # the least recently used goes (dicts keep insertion order)
                _, evicted, _ = self._envs.pop(next(iter(self._envs)))
                self._evicted_seconds += evicted.env_seconds
                evicted.env.close()
            self._envs[key] = (par_env, seats, interfaces)
        else:
            self._envs[key] = self._envs.pop(key)  # now the most recently used
        self.par_env, self.seats, self._interfaces = self._envs[key]

    @property
    def _shape_free(self) -> bool:
        """Every seat RLlib sees acts through a shape-free interface (the other seats play inside)."""
        cfg = self.arena_config
        return cfg.scripted_in_env and bool(cfg.learned_agents) and all(
            cfg.network_of(a).cell_view for a in cfg.learned_agents)

    @property
    def env_seconds(self) -> float:
        """Time inside the ParallelEnvs' reset/step (for the env-share figure)."""
        return self._evicted_seconds + sum(seats.env_seconds for _, seats, _ in self._envs.values())

    def _check_same_spaces(self, scenario: Scenario) -> None:
        if self._shape_free:
            return
        probe = commons_arena.parallel_env(scenario)
        for agent in self.par_env.possible_agents:
            old, new = self.par_env.observation_space(agent).shape, probe.observation_space(agent).shape
            if old != new or not np.array_equal(self.par_env.action_space(agent).nvec, probe.action_space(agent).nvec):
                raise ValueError(f"scenario {scenario!r} changes the spaces of {agent!r}: {old} -> {new}")
        probe.close()

    def set_scenario(self, scenario: Scenario) -> None:
        """Play ``scenario`` from the next reset on (curriculum; it replaces any mix); its
        spaces must have the same shapes as the current one's."""
        self._check_same_spaces(scenario)
        self._next_scenario = scenario

    def reset(  # type: ignore[override]
        self, *, seed: int | None = None, options: dict | None = None
    ) -> tuple[MultiAgentDict, MultiAgentDict]:
        if seed is not None:
            self._seeds = np.random.default_rng(seed)
        if self._next_scenario is not None:
            self._mix = []
            self._use(self._next_scenario)
            self._next_scenario = None
        elif self._mix:
            index = (self._seeds.integers(len(self._mix)) if self._scenario_thresholds is None
                     else draw(self._seeds, self._scenario_thresholds))
            self._use(self._mix[int(index)])
        if self._drawn:  # drawn only when there is a mix: other runs' seeds stay as they were
            background = self._drawn[draw(self._seeds, self._thresholds)]
            self.mix_background_played = not self._mixture and background == 1
            self.mixture_entry = background - 1 if self._mixture else None
            # the episode's tag for every seat's infos, made once here rather than on every step
            self._episode_tag = ({MIXTURE_INFO: self.mixture_entry} if self._mixture
                                 else {MIX_INFO: float(self.mix_background_played)})
            self._use(self._scenario, background)
        episode_seed = int(self._seeds.integers(*TRAINING_SEEDS))
        self.episode_seed = episode_seed  # a league draws its matchup from it (experiments.training.league)
        obs, infos = self.seats.reset(seed=episode_seed, options=options)
        for interface in self._interfaces.values():
            interface.reset()
        self.agents = list(self.seats.agents)
        return self._module_view(obs), self._tag(infos)

    def _tag(self, infos: MultiAgentDict) -> MultiAgentDict:
        if not self._drawn:
            return infos
        return {a: {**info, **self._episode_tag} for a, info in infos.items()}

    def _module_view(self, obs: MultiAgentDict) -> MultiAgentDict:
        """Keep the raw observations (codecs decode with them); learned agents get their
        module's view."""
        self._raw_obs = dict(obs)
        return {a: self._interfaces[a].observe(o) if a in self._interfaces else o for a, o in obs.items()}

    # (gymnasium's single-agent `step` signature does not fit any MultiAgentEnv)
    def step(self, action_dict: MultiAgentDict) -> tuple[MultiAgentDict, ...]:  # type: ignore[override]
        if self._interfaces:
            action_dict = {
                a: self._interfaces[a].act(self._raw_obs[a], act) if a in self._interfaces else act
                for a, act in action_dict.items()
            }
        obs, rewards, terms, truncs, infos = self.seats.step(action_dict)
        # The ParallelEnv clears `agents` when the episode is over; that, not the flag
        # dicts, decides the end. `self.agents` then keeps the agents of the last step:
        # RLlib's env checker requires the returned keys to be in `agents`, which a
        # one-tick episode would otherwise fail.
        done = self.seats.episode_over
        self.agents = list(self.seats.agents) or [a for a in self.possible_agents if a in obs or a in rewards]
        terminateds: MultiAgentDict = {a: bool(v) for a, v in terms.items()}
        truncateds: MultiAgentDict = {a: bool(v) for a, v in truncs.items()}
        # At the end exactly one `__all__` is True: "terminated" only if every agent
        # terminated, otherwise the episode counts as cut (truncated). Per-agent flags are
        # passed on as the env set them.
        all_terminated = done and bool(terminateds) and all(terminateds.values())
        terminateds["__all__"] = all_terminated
        truncateds["__all__"] = done and not all_terminated
        # The env checker rejects numpy scalars of other shapes/bools: plain floats.
        scale = self._scenario_reward_scale
        float_rewards: MultiAgentDict = {a: float(r) * scale[a] if a in scale else float(r) for a, r in rewards.items()}
        return self._module_view(obs), float_rewards, terminateds, truncateds, self._tag(infos)

    def render(self) -> Any:
        return self.par_env.render()

    def close(self) -> None:
        for par_env, _, _ in self._envs.values():
            par_env.close()


