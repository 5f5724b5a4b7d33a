"""The reference's carbon rules (docs/rules.md §3, §5): emissions, the hard-cap cut, the soft cap's kg over."""

from __future__ import annotations

import numpy as np

from commons_arena.mechanics.carbon import TICK_HOURS, forecast, intensity_at
from commons_arena.numerics import dot

__all__ = ['TICK_HOURS', 'cut_for_hard_cap', 'emissions', 'forecast', 'intensity_at', 'over_cap_increment']


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
