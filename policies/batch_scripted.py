"""The scripted teams and brokers over a batch of arenas (:mod:`policies.teams`, :mod:`policies.brokers`).

Each is built from its per-arena policy (:class:`~policies.batch.BatchScripted`: same parameters,
layouts and bounds) and applies the same rule to every row at once, through the same helpers
(:func:`policies.teams.declare`, :func:`policies.brokers.demand_levels`), so row *i* is the
per-arena policy's action for row *i*. Teams and brokers never draw random numbers.
"""

from __future__ import annotations

import numpy as np

from commons_arena.enums import Stance
from policies.batch import BatchScripted
from policies.brokers import DemandPricedBroker, FixedPriceBroker, demand_levels
from policies.teams import TeamPolicy, declare


class BatchTeam(BatchScripted):
    """Every team archetype (:class:`policies.teams.TeamPolicy`, its bluff and escalation threshold)."""

    policy: TeamPolicy

    def __init__(self, policy: TeamPolicy, num_envs: int) -> None:
        T = policy.n_tiers
        self._answered = np.zeros((num_envs, T))  # the declaration last tick's grant answered
        self._has_answered = np.zeros(num_envs, dtype=bool)  # False: the first tick (nothing answered yet)
        super().__init__(policy, num_envs)

    def clear(self, arenas: np.ndarray) -> None:
        self._has_answered[arenas] = False

    def decide(self, obs: np.ndarray) -> np.ndarray:
        p = self.policy
        T = p.n_tiers
        out = np.zeros((self.num_envs, T + 1), dtype=np.int64)
        out[:, :T] = declare(obs[:, p._sl_need], p.bluff, p._request_high)
        # the stance rule of policies.teams.stance, every row at once
        escalate = obs[:, p._i_streak] >= p.escalate_after
        counter = self._has_answered & np.any(obs[:, p._sl_grant] < self._answered, axis=1)
        out[:, T] = np.where(escalate, int(Stance.ESCALATE), np.where(counter, int(Stance.COUNTER), int(Stance.ACCEPT)))
        # this tick's `declared` is what next tick's `last_grant` will answer
        self._answered[:] = obs[:, p._sl_declared]
        self._has_answered[:] = True
        return out


class BatchDemandPricedBroker(BatchScripted):
    """:class:`policies.brokers.DemandPricedBroker`: the whole inventory at a demand-priced level."""

    policy: DemandPricedBroker

    def decide(self, obs: np.ndarray) -> np.ndarray:
        p = self.policy
        level = demand_levels(p._base, obs[:, p._sl_demand], p._capacity, p.demand_gain,
                              obs[:, p._i_crisis, None] > 0, p.crisis_levels, p._top)
        return np.concatenate([obs[:, p._sl_inventory], level], axis=1)


class BatchFixedPriceBroker(BatchScripted):
    """:class:`policies.brokers.FixedPriceBroker`: the whole inventory at fixed levels."""

    policy: FixedPriceBroker

    def decide(self, obs: np.ndarray) -> np.ndarray:
        p = self.policy
        levels = np.broadcast_to(p._levels, (self.num_envs, p.n_tiers))
        return np.concatenate([obs[:, p._sl_inventory], levels], axis=1)


__all__ = ["BatchDemandPricedBroker", "BatchFixedPriceBroker", "BatchTeam"]
