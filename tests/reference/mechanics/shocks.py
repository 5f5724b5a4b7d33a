"""The reference's shocks (docs/rules.md §6): which fire at a tick, which effects last, the inventory a crisis leaves."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from commons_arena.mechanics.shocks import (
    Effect,
    intensity_multiplier,
    inventory_factor,
    offline_gpus,
    price_multiplier,
)
from commons_arena.scenario import ShockSpec

__all__ = ['Effect', 'active', 'due_shocks', 'intensity_multiplier', 'inventory_factor', 'offline_gpus', 'price_multiplier', 'spot_inventory']


def due_shocks(specs: tuple[ShockSpec, ...], t: int, rng: np.random.Generator) -> list[ShockSpec]:
    # One vector draw gives exactly the numbers (and leaves the generator exactly where)
    # one ``rng.random()`` per random shock would, at a fraction of the call overhead.
    n_random = sum(1 for spec in specs if spec.tick is None)
    draws = iter(rng.random(n_random).tolist() if n_random else ())
    fired = []
    for spec in specs:
        if spec.tick is not None:
            if spec.tick == t:
                fired.append(spec)
        elif next(draws) < spec.rate:  # type: ignore[operator]
            fired.append(spec)
    return fired


def active(effects: list[Effect], t: int) -> list[Effect]:
    return [e for e in effects if e.until >= t]


def spot_inventory(inventory: Sequence[int], effects: list[Effect]) -> list[int]:
    """GPUs the broker may offer now: ``floor(inventory x factor)`` while a crisis lasts."""
    factor = inventory_factor(effects)
    return [math.floor(q * factor) for q in inventory]
