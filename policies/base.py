"""The Policy protocol every scripted, learned or human agent implements.

A policy maps one agent's observation to one action from that agent's action space. It
has no hidden side effects: all randomness comes from the generator seeded in
``reset(seed)``, so the same seed and observations give the same actions.

The scripted policies of this package are each defined once over N arenas
(:class:`policies.batch.BatchScripted`); one arena's policy is a batch of one
(:class:`policies.batch.OneArena`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Policy(Protocol):
    """``reset(seed)`` once per episode, then ``act(observation)`` once per tick."""

    def reset(self, seed: int | None = None) -> None: ...

    def act(self, observation: np.ndarray) -> np.ndarray: ...


class UniformRandomPolicy:
    """Uniform random actions over a ``MultiDiscrete`` space, from the generator ``reset``
    seeds (``commons-arena play`` gives every seat one when no population is named)."""

    def __init__(self, nvec: np.ndarray) -> None:
        self.nvec = np.asarray(nvec, dtype=np.int64)
        self.rng = np.random.default_rng()

    def reset(self, seed: int | None = None) -> None:
        self.rng = np.random.default_rng(seed)

    def act(self, observation: np.ndarray) -> np.ndarray:
        return self.rng.integers(0, self.nvec)


def uniform_random_policies(env: Any, agents: Iterable[str]) -> dict[str, Policy]:
    """A :class:`UniformRandomPolicy` for each of ``agents`` over its action space in ``env``: the one
    place a seat is made to act uniformly at random (``play`` without a population, a tournament's
    ``random`` anchor in a team or broker seat, analysis's scale of random teams)."""
    return {agent: UniformRandomPolicy(env.action_space(agent).nvec) for agent in agents}
