"""The fit step of :mod:`policies.limits` over a batch of arenas: N allocator actions cut within N observations' limits.

Row *n* of :func:`fit_action_batch` is exactly what :func:`policies.limits.fit_action` returns for
row *n*'s limits, purchases, grants and trim order: the same cuts in the same order, with the same
float arithmetic (products rounded per element, sums over tiers left to right from 0, as
:func:`commons_arena.numerics.dot` adds them), vectorised over the batch axis and looping only over
the small fixed axes (tiers, teams). Purchases are cut by the batched core's own purchase repair
(``commons_arena.batched.tick.repair_purchases_rows``): one rule, not a copy of it.

Shapes: ``N`` arenas, ``T`` tiers, ``M`` teams. Purchases ``(N, T)``, grants ``(N, M, T)``, a trim
order ``(N, M)`` (each row every team, the one whose units are given up last first), all int64.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from commons_arena.batched.tick import repair_purchases_rows
from commons_arena.mechanics import carbon
from commons_arena.numerics import left_to_right_sum
from commons_arena.scenario import ScenarioConfig
from commons_arena.spaces import Layout
from policies.limits import BUDGET_MARGIN, CARBON_MARGIN, PRICE_SLACK, SPIKE_BOUND, LimitReader


@dataclass(frozen=True, slots=True)
class BatchLimits:
    """:class:`policies.limits.Limits` of N observations, stacked."""

    offer_qty: np.ndarray  # (N, T) int64
    offer_price: np.ndarray  # (N, T) float64, as observed
    budget: np.ndarray  # (N,) float64, as observed
    online: np.ndarray  # (N, T) int64
    headroom_kg: np.ndarray | None  # (N,) carbon left under a hard cap (margin kept back); None: soft cap
    kg_per_gpu: np.ndarray  # (N, T): the most one granted GPU may emit this tick (zeros under a soft cap)


class BatchLimitReader:
    """Reads :class:`BatchLimits` from ``(N, obs_dim)`` allocator observations of one scenario."""

    def __init__(self, config: ScenarioConfig, layout: Layout) -> None:
        self.one = LimitReader(config, layout)
        self.power = np.array(self.one.power, dtype=np.float64)
        self.profile = np.array(self.one.profile, dtype=np.float64)

    def __call__(self, obs: np.ndarray) -> BatchLimits:
        r = self.one
        o = np.asarray(obs).astype(np.float64)  # float32 -> float64 is exact, as .tolist() is
        n = o.shape[0]
        headroom = None
        kg = np.zeros((n, len(self.power)), dtype=np.float64)
        if r.hard:
            used = o[:, r.carbon_used]
            headroom = r.cap - used - CARBON_MARGIN * np.maximum(r.cap, used)
            tick = o[:, r.tick].astype(np.int64)
            multiplier = np.where(o[:, r.spike] > 0.5, SPIKE_BOUND, 1.0)
            intensity = self.profile[np.minimum(tick, len(self.profile) - 1)] * multiplier
            kg = self.power[None, :] * intensity[:, None] * carbon.TICK_HOURS
        return BatchLimits(
            offer_qty=o[:, r.offer_qty].astype(np.int64),
            offer_price=o[:, r.offer_price],
            budget=o[:, r.budget],
            online=o[:, r.online].astype(np.int64),
            headroom_kg=headroom,
            kg_per_gpu=kg,
        )


def fit_buy_batch(buy: np.ndarray, offer_qty: np.ndarray, offer_price: np.ndarray, budget: np.ndarray) -> np.ndarray:
    """:func:`policies.limits.fit_buy` per row: cut as the env cuts them (the batched core's
    ``repair_purchases_rows``), with the observed prices raised by a rounding slack and the
    observed budget lowered by a rounding margin."""
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


def fit_grants_batch(grant: np.ndarray, capacity: np.ndarray, order: np.ndarray) -> np.ndarray:
    """:func:`policies.limits.fit_grants` per row: grants cut per tier to ``capacity``, last team of ``order`` first."""
    fixed = np.maximum(np.asarray(grant, dtype=np.int64), 0)
    for k in range(fixed.shape[2]):
        over = fixed[:, :, k].sum(axis=1) - capacity[:, k]
        if np.any(over > 0):
            _trim_from_last(fixed, k, over, order)
    return fixed


def fit_carbon_batch(grant: np.ndarray, kg_per_gpu: np.ndarray, headroom_kg: np.ndarray, order: np.ndarray) -> np.ndarray:
    """:func:`policies.limits.fit_carbon` per row: grants cut until every granted GPU, counted busy,
    emits at most ``headroom_kg``: last team of ``order`` first, on it the tier with most kg per GPU first."""
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


def fit_action_batch(
    limits: BatchLimits, buy: np.ndarray, grant: np.ndarray, order: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`policies.limits.fit_action` per row: ``(buy (N, T), grant (N, M, T))`` within every
    observed limit; ``order (N, M)``: per row every team, the one whose units are given up last first."""
    order = np.asarray(order, dtype=np.int64)
    fixed_buy = fit_buy_batch(buy, limits.offer_qty, limits.offer_price, limits.budget)
    fixed = fit_grants_batch(grant, limits.online + fixed_buy, order)
    if limits.headroom_kg is not None:
        before = fixed.sum(axis=1)
        fixed = fit_carbon_batch(fixed, limits.kg_per_gpu, limits.headroom_kg, order)
        # purchases the carbon cut left without a grant are not made
        fixed_buy = fixed_buy - np.minimum(fixed_buy, before - fixed.sum(axis=1))
    return fixed_buy, fixed


__all__ = ["BatchLimitReader", "BatchLimits", "fit_action_batch", "fit_buy_batch", "fit_carbon_batch",
           "fit_grants_batch"]
