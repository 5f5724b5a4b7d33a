"""The spot market: the broker's posted offer and the allocator's purchases (docs/rules.md §3, §5).

Repair rules (deterministic, docs/rules.md §5, repairs):

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


