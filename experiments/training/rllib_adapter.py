"""RLlib (new API stack, ray 2.60) adapter for the commons_arena ``ParallelEnv``.

Learning seats (the allocator by default; any seats with a ``SeatPlan`` from
``experiments.training.seats``, each learning module a default RLlib module) play against
the others, which run either inside RLlib as untrained RLModules or inside the env wrapper
as the background of a :class:`policies.focal.FocalEnv` (faster, and a curriculum switch
brings the next population). The pieces:

- :class:`ArenaRLlibEnv` wraps the focal env as a ``MultiAgentEnv`` (observation scaling,
  team identity for shared modules, action codecs, the in-env background, curriculum switches);
- :class:`ScriptedRLModule` runs a :class:`policies.base.Policy` as an RLModule;
- :func:`build_algorithm_config` wires env, modules, resources and callbacks into a config;
- :class:`RewardTermsCallback` logs the allocator's per-term episode sums and normalised
  score; :class:`CurriculumCallback` promotes the curriculum on that score;
- a trained module is used without Ray through ``policies.learned.LearnedPolicy``
  (``learned:<checkpoint>`` wherever a policy name goes).

Only new-stack APIs are used (RLModule, Learner, EnvRunner, ``build_algo()``).
"""

from __future__ import annotations

import functools
import importlib
import logging
import math
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import ray
import torch
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.callbacks.callbacks import RLlibCallback
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModule, RLModuleSpec
from ray.rllib.env.multi_agent_env import MultiAgentEnv
from ray.rllib.utils.typing import MultiAgentDict
from ray.tune.registry import register_env

from commons_arena.enums import ALLOCATOR
from policies.base import Policy

logger = logging.getLogger(__name__)

# A factory builds the scripted Policy for one agent id. It travels to env runners and
# into checkpoints via cloudpickle, so module-level functions/classes (or
# ``functools.partial`` of them) are the safe choice; a "package.module:attr" string
# avoids pickling code at all.
PolicyFactory = Callable[[str], Policy]

# Where the allocator's custom metrics land: result["env_runners"][<this>][<term>].
REWARD_TERMS_KEY = "allocator_reward_terms"
EPISODE_TOTALS_KEY = "allocator_episode"


def _resolve(obj: Any) -> Any:
    """Turn a ``"package.module:attr"`` string into the object; pass anything else through."""
    if isinstance(obj, str):
        module_name, _, attr = obj.partition(":")
        if not attr:
            raise ValueError(f"expected 'package.module:attr', got {obj!r}")
        return getattr(importlib.import_module(module_name), attr)
    return obj


def _default_parallel_env(**kwargs: Any) -> Any:
    # Imported lazily so this module imports (and can be tested with a stand-in env)
    # before/without the real environment.
    import commons_arena

    return commons_arena.parallel_env(**kwargs)


# --------------------------------------------------------------------------- env


TRAINING_SEEDS = (2**20, 2**31 - 1)  # [low, high) of training episode seeds; evaluations use seeds below


class ArenaRLlibEnv(MultiAgentEnv):
    """The commons_arena ``ParallelEnv`` as an RLlib ``MultiAgentEnv``.

    Written instead of RLlib's ``ParallelPettingZooEnv`` because that one orders
    ``possible_agents`` arbitrarily (from a set), never updates ``agents``, and decides the
    episode end with ``all()`` per flag dict, so a last step where some agents are
    terminated and others truncated never sets ``__all__`` and RLlib steps a finished env.

    ``config`` keys: ``scenario`` (default ``"standard"``), optional ``env_kwargs`` (extra
    keyword arguments for the factory) and optional ``env_factory`` (a callable or
    ``"module:attr"`` string with the signature of ``commons_arena.parallel_env``; used
    for stand-in envs in tests). ``scenarios`` (a list) samples one of them per episode
    instead (mixed-tier training; their spaces must match). Learned agents named in
    ``observation_scale`` (agent -> per-dimension scale) or ``action_codec`` (agent -> codec
    name) see their observation through a :class:`policies.learned.ModuleInterface` (scale,
    codec, ``history`` agent -> stacked ticks, and for seats of a shared module
    ``seat_identity`` agent -> [index, size] of their appended one-hot identity, see
    ``experiments.training.seats``), built per scenario because codecs read the scenario's
    public parameters.

    Episode seeds: a seeded ``reset`` reseeds a generator; every episode's seed (and, with
    ``scenarios``, its scenario) is drawn from it and handed to the focal env, whose one
    seeding rule seeds the background policies from it. Training seeds are drawn from
    ``TRAINING_SEEDS`` (2**20 and up), so no training episode ever plays a seed below 2**20:
    the evaluation seeds (training's 900000.., the tournament's 5000.., the paired check's
    7000..) are held out by construction.
    """

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        cfg = dict(config or {})  # RLlib passes an EnvContext (a dict subclass)
        self._make = _resolve(cfg.get("env_factory") or _default_parallel_env)
        self._env_kwargs = dict(cfg.get("env_kwargs", {}))
        self._mix = list(cfg.get("scenarios") or [])
        # Learned agents see observations through a ModuleInterface (the trained policy
        # applies the same one at inference): scale, codec features, stacked history; the
        # codec turns the module's action into an env action using the raw observation.
        self._scale = {a: np.asarray(v, dtype=np.float32) for a, v in cfg.get("observation_scale", {}).items()}
        self._codec_names: dict[str, str] = dict(cfg.get("action_codec", {}))
        self._history: dict[str, int] = {a: int(k) for a, k in cfg.get("history", {}).items()}
        self._identity = {a: (int(i), int(n)) for a, (i, n) in cfg.get("seat_identity", {}).items()}
        self._raw_obs: MultiAgentDict = {}
        # Optionally a background population plays every agent but the learned ones *inside*
        # this env (policies.focal.FocalEnv, the one substrate) instead of as RLModules:
        # RLlib then sees only the learned agents and skips its per-agent module pipeline for
        # the others (faster), and a curriculum switch or a mix brings each scenario's
        # population along (RLModules keep the first). ``background`` is a Population as a
        # dict (``Population.to_dict()``); default: the scenario's own population.
        self._learned = list(cfg.get("learned_agents", []))
        self._play_population = bool(cfg.get("play_population", False))
        self._background = cfg.get("background")
        self._seeds = np.random.default_rng()
        self._envs: dict[str, tuple[Any, Any, dict[str, Any]]] = {}  # scenario -> (arena, seats, interfaces)
        self._next_scenario: str | None = None
        self._use(self._mix[0] if self._mix else cfg.get("scenario", "standard"))
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

    def _use(self, scenario: str) -> None:
        """Play ``scenario`` from now on (its arena, focal env and interfaces are built once)."""
        if scenario not in self._envs:
            from policies.focal import FocalEnv
            from policies.learned import ModuleInterface
            from policies.population import Population

            par_env = self._make(scenario=scenario, **self._env_kwargs)
            if self._play_population:
                config = par_env.config
                background = Population.from_dict(self._background) if self._background else Population.default(config)
                seats = FocalEnv(par_env, self._learned, background)
            else:
                seats = FocalEnv(par_env, par_env.possible_agents, {})
            interfaces = {
                agent: ModuleInterface(
                    par_env.config, agent,
                    self._scale.get(agent, np.ones(par_env.observation_space(agent).shape, np.float32)),
                    self._codec_names.get(agent), self._history.get(agent, 1), self._identity.get(agent),
                )
                for agent in set(self._scale) | set(self._codec_names) | set(self._identity)
            }
            self._envs[scenario] = (par_env, seats, interfaces)
        self.par_env, self.seats, self._interfaces = self._envs[scenario]

    @property
    def env_seconds(self) -> float:
        """Time inside the ParallelEnvs' reset/step (for the env-share figure)."""
        return sum(seats.env_seconds for _, seats, _ in self._envs.values())

    def _check_same_spaces(self, scenario: str) -> None:
        probe = self._make(scenario=scenario, **self._env_kwargs)
        for agent in self.par_env.possible_agents:
            old, new = self.par_env.observation_space(agent).shape, probe.observation_space(agent).shape
            if old != new or not np.array_equal(self.par_env.action_space(agent).nvec, probe.action_space(agent).nvec):
                raise ValueError(f"scenario {scenario!r} changes the spaces of {agent!r}: {old} -> {new}")
        probe.close()

    def set_scenario(self, scenario: str) -> None:
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
            self._use(self._mix[int(self._seeds.integers(len(self._mix)))])
        episode_seed = int(self._seeds.integers(*TRAINING_SEEDS))
        obs, infos = self.seats.reset(seed=episode_seed, options=options)
        for interface in self._interfaces.values():
            interface.reset()
        self.agents = list(self.seats.agents)
        return self._module_view(obs), infos

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
        float_rewards: MultiAgentDict = {a: float(r) for a, r in rewards.items()}
        return self._module_view(obs), float_rewards, terminateds, truncateds, infos

    def render(self) -> Any:
        return self.par_env.render()

    def close(self) -> None:
        for par_env, _, _ in self._envs.values():
            par_env.close()


def register_arena_env(name: str = "commons_arena") -> str:
    """Register :class:`ArenaRLlibEnv` under ``name`` for string-based configs (Tune, CLI).

    Needed in every process that restores an Algorithm configured with this name (else
    ``Algorithm.from_checkpoint`` fails with an unrelated-looking ``IndexError``).
    :func:`build_algorithm_config` passes the class itself and does not need it.
    """
    register_env(name, lambda cfg: ArenaRLlibEnv(cfg))
    return name


# ------------------------------------------------------------------ scripted agents


def registered_policy(name: str, scenario: str, **params: Any) -> PolicyFactory:
    """Factory for the ``policies.registry`` policy ``name`` (a picklable ``partial``).

    ``make_policy`` needs no env for the scripted teams, brokers and baselines; privileged
    policies (``oracle``) cannot run as an RLModule.
    """
    return functools.partial(_make_registered, name, scenario, params)


def _make_registered(name: str, scenario: str, params: dict[str, Any], agent_id: str) -> Policy:
    from policies.registry import make_policy

    return make_policy(name, scenario, agent_id, **params)


# Batch columns the row-tagging connector adds: which sub-env a row comes from and the
# agent's step in its episode (0 = the episode's first observation).
ENV_INDEX = "arena_env_index"
AGENT_T = "arena_agent_t"


class TagRowsWithEnvIndex(ConnectorV2):
    """Env-to-module piece: tags every acting agent's row with its sub-env index and step.

    A scripted Policy may keep per-episode state (``ScriptedPolicy.clear``), so each
    vectorised sub-env needs its own instance, reset when its episode starts. Batch rows do
    not identify their sub-env (a sub-env that is auto-resetting contributes no row), hence
    these tags. All agents are tagged, not only scripted ones: RLlib's
    ``AgentToModuleMapping`` takes the row layout from the first batch column, which is
    this one, as custom pieces run before the default ones.
    """

    def __call__(
        self,
        *,
        rl_module: RLModule,
        batch: dict[str, Any],
        episodes: list[Any],
        explore: bool | None = None,
        shared_data: dict | None = None,
        **kwargs: Any,
    ) -> Any:
        env_index = {episode.id_: i for i, episode in enumerate(episodes)}
        # Same iterator (same order) as RLlib's AddObservationsFromEpisodesToBatch.
        for sa_episode in self.single_agent_episode_iterator(episodes, agents_that_stepped_only=True):
            self.add_batch_item(batch, ENV_INDEX, env_index.get(sa_episode.multi_agent_episode_id, 0), sa_episode)
            # `t` counts from the episode's start across chunks (`len()` restarts per chunk).
            self.add_batch_item(batch, AGENT_T, sa_episode.t, sa_episode)
        return batch


def _row_tagging_connector(env: Any = None, spaces: Any = None, device: Any = None) -> ConnectorV2:
    return TagRowsWithEnvIndex()


class ScriptedRLModule(RLModule):
    """A scripted :class:`Policy` run as an (untrained) RLModule.

    ``model_config``: ``{"policy_factory": PolicyFactory | "module:attr", "agent_id": str,
    "seed": int | None}``. One Policy per sub-env, built on first use and ``reset`` at each
    episode start, using the tags of :class:`TagRowsWithEnvIndex` (installed by
    :func:`build_algorithm_config`). Without tags (e.g. a direct ``forward_inference`` call) row
    ``i`` is treated as sub-env ``i`` and policies are reset only when built.

    Optional ``"seats"`` + ``"observation_scale"``: the module plays seats whose observations
    arrive scaled, with the seat's one-hot identity appended (a league's team seats, shared
    with learned modules): it recovers the raw observation (an exact power-of-two scale makes
    this exact) and the seat from the identity, and keeps one policy per (sub-env, seat).
    """

    def setup(self) -> None:
        cfg: dict[str, Any] = self.model_config if isinstance(self.model_config, dict) else {}
        self.agent_id: str = cfg["agent_id"]
        self._factory: PolicyFactory = _resolve(cfg["policy_factory"])
        self._seed: int | None = cfg.get("seed")
        self._episodes_started = 0
        self._seats: list[str] = list(cfg.get("seats", []))
        self._unscale = np.asarray(cfg["observation_scale"], np.float32) if self._seats else None
        # (sub-env index, seat) -> policy; built lazily, so the learner's copy builds none
        self.policies: dict[tuple[int, str], Policy] = {}

    def _policy_for(self, env_index: int, episode_start: bool, seat: str | None = None) -> Policy:
        seat = seat or self.agent_id
        policy = self.policies.get((env_index, seat))
        if policy is None:
            policy = self.policies[(env_index, seat)] = self._factory(seat)
            if not isinstance(policy, Policy):
                raise TypeError(f"policy for {self.agent_id!r} does not implement reset()/act()")
            episode_start = True
        if episode_start:
            # A distinct, reproducible seed per episode (every env runner repeats the
            # sequence; the env itself is seeded per runner and sub-env by RLlib).
            seed = None
            if self._seed is not None:
                seed = int(np.random.SeedSequence([self._seed, self._episodes_started]).generate_state(1)[0])
            self._episodes_started += 1
            policy.reset(seed)
        return policy

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        # Serves inference, exploration and train alike (the module is never trained;
        # keep it out of `policies_to_train`). Env runners hand in torch tensors and turn
        # the torch output back into numpy for the env.
        obs = _to_numpy(batch[Columns.OBS])
        env_index = _to_numpy(batch.get(ENV_INDEX, np.arange(len(obs))))
        agent_t = batch.get(AGENT_T)
        starts = _to_numpy(agent_t) == 0 if agent_t is not None else np.zeros(len(obs), bool)
        seats: list[str | None] = [None] * len(obs)
        if self._unscale is not None:
            size = len(self._unscale)
            seats = [self._seats[int(k)] for k in obs[:, size:].argmax(axis=1)]
            obs = obs[:, :size] * self._unscale
        actions = [
            np.asarray(self._policy_for(int(i), bool(start), seat).act(row), dtype=np.int64)
            for row, i, start, seat in zip(obs, env_index, starts, seats, strict=True)
        ]
        out = np.stack(actions) if actions else np.zeros((0, *getattr(self.action_space, "shape", ())), np.int64)
        return {Columns.ACTIONS: torch.from_numpy(out)}


def _to_numpy(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


# -------------------------------------------------------------------------- metrics


class RewardTermsCallback(RLlibCallback):
    """Logs, per finished episode, the allocator's summed reward terms and episode totals.

    Results: ``result["env_runners"]["allocator_reward_terms"][term]`` (sum over the episode
    of ``infos["allocator"]["reward_terms"][term]``) and
    ``result["env_runners"]["allocator_episode"][key]`` (the final ``infos[...]["episode"]``),
    each a mean over the last ``metrics_num_episodes_for_smoothing`` episodes. TensorBoard
    shows them as ``env_runners/allocator_reward_terms/<term>``.
    """

    agent_id: str = ALLOCATOR

    def on_episode_step(self, *, episode: Any, **kwargs: Any) -> None:
        # Summed step by step into `custom_data`, which RLlib copies into the next chunk
        # when an episode spans several `sample()` calls. Summing the chunks' infos at the
        # end instead is wrong: with a local env runner the learner pipeline appends a
        # duplicate last step to the already-returned chunks, in place.
        info = episode.get_infos(-1, agent_ids=[self.agent_id]).get(self.agent_id)
        if info:
            sums = episode.custom_data.setdefault(REWARD_TERMS_KEY, defaultdict(float))
            for term, value in info.get("reward_terms", {}).items():
                sums[term] += float(value)

    def on_episode_end(
        self,
        *,
        episode: Any,
        env_runner: Any = None,
        metrics_logger: Any = None,
        **kwargs: Any,
    ) -> None:
        if metrics_logger is None:
            return
        # Same smoothing as RLlib's own episode metrics; divided by the runner count
        # because the runners' windows are merged in the algorithm process.
        window = 100
        if env_runner is not None:
            cfg = env_runner.config
            window = max(1, math.ceil(cfg.metrics_num_episodes_for_smoothing / (cfg.num_env_runners or 1)))
        for term, total in episode.custom_data.get(REWARD_TERMS_KEY, {}).items():
            metrics_logger.log_value((REWARD_TERMS_KEY, term), total, reduce="mean", window=window)
        final = episode.get_infos(-1, agent_ids=[self.agent_id]).get(self.agent_id) or {}
        totals = final.get("episode", {})
        for key, value in totals.items():
            metrics_logger.log_value((EPISODE_TOTALS_KEY, key), float(value), reduce="mean", window=window)
        # Normalised score of this training episode, against the random/oracle means of the
        # held-out seeds (env_config["score_anchors"][scenario hash], set by experiments.training.train).
        anchors = (env_runner.config.env_config.get("score_anchors", {}) if env_runner is not None else {}).get(
            final.get("scenario_hash")
        )
        if anchors and "return" in totals:
            span = anchors["oracle"] - anchors["random"]
            if abs(span) > 1e-9:
                score = (totals["return"] - anchors["random"]) / span
                metrics_logger.log_value((EPISODE_TOTALS_KEY, "normalised_score"), score, reduce="mean", window=window)


class CurriculumCallback(RewardTermsCallback):
    """Promotes every env to the next curriculum stage when the training episodes'
    normalised score (the smoothed ``allocator_episode/normalised_score`` metric) reaches
    ``promote_at``, at most once every ``min_iterations`` iterations (the smoothing window
    still holds the previous stage's episodes right after a switch).

    ``env_config["curriculum"] = {"stages": [...], "promote_at": float, "min_iterations": int,
    "stage": int}``; the current stage index is written to ``result["curriculum_stage"]``.
    """

    def on_train_result(self, *, algorithm: Any, result: dict, **kwargs: Any) -> None:
        curriculum = algorithm.config.env_config.get("curriculum")
        if not curriculum:
            return
        stage = getattr(algorithm, "_arena_stage", curriculum.get("stage", 0))
        since = getattr(algorithm, "_arena_stage_iterations", 0) + 1
        score = result.get("env_runners", {}).get(EPISODE_TOTALS_KEY, {}).get("normalised_score")
        if (
            score is not None
            and score >= curriculum["promote_at"]
            and since >= curriculum.get("min_iterations", 5)
            and stage + 1 < len(curriculum["stages"])
        ):
            stage += 1
            since = 0
            set_scenario_everywhere(algorithm, curriculum["stages"][stage])
        algorithm._arena_stage = stage
        algorithm._arena_stage_iterations = since
        result["curriculum_stage"] = stage


def foreach_sampling_runner(algorithm: Any, fn: Callable[[Any], Any]) -> list[Any]:
    """``fn(runner)`` on every env runner that samples, i.e. holds envs and acting modules:
    the remote runners when there are any (the driver's local runner then has no env,
    ``runner.env`` is None), else the local one. Returns the results in runner order."""
    group = algorithm.env_runner_group
    return list(group.foreach_env_runner(fn, local_env_runner=group.num_remote_env_runners() == 0))


def set_scenario_everywhere(algorithm: Any, scenario: str) -> None:
    """Switch every env of every sampling env runner to ``scenario`` from their next episode on."""

    def switch(runner: Any) -> None:
        for env in runner.env.envs:
            env.unwrapped.set_scenario(scenario)

    foreach_sampling_runner(algorithm, switch)


# --------------------------------------------------------------------------- config


def fit_num_env_runners(requested: int, num_cpus_per_env_runner: float = 1.0) -> int:
    """Clamp ``requested`` remote env runners to what Ray can schedule right now.

    ``build_algo()`` waits forever (silently) for actors whose CPUs Ray does not have.
    The learner stays in the driver process (``num_learners=0``) and asks for none. Under
    Tune the trial's driver also reserves ``num_cpus_for_main_process`` (1 CPU), which is
    not counted here: ask for one runner fewer there.
    """
    if requested <= 0:
        return 0
    if not ray.is_initialized():
        raise RuntimeError("call ray.init() before asking for remote env runners")
    cpus = ray.available_resources().get("CPU", 0.0)
    fits = int(cpus // num_cpus_per_env_runner)
    if fits < requested:
        logger.warning("only %.1f CPUs available: %d env runners instead of %d", cpus, fits, requested)
    return min(requested, fits)


def build_algorithm_config(
    scenario: str,
    scripted: Mapping[str, PolicyFactory | str],
    *,
    num_envs_per_env_runner: int = 1,
    train_batch_size: int = 2000,
    minibatch_size: int = 128,
    num_epochs: int = 10,
    num_env_runners: int = 0,
    learned_agent: str = ALLOCATOR,
    model_config: DefaultModelConfig | dict[str, Any] | None = None,
    env_config: Mapping[str, Any] | None = None,
    algo_config: AlgorithmConfig | None = None,
    seed: int | None = None,
    callbacks: type[RLlibCallback] = RewardTermsCallback,
    play_population: bool = False,
    plan: Any = None,
    extra_modules: Mapping[str, RLModuleSpec] | None = None,
    mapping_fn: Callable[..., str] | None = None,
) -> AlgorithmConfig:
    """A config where ``learned_agent`` trains and every other agent runs a scripted Policy.

    ``scripted`` maps each other agent id to its Policy factory (run as ScriptedRLModules);
    the env is built once here to check that every agent is covered. With
    ``play_population=True`` the scenario's default population plays the other agents
    inside the env instead and ``scripted`` is ignored. ``algo_config`` defaults to ``PPOConfig()``; any
    new-stack config (e.g. ``APPOConfig()``) works, as the learned module's spec leaves the
    module class to the algorithm's default. ``train_batch_size`` counts env steps per
    iteration (one local learner, so it is also the per-learner size).

    ``plan`` (an ``experiments.training.seats.SeatPlan``) replaces ``learned_agent`` when
    several seats learn: one trained module per plan module, mapped to its seats.
    ``extra_modules`` (never trained) and ``mapping_fn`` (replacing the plan's mapping) let a
    league map learning seats to opponents per episode (experiments.training.league).
    """
    from experiments.training.seats import SeatPlan

    if plan is None:
        plan = SeatPlan.single(learned_agent)
    learning = plan.seats
    env_config = {"scenario": scenario, **(env_config or {}), **plan.to_env_config()}
    if play_population:
        # the background plays inside the env; RLlib sees only the learning seats
        env_config = {**env_config, "play_population": True, "learned_agents": learning}
        scripted = {}
    probe = ArenaRLlibEnv(env_config)
    agents: list[str] = [str(a) for a in probe.possible_agents]
    obs_spaces = {a: probe.get_observation_space(a) for a in agents}
    act_spaces = {a: probe.get_action_space(a) for a in agents}
    probe.close()
    outside = [a for a in learning if a not in agents]
    if outside:
        raise ValueError(f"learned agent(s) {outside} not among the env's agents {agents}")
    missing = [a for a in agents if a not in learning and a not in scripted]
    unknown = [a for a in scripted if a not in agents or a in learning]
    if missing or unknown:
        raise ValueError(f"scripted policies: missing for {missing}, not scriptable {unknown}")

    specs: dict[str, RLModuleSpec] = {}
    for module, seats in plan.modules.items():
        first = seats[0]
        for seat in seats[1:]:
            if obs_spaces[seat].shape != obs_spaces[first].shape or act_spaces[seat] != act_spaces[first]:
                raise ValueError(f"module {module!r} cannot play both {first!r} and {seat!r}: their spaces differ")
        specs[module] = RLModuleSpec(
            observation_space=obs_spaces[first], action_space=act_spaces[first], model_config=model_config
        )
    for module_id, spec in (extra_modules or {}).items():
        seat = (spec.model_config or {}).get("agent_id")  # spaces left open: that seat's
        if spec.observation_space is None and seat in obs_spaces:
            spec.observation_space, spec.action_space = obs_spaces[seat], act_spaces[seat]
        specs[module_id] = spec
    for aid in agents:
        if aid not in learning:
            specs[aid] = RLModuleSpec(
                module_class=ScriptedRLModule,
                observation_space=obs_spaces[aid],
                action_space=act_spaces[aid],
                model_config={"policy_factory": scripted[aid], "agent_id": aid, "seed": seed},
            )

    config = algo_config if algo_config is not None else PPOConfig()
    config = (
        config.environment(ArenaRLlibEnv, env_config=env_config)
        .env_runners(
            num_env_runners=fit_num_env_runners(num_env_runners),
            num_envs_per_env_runner=num_envs_per_env_runner,
            # Replaces any env-to-module connector set before: scripted modules need it.
            env_to_module_connector=_row_tagging_connector,
        )
        # A remote learner would need its own CPU; on 2 cores the driver does the update.
        .learners(num_learners=0)
        .multi_agent(
            policies=set(specs),
            policy_mapping_fn=mapping_fn or plan.mapping_fn(),
            policies_to_train=list(plan.modules),
        )
        .rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs=specs))
        .training(
            train_batch_size_per_learner=train_batch_size,
            minibatch_size=minibatch_size,
            num_epochs=num_epochs,
        )
        .callbacks(callbacks)
    )
    if seed is not None:
        config = config.debugging(seed=seed)
    return config


# ------------------------------------------------------------------ initial policy


def favour_code(algo: Any, agent: str, nvec: Any, code: Any, strength: float) -> None:
    """Make ``code`` the learned agent's likely action at the start of training.

    The output layer of the module's policy head gets bias ``strength`` on the chosen
    category of every MultiDiscrete sub-action (0 elsewhere) and its weights are scaled
    down 10x, so that every observation starts near the same distribution: with 5
    categories and ``strength=4`` each sub-action picks ``code`` with probability ~0.93,
    and the greedy action is ``code``. Used to start a residual codec at the zero
    correction (the base policy). The learner's module is changed and its weights are
    pushed to every env runner.
    """
    bias = np.concatenate([np.where(np.arange(n) == c, strength, 0.0) for n, c in zip(nvec, code, strict=True)])

    def patch(learner: Any) -> None:
        module = learner.module[agent]
        last = [layer for layer in module.pi.modules() if isinstance(layer, torch.nn.Linear)][-1]
        if last.out_features != len(bias):
            raise ValueError(f"{agent!r} policy head has {last.out_features} outputs, the code space {len(bias)}")
        with torch.no_grad():
            last.bias.copy_(torch.as_tensor(bias, dtype=last.bias.dtype))
            last.weight.mul_(0.1)

    algo.learner_group.foreach_learner(patch)
    algo.env_runner_group.sync_weights(from_worker_or_learner_group=algo.learner_group, inference_only=True)
