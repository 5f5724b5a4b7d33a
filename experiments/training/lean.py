"""The lean sampler and update (``--sampler lean``): learning writes arrays, not episodes.

RLlib's stock env runner keeps one episode object per arena and runs its connectors on every
step; at the batched core's speed they are most of a training step. Here:

* :class:`LeanEnvRunner` (RLlib's multi-agent runner: its module, weights, state and checkpoints
  stay RLlib's) samples ``T`` steps of the :class:`~experiments.training.batched_env.BatchedFocalEnv`
  into preallocated ``[T, N]`` arrays per learning seat (:class:`Rollout`): the module's view,
  the actions, their log-probabilities and distribution inputs, rewards and flags, and the
  observation after the last step (the bootstrap). No episode objects, no per-arena dicts.
  Episode statistics come from running sums and the core's episode totals, logged under RLlib's
  own keys and windows (``episode_return_mean``, per-agent and per-module returns, lengths,
  ``num_env_steps_sampled_lifetime``) and the run's (:func:`experiments.training.callbacks.log_episode_totals`).
* :class:`LeanPPO` (PPO with its own ``training_step``) computes values with the learner's module,
  GAE over the arrays, normalises advantages as RLlib does, and calls
  ``LearnerGroup.update(batch=...)``: RLlib's PPO Learner, unchanged, without its connector.

A recurrent module (``--use-lstm``) carries each arena's state in the runner (zero when an arena starts an
episode) and its rollout keeps the state before every row; the learner reads its rows as sequences
(:class:`Sequences`: cut where an episode starts and every ``max_seq_len`` rows), each from the state the
runner carried into it, with RLlib's ``seq_lens`` and ``loss_mask``. A league's team seats are played, per
arena and episode, by the member the run's mapping draws from the episode's seed (:meth:`LeanEnvRunner._members`);
only the learner's rows (``Rollout.mask``) are trained.

The core's NEXT_STEP autoreset makes the row after an arena's last step its reset: that row is no
transition. It is dropped from the batch and not counted as an env step, and GAE never runs across
it (the row before it is ``done``). The ending step's observation is the final one, so a truncated
episode bootstraps from ``V(final observation)`` and a terminated one from 0. Action sampling draws
from one generator seeded by the runner's seed: the same experiment file and seed give the same
weights (``tests/experiments/training/test_lean.py``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.algorithms.ppo import PPO
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner
from ray.rllib.core.columns import Columns
from ray.rllib.core.distribution.distribution import Distribution
from ray.rllib.core.distribution.torch.torch_distribution import TorchDeterministic, TorchMultiCategorical
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.metrics import (
    ALL_MODULES,
    ENV_RUNNER_RESULTS,
    ENV_RUNNER_SAMPLING_TIMER,
    EPISODE_AGENT_RETURN_MEAN,
    EPISODE_AGENT_STEPS,
    EPISODE_LEN_MAX,
    EPISODE_LEN_MEAN,
    EPISODE_LEN_MIN,
    EPISODE_MODULE_RETURN_MEAN,
    EPISODE_RETURN_MAX,
    EPISODE_RETURN_MEAN,
    EPISODE_RETURN_MIN,
    LEARNER_RESULTS,
    LEARNER_UPDATE_TIMER,
    NUM_AGENT_STEPS_SAMPLED,
    NUM_AGENT_STEPS_SAMPLED_LIFETIME,
    NUM_ENV_STEPS_SAMPLED,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    NUM_EPISODES,
    NUM_EPISODES_LIFETIME,
    NUM_MODULE_STEPS_SAMPLED,
    NUM_MODULE_STEPS_SAMPLED_LIFETIME,
    NUM_MODULE_STEPS_TRAINED_LIFETIME,
    SYNCH_WORKER_WEIGHTS_TIMER,
    TIMERS,
)
from ray.rllib.utils.minibatch_utils import MiniBatchCyclicIterator
from torch.utils._pytree import tree_leaves, tree_map

from experiments.training.batched_env import BatchedEnvRunner
from experiments.training.callbacks import foreach_sampling_runner, log_background_draw, log_episode_totals
from experiments.training.env_config import ArenaEnvConfig
from experiments.training.league import EPISODE_SEED as LEAGUE_SEED
from experiments.training.league import SEAT_RETURN_KEY
from experiments.training.rl_modules import recurrent_start
from experiments.training.scripted import AGENT_T, ENV_INDEX, ScriptedRLModule
from experiments.training.scripted import EPISODE_SEED as SCRIPTED_SEED

DRAWN_SCENARIOS = 16  # scenarios per sample of a run over more (LeanEnvRunner.draw)
DRAW_STREAM = 0x5CE7  # the runner's stream of scenario draws and episode seeds, beside its action sampling


@dataclass
class SeededEpisode:
    """What a league's mapping function reads of an episode: its seed (experiments.training.league.episode_seed)."""

    seed: int

    @property
    def custom_data(self) -> dict[str, int]:
        return {LEAGUE_SEED: self.seed}


@dataclass
class Rollout:
    """``T`` steps of ``N`` arenas for one learning seat (numpy, rows ``[t, i]``)."""

    seat: str
    module: str
    obs: np.ndarray  # [T + 1, N, D]: the module's view before each step, then after the last (the bootstrap)
    actions: np.ndarray  # [T, N, k] int64 codes
    logp: np.ndarray  # [T, N] float32
    dist_inputs: np.ndarray  # [T, N, sum(nvec)] float32
    rewards: np.ndarray  # [T, N] float32 (scaled as training scales them)
    terminated: np.ndarray  # [T, N] bool
    truncated: np.ndarray  # [T, N] bool
    valid: np.ndarray  # [T, N] bool: a transition (False: the row is an arena's NEXT_STEP reset)
    state: Any = None  # a recurrent module's: its state before each row, a tree of [T + 1, N, ...] arrays
    mask: np.ndarray | None = None  # [T, N] bool: the rows its module played (a league seat's); None: every row

    def trained(self) -> np.ndarray:
        """``[T, N]``: the rows the module learns from (its transitions)."""
        return self.valid if self.mask is None else self.valid & self.mask

    def head(self, steps: int) -> Rollout:
        """The first ``steps`` rows (and the observation after them)."""
        def cut(rows: Any, extra: int = 0) -> Any:
            return None if rows is None else tree_map(lambda a: a[: steps + extra], rows)

        return Rollout(self.seat, self.module, cut(self.obs, 1), cut(self.actions), cut(self.logp),
                       cut(self.dist_inputs), cut(self.rewards), cut(self.terminated), cut(self.truncated),
                       cut(self.valid), cut(self.state, 1), cut(self.mask))


class PaddedMultiCategorical:
    """Every sub-action's categorical of a ``MultiDiscrete`` space at once: the logits padded to
    ``[B, k, n_max]`` (``-inf`` beyond a sub-space's size). Samples and log-probabilities equal
    RLlib's ``TorchPaddedMultiCategorical`` (k ``Categorical`` objects) without building k objects."""

    def __init__(self, nvec: Sequence[int]) -> None:
        self.nvec = [int(n) for n in nvec]
        self.k, self.n_max = len(self.nvec), max(self.nvec)
        self.uniform = len(set(self.nvec)) == 1
        # where each flat logit goes in the padded [k * n_max] layout
        self.index = torch.tensor([j * self.n_max + c for j, n in enumerate(self.nvec) for c in range(n)])

    def log_probs(self, logits: torch.Tensor) -> torch.Tensor:
        """``[..., sum(nvec)]`` logits -> ``[..., k, n_max]`` log-probabilities (a recurrent module's
        training batch is ``[B, T, ...]``)."""
        lead = logits.shape[:-1]
        if self.uniform:
            padded = logits.reshape(*lead, self.k, self.n_max)
        else:
            padded = logits.new_full((*lead, self.k * self.n_max), -math.inf)
            padded[..., self.index] = logits
            padded = padded.reshape(*lead, self.k, self.n_max)
        return torch.log_softmax(padded, dim=-1)

    def sample(self, logits: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Actions ``[B, k]`` (Gumbel-max from ``generator``) and their log-probabilities ``[B]``."""
        logp = self.log_probs(logits)
        uniform = torch.rand(logp.shape, generator=generator).clamp_(1e-20, 1.0)
        actions = torch.argmax(logp - torch.log(-torch.log(uniform)), dim=-1)
        return actions, self.logp(logp, actions)

    @staticmethod
    def logp(log_probs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return log_probs.gather(-1, actions.unsqueeze(-1)).squeeze(-1).sum(-1)


class LeanMultiCategorical(TorchMultiCategorical):
    """RLlib's multi-categorical as one ``[B, k, n_max]`` tensor (:class:`PaddedMultiCategorical`) instead of k
    ``Categorical`` objects: the same log-probabilities, entropy and KL (``tests/experiments/training/test_lean.py``),
    about a third of PPO's loss time less. What :class:`LeanPPOModule` trains and acts with."""

    def __init__(self, logits: torch.Tensor, input_lens: Sequence[int]) -> None:
        Distribution.__init__(self)
        self.logits, self.padded = logits, PaddedMultiCategorical(input_lens)
        self.log_probs = self.padded.log_probs(logits)
        # the padding of a sub-space smaller than the largest (-inf) as 0 for the sums below: 0 * -inf is nan,
        # and a torch.where that drops it in the forward pass still sends nan back through the unselected branch
        self.finite_log_probs = self.log_probs.masked_fill(self.log_probs == -math.inf, 0.0)

    @classmethod
    def from_logits(cls, logits: torch.Tensor, input_lens: Sequence[int] = (),  # type: ignore[override]
                    temperatures: Any = None, **kwargs: Any) -> LeanMultiCategorical:
        if temperatures and any(t != 1.0 for t in temperatures):
            raise ValueError("LeanMultiCategorical has no temperatures")
        return cls(logits, input_lens)

    def _plogp(self, log_probs: torch.Tensor) -> torch.Tensor:
        """``p * log_probs`` summed over every sub-action (padding: p = 0, ``log_probs`` finite there)."""
        return (self.log_probs.exp() * log_probs).sum(dim=(-1, -2))

    def logp(self, value: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return PaddedMultiCategorical.logp(self.log_probs, value.long())

    def entropy(self) -> torch.Tensor:  # type: ignore[override]
        return -self._plogp(self.finite_log_probs)

    def kl(self, other: Distribution) -> torch.Tensor:  # type: ignore[override]
        assert isinstance(other, LeanMultiCategorical)
        return self._plogp(self.finite_log_probs - other.finite_log_probs)

    def sample(self) -> torch.Tensor:  # type: ignore[override]
        uniform = torch.rand(self.log_probs.shape).clamp_(1e-20, 1.0)
        return torch.argmax(self.log_probs - torch.log(-torch.log(uniform)), dim=-1)

    def to_deterministic(self) -> TorchDeterministic:
        return TorchDeterministic(loc=torch.argmax(self.log_probs, dim=-1))


class LeanPPOModule(DefaultPPOTorchRLModule):
    """RLlib's default PPO module (its encoder, heads, checkpoints and export unchanged) acting and training with
    :class:`LeanMultiCategorical` over its ``MultiDiscrete`` space."""

    def setup(self) -> None:
        super().setup()
        if isinstance(self.action_space, gym.spaces.MultiDiscrete):
            self.action_dist_cls = LeanMultiCategorical.get_partial_dist_cls(  # type: ignore[misc]
                input_lens=[int(n) for n in self.action_space.nvec])


class LeanEnvRunner(BatchedEnvRunner):
    """RLlib's multi-agent env runner whose :meth:`sample` fills :class:`Rollout` arrays (module docstring)."""

    env: Any  # a BatchedFocalEnv once make_env ran (RLlib types it as an optional vector env)
    module: Any
    metrics: Any
    config: Any

    # A run over more scenarios than this (the universal allocator's family split: 200) plays this many of them
    # per sample, drawn anew every sample, each arena one whole episode: the core's cost is per scenario and call.
    draw = DRAWN_SCENARIOS
    lean = True

    def make_env(self) -> None:
        super().make_env()
        self._lean_obs: dict[str, np.ndarray] | None = None  # each seat's view before the next step
        self._lean_restarting: np.ndarray | None = None  # arenas whose next row is their NEXT_STEP reset
        self._lean_state: dict[str, Any] = {}  # a recurrent seat's state before its next step (numpy [N, ...] tree)
        # a league's: each arena's episode seed the member table was drawn for, and who plays each team seat there
        self._member_seeds = np.full(self.env.num_envs, -1, dtype=np.int64)
        self._member_table: dict[str, np.ndarray] = {}
        seat_modules = {seat: str(self.config.policy_mapping_fn(seat, None)) for seat in self.env.learned}
        self._seat_module = seat_modules
        spaces = self.env.single_action_spaces
        self._dists = {seat: PaddedMultiCategorical(spaces[seat].nvec) for seat in self.env.learned}
        self._generator = torch.Generator().manual_seed(int(self._seed or 0))
        self._draws = np.random.default_rng(np.random.SeedSequence([int(self._seed or 0), DRAW_STREAM]))
        n = self.env.num_envs
        self._episode_return = {seat: np.zeros(n) for seat in self.env.learned}
        self._episode_length = np.zeros(n, dtype=np.int64)
        self._order_episodes()

    def _order_episodes(self) -> None:
        # the order finished episodes are logged in: the scenarios' arenas interleaved, so a smoothing window
        # of the last episodes holds every scenario in its share (in arena order it would hold the last one's)
        self._log_order = np.concatenate([(np.arange(g.size) + 0.5) / g.size for g in self.env.groups])

    def steps_per_sample(self) -> int:
        """``T``: the steps of every arena one :meth:`sample` takes, so the runners together fill a train batch
        (a drawn run's: its scenarios' longest episode)."""
        if self.env.draws:
            return max(g.config.max_ticks for g in self.env.groups)
        runners = max(1, self.config.num_env_runners)
        per_runner = self.config.train_batch_size_per_learner / runners
        return max(1, math.ceil(per_runner / self.env.num_envs))

    def sample(self, **kwargs: Any) -> list[Rollout]:  # type: ignore[override]
        env, seats, n = self.env, self.env.learned, self.env.num_envs
        once = bool(env.draws)  # every arena plays one whole episode of a fresh draw of scenarios
        restart = once or env.switched  # a curriculum's switch: every arena starts an episode of the new stage
        if once:
            env.redraw(self._draws)
        if restart:
            env.switched = False
            self._order_episodes()
            self._lean_state = {}
            self._lean_obs = env.reset_arrays([int(s) for s in self._draws.integers(0, 2**31 - 1, n)])
            self._lean_restarting = np.zeros(n, dtype=bool)
            for seat in seats:
                self._episode_return[seat][:] = 0.0
            self._episode_length[:] = 0
        elif self._lean_obs is None:
            self._lean_obs = env.reset_arrays(self._seed)
            self._lean_restarting = np.zeros(n, dtype=bool)
        assert self._lean_restarting is not None
        recurrent = {seat for seat in seats if self.module[self._seat_module[seat]].is_stateful()}
        if recurrent and once:
            raise ValueError("a recurrent module learns on a run of fixed scenarios, not a drawn family's")
        for seat in recurrent - set(self._lean_state):  # a recurrent seat's state before the next step
            self._lean_state[seat] = tree_map(lambda s: s.numpy(), recurrent_start(self.module[self._seat_module[seat]], n))
        steps = self.steps_per_sample()
        width = {seat: self._lean_obs[seat].shape[1] for seat in seats}
        out = {seat: Rollout(
            seat, self._seat_module[seat],
            obs=np.empty((steps + 1, n, width[seat]), np.float32),
            actions=np.empty((steps, n, self._dists[seat].k), np.int64),
            logp=np.empty((steps, n), np.float32),
            dist_inputs=np.empty((steps, n, sum(self._dists[seat].nvec)), np.float32),
            rewards=np.empty((steps, n), np.float32),
            terminated=np.empty((steps, n), bool), truncated=np.empty((steps, n), bool),
            valid=np.empty((steps, n), bool),
            state=tree_map(lambda s: np.empty((steps + 1, *s.shape), s.dtype), self._lean_state[seat])
            if seat in recurrent else None) for seat in seats}
        counts = {"env": 0, "episodes": 0}
        done: list[dict[str, Any]] = []  # the sample's finished episodes, in the order they are logged
        finished = np.zeros(n, dtype=bool)  # once: arenas whose episode of this sample has ended
        clock = time.perf_counter()
        used = steps
        league = ArenaEnvConfig.of(self.config.env_config).league is not None
        if league:
            if recurrent:
                raise ValueError("a league's team module is not recurrent")
            for rollout in out.values():
                rollout.mask = np.empty((steps, n), bool)
        for t in range(steps):
            codes: dict[str, np.ndarray] = {}
            members = self._members() if league else {}
            with torch.no_grad():
                for seat in seats:
                    rollout, obs = out[seat], self._lean_obs[seat]
                    rollout.obs[t] = obs
                    module = self.module[rollout.module]
                    if seat in members:  # a league seat: each arena's member of this episode acts in it
                        codes[seat] = rollout.actions[t] = self._act_members(seat, members[seat], rollout, t)
                        continue
                    if seat in recurrent:  # one step of one sequence per arena, from the state it carries
                        state = self._lean_state[seat]
                        tree_map(lambda row, s, t=t: row.__setitem__(t, s), rollout.state, state)
                        result = module.forward_exploration({Columns.OBS: torch.from_numpy(obs[:, None]),
                                                             Columns.STATE_IN: tree_map(torch.from_numpy, state)})
                        logits = result[Columns.ACTION_DIST_INPUTS][:, 0]
                        # an arena restarting on this step begins its next episode from the initial (zero) state
                        fresh = self._lean_restarting.reshape(-1, *([1] * (next(iter(tree_leaves(state))).ndim - 1)))
                        self._lean_state[seat] = tree_map(
                            lambda s, fresh=fresh: np.where(fresh, 0.0, s.numpy()).astype(np.float32),
                            result[Columns.STATE_OUT])
                    else:
                        logits = module.forward_exploration({Columns.OBS: torch.from_numpy(obs)})[
                            Columns.ACTION_DIST_INPUTS]
                    actions, logp = self._dists[seat].sample(logits, self._generator)
                    codes[seat] = rollout.actions[t] = actions.numpy()
                    rollout.logp[t], rollout.dist_inputs[t] = logp.numpy(), logits.numpy()
            # a drawn run's scenario whose arenas have all played their episode is not stepped again
            step = env.step_arrays(codes, [bool(finished[g.rows].all()) for g in env.groups] if once else None)
            valid = ~self._lean_restarting & ~finished
            focal = seats[0]
            ended = (step.terminated[focal] | step.truncated[focal]) & valid
            for seat in seats:
                rollout = out[seat]
                rollout.rewards[t] = step.reward[seat]
                rollout.terminated[t], rollout.truncated[t] = step.terminated[seat], step.truncated[seat]
                rollout.valid[t] = valid
                self._episode_return[seat] += np.where(valid, step.reward[seat], 0.0)
            self._episode_length += valid
            counts["env"] += int(valid.sum())
            if ended.any():
                counts["episodes"] += int(ended.sum())
                self._finish_episodes(np.flatnonzero(ended), step.infos, step.entries, done)
            self._lean_obs, self._lean_restarting = step.obs, step.terminated[focal] | step.truncated[focal]
            if once:
                finished |= ended
                if finished.all():
                    used = t + 1
                    break
        for seat in seats:
            out[seat].obs[used] = self._lean_obs[seat]
            if seat in recurrent:
                tree_map(lambda row, s: row.__setitem__(used, s), out[seat].state, self._lean_state[seat])
        if used < steps:
            out = {seat: r.head(used) for seat, r in out.items()}
        self._log_episodes(done)
        self._log_counts(counts["env"], counts["episodes"], {seat: int(out[seat].valid.sum()) for seat in seats})
        self.metrics.log_value((TIMERS, "lean_sample_s"), time.perf_counter() - clock, reduce="mean")
        return list(out.values())

    def _members(self) -> dict[str, np.ndarray]:
        """A league's team seats: who plays each in each arena's current episode (the run's mapping function of the
        episode's seed, asked again only when an arena's episode changes)."""
        seeds = np.asarray(self.env.focal.episode_seeds, dtype=np.int64)
        if not self._member_table:
            self._member_table = {seat: np.empty(len(seeds), dtype=object) for seat in self.env.learned}
        for i in np.flatnonzero(seeds != self._member_seeds).tolist():
            episode = SeededEpisode(int(seeds[i]))
            for seat, table in self._member_table.items():
                table[i] = str(self.config.policy_mapping_fn(seat, episode))
        self._member_seeds = seeds
        return self._member_table

    def _act_members(self, seat: str, members: np.ndarray, rollout: Rollout, t: int) -> np.ndarray:
        """Row ``t`` of a league seat: each member acts in the arenas it plays (the learner and its snapshots sample
        from their modules; a scripted member's module plays its policy, seeded by the episode as everywhere), and
        the rollout keeps the learner's rows (``mask``) with their log-probabilities."""
        assert self._lean_obs is not None
        obs = self._lean_obs[seat]
        codes = np.zeros((len(obs), self._dists[seat].k), np.int64)
        seeds = self._member_seeds
        for member in sorted(set(members.tolist())):
            rows = np.flatnonzero(members == member)
            module = self.module[member]
            if isinstance(module, ScriptedRLModule):  # its policy per (arena, seat), reset at an episode's first row
                batch = {Columns.OBS: obs[rows], ENV_INDEX: rows, AGENT_T: self._episode_length[rows],
                         SCRIPTED_SEED: seeds[rows]}
                codes[rows] = module.forward_exploration(batch)[Columns.ACTIONS].numpy()
                continue
            logits = module.forward_exploration({Columns.OBS: torch.from_numpy(obs[rows])})[Columns.ACTION_DIST_INPUTS]
            actions, logp = self._dists[seat].sample(logits, self._generator)
            codes[rows] = actions.numpy()
            if member == rollout.module:
                rollout.logp[t, rows], rollout.dist_inputs[t, rows] = logp.numpy(), logits.numpy()
        assert rollout.mask is not None
        rollout.mask[t] = members == rollout.module
        return codes

    def _finish_episodes(self, arenas: np.ndarray, infos: Mapping[str, Mapping[str, Any]], entries: np.ndarray,
                         done: list[dict[str, Any]]) -> None:
        """Append the episodes ``arenas`` just finished to ``done`` (scenarios interleaved) and clear their sums."""
        seats = self.env.learned
        totals = infos.get("allocator", {}).get("episode")
        table = self._member_table  # a league's: who played each seat
        for i in arenas[np.argsort(self._log_order[arenas], kind="stable")].tolist():
            done.append({"agents": {seat: float(self._episode_return[seat][i]) for seat in seats},
                         "length": int(self._episode_length[i]), "entry": int(entries[i]),
                         "hash": self.env.scenario_hashes[i], "totals": totals, "row": i,
                         "members": {seat: table[seat][i] for seat in seats} if table else None})
        for seat in seats:
            self._episode_return[seat][arenas] = 0.0
        self._episode_length[arenas] = 0

    def _log_episodes(self, done: list[dict[str, Any]]) -> None:
        """RLlib's episode metrics (its keys and windows) and the run's episode totals of the sample's finished
        episodes. A windowed mean, min or max keeps only the last ``window`` values logged, so only the last
        ``window`` episodes are logged: the same reduced metrics, without a metrics call per episode."""
        win = max(1, math.ceil(self.config.metrics_num_episodes_for_smoothing / (self.config.num_env_runners or 1)))
        seats, log = self.env.learned, self.metrics.log_dict
        cfg = ArenaEnvConfig.of(self.config.env_config)
        for episode in done[-win:]:
            agents, length = episode["agents"], episode["length"]
            members = episode["members"] or self._seat_module
            modules: dict[str, float] = {}
            for seat, value in agents.items():
                modules[members[seat]] = modules.get(members[seat], 0.0) + value
            if episode["members"]:  # a league's snapshot rule reads each member's return per seat it played
                for seat, value in agents.items():
                    self.metrics.log_value((SEAT_RETURN_KEY, members[seat]), value, reduce="mean",
                                           window=self.config.metrics_num_episodes_for_smoothing)
            total = sum(agents.values())
            log({EPISODE_LEN_MEAN: length, EPISODE_RETURN_MEAN: total, EPISODE_AGENT_RETURN_MEAN: agents,
                 EPISODE_AGENT_STEPS: dict.fromkeys(seats, length), EPISODE_MODULE_RETURN_MEAN: modules}, window=win)
            log({EPISODE_LEN_MIN: length, EPISODE_RETURN_MIN: total}, reduce="min", window=win)
            log({EPISODE_LEN_MAX: length, EPISODE_RETURN_MAX: total}, reduce="max", window=win)
            if episode["totals"] is not None:
                totals = {k: float(v[episode["row"]]) for k, v in episode["totals"].items()}
                log_episode_totals(self.metrics, totals, episode["hash"], cfg, win)
            if cfg.background_mix is not None or cfg.background_mixture is not None:
                log_background_draw(self.metrics, cfg if cfg.background_mixture else None, episode["entry"], win)

    def _log_counts(self, env_steps: int, episodes: int, agent_steps: Mapping[str, int]) -> None:
        log = self.metrics.log_value
        log(NUM_ENV_STEPS_SAMPLED, env_steps, reduce="sum")
        log(NUM_ENV_STEPS_SAMPLED_LIFETIME, env_steps, reduce="lifetime_sum", with_throughput=True)
        log(NUM_EPISODES, episodes, reduce="sum")
        log(NUM_EPISODES_LIFETIME, episodes, reduce="lifetime_sum")
        for seat, value in agent_steps.items():
            module = self._seat_module[seat]
            log((NUM_AGENT_STEPS_SAMPLED, seat), value, reduce="sum")
            log((NUM_AGENT_STEPS_SAMPLED_LIFETIME, seat), value, reduce="lifetime_sum")
            log((NUM_MODULE_STEPS_SAMPLED, module), value, reduce="sum")
            log((NUM_MODULE_STEPS_SAMPLED_LIFETIME, module), value, reduce="lifetime_sum")


def gae(rewards: np.ndarray, values: np.ndarray, terminated: np.ndarray, truncated: np.ndarray, gamma: float,
        lam: float) -> np.ndarray:
    """Advantages ``[T, N]`` from rewards and flags ``[T, N]`` and values ``[T + 1, N]`` (row ``T``: the bootstrap).

    A terminated step bootstraps from 0, a truncated one from the value of its (final) next observation;
    nothing runs back across a step that ended an episode (the next row is another episode's)."""
    steps = rewards.shape[0]
    advantages = np.zeros_like(rewards, dtype=np.float32)
    carry = np.zeros(rewards.shape[1], dtype=np.float32)
    keep = (~terminated).astype(np.float32)
    cont = (~(terminated | truncated)).astype(np.float32)
    for t in range(steps - 1, -1, -1):
        delta = rewards[t] + gamma * values[t + 1] * keep[t] - values[t]
        carry = delta + gamma * lam * cont[t] * carry
        advantages[t] = carry
    return advantages


def values_of(algorithm: Any, module: str, obs: np.ndarray) -> np.ndarray:
    """The learner's value estimates of ``obs`` (``[..., D]``) under ``module`` (no gradient)."""

    def compute(learner: Any) -> np.ndarray:
        with torch.no_grad():
            flat = torch.from_numpy(obs.reshape(-1, obs.shape[-1]))
            return learner.module[module].compute_values({Columns.OBS: flat}).numpy()

    first = next(iter(algorithm.learner_group.foreach_learner(compute)))
    return first.get().reshape(obs.shape[:-1])


@dataclass
class Sequences:
    """A recurrent module's rows cut into sequences as its learner reads them: each arena's rows split where an
    episode starts and every ``max_seq_len`` rows within one, zero-padded to ``[B, max_seq_len]``."""

    arena: np.ndarray  # [B, L] the arena of each entry (padding: 0)
    row: np.ndarray  # [B, L] its row (padding: 0)
    mask: np.ndarray  # [B, L] bool: an entry, not padding
    lengths: np.ndarray  # [B] each sequence's entries

    @classmethod
    def cut(cls, starts: np.ndarray, max_len: int) -> Sequences:
        """``starts`` ``[R, N]``: the rows that begin an episode (row 0 begins a sequence in every arena)."""
        rows, arenas = starts.shape
        begins = starts.T.copy()
        begins[:, 0] = True
        index = np.arange(rows)
        since = index - np.maximum.accumulate(np.where(begins, index, 0), axis=1)  # rows since the episode began
        first = (begins | (since % max_len == 0)).ravel()  # arena-major: arena i's rows are i * R .. i * R + R - 1
        which = np.cumsum(first) - 1
        offset = np.arange(first.size) - np.flatnonzero(first)[which]
        flat = np.full((int(first.sum()), max_len), -1, dtype=np.int64)
        flat[which, offset] = np.arange(first.size)
        mask = flat >= 0
        arena, row = np.divmod(np.where(mask, flat, 0), rows)
        return cls(arena, row, mask, mask.sum(axis=1))

    def gather(self, rows: np.ndarray) -> np.ndarray:
        """``[R, N, ...]`` -> ``[B, L, ...]`` (padding: 0)."""
        out = rows[self.row, self.arena]
        return np.where(self.mask.reshape(*self.mask.shape, *([1] * (out.ndim - 2))), out, 0).astype(rows.dtype)

    def starts(self, rows: np.ndarray) -> np.ndarray:
        """``[R, N, ...]`` -> each sequence's first row ``[B, ...]``."""
        return rows[self.row[:, 0], self.arena[:, 0]]

    def scatter(self, values: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
        """``[B, L]`` -> ``[R, N]`` (every row is in one sequence)."""
        out = np.zeros(shape, dtype=values.dtype)
        out[self.row[self.mask], self.arena[self.mask]] = values[self.mask]
        return out


def recurrent_values(algorithm: Any, module: str, r: Rollout, cut: Sequences) -> np.ndarray:
    """The learner's values ``[T + 1, N]`` of a recurrent module's rollout: every sequence from the state the
    runner carried into its first row."""
    batch = {Columns.OBS: cut.gather(r.obs), Columns.STATE_IN: tree_map(cut.starts, r.state)}

    def compute(learner: Any) -> np.ndarray:
        with torch.no_grad():
            return learner.module[module].compute_values(tree_map(torch.from_numpy, batch)).numpy()

    first = next(iter(algorithm.learner_group.foreach_learner(compute)))
    return cut.scatter(first.get(), r.obs.shape[:2])


def recurrent_rows(algorithm: Any, r: Rollout) -> dict[str, Any]:
    """A recurrent module's training rows: its sequences ``[B, L, ...]`` (those with a transition), each with
    the state it starts from, ``seq_lens`` and a ``loss_mask`` of the transitions (module docstring)."""
    cfg = algorithm.config
    starts = np.zeros(r.obs.shape[:2], dtype=bool)
    starts[1:] = ~r.valid  # the row after an arena's reset row is its next episode's first
    max_len = int(algorithm.get_module(r.module).model_config["max_seq_len"])
    cut = Sequences.cut(starts, max_len)
    values = recurrent_values(algorithm, r.module, r, cut)
    advantages = gae(r.rewards, values, r.terminated, r.truncated, cfg.gamma, cfg.lambda_)

    def rows(data: np.ndarray) -> np.ndarray:  # [T, N, ...] plus the bootstrap row T (no transition) -> [B, L, ...]
        return cut.gather(np.concatenate([data, np.zeros_like(data[:1])]))

    loss_mask = rows(r.trained()) & cut.mask
    keep = loss_mask.any(axis=1)
    out = {Columns.OBS: cut.gather(r.obs), Columns.ACTIONS: rows(r.actions), Columns.ACTION_LOGP: rows(r.logp),
           Columns.ACTION_DIST_INPUTS: rows(r.dist_inputs), "advantages": rows(advantages),
           "value_targets": rows((advantages + values[:-1]).astype(np.float32)), Columns.LOSS_MASK: loss_mask,
           Columns.SEQ_LENS: cut.lengths}
    out = {key: value[keep] for key, value in out.items()}
    out[Columns.STATE_IN] = tree_map(lambda s: cut.starts(s)[keep], r.state)
    return out


def normalised(advantages: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Advantages normalised as RLlib's learner connector does, ``(a - mean) / max(1e-4, std)`` over the real
    rows (``mask``: a padded batch's; the padding stays 0)."""
    real = advantages if mask is None else advantages[mask]
    out = (advantages - real.mean()) / max(1e-4, float(real.std()))
    return (out if mask is None else np.where(mask, out, 0.0)).astype(np.float32)


def lean_batch(algorithm: Any, rollouts: Sequence[Rollout]) -> MultiAgentBatch:
    """The learner's batch from every runner's rollouts: values, GAE, the valid rows only, advantages
    normalised per module as RLlib's learner connector does (``(a - mean) / max(1e-4, std)``)."""
    cfg = algorithm.config
    columns: dict[str, dict[str, list[np.ndarray]]] = {}
    first = rollouts[0].seat  # every seat of an arena steps together: count one seat's rows
    env_steps = sum(int(r.valid.sum()) for r in rollouts if r.seat == first)
    recurrent: dict[str, list[dict[str, Any]]] = {}
    for r in rollouts:
        if r.state is not None:
            recurrent.setdefault(r.module, []).append(recurrent_rows(algorithm, r))
            continue
        # values where GAE reads them: a transition's row and the row after it (its bootstrap); a drawn run's
        # arenas idle after their one episode, and no row there needs a value
        trained = r.trained()
        needed = np.zeros(r.obs.shape[:2], dtype=bool)
        needed[:-1] |= trained
        needed[1:] |= trained
        values = np.zeros(r.obs.shape[:2], dtype=np.float32)
        values[needed] = values_of(algorithm, r.module, r.obs[needed])
        advantages = gae(r.rewards, values, r.terminated, r.truncated, cfg.gamma, cfg.lambda_)
        keep = trained
        rows = {Columns.OBS: r.obs[:-1][keep], Columns.ACTIONS: r.actions[keep],
                Columns.ACTION_LOGP: r.logp[keep], Columns.ACTION_DIST_INPUTS: r.dist_inputs[keep],
                "advantages": advantages[keep], "value_targets": (advantages + values[:-1])[keep].astype(np.float32)}
        for key, value in rows.items():
            columns.setdefault(r.module, {}).setdefault(key, []).append(value)
    batches = {}
    for module, parts in columns.items():
        data = {key: np.concatenate(values) for key, values in parts.items()}
        data["advantages"] = normalised(data["advantages"])
        batches[module] = SampleBatch(data)
    for module, pieces in recurrent.items():
        data = {key: np.concatenate([p[key] for p in pieces]) for key in pieces[0] if key != Columns.STATE_IN}
        data[Columns.STATE_IN] = tree_map(lambda *s: np.concatenate(s), *[p[Columns.STATE_IN] for p in pieces])
        data["advantages"] = normalised(data["advantages"], data[Columns.LOSS_MASK])
        batches[module] = SampleBatch(data, _zero_padded=True, _max_seq_len=data[Columns.OBS].shape[1])
    if recurrent:  # as tensors: the learner rebuilds a numpy batch without its zero-padding (which shuffling reads)
        for module, batch in batches.items():
            batches[module] = SampleBatch(tree_map(torch.from_numpy, dict(batch)), _zero_padded=batch.zero_padded,
                                          _max_seq_len=batch.max_seq_len)
    return MultiAgentBatch(batches, env_steps=env_steps)


class EqualEpochsIterator:
    """Minibatches in which every module goes through its rows exactly ``num_epochs`` times, in the same number
    of steps: the largest module's minibatches hold ``minibatch_size`` rows, a smaller module's proportionally
    fewer. RLlib's ``MiniBatchCyclicIterator`` gives every module ``minibatch_size`` rows a step and runs until
    the largest has its epochs, so with teams sharing a module (three seats' rows) the allocator's and the
    broker's modules went through their rows three times as often as asked, at that cost. Every module is in
    every step: RLlib's gradient step reads a gradient for every module's parameters."""

    def __init__(self, batch: MultiAgentBatch, num_epochs: int, minibatch_size: int, shuffle: bool) -> None:
        self.batch, self.num_epochs, self.shuffle = batch, num_epochs, shuffle
        self.steps = max(math.ceil(len(b) / minibatch_size) for b in batch.policy_batches.values())
        if any(len(b) < self.steps for b in batch.policy_batches.values()):
            raise ValueError(f"every module needs at least {self.steps} rows for {self.steps} minibatches a "
                             f"epoch, got {({m: len(b) for m, b in batch.policy_batches.items()})}")

    def __iter__(self) -> Iterator[MultiAgentBatch]:
        modules = self.batch.policy_batches
        bounds = {m: np.linspace(0, len(b), self.steps + 1).round().astype(int) for m, b in modules.items()}
        for _ in range(self.num_epochs):
            if self.shuffle:
                for b in modules.values():
                    b.shuffle()
            for j in range(self.steps):
                yield MultiAgentBatch({m: b.slice(int(bounds[m][j]), int(bounds[m][j + 1]))
                                       for m, b in modules.items()}, len(self.batch))


class LeanPPOLearner(PPOTorchLearner):
    """RLlib's PPO learner whose minibatches over several modules are :class:`EqualEpochsIterator`'s."""

    def _create_iterator_if_necessary(self, **kwargs: Any) -> Iterable:
        batch_iter = super()._create_iterator_if_necessary(**kwargs)
        if isinstance(batch_iter, MiniBatchCyclicIterator) and len(batch_iter._batch.policy_batches) > 1:
            return EqualEpochsIterator(batch_iter._batch, batch_iter._num_epochs, batch_iter._minibatch_size,
                                       batch_iter._shuffle_batch_per_epoch)
        return batch_iter


def _sample_and_metrics(runner: Any) -> tuple[list[Rollout], Any]:
    return runner.sample(), runner.get_metrics()


class LeanPPO(PPO):
    """PPO trained from :class:`LeanEnvRunner`'s arrays (module docstring): RLlib's learner, no episodes.

    ``overlap`` (:class:`OverlappedLeanPPO`, ``--overlap``): with remote runners, each runner samples the next
    batch while the driver updates on this one, so the two cores work at once; the next batch is then sampled
    with the weights from before this update (one update behind: PPO's ratio starts off 1 at the first epoch, as
    in IMPALA-style asynchronous samplers). Without remote runners there is nothing to overlap."""

    overlap = False
    env_runner_group: Any  # RLlib types these optional; a built algorithm has them
    learner_group: Any
    metrics: Any
    config: Any

    def training_step(self) -> None:
        group = self.env_runner_group
        with self.metrics.log_time((TIMERS, ENV_RUNNER_SAMPLING_TIMER)):
            if self.overlap and group.num_remote_env_runners() > 0:
                parts, metrics = self._overlapped_samples()
            else:
                parts = foreach_sampling_runner(self, lambda runner: runner.sample())
                metrics = group.foreach_env_runner(lambda runner: runner.get_metrics(),
                                                   local_env_runner=group.num_remote_env_runners() == 0)
            rollouts = [r for part in parts for r in part]
            self.metrics.aggregate(metrics, key=ENV_RUNNER_RESULTS)
        with self.metrics.log_time((TIMERS, LEARNER_UPDATE_TIMER)):
            batch = lean_batch(self, rollouts)
            learner_results = self.learner_group.update(
                batch=batch,
                timesteps={
                    NUM_ENV_STEPS_SAMPLED_LIFETIME: self.metrics.peek((ENV_RUNNER_RESULTS,
                                                                       NUM_ENV_STEPS_SAMPLED_LIFETIME)),
                    NUM_MODULE_STEPS_TRAINED_LIFETIME: self.metrics.peek(
                        (LEARNER_RESULTS, ALL_MODULES, NUM_MODULE_STEPS_TRAINED_LIFETIME), default=0),
                },
                num_epochs=self.config.num_epochs,
                minibatch_size=self.config.minibatch_size,
                shuffle_batch_per_epoch=self.config.shuffle_batch_per_epoch,
            )
            self.metrics.aggregate(learner_results, key=LEARNER_RESULTS)
        with self.metrics.log_time((TIMERS, SYNCH_WORKER_WEIGHTS_TIMER)):
            # with overlap the remote runners take the new weights after the sample in flight (actors run in order)
            self.env_runner_group.sync_weights(from_worker_or_learner_group=self.learner_group,
                                               policies=sorted(set(learner_results[0].keys()) - {ALL_MODULES}),
                                               inference_only=True)

    def _overlapped_samples(self) -> tuple[list[list[Rollout]], list[Any]]:
        """This iteration's samples (requested during the last update, or now on the first), and the next
        iteration's requested before they are returned."""
        group = self.env_runner_group
        runners = group.num_remote_env_runners()
        if not getattr(self, "_in_flight", False):
            group.foreach_env_runner_async(_sample_and_metrics, tag="lean")
        ready: list[Any] = []
        while len(ready) < runners:
            ready += [result for _, result in group.fetch_ready_async_reqs(tags="lean", timeout_seconds=None)]
        group.foreach_env_runner_async(_sample_and_metrics, tag="lean")  # the next batch, sampled during the update
        self._in_flight = True
        return [parts for parts, _ in ready], [metrics for _, metrics in ready]


class OverlappedLeanPPO(LeanPPO):
    """:class:`LeanPPO` with sampling overlapping the update (``--overlap``)."""

    overlap = True


__all__ = ["EqualEpochsIterator", "LeanEnvRunner", "LeanMultiCategorical", "LeanPPO", "LeanPPOLearner", "LeanPPOModule", "OverlappedLeanPPO", "PaddedMultiCategorical", "Rollout", "gae", "lean_batch", "values_of"]
