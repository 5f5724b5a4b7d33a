"""The reference's market rules (docs/rules.md §5, rules 1 and 3): the offer, the purchase repair, the broker's profit."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from commons_arena.mechanics.market import price_grid
from commons_arena.numerics import dot

__all__ = ['broker_profit', 'post_offer', 'price_grid', 'repair_purchases']


def post_offer(
    quantity: Sequence[int],
    price_level: Sequence[int],
    inventory: Sequence[int],
    grid: np.ndarray | Sequence[Sequence[float]],
    multiplier: float,
) -> tuple[np.ndarray, np.ndarray, int]:
    """The offer for next tick: (quantity, unit price, repaired units)."""
    offered = [min(q, cap) for q, cap in zip(quantity, inventory, strict=True)]
    repaired = int(sum(quantity) - sum(offered))
    prices = [grid[tier][level] * multiplier for tier, level in enumerate(price_level)]
    return np.array(offered, dtype=np.int64), np.array(prices, dtype=np.float64), repaired


def repair_purchases(
    buys: Sequence[int], offer_qty: Sequence[int], offer_price: np.ndarray, budget: float
) -> tuple[np.ndarray, float, int, int]:
    """Cut buys to the offer, then to the budget. Returns (buys, cost, offer_cut, budget_cut)."""
    fixed = [min(b, q) for b, q in zip(buys, offer_qty, strict=True)]
    offer_cut = int(sum(buys) - sum(fixed))
    budget_cut = 0
    # one rounding rule (numerics.dot) for the cost the allocator pays and for the budget test
    bought = np.array(fixed, dtype=np.int64)
    cost = dot(bought, offer_price)
    if cost > budget + 1e-9:
        prices = offer_price.tolist()
        # Most expensive first; stable for equal prices by preferring the higher index.
        by_price = sorted(range(len(fixed)), key=lambda i: (prices[i], i), reverse=True)
        for tier in by_price:
            if cost <= budget + 1e-9:  # within budget: the cheaper tiers keep what they have
                break
            if prices[tier] <= 0:  # free units do not lower the cost: all go
                budget_cut, fixed[tier] = budget_cut + fixed[tier], 0
                continue
            # thousands of units: cut all but the last few at once (the loop below is one unit per step)
            # (capped before int(): over a subnormal price the quotient is inf)
            bulk = int(min((cost - budget) / prices[tier], fixed[tier] + 2.0)) - 2 if prices[tier] > 0 else 0
            if bulk > 64:
                fixed[tier] -= bulk
                cost -= bulk * prices[tier]
                budget_cut += bulk
            while fixed[tier] > 0 and cost > budget + 1e-9:
                fixed[tier] -= 1
                cost -= prices[tier]
                budget_cut += 1
        bought = np.array(fixed, dtype=np.int64)
        cost = dot(bought, offer_price)  # the price of what is left, not the running difference
    return bought, cost, offer_cut, budget_cut


def broker_profit(sold: np.ndarray, price: np.ndarray, unit_cost: np.ndarray) -> float:
    return dot(sold, price - unit_cost)
