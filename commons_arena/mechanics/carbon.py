"""Carbon accounting (docs/rules.md §3).

Emissions of a tick = Σ busy GPUs x tier power (kW) x grid intensity (kg/kWh) x 1 h tick.
``hard`` caps cut grants before jobs run so that the tick's emissions, counting every
granted GPU as busy, cannot take the episode over the cap: GPUs are removed one at a time
from the most power-hungry tier (ties: the higher tier index), from the last team holding
one there. ``soft`` caps let emissions through and the allocator pays per kg over.
"""

from __future__ import annotations

import numpy as np

from commons_arena.numerics import dot

TICK_HOURS = 1.0  # one tick is one hour of cluster time


def intensity_at(profile: tuple[float, ...], t: int, multiplier: float = 1.0) -> float:
    """Grid intensity at tick t; the profile's last value repeats past its end."""
    return profile[min(t, len(profile) - 1)] * multiplier


def forecast(profile: tuple[float, ...], t: int, horizon: int) -> np.ndarray:
    """The published intensity profile for ticks t .. t+horizon-1 (shocks not included)."""
    return np.array([intensity_at(profile, t + h) for h in range(horizon)], dtype=np.float32)


def emissions(busy: np.ndarray, power_kw: np.ndarray, intensity: float) -> float:
    return dot(busy, power_kw) * intensity * TICK_HOURS


def cut_for_hard_cap(
    grants: np.ndarray, power_kw: np.ndarray, intensity: float, headroom_kg: float
) -> tuple[np.ndarray, int]:
    """Remove granted GPUs until their full-use emissions fit ``headroom_kg``."""
    fixed = grants.copy()
    kg_per_gpu = power_kw * intensity * TICK_HOURS
    excess = emissions(fixed.sum(axis=0), power_kw, intensity) - max(headroom_kg, 0.0)
    cut = 0
    if excess <= 1e-9:
        return fixed, cut  # fits already: the common case
    for tier in sorted(range(len(power_kw)), key=lambda k: (kg_per_gpu[k], k), reverse=True):
        if kg_per_gpu[tier] <= 0:
            break
        for team in range(fixed.shape[0] - 1, -1, -1):
            while excess > 1e-9 and fixed[team, tier] > 0:
                fixed[team, tier] -= 1
                excess -= kg_per_gpu[tier]
                cut += 1
    return fixed, cut


def over_cap_increment(used_before: float, used_after: float, cap: float) -> float:
    """kg over the cap added by this tick (what a soft cap charges)."""
    return max(0.0, used_after - cap) - max(0.0, used_before - cap)
