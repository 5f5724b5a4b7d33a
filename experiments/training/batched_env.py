"""The focal env as one batch: RLlib samples ``num_envs`` arenas per call of the batched core.

RLlib's ``MultiAgentEnvRunner`` steps a ``VectorMultiAgentEnv``; its stock one,
``SyncVectorMultiAgentEnv``, loops its sub-envs in Python (multi-agent vectorisation is
synchronous only, ray-project/ray#57790), so every sub-env pays the arena's step, every
background policy and the learned seat's codec one arena at a time. :class:`BatchedFocalEnv`
is a ``VectorMultiAgentEnv`` over the batched core (``commons_arena.vector_env``): one call
steps every arena, the background seats act through :mod:`policies.batch` (batched forms where
they exist), and RLlib sees the learning seats of every arena exactly as
:class:`experiments.training.env.ArenaRLlibEnv` shows them: the same observations, rewards,
flags and infos. :class:`BatchedEnvRunner` is the runner that builds it (RLlib's own, with
``make_env`` replaced): ``config.env_runners(env_runner_cls=BatchedEnvRunner)``.

What it plays (the allocator-vs-scripted kinds; anything else is refused with the reason):
learning seats with the background inside the env, one scenario or several (``scenarios``,
mixed tiers: the arenas are split between them in proportion to their weights, each arena
keeping its scenario), each scenario's own or a given background of scripted policies,
per-scenario reward scales. Not here: a background mix or mixture, a curriculum switch, a
league, the shape-free (cells) network, stand-in env factories, privileged backgrounds (the
oracle reads the hidden state of one arena).

Episode seeds: ``reset(seed=s)`` seeds arena ``i``'s generator with ``s + i`` (as the stock
vector env seeds its sub-envs) and draws the arena's first episode seed from it as
``ArenaRLlibEnv`` does, so arena ``i``'s first episode is the one sub-env ``i`` of the stock
path plays; later episodes follow the batched core's autoreset rule (each drawn from the
arena's generator here, handed to the core before it resets the arena). Every background
policy is seeded by the one rule (``policies.focal.policy_seed`` of the episode seed and the
seat's index).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from copy import deepcopy
from typing import Any

import gymnasium as gym
import numpy as np
from ray.rllib.env.multi_agent_env import MultiAgentEnv
from ray.rllib.env.multi_agent_env_runner import MultiAgentEnvRunner
from ray.rllib.env.vector.vector_multi_agent_env import VectorMultiAgentEnv
from ray.rllib.callbacks.utils import make_callback

import commons_arena
from commons_arena.scenario import ScenarioConfig, load_scenario
from experiments.training.env import TRAINING_SEEDS
from policies.batch import BatchPolicy, LoopBatchPolicy
from policies.focal import policy_seed
from policies.learned import interface_for
from policies.population import Population
from policies.registry import make_policy, policy_spec
from policies.shipping import install

# env-config keys whose runs the batched sampler cannot play, and why (the stock sampler plays them)
UNSUPPORTED = {
    "background_mix": "a background mix is drawn per episode",
    "background_mixture": "a mixture of backgrounds is drawn per episode",
    "curriculum": "a curriculum switches every env's scenario",
    "env_factory": "a stand-in env factory builds per-arena envs",
    "seat_identity": "shared team modules (seat identities) are self-play",
}


def unsupported_reason(env_config: Mapping[str, Any]) -> str | None:
    """Why the batched sampler cannot play a run with ``env_config`` (None: it can)."""
    for key, why in UNSUPPORTED.items():
        if env_config.get(key):
            return f"{key}: {why}"
    if not env_config.get("scripted_in_env"):
        return "the background plays as RLlib modules (scripted_in_env is off)"
    if any(network == "cells" for network in dict(env_config.get("network", {})).values()):
        return "the shape-free (cells) allocator plays clusters of many shapes"
    return None


def split_arenas(num_envs: int, weights: Sequence[float]) -> list[int]:
    """Arenas per scenario in proportion to ``weights`` (largest remainder; ties to the earlier
    scenario), each scenario at least one arena when there are enough."""
    if num_envs < len(weights):
        raise ValueError(f"{num_envs} envs per runner cannot hold {len(weights)} scenarios: give at least one each")
    total = float(sum(weights))
    quotas = [num_envs * w / total for w in weights]
    counts = [max(1, int(q)) for q in quotas]
    while sum(counts) > num_envs:  # the floor of one arena each went over: take from the largest
        counts[int(np.argmax(counts))] -= 1
    order = sorted(range(len(weights)), key=lambda i: (-(quotas[i] - int(quotas[i])), i))
    for i in order[: num_envs - sum(counts)]:
        counts[i] += 1
    return counts


class ArenaView(MultiAgentEnv):
    """One arena of the batch as RLlib's runner and callbacks see a sub-env: its agents, spaces
    and the seed and scenario of the episode it plays. It is never stepped itself."""

    def __init__(self, agents: list[str], obs_spaces: dict[str, Any], act_spaces: dict[str, Any]) -> None:
        super().__init__()
        self.possible_agents, self.agents = list(agents), list(agents)
        self.observation_spaces, self.action_spaces = obs_spaces, act_spaces  # type: ignore[assignment]
        self.observation_space = gym.spaces.Dict(obs_spaces)
        self.action_space = gym.spaces.Dict(act_spaces)
        self.episode_seed: int | None = None
        self.scenario: ScenarioConfig | None = None
        self.env_seconds = 0.0  # the batch's time is the batch's (BatchedFocalEnv.env_seconds)


class _Group:
    """The arenas of one scenario: its batched core, background seats and learning seats' interfaces."""

    def __init__(self, config: ScenarioConfig, size: int, learned: list[str], background: Population,
                 env_config: Mapping[str, Any]) -> None:
        self.config, self.size = config, size
        self.core = commons_arena.vector_env(scenario=config, num_envs=size)
        seats = list(config.agents)
        self.seat_index = {a: i for i, a in enumerate(seats)}
        entries = background.resolve(config, strict=False)
        self.background: dict[str, BatchPolicy] = {}
        for seat in seats:
            if seat in learned:
                continue
            entry = entries[seat]
            if policy_spec(entry.policy).needs_env:
                raise ValueError(f"the batched sampler cannot play {entry.policy!r} in {seat!r}: it reads the hidden "
                                 "state of one arena; train with the stock sampler")
            self.background[seat] = batched_seat(entry.policy, config, seat, size, dict(entry.params))
        scale, codecs, history = (dict(env_config.get(k, {})) for k in ("observation_scale", "action_codec", "history"))
        self.interfaces = {
            seat: [interface_for(config, seat, None if seat not in scale else np.asarray(scale[seat], np.float32),
                                 codecs.get(seat), int(history.get(seat, 1))) for _ in range(size)]
            for seat in learned
        }
        reward_scale = dict(env_config.get("reward_scale", {}))
        self.reward_scale = {a: float(by_hash[config.content_hash]) for a, by_hash in reward_scale.items()
                             if config.content_hash in by_hash}
        self.raw: dict[str, np.ndarray] = {}


def batched_seat(name: str, config: ScenarioConfig, seat: str, size: int, params: dict[str, Any]) -> BatchPolicy:
    """Policy ``name`` in seat ``seat`` of ``size`` arenas: its batched form where one exists."""
    try:
        from policies.batch import batch_policy  # type: ignore[attr-defined]
    except ImportError:  # no batched forms yet: every seat loops
        return LoopBatchPolicy(lambda: make_policy(name, config, seat, **params), size)
    policy: BatchPolicy = batch_policy(name, config, seat, size, **params)
    return policy


class BatchedFocalEnv(VectorMultiAgentEnv):
    """``num_envs`` arenas of the focal env, stepped as one batch (see the module docstring)."""

    def __init__(self, env_config: Mapping[str, Any], num_envs: int) -> None:
        super().__init__()
        cfg = dict(env_config)
        why = unsupported_reason(cfg)
        if why is not None:
            raise ValueError(f"the batched sampler cannot play this run ({why}); use --sampler stock")
        install(cfg.get("checkpoints", ()))
        self.learned = list(cfg.get("learned_agents", []))
        scenarios = [load_scenario(s) for s in (cfg.get("scenarios") or [cfg.get("scenario", "standard")])]
        weights = list(cfg.get("scenario_weights") or [1.0] * len(scenarios))
        background = cfg.get("background")
        self.num_envs = num_envs
        self.groups: list[_Group] = []
        for config, size in zip(scenarios, split_arenas(num_envs, weights), strict=True):
            chosen = Population.from_dict(background) if background else Population.default(config)
            self.groups.append(_Group(config, size, self.learned, chosen, cfg))
        first = self.groups[0]
        obs_spaces = {a: first.interfaces[a][0].observation_space() for a in self.learned}
        act_spaces = {a: first.interfaces[a][0].action_space() for a in self.learned}
        for group in self.groups[1:]:
            for a in self.learned:
                space = group.interfaces[a][0]
                if space.observation_space().shape != obs_spaces[a].shape or space.action_space() != act_spaces[a]:
                    raise ValueError(f"scenario {group.config.name!r} changes the spaces of {a!r}")
        self.envs = [ArenaView(self.learned, obs_spaces, act_spaces) for _ in range(num_envs)]
        self.single_observation_spaces, self.single_action_spaces = obs_spaces, act_spaces
        self.single_observation_space = gym.spaces.Dict(obs_spaces)
        self.single_action_space = gym.spaces.Dict(act_spaces)
        self.metadata = {"autoreset_mode": "next_step"}
        self.render_mode = None
        self._rngs = [np.random.default_rng() for _ in range(num_envs)]
        self._ended = np.zeros(num_envs, dtype=bool)
        self.env_seconds = 0.0

    # ------------------------------------------------------------------ seeds
    def _spans(self) -> list[tuple[_Group, int]]:
        """Each group with the index of its first arena in the batch."""
        spans, start = [], 0
        for group in self.groups:
            spans.append((group, start))
            start += group.size
        return spans

    def _draw_seeds(self, arenas: np.ndarray) -> list[int]:
        seeds = [int(self._rngs[i].integers(*TRAINING_SEEDS)) for i in arenas.tolist()]
        for i, seed in zip(arenas.tolist(), seeds, strict=True):
            self.envs[i].episode_seed = seed
        return seeds

    def _reset_seats(self, group: _Group, local: np.ndarray, seeds: Sequence[int]) -> None:
        """Background policies and learning seats' interfaces of ``group``'s arenas ``local`` start episodes ``seeds``."""
        for seat, policy in group.background.items():
            policy.reset([policy_seed(s, group.seat_index[seat]) for s in seeds], local)
        for interfaces in group.interfaces.values():
            for i in local.tolist():
                interfaces[i].reset()

    # ------------------------------------------------------------------ api
    def reset(self, *, seed: int | Sequence[int] | None = None, options: dict | None = None):
        if seed is not None:
            seeds = [seed + i for i in range(self.num_envs)] if isinstance(seed, int) else list(seed)
            self._rngs = [np.random.default_rng(s) for s in seeds]
        self._ended[:] = False
        observations: list[dict[str, np.ndarray]] = [{} for _ in range(self.num_envs)]
        infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
        for group, start in self._spans():
            local = np.arange(group.size)
            seeds = self._draw_seeds(local + start)
            self._reset_seats(group, local, seeds)
            obs, _ = group.core.reset(seed=seeds)
            group.raw = obs
            self._fill(group, start, local, observations, infos, seeds)
        return deepcopy(observations), infos

    def _fill(self, group: _Group, start: int, local: np.ndarray, observations: list[dict[str, np.ndarray]],
              infos: list[dict[str, Any]], seeds: Sequence[int] | None = None) -> None:
        """The learning seats' module views of ``group``'s arenas ``local`` (after a reset: with ``seeds``' infos)."""
        for k, i in enumerate(local.tolist()):
            self.envs[start + i].scenario = group.config
            observations[start + i] = {a: group.interfaces[a][i].observe(group.raw[a][i]) for a in self.learned}
            if seeds is not None:
                info = {"scenario": group.config.name, "scenario_hash": group.config.content_hash,
                        "episode_seed": seeds[k]}
                infos[start + i] = {a: dict(info) for a in self.learned}

    def step(self, actions: list[dict[str, Any]]):
        n = self.num_envs
        observations: list[dict[str, np.ndarray]] = [{} for _ in range(n)]
        rewards: list[dict[str, float]] = [{} for _ in range(n)]
        terminateds: list[dict[str, bool]] = [{} for _ in range(n)]
        truncateds: list[dict[str, bool]] = [{} for _ in range(n)]
        infos: list[dict[str, Any]] = [{} for _ in range(n)]
        for group, start in self._spans():
            self._step_group(group, start, actions, observations, rewards, terminateds, truncateds, infos)
        return (observations, np.array(rewards, dtype=object), np.array(terminateds, dtype=object),
                np.array(truncateds, dtype=object), np.array(infos, dtype=object))

    def _step_group(self, group: _Group, start: int, actions: list[dict[str, Any]],
                    observations: list[dict[str, np.ndarray]], rewards: list[dict[str, float]],
                    terminateds: list[dict[str, bool]], truncateds: list[dict[str, bool]],
                    infos: list[dict[str, Any]]) -> None:
        local = np.arange(group.size)
        resetting = local[self._ended[start:start + group.size]]  # NEXT_STEP: these reset in this call
        joint: dict[str, np.ndarray] = {}
        for seat in self.learned:
            interfaces, raw = group.interfaces[seat], group.raw[seat]
            rows = []
            for i in local.tolist():
                action = actions[start + i].get(seat)
                rows.append(interfaces[i].act(raw[i], action) if action is not None
                            else np.zeros(group.core.action_space(seat).shape, dtype=np.int64))
            joint[seat] = np.stack([np.asarray(r, dtype=np.int64) for r in rows])
        for seat, policy in group.background.items():
            joint[seat] = policy.act(group.raw[seat])
        if resetting.size:
            seeds = self._draw_seeds(resetting + start)
            group.core.set_next_seeds(resetting, seeds)
        obs, reward, terminated, truncated, info = group.core.step(joint)
        group.raw = obs
        if resetting.size:
            self._reset_seats(group, resetting, seeds)
        self._fill(group, start, local, observations, infos)
        ended = np.logical_or(terminated[self.learned[0]], truncated[self.learned[0]])
        self._ended[start:start + group.size] = ended
        scale = group.reward_scale
        for i in local.tolist():
            j = start + i
            if i in set(resetting.tolist()):
                rewards[j] = dict.fromkeys(self.learned, 0.0)
                terminateds[j] = {**dict.fromkeys(self.learned, False), "__all__": False}
                truncateds[j] = {**dict.fromkeys(self.learned, False), "__all__": False}
                seed = self.envs[j].episode_seed
                infos[j] = {a: {"scenario": group.config.name, "scenario_hash": group.config.content_hash,
                                "episode_seed": seed} for a in self.learned}
                continue
            rewards[j] = {a: float(reward[a][i]) * scale.get(a, 1.0) if a in scale else float(reward[a][i])
                          for a in self.learned}
            term = bool(terminated[self.learned[0]][i])
            trunc = bool(truncated[self.learned[0]][i])
            terminateds[j] = {**{a: bool(terminated[a][i]) for a in self.learned}, "__all__": term}
            truncateds[j] = {**{a: bool(truncated[a][i]) for a in self.learned}, "__all__": bool(ended[i]) and not term}
            infos[j] = {a: group.core.arena_info(a, i) for a in self.learned}
            del trunc

    def close_extras(self, **kwargs: Any) -> None:
        pass


class BatchedEnvRunner(MultiAgentEnvRunner):
    """RLlib's multi-agent env runner sampling from a :class:`BatchedFocalEnv` (``make_env`` replaced)."""

    def make_env(self) -> None:
        if self.env is not None:
            self.env.close()
        self.env = BatchedFocalEnv(self.config.env_config, self.config.num_envs_per_env_runner)
        self.num_envs = self.env.num_envs
        self._needs_initial_reset = True
        make_callback("on_environment_created", callbacks_objects=self._callbacks,
                      callbacks_functions=self.config.callbacks_on_environment_created,
                      kwargs=dict(env_runner=self, metrics_logger=self.metrics, env=self.env.unwrapped,
                                  env_context=self.config.env_config))
