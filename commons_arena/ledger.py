"""Episode totals: each agent's reward terms and the shared statistics, tick by tick.

``infos[agent]["episode"]`` at the end of an episode is :meth:`EpisodeLedger.summary`; the
batched core's ledger keeps the same totals as arrays and summarises them with the same
:func:`episode_summary`.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from commons_arena.tick import TickReport

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


class EpisodeLedger:
    """Running totals of one episode (reset by building a new ledger)."""

    def __init__(self, term_names: dict[str, tuple[str, ...]], owned_gpus: int) -> None:
        self.term_names = term_names  # every tick's terms of an agent come in this order
        self.owned_gpus = owned_gpus  # GPUs owned, all tiers: the utilisation's capacity per tick
        self.totals = {agent: [0.0] * len(names) for agent, names in term_names.items()}
        self.stats = dict.fromkeys(EPISODE_STATS, 0.0)

    def add(self, report: TickReport, carbon_kg: float) -> None:
        """Count a played tick; ``carbon_kg``: emissions so far, after the tick."""
        for agent, agent_terms in report.terms.items():
            self.totals[agent] = list(map(operator.add, self.totals[agent], agent_terms.values()))
        o, st = report.outcome, self.stats
        st["completed"] += sum([len(team.completed) for team in report.teams])
        st["missed"] += sum([len(team.missed) for team in report.teams])
        st["completed_value"] += o.completed_total
        st["missed_value"] += o.missed_total
        st["spend"] += o.purchase_cost + o.operating_cost
        st["purchased_gpus"] += sum(report.bought.tolist())
        st["granted_gpu_ticks"] += report.granted_total
        st["used_gpu_ticks"] += report.used_total
        st["idle_gpu_ticks"] += o.idle_gpus
        st["invalid_units"] += o.allocator_invalid
        st["carbon_kg"] = carbon_kg
        st["fairness_sum"] += o.fairness
        st["justified_escalations"] += sum(report.justified)
        st["unjustified_escalations"] += sum(report.unjustified)
        st["exposed_bluffs"] += sum(report.exposed_bluffs)
        st["ticks"] += 1

    def summary(self, agent: str) -> dict[str, float]:
        """``return`` and each reward term total of ``agent``, plus the shared statistics."""
        seen = self.stats["ticks"] > 0  # before the first step no term has been seen yet: no term totals
        names, totals = (self.term_names[agent], self.totals[agent]) if seen else ((), [])
        summary = episode_summary(names, totals, self.stats, self.owned_gpus)
        return {key: float(value) for key, value in summary.items()}


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
