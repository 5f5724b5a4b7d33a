"""Shocks (docs/rules.md §6): which fire at a tick, and the timed effects they leave behind.

A shock fires at its scheduled ``tick``, or at every tick with probability ``rate``
(one draw per random shock per tick, in file order, from the env's generator). Its
effect lasts ``duration`` ticks starting with the tick it fires in:

* ``production_incident``: ``gpus_offline`` owned GPUs of ``tier`` are offline; capacity
  is removed before grants apply (grants above it are repaired).
* ``market_crisis``: prices of offers posted while it lasts are multiplied by
  ``price_multiplier`` and the quantity the broker can post shrinks to
  ``floor(inventory x inventory_factor)``.
* ``grid_spike``: grid intensity is multiplied by ``intensity_multiplier``.
* ``compliance_audit`` additionally audits every team's declaration (see social.py).
* Any shock with a ``job`` injects that urgent job into its target team (default:
  audit → safety, customer_escalation → search, incident → robotics).
Overlapping effects multiply (prices, intensity) or add (offline GPUs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from commons_arena.scenario import ShockSpec


@dataclass(frozen=True, slots=True)
class Effect:
    spec: ShockSpec
    tier_index: int  # -1 when the shock has no tier
    until: int  # last tick (inclusive) the effect is active


def offline_gpus(effects: list[Effect], n_tiers: int) -> np.ndarray:
    offline = [0] * n_tiers
    for e in effects:
        if e.tier_index >= 0:
            offline[e.tier_index] += e.spec.gpus_offline
    return np.array(offline, dtype=np.int64)


# Products in list order, as numpy's product of the same list would round them.
def price_multiplier(effects: list[Effect]) -> float:
    return float(math.prod(e.spec.price_multiplier for e in effects)) if effects else 1.0


def inventory_factor(effects: list[Effect]) -> float:
    return float(math.prod(e.spec.inventory_factor for e in effects)) if effects else 1.0


def intensity_multiplier(effects: list[Effect]) -> float:
    return float(math.prod(e.spec.intensity_multiplier for e in effects)) if effects else 1.0


