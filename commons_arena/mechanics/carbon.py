"""Carbon accounting (docs/rules.md §3).

Emissions of a tick = Σ busy GPUs x tier power (kW) x grid intensity (kg/kWh) x 1 h tick.
``hard`` caps cut grants before jobs run so that the tick's emissions, counting every
granted GPU as busy, cannot take the episode over the cap: GPUs are removed one at a time
from the most power-hungry tier (ties: the higher tier index), from the last team holding
one there. ``soft`` caps let emissions through and the allocator pays per kg over.
"""

from __future__ import annotations

import numpy as np

TICK_HOURS = 1.0  # one tick is one hour of cluster time


def intensity_at(profile: tuple[float, ...], t: int, multiplier: float = 1.0) -> float:
    """Grid intensity at tick t; the profile's last value repeats past its end."""
    return profile[min(t, len(profile) - 1)] * multiplier


def forecast(profile: tuple[float, ...], t: int, horizon: int) -> np.ndarray:
    """The published intensity profile for ticks t .. t+horizon-1 (shocks not included)."""
    return np.array([intensity_at(profile, t + h) for h in range(horizon)], dtype=np.float32)


