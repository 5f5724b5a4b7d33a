"""Episode totals: each agent's reward terms and the shared statistics, tick by tick.

``infos[agent]["episode"]`` at the end of an episode is :func:`episode_summary` of the running
totals the batched core's ledger keeps (``commons_arena.batched.env.BatchLedger``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

EPISODE_STATS = (
    "completed",  # jobs completed
    "missed",  # jobs missed
    "completed_value",
    "missed_value",
    "spend",  # spot purchases + operating cost
    "purchased_gpus",
    "granted_gpu_ticks",
    "used_gpu_ticks",
    "idle_gpu_ticks",
    "invalid_units",  # repaired units of the allocator's actions
    "carbon_kg",  # emitted so far
    "fairness_sum",  # Σ per-tick fairness (the summary reports the mean)
    "justified_escalations",
    "unjustified_escalations",
    "exposed_bluffs",
    "ticks",
)


def episode_summary(
    term_names: Sequence[str], totals: Sequence[Any], stats: Mapping[str, Any], owned_gpus: int
) -> dict[str, Any]:
    """An episode's ``return``, term totals (``term/<name>``) and statistics from its running totals:
    ``totals`` one per term, ``stats`` by :data:`EPISODE_STATS`; floats for one arena, arrays for
    a batch (the batched core's ledger), the same arithmetic either way."""
    st = {key: np.asarray(value, dtype=np.float64) for key, value in stats.items()}
    terms = {f"term/{name}": total for name, total in zip(term_names, totals, strict=True)}
    episode_return: Any = 0.0
    for total in terms.values():  # left to right, as Python's sum() adds
        episode_return = episode_return + total
    ticks = np.maximum(st.pop("ticks"), 1.0)
    st["fairness"] = st.pop("fairness_sum") / ticks
    capacity = ticks * owned_gpus + st["purchased_gpus"]
    with np.errstate(divide="ignore", invalid="ignore"):
        st["utilisation"] = np.where(capacity != 0, st["used_gpu_ticks"] / capacity, 0.0)
    st["ticks"] = ticks
    return {"return": episode_return, **terms, **st}
