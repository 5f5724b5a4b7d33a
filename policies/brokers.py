"""Scripted brokers (docs/rules.md §9): a demand-priced and a fixed-price seller of spot GPUs.

Both offer their whole current inventory every tick (the ``inventory`` field, already
shrunk by a market crisis) and choose a *price level* per tier; the env turns level ``L``
into ``max_price x L / (price_levels - 1)`` and multiplies it during a crisis.

The **cost-covering level** of a tier is the lowest level whose price is at least
``spot_unit_cost x margin`` (public scenario facts; never below level 1).

``demand_priced`` (defaults ``margin=1.2``, ``demand_gain=3``, ``crisis_levels=1``)::

    level = cost-covering level
          + round(demand_gain x min(demand[k] / (owned[k] + inventory[k]), 2))
          + crisis_levels x crisis

  ``demand[k]`` is the teams' total declared request for tier ``k`` this tick (the
  broker's public demand signal); ``owned`` and ``inventory`` are the scenario's tier
  sizes, so the ratio is the share of the tier's whole capacity being asked for. Prices
  therefore rise with declared demand — which is how bluffing teams make spot capacity
  dearer for everyone — and rise further in a crisis (on top of the env's multiplier).

``fixed_price`` (default ``margin=1.5``): always the cost-covering level; or
``level=<int>`` for one constant level on every tier.

Brokers are deterministic: they never draw random numbers. Each class is the broker's one
definition, over N arenas; the per-arena broker is a batch of one of it
(:class:`policies.batch.OneArena`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from commons_arena.rules import rules_for
from commons_arena.scenario import ScenarioConfig
from policies.batch import BatchScripted


def cost_covering_levels(config: ScenarioConfig, margin: float) -> np.ndarray:
    """Per tier: the lowest price level whose price covers ``unit_cost x margin`` (>= 1)."""
    top = config.price_levels - 1
    rules = rules_for(config)
    levels = []
    for unit_cost, max_price in zip(rules.spot_unit_cost.tolist(), rules.max_price.tolist(), strict=True):
        level = int(np.ceil(unit_cost * margin / max_price * top - 1e-9))
        levels.append(min(max(level, 1), top))
    return np.array(levels, dtype=np.int64)


def demand_levels(
    base: np.ndarray, demand: np.ndarray, capacity: np.ndarray, gain: float, crisis: bool | np.ndarray,
    crisis_levels: int, top: int,
) -> np.ndarray:
    """The demand-priced rule: ``base + round(gain x min(demand / capacity, 2)) + crisis_levels
    x crisis`` per tier, at most ``top`` (``demand_priced``; also the ``markup`` codec's). Over a
    batch, ``demand`` is ``(N, T)`` and ``crisis`` ``(N, 1)`` booleans."""
    level = base + np.rint(gain * np.minimum(demand / capacity, 2.0)).astype(np.int64)
    level = level + crisis_levels * np.asarray(crisis, dtype=np.int64)
    return np.minimum(level, top)


class _Broker(BatchScripted):
    role = "broker"

    def __init__(self, config: ScenarioConfig, agent: str, num_envs: int) -> None:
        super().__init__(config, agent, num_envs)
        sl = self.obs_layout.slices
        self._sl_inventory = sl["inventory"]
        self._sl_demand = sl["demand"]
        self._i_crisis = sl["crisis"].start
        self._top = config.price_levels - 1


class DemandPricedBroker(_Broker):
    """Price rises with declared demand and during crises; offers the full inventory."""

    name = "demand_priced"

    def __init__(
        self,
        config: ScenarioConfig,
        agent: str,
        num_envs: int,
        margin: float = 1.2,
        demand_gain: float = 3.0,
        crisis_levels: int = 1,
    ) -> None:
        super().__init__(config, agent, num_envs)
        self.margin, self.demand_gain, self.crisis_levels = float(margin), float(demand_gain), int(crisis_levels)
        self._base = cost_covering_levels(config, self.margin)
        self._capacity = np.maximum(rules_for(config).capacity, 1.0)  # owned + inventory per tier

    @property
    def params(self) -> dict[str, Any]:
        return {"margin": self.margin, "demand_gain": self.demand_gain, "crisis_levels": self.crisis_levels}

    def decide(self, obs: np.ndarray) -> np.ndarray:
        level = demand_levels(self._base, obs[:, self._sl_demand], self._capacity, self.demand_gain,
                              obs[:, self._i_crisis, None] > 0, self.crisis_levels, self._top)
        return np.concatenate([obs[:, self._sl_inventory], level], axis=1)


class FixedPriceBroker(_Broker):
    """A constant price level per tier; offers the full inventory."""

    name = "fixed_price"

    def __init__(
        self,
        config: ScenarioConfig,
        agent: str,
        num_envs: int,
        margin: float = 1.5,
        level: int | None = None,
    ) -> None:
        super().__init__(config, agent, num_envs)
        self.margin, self.level = float(margin), level
        if level is None:
            self._levels = cost_covering_levels(config, self.margin)
        else:
            if not 0 <= int(level) <= self._top:
                raise ValueError(f"level must be in [0, {self._top}], got {level}")
            self._levels = np.full(self.n_tiers, int(level), dtype=np.int64)

    @property
    def params(self) -> dict[str, Any]:
        return {"margin": self.margin, "level": self.level}

    def decide(self, obs: np.ndarray) -> np.ndarray:
        levels = np.broadcast_to(self._levels, (self.num_envs, self.n_tiers))
        return np.concatenate([obs[:, self._sl_inventory], levels], axis=1)


BROKERS = (DemandPricedBroker, FixedPriceBroker)  # each in N arenas; per arena a batch of one (OneArena.maker)
