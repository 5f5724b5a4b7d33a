"""The reward rubric (docs/rules.md §8): named pure term functions, weighted by the scenario;
the batched core scores with :class:`Rubric` (and the list-based reference in tests/reference).

Every term returns a *raw* value oriented so that higher is better (costs are negative);
the reward of a role is ``Σ weight[term] x raw(term)``. ``infos[agent]["reward_terms"]``
holds the weighted values, so they sum exactly to the agent's reward. To add a term,
write a function here, add it to the role's table and give it a weight in the scenario
schema.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from commons_arena.scenario import RewardWeights

# A tick's raw measurements, what every term reads: the batched core's ``Outcome`` (an entry per
# arena; ``commons_arena.batched.tick``), or one arena's floats (the reference's, in tests/reference).
Measures = Any

# The terms, one table: each term is written over arrays (the batched core's Outcome, an entry per
# arena) and plain floats alike. A cost counted in units is negated as ``-1.0 * count``: a float,
# and -0.0 for none, as ``-float(count)`` is.


class TeamOutcome(NamedTuple):
    """One team's raw measurements of a tick (arrays in the batched core: every team at once)."""

    completed_value: Any
    missed_value: Any
    credibility_lost: Any


def allocator_job_value(o: Measures) -> float:
    return o.completed_total


def allocator_spend(o: Measures) -> float:
    return -(o.purchase_cost + o.operating_cost)


def allocator_missed(o: Measures) -> float:
    return -o.missed_total


def allocator_idle(o: Measures) -> float:
    return -1.0 * o.idle_gpus


def allocator_carbon(o: Measures) -> float:
    return -o.carbon_over_kg


def allocator_escalation(o: Measures) -> float:
    return -o.justified_pressure


def allocator_fairness(o: Measures) -> float:
    """Jain's index of true-need satisfaction over teams with a need, minus 1 (so 0 is fair)."""
    return o.fairness - 1.0


def allocator_invalid(o: Measures) -> float:
    return -1.0 * o.allocator_invalid


def team_job_value(t: TeamOutcome) -> float:
    return t.completed_value


def team_missed(t: TeamOutcome) -> float:
    return -t.missed_value


def team_credibility(t: TeamOutcome) -> float:
    return -t.credibility_lost


def broker_profit(o: Measures) -> float:
    return o.broker_profit


def broker_invalid(o: Measures) -> float:
    return -1.0 * o.broker_invalid


ALLOCATOR_TERMS: dict[str, Callable[[Measures], float]] = {
    "job_value": allocator_job_value,
    "spend": allocator_spend,
    "missed": allocator_missed,
    "idle": allocator_idle,
    "carbon": allocator_carbon,
    "escalation": allocator_escalation,
    "fairness": allocator_fairness,
    "invalid": allocator_invalid,
}
TEAM_TERMS: dict[str, Callable[[TeamOutcome], float]] = {
    "job_value": team_job_value,
    "missed": team_missed,
    "credibility": team_credibility,
}
BROKER_TERMS: dict[str, Callable[[Measures], float]] = {
    "profit": broker_profit,
    "invalid": broker_invalid,
}


class Repairs(NamedTuple):
    """Units cut from infeasible actions, per rule; every allocator unit is charged ``invalid``."""

    buy_over_offer: int = 0
    buy_over_budget: int = 0
    grant_over_capacity: int = 0
    grant_over_carbon_cap: int = 0
    offer_over_inventory: int = 0  # the broker's

    def as_dict(self) -> dict[str, int]:
        """Rule name -> units (``infos["allocator"]["repairs"]``)."""
        return self._asdict()


class Rubric:
    """The scenario's weights bound to the term tables: :meth:`stacked` gives the batched core's
    weighted terms (arrays), ``*_terms`` one arena's as a dict per role (the reference's floats)."""

    def __init__(self, weights: RewardWeights) -> None:
        self.allocator = [(n, getattr(weights.allocator, n), f) for n, f in ALLOCATOR_TERMS.items()]
        self.team = [(n, getattr(weights.team, n), f) for n, f in TEAM_TERMS.items()]
        self.broker = [(n, getattr(weights.broker, n), f) for n, f in BROKER_TERMS.items()]

    def term_names(self, role: str) -> tuple[str, ...]:
        """Names of a role's terms (``"allocator"``, ``"team"`` or ``"broker"``), in the order its terms come."""
        return tuple(name for name, _, _ in getattr(self, role))

    def allocator_terms(self, o: Measures) -> dict[str, float]:
        return {name: w * term(o) for name, w, term in self.allocator}

    def team_terms(self, o: Measures, i: int) -> dict[str, float]:
        team = o.team(i)
        return {name: w * term(team) for name, w, term in self.team}

    def broker_terms(self, o: Measures) -> dict[str, float]:
        return {name: w * term(o) for name, w, term in self.broker}

    def stacked(self, role: str, o: Any) -> np.ndarray:
        """A role's weighted terms over arrays (the batched core's), stacked: ``(n_terms, *shape)``;
        for ``"team"``, ``o`` is a :class:`TeamOutcome` of every team, ``(B, N)`` arrays."""
        table = getattr(self, role)
        raw = np.array([term(o) for _, _, term in table], dtype=np.float64)
        return raw * np.array([w for _, w, _ in table]).reshape(-1, *(1,) * (raw.ndim - 1))
