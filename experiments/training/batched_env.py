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
path plays; later episodes follow the batched core's autoreset rule (the arena's previous
seed + the scenario's arena count: training seeds stay training seeds). Every background
policy is seeded by the one rule (``policies.focal.policy_seed`` of the episode seed and the
seat's index).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
from ray.rllib.callbacks.utils import make_callback
from ray.rllib.env.multi_agent_env import MultiAgentEnv
from ray.rllib.env.multi_agent_env_runner import MultiAgentEnvRunner
from ray.rllib.env.vector.vector_multi_agent_env import VectorMultiAgentEnv
from ray.rllib.utils.metrics import (
    NUM_AGENT_STEPS_SAMPLED,
    NUM_AGENT_STEPS_SAMPLED_LIFETIME,
    NUM_ENV_STEPS_SAMPLED,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    NUM_EPISODES,
    NUM_EPISODES_LIFETIME,
    NUM_MODULE_STEPS_SAMPLED,
    NUM_MODULE_STEPS_SAMPLED_LIFETIME,
)

from commons_arena.scenario import ScenarioConfig, load_scenario
from experiments.training.env import MIX_INFO, MIXTURE_INFO, TRAINING_SEEDS
from experiments.training.env_config import ArenaEnvConfig
from policies.batch import OneArenaInterface
from policies.focal_vector import Background, BackgroundMixture, FocalVectorEnv
from policies.shipping import install


def unsupported_reason(env: ArenaEnvConfig | Mapping[str, Any], lean: bool = False) -> str | None:
    """Why the batched sampler (``lean``: the lean one) cannot play a run with this env config (None: it can)."""
    cfg = ArenaEnvConfig.of(env)
    for part, why in ((cfg.curriculum and not lean, "curriculum: a curriculum switches every env's scenario"),
                      (cfg.league and not lean, "league: league members switch per episode")):
        if part:
            return why
    if not cfg.scripted_in_env:
        return "the background plays as RLlib modules (scripted_in_env is off)"
    return None


def background_of(cfg: ArenaEnvConfig) -> Background | BackgroundMixture:
    """The run's background: one, a ``--mix-background`` (entry 1, drawn with its share) or a ``--mixture``."""
    if cfg.background_mix is not None:
        share = float(cfg.background_mix.share)
        return BackgroundMixture(("background", "mix"), (cfg.background, cfg.background_mix.background),
                                 (1.0 - share, share))
    return cfg.background_mixture or cfg.background


def background_tag(cfg: ArenaEnvConfig, entry: int) -> dict[str, Any]:
    """What a finished episode's infos say about the background it played (as the stock env's do)."""
    if cfg.background_mix is not None:
        return {MIX_INFO: float(entry == 1)}
    return {MIXTURE_INFO: entry} if cfg.background_mixture is not None else {}


class ArenaView(MultiAgentEnv):
    """One arena of the batch as RLlib's runner and callbacks see a sub-env: its agents, spaces
    and the seed and scenario of the episode it plays. It is never stepped itself."""

    def __init__(self, agents: list[str], obs_spaces: dict[str, Any], act_spaces: dict[str, Any],
                 batch: BatchedFocalEnv | None = None) -> None:
        super().__init__()
        self._batch = batch
        self.possible_agents, self.agents = list(agents), list(agents)
        self.observation_spaces, self.action_spaces = obs_spaces, act_spaces  # type: ignore[assignment]
        self.observation_space = gym.spaces.Dict(obs_spaces)
        self.action_space = gym.spaces.Dict(act_spaces)
        self.episode_seed: int | None = None
        self.scenario: ScenarioConfig | None = None
        self.env_seconds = 0.0  # the batch's time is the batch's (BatchedFocalEnv.env_seconds)

    def set_scenario(self, scenario: ScenarioConfig | str) -> None:
        """What a kind's start asks of every env (experiments.training.callbacks.set_scenario_everywhere)."""
        if self._batch is not None:
            self._batch.set_scenario(scenario)


@dataclass
class ArrayStep:
    """One step of every arena as the learning seats' modules see it (``(N, ...)`` arrays by seat)."""

    obs: dict[str, np.ndarray]  # the modules' views (scaled, codec features, stacked history)
    reward: dict[str, np.ndarray]  # scaled per scenario as training scales it
    terminated: dict[str, np.ndarray]
    truncated: dict[str, np.ndarray]
    infos: dict[str, dict[str, Any]]  # the focal env's (policies.focal_vector)
    restarted: np.ndarray  # rows that are an arena's NEXT_STEP reset: no transition
    entries: np.ndarray  # the mixture entry each arena's episode plays (0 without a mixture)


class BatchedFocalEnv(VectorMultiAgentEnv):
    """``num_envs`` arenas of the focal env, stepped as one batch (see the module docstring).

    The game and its background are :class:`policies.focal_vector.FocalVectorEnv`; this class adds the
    learning seats' module views (``policies.learned.BatchInterface`` or its cell view's, per scenario) and reward scales, as arrays
    (:meth:`reset_arrays`, :meth:`step_arrays`: the lean sampler's) and as RLlib's per-arena dicts."""

    def __init__(self, env_config: ArenaEnvConfig | Mapping[str, Any], num_envs: int, draw: int = 0,
                 lean: bool = False) -> None:
        super().__init__()
        cfg = ArenaEnvConfig.of(env_config)
        why = unsupported_reason(cfg, lean)
        if why is not None:
            raise ValueError(f"the batched sampler cannot play this run ({why}); train with --sampler stock")
        install(cfg.checkpoints)
        self.learned = list(cfg.learned_agents)
        self.num_envs = num_envs
        self.cfg = cfg
        self.pool = [load_scenario(s) for s in (cfg.scenarios or [cfg.scenario])]
        self.pool_weights = np.asarray(cfg.scenario_weights or [1.0] * len(self.pool), dtype=np.float64)
        self._groups: dict[tuple[str, int], Any] = {}  # a drawn run's groups and interfaces, built once
        self._interfaces: dict[tuple[str, int, str], Any] = {}
        self.draws = draw if draw and len(self.pool) > draw else 0
        self.lean = lean
        self.switched = False  # set_scenario switched the scenario: every arena restarts (the lean sampler's reset)
        self._build(self.pool[: self.draws] if self.draws else self.pool, None if self.draws else cfg.scenario_weights)
        first = self.interfaces[0]
        obs_spaces = {a: first[a].observation_space() for a in self.learned}
        act_spaces = {a: first[a].action_space() for a in self.learned}
        self._check_spaces(obs_spaces, act_spaces)
        self.views = [ArenaView(self.learned, obs_spaces, act_spaces, self) for _ in range(num_envs)]
        self.envs = list(self.views)  # what RLlib's runner reads per sub-env (spaces, agents)
        self.single_observation_spaces, self.single_action_spaces = obs_spaces, act_spaces
        self.single_observation_space = gym.spaces.Dict(obs_spaces)
        self.single_action_space = gym.spaces.Dict(act_spaces)
        self.metadata = {"autoreset_mode": "next_step"}
        self.render_mode = None
        self.env_seconds = 0.0

    def _build(self, configs: Sequence[ScenarioConfig], weights: Sequence[float] | None) -> None:
        """The batch over ``configs`` (arenas split by ``weights``): the focal env, the interfaces, reward scales."""
        cfg = self.cfg
        self.focal = FocalVectorEnv(list(configs), self.num_envs, focal=self.learned, background=background_of(cfg),
                                    weights=list(weights) if weights else None, shapes="any", cache=self._groups)
        self.groups = self.focal.groups
        self.interfaces = [{seat: self._batch_interface(g.config, seat, g.size) for seat in self.learned}
                           for g in self.groups]
        self.reward_scale = {a: np.concatenate([np.full(g.size, float(cfg.reward_scale.get(a, {}).get(
            g.config.content_hash, 1.0))) for g in self.groups]) for a in self.learned}
        self.scenario_names = [g.config.name for g in self.groups for _ in range(g.size)]
        self.scenario_hashes = [g.config.content_hash for g in self.groups for _ in range(g.size)]
        self._views: list[dict[str, np.ndarray]] = []  # each group's last views (an idle group's rows: these)
        given: Any = getattr(self, "single_observation_spaces", None)
        if given:  # a redraw: the spaces RLlib was given must hold
            self._check_spaces(given, self.single_action_spaces or {})

    def _check_spaces(self, obs_spaces: Mapping[str, Any], act_spaces: Mapping[str, Any]) -> None:
        for group, interfaces in zip(self.groups, self.interfaces, strict=True):
            for a in self.learned:
                interface = interfaces[a]
                if interface.observation_space().shape != obs_spaces[a].shape or interface.action_space() != act_spaces[a]:
                    raise ValueError(f"scenario {group.config.name!r} changes the spaces of {a!r}")

    def _batch_interface(self, config: ScenarioConfig, seat: str, size: int) -> Any:
        key = (config.content_hash, size, seat)
        if key not in self._interfaces:
            self._interfaces[key] = self._interface(self.cfg, config, seat).batched.resized(size)
        return self._interfaces[key]

    def set_scenario(self, scenario: ScenarioConfig | str) -> None:
        """Every arena plays ``scenario``: the batch's one scenario already (a kind's start), else a switch mid-run
        (a curriculum's promotion): the lean sampler's arenas all restart on it at its next sample (the episodes
        in progress are dropped, not learned from); the batched sampler refuses it."""
        config = load_scenario(scenario)
        if [c.content_hash for c in self.pool] == [config.content_hash]:
            return
        if not self.lean:
            raise ValueError(f"the batched sampler plays its run's scenarios throughout; switching to "
                             f"{config.name!r} mid-run (a curriculum) needs --sampler lean or stock")
        self.pool, self.pool_weights = [config], np.ones(1)
        self._build(self.pool, None)
        self.switched = True

    def redraw(self, rng: np.random.Generator) -> None:
        """A run over many scenarios (``draw`` > 0): the batch's scenarios become ``draw`` of them, drawn without
        replacement in proportion to their weights (call :meth:`reset_arrays` next)."""
        p = self.pool_weights / self.pool_weights.sum()
        chosen = rng.choice(len(self.pool), size=self.draws, replace=False, p=p)
        self._build([self.pool[i] for i in sorted(chosen.tolist())], None)

    @staticmethod
    def _interface(cfg: ArenaEnvConfig, config: ScenarioConfig, seat: str) -> OneArenaInterface[Any]:
        scale = cfg.observation_scale.get(seat)
        return cfg.network_of(seat).interface(config, seat, None if scale is None else np.asarray(scale, np.float32),
                                              cfg.action_codec.get(seat), int(cfg.history.get(seat, 1)),
                                              cfg.seat_identity.get(seat))

    # ------------------------------------------------------------------ arrays
    def reset_arrays(self, seed: int | Sequence[int] | None = None) -> dict[str, np.ndarray]:
        """Every arena's first module view. Arena i's first episode seed is the one sub-env i of the stock
        path draws first (from a generator seeded ``seed + i``)."""
        base = [seed + i for i in range(self.num_envs)] if isinstance(seed, int) else seed
        seeds = None if base is None else [int(np.random.default_rng(b).integers(*TRAINING_SEEDS)) for b in base]
        clock = time.perf_counter()
        self.focal.reset_groups(seeds)
        self.env_seconds += time.perf_counter() - clock
        for group, interfaces in zip(self.groups, self.interfaces, strict=True):
            for interface in interfaces.values():
                interface.reset(np.arange(group.size))
        for j in range(self.num_envs):
            self._view(j)
        return self._observe([g.raw for g in self.groups])

    def step_arrays(self, codes: Mapping[str, np.ndarray], idle: Sequence[bool] | None = None) -> ArrayStep:
        """One step of every arena from the modules' codes (seat -> ``(N, k)``). Groups marked ``idle`` are not
        stepped (``FocalVectorEnv.step_groups``): their rows are their last views, zero rewards and no flags."""
        idle = list(idle) if idle is not None else [False] * len(self.groups)
        actions = [None if skip else {seat: interface.act(group.raw[seat], codes[seat][group.rows])
                                      for seat, interface in interfaces.items()}
                   for group, interfaces, skip in zip(self.groups, self.interfaces, idle, strict=True)]
        clock = time.perf_counter()
        steps = self.focal.step_groups(actions)
        reward, terminated, truncated, infos = self.focal.merge(steps)
        self.env_seconds += time.perf_counter() - clock
        restarted = self.focal.restarted.copy()
        entries = self.focal.mixture_entry  # an arena that ended now keeps its entry until it restarts next step
        if restarted.any():
            for group, interfaces in zip(self.groups, self.interfaces, strict=True):
                arenas = np.flatnonzero(restarted[group.rows])
                if arenas.size:
                    for interface in interfaces.values():
                        interface.reset(arenas)
            for j in np.flatnonzero(restarted).tolist():
                self._view(j)
        scaled = {a: reward[a] * self.reward_scale[a] for a in self.learned}
        return ArrayStep(self._observe([step.obs for step in steps], idle), scaled, terminated, truncated, infos,
                         restarted, entries)

    def privileged_arrays(self) -> np.ndarray:
        """``(N, CELLS * P)``: every arena's hidden state per cell at the tick about to be played, as the
        ``privileged`` critic reads it (:func:`experiments.training.privileged.privileged_cells`; training-only)."""
        from experiments.training.privileged import privileged_cells

        return np.concatenate([privileged_cells(g.core) for g in self.groups])

    def _observe(self, raw: Sequence[Mapping[str, np.ndarray]], idle: Sequence[bool] = ()) -> dict[str, np.ndarray]:
        """The modules' views of every arena from each group's raw observations; a group marked ``idle`` keeps
        its last views (it was not stepped)."""
        self._views = [self._views[j] if j < len(idle) and idle[j]
                       else {seat: interfaces[seat].observe(part[seat]) for seat in self.learned}
                       for j, (part, interfaces) in enumerate(zip(raw, self.interfaces, strict=True))]
        return {seat: np.concatenate([v[seat] for v in self._views]) for seat in self.learned}

    def _view(self, j: int) -> None:
        view = self.views[j]
        view.episode_seed = self.focal.episode_seed(j)
        view.scenario = self.groups[int(self.focal.scenario_of[j])].config

    # ------------------------------------------------------------------ RLlib's per-arena dicts
    def reset(self, *, seed: int | Sequence[int] | None = None, options: dict | None = None):
        views = self.reset_arrays(seed)
        observations = [{a: views[a][i] for a in self.learned} for i in range(self.num_envs)]
        return observations, [self._reset_info(i) for i in range(self.num_envs)]

    def _reset_info(self, i: int) -> dict[str, Any]:
        info = {"scenario": self.scenario_names[i], "scenario_hash": self.scenario_hashes[i],
                "episode_seed": self.views[i].episode_seed}
        return {a: dict(info) for a in self.learned}

    def step(self, actions: Any):  # RLlib's ArrayType: one dict of module actions per sub-env
        codes = {}
        for seat in self.learned:
            no_action = self.interfaces[0][seat].no_action  # an arena RLlib did not act in: its NEXT_STEP reset
            codes[seat] = np.stack([np.asarray(a[seat], dtype=np.int64) if seat in a else no_action for a in actions])
        out = self.step_arrays(codes)
        focal = self.learned[0]  # every seat ends on the same step
        ended = out.terminated[focal] | out.truncated[focal]
        # every value as Python lists once (RLlib wants plain floats and bools per arena; list indexing is cheap)
        rewards_of = {a: out.reward[a].tolist() for a in self.learned}
        terminated_of = {a: out.terminated[a].tolist() for a in self.learned}
        truncated_of = {a: out.truncated[a].tolist() for a in self.learned}
        terms_of = {a: {k: v.tolist() for k, v in out.infos[a]["reward_terms"].items()} for a in self.learned}
        episode = {a: out.infos[a].get("episode") for a in self.learned}
        ended_list, restarted = ended.tolist(), out.restarted.tolist()
        entries = out.entries
        observations = [{a: out.obs[a][i] for a in self.learned} for i in range(self.num_envs)]
        rewards, terminateds, truncateds, infos = [], [], [], []
        for i in range(self.num_envs):
            if restarted[i]:
                rewards.append(dict.fromkeys(self.learned, 0.0))
                terminateds.append({**dict.fromkeys(self.learned, False), "__all__": False})
                truncateds.append({**dict.fromkeys(self.learned, False), "__all__": False})
                infos.append(self._reset_info(i))
                continue
            rewards.append({a: rewards_of[a][i] for a in self.learned})
            all_terminated = terminated_of[focal][i]
            terminateds.append({**{a: terminated_of[a][i] for a in self.learned}, "__all__": all_terminated})
            truncateds.append({**{a: truncated_of[a][i] for a in self.learned},
                               "__all__": ended_list[i] and not all_terminated})
            seat_infos = {}
            for a in self.learned:
                seat_info: dict[str, Any] = {"reward_terms": {k: v[i] for k, v in terms_of[a].items()},
                                             "scenario_hash": self.scenario_hashes[i]}
                totals = episode[a]
                if ended_list[i] and totals is not None:
                    seat_info["episode"] = {k: float(v[i]) for k, v in totals.items()}
                    seat_info.update(background_tag(self.cfg, int(entries[i])))
                seat_infos[a] = seat_info
            infos.append(seat_infos)
        return (observations, *(np.array(column, dtype=object) for column in (rewards, terminateds, truncateds,
                                                                               infos)))

    def close_extras(self, **kwargs: Any) -> None:
        if hasattr(self, "focal"):  # (a refused config never built it)
            self.focal.close()


class BatchedEnvRunner(MultiAgentEnvRunner):
    """RLlib's multi-agent env runner sampling from a :class:`BatchedFocalEnv` (``make_env`` replaced).

    The stock runner logs six metric values per sub-env step (its env, agent and module step
    counts); with the env batched they are the larger part of a step's cost. Here they are counted
    and logged once per :meth:`sample` call, the same sums."""

    draw = 0  # BatchedFocalEnv's: every scenario of a run in the batch at once
    lean = False  # the lean runner (LeanEnvRunner) restarts its arenas when a curriculum switches the scenario

    def make_env(self) -> None:
        if self.env is not None:
            self.env.close()
        self.env = BatchedFocalEnv(self.config.env_config, self.config.num_envs_per_env_runner, draw=self.draw,
                                   lean=self.lean)
        self.num_envs = self.env.num_envs
        self._needs_initial_reset = True
        self._counts: Counter[tuple[str, Any]] = Counter()
        make_callback("on_environment_created", callbacks_objects=self._callbacks,
                      callbacks_functions=self.config.callbacks_on_environment_created,
                      kwargs=dict(env_runner=self, metrics_logger=self.metrics, env=self.env.unwrapped,
                                  env_context=self.config.env_config))

    def _increase_sampled_metrics(self, num_steps: int, next_obs: Any, episode: Any) -> int:
        counts = self._counts
        counts["env", None] += num_steps
        if episode.is_done:
            counts["episodes", None] += 1
        for aid in next_obs:
            counts["agent", str(aid)] += 1
            counts["module", episode.module_for(aid)] += 1
        return num_steps

    def sample(self, **kwargs: Any) -> Any:
        episodes = super().sample(**kwargs)
        counts, self._counts = self._counts, Counter()
        log = self.metrics.log_value
        for (kind, key), value in counts.items():
            if kind == "env":
                log(NUM_ENV_STEPS_SAMPLED, value, reduce="sum")
                log(NUM_ENV_STEPS_SAMPLED_LIFETIME, value, reduce="lifetime_sum", with_throughput=True)
            elif kind == "episodes":
                log(NUM_EPISODES, value, reduce="sum")
                log(NUM_EPISODES_LIFETIME, value, reduce="lifetime_sum")
            elif kind == "agent":
                log((NUM_AGENT_STEPS_SAMPLED, key), value, reduce="sum")
                log((NUM_AGENT_STEPS_SAMPLED_LIFETIME, key), value, reduce="lifetime_sum")
            else:
                log((NUM_MODULE_STEPS_SAMPLED, key), value, reduce="sum")
                log((NUM_MODULE_STEPS_SAMPLED_LIFETIME, key), value, reduce="lifetime_sum")
        return episodes
