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

import commons_arena
from commons_arena.scenario import ScenarioConfig, load_scenario
from experiments.training.env import TRAINING_SEEDS
from experiments.training.env_config import ArenaEnvConfig
from experiments.training.networks import MLP
from policies.batch import BatchPolicy
from policies.batch_codecs import make_batch_codec
from policies.focal import policy_seed
from policies.learned import ModuleInterface
from policies.population import Population
from policies.registry import batch_policy, policy_spec
from policies.shipping import install


def unsupported_reason(env: ArenaEnvConfig | Mapping[str, Any]) -> str | None:
    """Why the batched sampler cannot play a run with this env config (None: it can)."""
    cfg = ArenaEnvConfig.of(env)
    for part, why in ((cfg.background_mix, "background_mix: a background mix is drawn per episode"),
                      (cfg.background_mixture, "background_mixture: a mixture of backgrounds is drawn per episode"),
                      (cfg.curriculum, "curriculum: a curriculum switches every env's scenario"),
                      (cfg.league, "league: league members switch per episode"),
                      (cfg.seat_identity, "seat_identity: shared team modules (seat identities) are self-play")):
        if part:
            return why
    if not cfg.scripted_in_env:
        return "the background plays as RLlib modules (scripted_in_env is off)"
    if any(cfg.network_of(seat).cell_view for seat in cfg.learned_agents):
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


class BatchInterface:
    """:class:`policies.learned.ModuleInterface` of one learning seat in ``num_envs`` arenas: the
    scaled observation, the codec's features (its batched form, :mod:`policies.batch_codecs`) and
    the stacked history as arrays; row *i* is what arena *i*'s ``ModuleInterface`` gives."""

    def __init__(self, config: ScenarioConfig, seat: str, num_envs: int, scale: np.ndarray | None,
                 codec: dict[str, Any] | str | None, history: int) -> None:
        one = MLP.interface(config, seat, scale, codec, history)  # spaces, scale, the codec's name and params
        if not isinstance(one, ModuleInterface) or one.identity is not None:
            raise ValueError(f"the batched sampler plays {seat!r} through a plain module interface only")
        self.one = one
        self.scale, self.history, self.frame_size = self.one.scale, self.one.history, self.one.frame_size
        spec = codec if codec is None or isinstance(codec, str) else codec["name"]
        params = {} if codec is None or isinstance(codec, str) else dict(codec.get("params", {}))
        self.codec = None if spec is None else make_batch_codec(spec, config, num_envs, seat, **params)
        self.frames = np.zeros((num_envs, self.history, self.frame_size), dtype=np.float32)
        self.no_action = np.zeros(one.action_space().shape, dtype=np.int64)  # what an arena RLlib did not act in plays

    def reset(self, index: np.ndarray) -> None:
        self.frames[index] = 0.0
        if self.codec is not None:
            self.codec.reset(index)

    def observe(self, observations: np.ndarray) -> np.ndarray:
        frame = np.asarray(observations, dtype=np.float32) / self.scale
        if self.codec is not None and self.codec.codec.n_features:
            frame = np.concatenate([frame, self.codec.features(observations)], axis=1)
        if self.history == 1:
            return frame.astype(np.float32)
        self.frames[:, 1:] = self.frames[:, :-1]
        self.frames[:, 0] = frame
        return self.frames.reshape(len(frame), -1).astype(np.float32)

    def act(self, observations: np.ndarray, module_actions: np.ndarray) -> np.ndarray:
        return module_actions if self.codec is None else self.codec.decode(observations, module_actions)


class _Group:
    """The arenas of one scenario: its batched core, background seats and learning seats' interfaces."""

    def __init__(self, config: ScenarioConfig, size: int, offset: int, learned: list[str], background: Population,
                 cfg: ArenaEnvConfig) -> None:
        self.config, self.size, self.offset = config, size, offset  # its arenas are the batch's offset .. + size
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
            self.background[seat] = batch_policy(entry.policy, config, seat, size, **dict(entry.params))
        scale = cfg.observation_scale
        self.interfaces = {
            seat: BatchInterface(config, seat, size, None if seat not in scale else np.asarray(scale[seat], np.float32),
                                 cfg.action_codec.get(seat), int(cfg.history.get(seat, 1)))
            for seat in learned
        }
        self.reward_scale = {a: float(by_hash[config.content_hash]) for a, by_hash in cfg.reward_scale.items()
                             if config.content_hash in by_hash}
        self.info = {"scenario": config.name, "scenario_hash": config.content_hash}
        self.raw: dict[str, np.ndarray] = {}
        self.ended = np.zeros(size, dtype=bool)  # arenas whose episode ended at the last step (NEXT_STEP)

    def start(self, arenas: np.ndarray) -> None:
        """Background policies and learning seats' interfaces of ``arenas`` start the core's episodes there."""
        seeds = [self.core.episode_seeds[i] for i in arenas.tolist()]
        for seat, policy in self.background.items():
            policy.reset([policy_seed(s, self.seat_index[seat]) for s in seeds], arenas)
        for interface in self.interfaces.values():
            interface.reset(arenas)


class BatchedFocalEnv(VectorMultiAgentEnv):
    """``num_envs`` arenas of the focal env, stepped as one batch (see the module docstring)."""

    def __init__(self, env_config: ArenaEnvConfig | Mapping[str, Any], num_envs: int) -> None:
        super().__init__()
        cfg = ArenaEnvConfig.of(env_config)
        why = unsupported_reason(cfg)
        if why is not None:
            raise ValueError(f"the batched sampler cannot play this run ({why}); train with --sampler stock")
        install(cfg.checkpoints)
        self.learned = list(cfg.learned_agents)
        scenarios = [load_scenario(s) for s in (cfg.scenarios or [cfg.scenario])]
        weights = list(cfg.scenario_weights or [1.0] * len(scenarios))
        background = cfg.background
        self.num_envs = num_envs
        self.groups: list[_Group] = []
        offset = 0
        for config, size in zip(scenarios, split_arenas(num_envs, weights), strict=True):
            chosen = Population.from_dict(background) if background else Population.default(config)
            self.groups.append(_Group(config, size, offset, self.learned, chosen, cfg))
            offset += size
        first = self.groups[0]
        obs_spaces = {a: first.interfaces[a].one.observation_space() for a in self.learned}
        act_spaces = {a: first.interfaces[a].one.action_space() for a in self.learned}
        for group in self.groups[1:]:
            for a in self.learned:
                one = group.interfaces[a].one
                if one.observation_space().shape != obs_spaces[a].shape or one.action_space() != act_spaces[a]:
                    raise ValueError(f"scenario {group.config.name!r} changes the spaces of {a!r}")
        self.views = [ArenaView(self.learned, obs_spaces, act_spaces) for _ in range(num_envs)]
        self.envs = list(self.views)  # what RLlib's runner reads per sub-env (spaces, agents)
        self.single_observation_spaces, self.single_action_spaces = obs_spaces, act_spaces
        self.single_observation_space = gym.spaces.Dict(obs_spaces)
        self.single_action_space = gym.spaces.Dict(act_spaces)
        self.metadata = {"autoreset_mode": "next_step"}
        self.render_mode = None
        self.env_seconds = 0.0

    # ------------------------------------------------------------------ api
    def reset(self, *, seed: int | Sequence[int] | None = None, options: dict | None = None):
        base = [seed + i for i in range(self.num_envs)] if isinstance(seed, int) else seed
        observations: list[dict[str, np.ndarray]] = []
        infos: list[dict[str, Any]] = []
        for group in self.groups:
            start = group.offset
            # arena i's first episode seed is the one sub-env i of the stock path draws first
            seeds = None if base is None else [int(np.random.default_rng(base[start + i]).integers(*TRAINING_SEEDS))
                                               for i in range(group.size)]
            clock = time.perf_counter()
            group.raw, _ = group.core.reset(seed=seeds)
            self.env_seconds += time.perf_counter() - clock
            group.ended[:] = False
            every = np.arange(group.size)
            group.start(every)
            views = {a: group.interfaces[a].observe(group.raw[a]) for a in self.learned}
            for i in range(group.size):
                self._view(start + i, group, i)
                observations.append({a: views[a][i] for a in self.learned})
                infos.append(self._reset_info(group, i))
        return observations, infos

    def _view(self, j: int, group: _Group, i: int) -> None:
        view = self.views[j]
        view.episode_seed, view.scenario = group.core.episode_seeds[i], group.config

    def _reset_info(self, group: _Group, i: int) -> dict[str, Any]:
        info = {**group.info, "episode_seed": group.core.episode_seeds[i]}
        return {a: dict(info) for a in self.learned}

    def step(self, actions: Any):  # RLlib's ArrayType: one dict of module actions per sub-env
        columns: list[list[Any]] = [[], [], [], [], []]  # observations, rewards, terminateds, truncateds, infos
        for group in self.groups:
            part_of = self._step_group(group, actions[group.offset:group.offset + group.size])
            for column, part in zip(columns, part_of, strict=True):
                column.extend(part)
        observations, *rest = columns
        return (observations, *(np.array(column, dtype=object) for column in rest))

    def _step_group(self, group: _Group, actions: list[dict[str, Any]]) -> tuple[list[Any], ...]:
        restarting = np.flatnonzero(group.ended)  # NEXT_STEP: the core resets these in this call
        joint: dict[str, np.ndarray] = {}
        for seat in self.learned:
            interface, raw = group.interfaces[seat], group.raw[seat]
            # an arena whose episode ended at the last step gets no action from RLlib (its NEXT_STEP reset ignores it)
            codes = np.stack([np.asarray(a[seat], dtype=np.int64) if seat in a else interface.no_action for a in actions])
            joint[seat] = interface.act(raw, codes)
        for seat, policy in group.background.items():
            joint[seat] = policy.act(group.raw[seat])
        clock = time.perf_counter()
        obs, reward, terminated, truncated, info = group.core.step(joint)
        self.env_seconds += time.perf_counter() - clock
        group.raw = obs
        if restarting.size:
            group.start(restarting)
        views = {a: group.interfaces[a].observe(obs[a]) for a in self.learned}
        focal = self.learned[0]  # every seat ends on the same step
        ended = terminated[focal] | truncated[focal]
        group.ended = ended
        restarted = set(restarting.tolist())
        # every value as Python lists once (RLlib wants plain floats and bools per arena; list indexing is cheap)
        rewards_of = {a: reward[a].tolist() for a in self.learned}
        terminated_of = {a: terminated[a].tolist() for a in self.learned}
        truncated_of = {a: truncated[a].tolist() for a in self.learned}
        terms_of = {a: {k: v.tolist() for k, v in info[a]["reward_terms"].items()} for a in self.learned}
        episode = {a: info[a].get("episode") for a in self.learned}
        ended_list = ended.tolist()
        out: tuple[list[Any], ...] = ([], [], [], [], [])
        for i in range(group.size):
            observations, rewards, terminateds, truncateds, infos = out
            observations.append({a: views[a][i] for a in self.learned})
            if i in restarted:
                self._view(group.offset + i, group, i)
                rewards.append(dict.fromkeys(self.learned, 0.0))
                terminateds.append({**dict.fromkeys(self.learned, False), "__all__": False})
                truncateds.append({**dict.fromkeys(self.learned, False), "__all__": False})
                infos.append(self._reset_info(group, i))
                continue
            scale = group.reward_scale
            rewards.append({a: rewards_of[a][i] * scale[a] if a in scale else rewards_of[a][i] for a in self.learned})
            all_terminated = terminated_of[focal][i]
            terminateds.append({**{a: terminated_of[a][i] for a in self.learned}, "__all__": all_terminated})
            truncateds.append({**{a: truncated_of[a][i] for a in self.learned},
                               "__all__": ended_list[i] and not all_terminated})
            seat_infos = {}
            for a in self.learned:
                seat_info: dict[str, Any] = {"reward_terms": {k: v[i] for k, v in terms_of[a].items()},
                                             "scenario_hash": group.config.content_hash}
                if ended_list[i] and episode[a] is not None:
                    seat_info["episode"] = {k: float(v[i]) for k, v in episode[a].items()}
                seat_infos[a] = seat_info
            infos.append(seat_infos)
        return out

    def close_extras(self, **kwargs: Any) -> None:
        for group in getattr(self, "groups", ()):  # (a refused config never built them)
            group.core.close()


class BatchedEnvRunner(MultiAgentEnvRunner):
    """RLlib's multi-agent env runner sampling from a :class:`BatchedFocalEnv` (``make_env`` replaced).

    The stock runner logs six metric values per sub-env step (its env, agent and module step
    counts); with the env batched they are the larger part of a step's cost. Here they are counted
    and logged once per :meth:`sample` call, the same sums."""

    def make_env(self) -> None:
        if self.env is not None:
            self.env.close()
        self.env = BatchedFocalEnv(self.config.env_config, self.config.num_envs_per_env_runner)
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
