"""Fit an allocator's action within every limit its observation shows (docs/rules.md §5, repairs).

The env repairs an allocator action that buys over the offer or the budget, grants over the
GPUs online plus bought, or grants over what is left of a hard carbon cap, and charges every
unit it cuts as ``invalid``. Each of these limits is visible to the allocator when it acts:

* the **offer** (``offer_qty``, ``offer_price``) and the **budget** (``budget``) exactly,
  up to float32 rounding (a relative margin covers it);
* the **GPUs online** (``online``): an incident that fires in the tick the allocator acts
  (rules §5, step 4: shocks fire after the actions) is the one thing it cannot see coming;
* the **hard cap's carbon left**: ``cap_kg`` (public) minus ``carbon_used``; the cut counts
  every granted GPU as busy at ``power_kw`` (public) x this tick's grid intensity, which is
  the published profile (public) x the multipliers of the shocks active now. Only
  ``grid_spike`` shocks carry an intensity multiplier (the scenario schema says so), and the
  observation's ``shocks_active`` says whether one is active, but not how strong it is: while
  one is active the multiplier is bounded by ``MAX_MULTIPLIER``, the most overlapping
  multipliers may reach in a valid scenario (``scenario.py`` checks it). A spike that fires
  in the tick the allocator acts is not seen.

:func:`fit_action` is the one shared step every scripted allocator and ``planner`` end
with, over a batch of arenas (a single arena is a batch of one): it cuts purchases to the offer and a margin inside the budget (most expensive tier
first, as the env does), grants to online + bought per tier and then to the carbon left,
dropping units from the team last in the allocator's own priority order first (on that
team, the tier with the most kg per GPU first), and gives back purchases the carbon cut left
unused. Where no limit binds it returns the action unchanged, so on soft-cap scenarios it is
an exact no-op.

Shapes: ``N`` arenas, ``T`` tiers, ``M`` teams. Purchases ``(N, T)``, grants ``(N, M, T)``, a trim
order ``(N, M)`` (each row every team, the one whose units are given up last first), all int64. The
float arithmetic is per element (sums over tiers left to right from 0, as
:func:`commons_arena.numerics.dot` adds them), so each row is cut exactly as one arena would be: the
list-based step this replaced is the spec (tests/reference/limits.py). Purchases are cut by the
batched core's own purchase repair (``commons_arena.batched.tick.repair_purchases_rows``): one rule,
not a copy of it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from commons_arena.batched.tick import repair_purchases_rows
from commons_arena.enums import ShockKind
from commons_arena.mechanics import carbon
from commons_arena.numerics import left_to_right_sum
from commons_arena.scenario import MAX_MULTIPLIER, ScenarioConfig
from commons_arena.spaces import Layout

PRICE_SLACK = 1 + 1e-6  # observed (float32) prices may round down
BUDGET_MARGIN = 2.0**-22  # observed (float32) budget may round up by 2**-24 of itself
CARBON_MARGIN = 1e-6  # observed (float32) carbon used may round down: kept back, relative to the cap
SPIKE_BOUND = MAX_MULTIPLIER  # the most an active grid spike's (unobserved) multiplier may be


@dataclass(frozen=True, slots=True)
class Limits:
    """The limits N allocator observations show for this tick, stacked."""

    offer_qty: np.ndarray  # (N, T) int64
    offer_price: np.ndarray  # (N, T) float64, as observed
    budget: np.ndarray  # (N,) float64, as observed
    online: np.ndarray  # (N, T) int64
    headroom_kg: np.ndarray | None  # (N,) carbon left under a hard cap (margin kept back); None: soft cap
    kg_per_gpu: np.ndarray  # (N, T): the most one granted GPU may emit this tick (zeros under a soft cap)


class LimitReader:
    """Reads :class:`Limits` from ``(N, obs_dim)`` allocator observations of one scenario (public
    parameters only: tier power, the carbon cap, its mode and the published intensity profile)."""

    def __init__(self, config: ScenarioConfig, layout: Layout) -> None:
        self.power = np.array([t.power_kw for t in config.gpu_tiers], dtype=np.float64)
        self.profile = np.array(config.carbon.intensity, dtype=np.float64)
        self.cap = config.carbon.cap_kg
        self.hard = config.carbon.mode == "hard"
        sl = layout.slices
        self.tick, self.budget, self.carbon_used = sl["tick"].start, sl["budget"].start, sl["carbon_used"].start
        self.spike = sl["shocks_active"].start + int(ShockKind.GRID_SPIKE)
        self.online, self.offer_qty, self.offer_price = sl["online"], sl["offer_qty"], sl["offer_price"]

    def __call__(self, obs: np.ndarray) -> Limits:
        o = np.asarray(obs).astype(np.float64)  # float32 -> float64 is exact
        headroom = None
        kg = np.zeros((len(o), len(self.power)), dtype=np.float64)
        if self.hard:
            used = o[:, self.carbon_used]
            headroom = self.cap - used - CARBON_MARGIN * np.maximum(self.cap, used)
            tick = o[:, self.tick].astype(np.int64)
            multiplier = np.where(o[:, self.spike] > 0.5, SPIKE_BOUND, 1.0)
            intensity = self.profile[np.minimum(tick, len(self.profile) - 1)] * multiplier
            kg = self.power[None, :] * intensity[:, None] * carbon.TICK_HOURS
        return Limits(
            offer_qty=o[:, self.offer_qty].astype(np.int64),
            offer_price=o[:, self.offer_price],
            budget=o[:, self.budget],
            online=o[:, self.online].astype(np.int64),
            headroom_kg=headroom,
            kg_per_gpu=kg,
        )


def fit_buy(buy: np.ndarray, offer_qty: np.ndarray, offer_price: np.ndarray, budget: np.ndarray) -> np.ndarray:
    """Purchases ``(N, T)`` cut as the env cuts them (the batched core's ``repair_purchases_rows``: to
    the offer, then the most expensive tier first to the budget), with the observed prices raised by
    a rounding slack and the observed budget lowered by a rounding margin."""
    price = np.asarray(offer_price, dtype=np.float64) * PRICE_SLACK
    wanted = np.maximum(np.asarray(buy, dtype=np.int64), 0)
    money = np.asarray(budget, dtype=np.float64) * (1 - BUDGET_MARGIN)
    return repair_purchases_rows(wanted, offer_qty, price, money).bought


def _trim_from_last(grant: np.ndarray, k: int, over: np.ndarray, order: np.ndarray) -> None:
    """Remove ``over`` (per row) GPUs of tier ``k`` in place, the team last in ``order`` first."""
    rows = np.arange(grant.shape[0])
    left = np.maximum(over, 0)
    for pos in range(order.shape[1] - 1, -1, -1):
        i = order[:, pos]
        take = np.minimum(grant[rows, i, k], left)
        grant[rows, i, k] -= take
        left = left - take


def fit_grants(grant: np.ndarray, capacity: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Grants ``(N, M, T)`` cut per tier to ``capacity`` ``(N, T)``, the team last in ``order`` first."""
    fixed = np.maximum(np.asarray(grant, dtype=np.int64), 0)
    over = fixed.sum(axis=1) - capacity  # (tiers are cut independently: each once, where it is over)
    for k in np.flatnonzero((over > 0).any(axis=0)).tolist():
        _trim_from_last(fixed, k, over[:, k], order)
    return fixed


def fit_carbon(grant: np.ndarray, kg_per_gpu: np.ndarray, headroom_kg: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Grants cut until every granted GPU, counted busy, emits at most ``headroom_kg`` ``(N,)``: the
    team last in ``order`` first, on that team the tier with the most kg per GPU first."""
    fixed = np.array(grant, dtype=np.int64)
    N, _, T = fixed.shape
    excess = left_to_right_sum(fixed.sum(axis=1) * kg_per_gpu) - np.maximum(headroom_kg, 0.0)
    if not np.any(excess > 0):
        return fixed
    rows = np.arange(N)
    # per row: tiers by (kg, index), largest first; tiers emitting nothing are never cut
    tiers = np.lexsort((-np.broadcast_to(np.arange(T), (N, T)), -kg_per_gpu), axis=-1)
    for pos in range(order.shape[1] - 1, -1, -1):
        i = order[:, pos]
        for t in range(T):
            k = tiers[:, t]
            kg = kg_per_gpu[rows, k]
            act = (excess > 0) & (kg > 0)
            if not act.any():
                continue
            have = fixed[rows, i, k]
            with np.errstate(over="ignore"):
                quotient = np.divide(excess, kg, out=np.zeros(N), where=act)
            take = np.where(act, np.ceil(np.minimum(quotient, have)), 0.0)  # (min before ceil: the quotient may be inf)
            fixed[rows, i, k] = have - take.astype(np.int64)
            excess = np.where(act, excess - take * kg, excess)
    return fixed


def fit_action(limits: Limits, buy: np.ndarray, grant: np.ndarray, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(buy (N, T), grant (N, M, T))`` within every observed limit (module docstring); ``order (N, M)``:
    per row every team, the one whose units the allocator would give up last first."""
    order = np.asarray(order, dtype=np.int64)
    fixed_buy = fit_buy(buy, limits.offer_qty, limits.offer_price, limits.budget)
    fixed = fit_grants(grant, limits.online + fixed_buy, order)
    if limits.headroom_kg is not None:
        before = fixed.sum(axis=1)
        fixed = fit_carbon(fixed, limits.kg_per_gpu, limits.headroom_kg, order)
        # purchases the carbon cut left without a grant are not made
        fixed_buy = fixed_buy - np.minimum(fixed_buy, before - fixed.sum(axis=1))
    return fixed_buy, fixed



__all__ = ["Limits", "LimitReader", "fit_action", "fit_buy", "fit_carbon", "fit_grants"]
