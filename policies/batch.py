"""Policies over a batch of arenas: one seat's policy in N arenas, acting on stacked observations.

A :class:`BatchPolicy` is N copies of one per-arena :class:`~policies.base.Policy` (same
scenario, same seat) held as arrays: ``act`` takes the seat's observations of every arena,
``(N, obs_dim)``, and returns every arena's action, ``(N, act_dim)`` int64, and row *i* is
exactly the action the per-arena policy returns for row *i* after the same ``reset`` seed and
the same observations. ``reset(seeds, index)`` starts new episodes in the arenas ``index``
(all of them when ``index`` is None): a vector env that resets one finished arena in place
resets that arena's policy state only.

:class:`LoopBatchPolicy` is the reference and the fallback: N per-arena policies stepped in
a Python loop. A batched policy is held to it bit for bit by the equivalence tests; a policy
with no batched form plays through it, so every policy can act in a batch.

:class:`BatchScripted` is the base of the batched scripted policies (``policies/batch_scripted.py``,
``policies/batch_allocators.py``): built from one per-arena policy, whose parameters, layouts and
bounds it plays. ``policies.registry.batch_policy`` gives a seat's batched form, or the loop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from policies.base import Policy, ScriptedPolicy


@runtime_checkable
class BatchPolicy(Protocol):
    """One seat's policy in ``num_envs`` arenas of one scenario."""

    num_envs: int

    def reset(self, seeds: Sequence[int | None], index: np.ndarray | None = None) -> None:
        """New episodes in arenas ``index`` (every arena when None), seeded ``seeds`` (one per arena reset)."""
        ...

    def act(self, observations: np.ndarray) -> np.ndarray:
        """``(num_envs, obs_dim)`` observations -> ``(num_envs, act_dim)`` int64 actions."""
        ...


def reset_indices(num_envs: int, seeds: Sequence[int | None], index: np.ndarray | None) -> np.ndarray:
    """The arenas a ``reset(seeds, index)`` call names, checked against ``seeds``."""
    arenas = np.arange(num_envs) if index is None else np.asarray(index, dtype=np.int64).reshape(-1)
    if len(seeds) != len(arenas):
        raise ValueError(f"reset got {len(seeds)} seed(s) for {len(arenas)} arena(s); give one seed per arena reset")
    if arenas.size and (arenas.min() < 0 or arenas.max() >= num_envs):
        raise ValueError(f"reset names arena(s) outside 0..{num_envs - 1}: {arenas.tolist()}")
    return arenas


class LoopBatchPolicy:
    """N per-arena policies stepped one by one: the reference every batched policy is held to,
    and how a policy with no batched form acts in a batch."""

    def __init__(self, make: Callable[[], Policy], num_envs: int) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, got {num_envs}")
        self.num_envs = num_envs
        self.policies = [make() for _ in range(num_envs)]

    def reset(self, seeds: Sequence[int | None], index: np.ndarray | None = None) -> None:
        for i, seed in zip(reset_indices(self.num_envs, seeds, index).tolist(), seeds, strict=True):
            self.policies[i].reset(seed)

    def act(self, observations: np.ndarray) -> np.ndarray:
        return np.stack([np.asarray(p.act(o), dtype=np.int64) for p, o in zip(self.policies, observations, strict=True)])


class BatchScripted:
    """Base of the batched scripted policies: one per-arena :class:`~policies.base.ScriptedPolicy`
    (its parameters, layouts and action bounds) played in ``num_envs`` arenas as arrays.

    Subclasses implement :meth:`decide` (``(N, obs_dim)`` observations -> ``(N, act_dim)``
    actions, clipped into the space by :meth:`act`, as ``ScriptedPolicy.act`` clips) and, when
    they keep per-episode state, :meth:`clear` (those arenas' state forgotten) or, when they
    draw random numbers, :meth:`reseed`.
    """

    def __init__(self, policy: ScriptedPolicy, num_envs: int) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, got {num_envs}")
        self.policy = policy  # the per-arena form: parameters, layouts, bounds
        self.num_envs = num_envs
        self.high = policy.high
        self.obs_dim = policy.obs_layout.size
        self.clear(np.arange(num_envs))

    def reset(self, seeds: Sequence[int | None], index: np.ndarray | None = None) -> None:
        arenas = reset_indices(self.num_envs, seeds, index)
        self.reseed(arenas, seeds)
        self.clear(arenas)

    def act(self, observations: np.ndarray) -> np.ndarray:
        obs = np.asarray(observations)
        if obs.shape != (self.num_envs, self.obs_dim):
            raise ValueError(f"{self.policy.name!r} for {self.policy.agent!r} in {self.num_envs} arena(s) takes "
                             f"observations of shape ({self.num_envs}, {self.obs_dim}), got {obs.shape}")
        action = np.array(self.decide(obs), dtype=np.int64)
        np.minimum(action, self.high, out=action)
        np.maximum(action, 0, out=action)
        return action

    def clear(self, arenas: np.ndarray) -> None:
        """Forget the per-episode state of ``arenas`` (called by ``__init__`` and ``reset``)."""

    def reseed(self, arenas: np.ndarray, seeds: Sequence[int | None]) -> None:
        """New generators for ``arenas`` (a deterministic policy has none)."""

    def decide(self, obs: np.ndarray) -> np.ndarray:
        """Every arena's action for its observation (clipped into the space by ``act``)."""
        raise NotImplementedError
