"""The spot market: the broker's posted offer and the allocator's purchases (SPEC §3, §5).

Repair rules (deterministic, SPEC §5.4):

* offer: a quantity above the broker's current inventory is cut to the inventory.
* purchases: each tier's buy is cut to the offered quantity; then, while the total cost
  exceeds the budget, one GPU is removed from the most expensive tier that still has a
  purchase (ties: the higher tier index). Every removed unit counts as repaired.
"""

from __future__ import annotations

import numpy as np


def price_grid(max_price: np.ndarray, levels: int) -> np.ndarray:
    """Price of each (tier, level): level k of K costs ``max_price * k / (K - 1)``."""
    return max_price[:, None] * (np.arange(levels) / (levels - 1))[None, :]


def post_offer(
    quantity: np.ndarray, price_level: np.ndarray, inventory: np.ndarray, grid: np.ndarray, multiplier: float
) -> tuple[np.ndarray, np.ndarray, int]:
    """The offer for next tick: (quantity, unit price, repaired units)."""
    offered = np.minimum(quantity, inventory)
    repaired = int((quantity - offered).sum())
    prices = grid[np.arange(len(price_level)), price_level] * multiplier
    return offered, prices, repaired


def repair_purchases(
    buys: np.ndarray, offer_qty: np.ndarray, offer_price: np.ndarray, budget: float
) -> tuple[np.ndarray, int, int]:
    """Cut buys to the offer, then to the budget. Returns (buys, offer_cut, budget_cut)."""
    fixed = np.minimum(buys, offer_qty)
    offer_cut = int((buys - fixed).sum())
    budget_cut = 0
    cost = float(fixed @ offer_price)
    if cost > budget + 1e-9:
        # Most expensive first; stable for equal prices by preferring the higher index.
        by_price = sorted(range(len(fixed)), key=lambda i: (offer_price[i], i), reverse=True)
        for tier in by_price:
            while fixed[tier] > 0 and cost > budget + 1e-9:
                fixed[tier] -= 1
                cost -= float(offer_price[tier])
                budget_cut += 1
    return fixed, offer_cut, budget_cut


def broker_profit(sold: np.ndarray, price: np.ndarray, unit_cost: np.ndarray) -> float:
    return float(sold @ (price - unit_cost))
