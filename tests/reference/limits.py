"""The limits step as first written: one arena, Python lists (the executable spec of ``policies.limits``).

``policies.limits`` fits N arenas' actions at once (a single arena is a batch of one); this is the
list-based step it replaced, kept as the spec it is held to row by row
(tests/policies/test_limits.py). It is not shipped. What each limit is, and why each is visible to the
allocator when it acts: ``policies.limits``'s docstring.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from commons_arena.batched.tick import repair_purchases_rows
from commons_arena.enums import ShockKind
from commons_arena.mechanics import carbon
from commons_arena.scenario import ScenarioConfig
from commons_arena.spaces import Layout
from policies.limits import BUDGET_MARGIN, CARBON_MARGIN, PRICE_SLACK, SPIKE_BOUND


@dataclass(frozen=True, slots=True)
class Limits:
    """The limits an allocator observation shows for this tick."""

    offer_qty: list[int]  # per tier
    offer_price: list[float]  # per tier, as observed
    budget: float  # as observed
    online: list[int]  # per tier
    headroom_kg: float | None  # carbon left under a hard cap (margin kept back); None: soft cap
    kg_per_gpu: list[float]  # per tier: the most one granted GPU may emit this tick


class LimitReader:
    """Reads :class:`Limits` from allocator observations of one scenario (public parameters only:
    tier power, the carbon cap, its mode and the published intensity profile)."""

    def __init__(self, config: ScenarioConfig, layout: Layout) -> None:
        self.power = [t.power_kw for t in config.gpu_tiers]
        self.profile = config.carbon.intensity
        self.cap = config.carbon.cap_kg
        self.hard = config.carbon.mode == "hard"
        sl = layout.slices
        self.tick = sl["tick"].start
        self.budget = sl["budget"].start
        self.carbon_used = sl["carbon_used"].start
        self.spike = sl["shocks_active"].start + int(ShockKind.GRID_SPIKE)
        self.online, self.offer_qty, self.offer_price = sl["online"], sl["offer_qty"], sl["offer_price"]

    def __call__(self, obs: np.ndarray) -> Limits:
        o = obs.tolist() if isinstance(obs, np.ndarray) else list(obs)
        headroom, kg = None, [0.0] * len(self.power)
        if self.hard:
            used = o[self.carbon_used]
            headroom = self.cap - used - CARBON_MARGIN * max(self.cap, used)
            intensity = carbon.intensity_at(self.profile, int(o[self.tick]), SPIKE_BOUND if o[self.spike] > 0.5 else 1.0)
            kg = [p * intensity * carbon.TICK_HOURS for p in self.power]
        return Limits(
            offer_qty=[int(x) for x in o[self.offer_qty]],
            offer_price=o[self.offer_price],
            budget=o[self.budget],
            online=[int(x) for x in o[self.online]],
            headroom_kg=headroom,
            kg_per_gpu=kg,
        )


def fit_buy(buy: Sequence[int], offer_qty: Sequence[int], offer_price: Sequence[float], budget: float) -> list[int]:
    """Purchases cut as the env cuts them (:func:`repair_purchases_rows`: to the offer, then
    the most expensive tier first to the budget), with the observed prices raised by a rounding
    slack and the observed budget lowered by a rounding margin."""
    price = np.asarray(offer_price, dtype=np.float64)[None] * PRICE_SLACK
    wanted = np.array([[max(0, int(b)) for b in buy]], dtype=np.int64)
    offered = np.array([offer_qty], dtype=np.int64).reshape(wanted.shape)
    fitted = repair_purchases_rows(wanted, offered, price, np.array([budget * (1 - BUDGET_MARGIN)]))
    return fitted.bought[0].tolist()


def _trim(grant: list[list[int]], k: int, n: int, order: Sequence[int]) -> int:
    """Remove up to ``n`` GPUs of tier ``k``, last team of ``order`` first; returns how many."""
    removed = 0
    for i in reversed(order):
        if removed >= n:
            break
        take = min(grant[i][k], n - removed)
        grant[i][k] -= take
        removed += take
    return removed


def fit_grants(grant: Sequence[Sequence[int]], capacity: Sequence[int], order: Sequence[int]) -> list[list[int]]:
    """Grants cut per tier to ``capacity``, the team last in ``order`` first."""
    fixed = [[max(0, int(g)) for g in row] for row in grant]
    for k, cap in enumerate(capacity):
        over = sum(row[k] for row in fixed) - cap
        if over > 0:
            _trim(fixed, k, over, order)
    return fixed


def fit_carbon(
    grant: Sequence[Sequence[int]], kg_per_gpu: Sequence[float], headroom_kg: float, order: Sequence[int]
) -> list[list[int]]:
    """Grants cut until every granted GPU, counted busy, emits at most ``headroom_kg``: the
    team last in ``order`` first, on that team the tier with the most kg per GPU first."""
    fixed = [list(row) for row in grant]
    T = len(kg_per_gpu)
    excess = sum(sum(row[k] for row in fixed) * kg_per_gpu[k] for k in range(T)) - max(headroom_kg, 0.0)
    if excess <= 0:
        return fixed
    tiers = sorted((k for k in range(T) if kg_per_gpu[k] > 0), key=lambda k: (kg_per_gpu[k], k), reverse=True)
    for i in reversed(order):
        for k in tiers:
            if excess <= 0:
                return fixed
            take = math.ceil(min(excess / kg_per_gpu[k], fixed[i][k]))  # (min before ceil: the quotient may be inf)
            fixed[i][k] -= take
            excess -= take * kg_per_gpu[k]
    return fixed


def fit_action(
    limits: Limits, buy: Sequence[int], grant: Sequence[Sequence[int]], order: Sequence[int]
) -> tuple[list[int], list[list[int]]]:
    """``(buy, grant)`` within every observed limit (module docstring); ``order``: every team,
    the one whose units the allocator would give up last first."""
    fixed_buy = fit_buy(buy, limits.offer_qty, limits.offer_price, limits.budget)
    capacity = [o + b for o, b in zip(limits.online, fixed_buy, strict=True)]
    fixed = fit_grants(grant, capacity, order)
    if limits.headroom_kg is not None:
        before = [sum(row[k] for row in fixed) for k in range(len(capacity))]
        fixed = fit_carbon(fixed, limits.kg_per_gpu, limits.headroom_kg, order)
        # purchases the carbon cut left without a grant are not made
        for k, n in enumerate(before):
            cut = n - sum(row[k] for row in fixed)
            fixed_buy[k] -= min(fixed_buy[k], cut)
    return fixed_buy, fixed


