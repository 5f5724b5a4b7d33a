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
* :class:`~experiments.training.lean_update.LeanPPO` (PPO with its own ``training_step``) computes values
  with the learner's module, GAE over the arrays, normalises advantages as RLlib does, and calls
  ``LearnerGroup.update(batch=...)``: RLlib's PPO Learner, unchanged, without its connector; the module
  acts with one multi-categorical tensor (:mod:`experiments.training.lean_module`).

A recurrent module (``--use-lstm``) carries each arena's state in the runner (zero when an arena starts an
episode) and its rollout keeps the state before every row; the learner reads its rows as sequences
(:class:`~experiments.training.lean_update.Sequences`: cut where an episode starts and every ``max_seq_len`` rows), each from the state the
runner carried into it, with RLlib's ``seq_lens`` and ``loss_mask``. A league's team seats are played, per
arena and episode, by the member the run's mapping draws from the episode's seed (:meth:`LeanEnvRunner._members`);
only the learner's rows (``Rollout.mask``) are trained. A seat whose module has a ``privileged`` critic
(``--critic privileged``) also keeps the core's hidden state per cell beside each row (``Rollout.privileged``:
:func:`~experiments.training.privileged.privileged_cells`), which only that critic reads.

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
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.utils.metrics import (
    EPISODE_AGENT_RETURN_MEAN,
    EPISODE_AGENT_STEPS,
    EPISODE_LEN_MAX,
    EPISODE_LEN_MEAN,
    EPISODE_LEN_MIN,
    EPISODE_MODULE_RETURN_MEAN,
    EPISODE_RETURN_MAX,
    EPISODE_RETURN_MEAN,
    EPISODE_RETURN_MIN,
    NUM_AGENT_STEPS_SAMPLED,
    NUM_AGENT_STEPS_SAMPLED_LIFETIME,
    NUM_ENV_STEPS_SAMPLED,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    NUM_EPISODES,
    NUM_EPISODES_LIFETIME,
    NUM_MODULE_STEPS_SAMPLED,
    NUM_MODULE_STEPS_SAMPLED_LIFETIME,
    TIMERS,
)
from torch.utils._pytree import tree_leaves, tree_map

from experiments.training.batched_env import BatchedEnvRunner
from experiments.training.callbacks import log_background_draw, log_episode_totals
from experiments.training.env_config import ArenaEnvConfig
from experiments.training.league import EPISODE_SEED as LEAGUE_SEED
from experiments.training.league import SEAT_RETURN_KEY
from experiments.training.lean_module import PaddedMultiCategorical
from experiments.training.rl_modules import recurrent_start
from experiments.training.scripted import AGENT_T, ENV_INDEX, ScriptedRLModule
from experiments.training.scripted import EPISODE_SEED as SCRIPTED_SEED
from policies.universal import CELLS

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
    privileged: np.ndarray | None = None  # [T, N, P] a privileged critic's per-cell inputs (--critic privileged)

    def trained(self) -> np.ndarray:
        """``[T, N]``: the rows the module learns from (its transitions)."""
        return self.valid if self.mask is None else self.valid & self.mask

    def head(self, steps: int) -> Rollout:
        """The first ``steps`` rows (and the observation after them)."""
        def cut(rows: Any, extra: int = 0) -> Any:
            return None if rows is None else tree_map(lambda a: a[: steps + extra], rows)

        return Rollout(self.seat, self.module, cut(self.obs, 1), cut(self.actions), cut(self.logp),
                       cut(self.dist_inputs), cut(self.rewards), cut(self.terminated), cut(self.truncated),
                       cut(self.valid), cut(self.state, 1), cut(self.mask), cut(self.privileged))


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
        # a privileged critic's seats: the core's hidden state per cell beside each view (never the policy's input)
        hidden = {seat: CELLS * per_cell for seat in seats
                  for per_cell in [int(getattr(self.module[self._seat_module[seat]], "n_privileged", 0))] if per_cell}
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
            if seat in recurrent else None,
            privileged=np.empty((steps, n, hidden[seat]), np.float32) if seat in hidden else None) for seat in seats}
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
            if hidden:
                truth = env.privileged_arrays()
                for seat in hidden:
                    out[seat].privileged[t] = truth  # type: ignore[index]
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


__all__ = ["LeanEnvRunner", "Rollout", "SeededEpisode"]
