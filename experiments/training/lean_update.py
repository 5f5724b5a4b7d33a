"""The lean update (``--sampler lean``): PPO trained from :class:`~experiments.training.lean.LeanEnvRunner`'s
arrays with RLlib's learner, no episodes.

:class:`LeanPPO` (PPO with its own ``training_step``) computes values with the learner's module, GAE over
the arrays (:func:`gae`: never across an episode's end; a truncated episode bootstraps from its final
observation), normalises advantages as RLlib does (:func:`normalised`), and calls
``LearnerGroup.update(batch=...)``: RLlib's PPO Learner, unchanged, without its connector. A recurrent
module's rows are read as :class:`Sequences` from the state the runner carried into them. The NEXT_STEP
reset row of an arena is no transition: it is dropped from the batch and not counted as an env step.
A module with a per-cell critic (``--critic cells``) gets one advantage per cell, the return minus each
cell's baseline (:func:`cell_advantages`), normalised over the real cells.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from ray.rllib.algorithms.ppo import PPO
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner
from ray.rllib.core.columns import Columns
from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
from ray.rllib.utils.metrics import (
    ALL_MODULES,
    ENV_RUNNER_RESULTS,
    ENV_RUNNER_SAMPLING_TIMER,
    LEARNER_RESULTS,
    LEARNER_UPDATE_TIMER,
    NUM_ENV_STEPS_SAMPLED_LIFETIME,
    NUM_MODULE_STEPS_TRAINED_LIFETIME,
    SYNCH_WORKER_WEIGHTS_TIMER,
    TIMERS,
)
from ray.rllib.utils.minibatch_utils import MiniBatchCyclicIterator
from torch.utils._pytree import tree_map

from experiments.training.callbacks import foreach_sampling_runner
from experiments.training.cell_module import PRIVILEGED
from experiments.training.lean import Rollout


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


def cell_advantages(algorithm: Any, module: str, data: Mapping[str, np.ndarray]) -> np.ndarray | None:
    """Each cell's advantage ``[rows, cells]`` of a module with a per-cell critic
    (:meth:`~experiments.training.cell_module.CellPPOModule.cell_baselines`): the return (``value_targets``)
    minus the cell's baseline, normalised over the real cells as :func:`normalised` does (padded cells 0).
    None for any other module: its advantage is the row's one."""

    def compute(learner: Any) -> tuple[np.ndarray, np.ndarray] | None:
        rl_module = learner.module[module].unwrapped()
        if getattr(rl_module, "cell_baselines", None) is None:
            return None
        batch = {key: torch.from_numpy(value) for key, value in data.items()}
        with torch.no_grad():
            baselines = rl_module.cell_baselines(batch)
            return None if baselines is None else (baselines.numpy(), rl_module.cell_mask(batch[Columns.OBS]).numpy())

    answer = next(iter(algorithm.learner_group.foreach_learner(compute))).get()
    if answer is None:
        return None
    baselines, mask = answer
    return normalised(data["value_targets"][:, None] - baselines, mask > 0.5)


def lean_batch(algorithm: Any, rollouts: Sequence[Rollout]) -> MultiAgentBatch:
    """The learner's batch from every runner's rollouts: values, GAE, the valid rows only, advantages
    normalised per module as RLlib's learner connector does (``(a - mean) / max(1e-4, std)``); a per-cell
    critic's module gets each cell's (:func:`cell_advantages`)."""
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
        if r.privileged is not None:  # a privileged critic's inputs (the policy never reads them)
            rows[PRIVILEGED] = r.privileged[keep]
        for key, value in rows.items():
            columns.setdefault(r.module, {}).setdefault(key, []).append(value)
    batches = {}
    for module, parts in columns.items():
        data = {key: np.concatenate(values) for key, values in parts.items()}
        per_cell = cell_advantages(algorithm, module, data)
        data["advantages"] = normalised(data["advantages"]) if per_cell is None else per_cell
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


__all__ = ["EqualEpochsIterator", "LeanPPO", "LeanPPOLearner", "OverlappedLeanPPO", "Sequences", "cell_advantages", "gae",
           "lean_batch", "normalised", "values_of"]
