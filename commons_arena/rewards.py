"""The reward rubric (docs/rules.md §8): named pure term functions, weighted by the scenario;
the per-arena env and the batched core score with the same :class:`Rubric`.

Every term returns a *raw* value oriented so that higher is better (costs are negative);
the reward of a role is ``Σ weight[term] x raw(term)``. ``infos[agent]["reward_terms"]``
holds the weighted values, so they sum exactly to the agent's reward. To add a term,
write a function here, add it to the role's table and give it a weight in the scenario
schema.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from commons_arena.numerics import dot, numpy_sum
from commons_arena.scenario import RewardWeights


@dataclass(slots=True)
class TickOutcome:
    """Raw measurements of one tick, the only input of the term functions."""

    # Per team: a few Python floats each (lists or tuples; arrays work too). Read one entry
    # at a time by the team terms, where indexing numpy would cost more than the arithmetic.
    completed_value: Sequence[float]  # per team: value of jobs completed this tick
    missed_value: Sequence[float]  # per team: value of jobs missed this tick
    satisfaction: Sequence[float]  # per team: share of true need that ran (1 when no need)
    has_need: Sequence[bool]  # per team: had any ready job
    credibility_lost: Sequence[float]  # per team
    purchase_cost: float = 0.0  # spot GPUs bought x price paid
    operating_cost: float = 0.0  # granted GPUs x tier op_cost
    idle_gpus: int = 0  # granted GPUs no job used
    carbon_over_kg: float = 0.0  # kg over the cap added this tick (soft cap only)
    justified_pressure: float = 0.0  # Σ board_pressure of justified escalations
    allocator_invalid: int = 0  # repaired units of the allocator's action
    broker_profit: float = 0.0  # revenue - unit cost of GPUs sold
    broker_invalid: int = 0  # repaired units of the broker's action
    # Derived once per tick: several terms and the episode statistics read them.
    completed_total: float = field(init=False)  # Σ completed_value
    missed_total: float = field(init=False)  # Σ missed_value
    fairness: float = field(init=False)  # Jain index of satisfaction over the teams with a need

    def team(self, i: int) -> TeamOutcome:
        return TeamOutcome(self.completed_value[i], self.missed_value[i], self.credibility_lost[i])

    def __post_init__(self) -> None:
        self.completed_total = numpy_sum(self.completed_value)
        self.missed_total = numpy_sum(self.missed_value)
        self.fairness = jain_index([x for x, need in zip(self.satisfaction, self.has_need, strict=True) if need])


def jain_index(x: Sequence[float]) -> float:
    """Jain's fairness index (Σx)² / (n Σx²); 1 for an empty or all-zero vector."""
    if len(x) == 0:
        return 1.0
    squares = dot(x, x)  # rounded the same on every processor (commons_arena.numerics)
    return 1.0 if squares == 0.0 else numpy_sum(x) ** 2 / (len(x) * squares)


# The terms, one table both paths read: each term is written over plain floats (one arena's
# TickOutcome) and arrays alike (the batched core's Outcome, an entry per arena). A cost counted
# in units is negated as ``-1.0 * count``: a float, and -0.0 for none, as ``-float(count)`` is.


class TeamOutcome(NamedTuple):
    """One team's raw measurements of a tick (``TickOutcome.team(i)``; in the batched core, arrays)."""

    completed_value: Any
    missed_value: Any
    credibility_lost: Any


def allocator_job_value(o: TickOutcome) -> float:
    return o.completed_total


def allocator_spend(o: TickOutcome) -> float:
    return -(o.purchase_cost + o.operating_cost)


def allocator_missed(o: TickOutcome) -> float:
    return -o.missed_total


def allocator_idle(o: TickOutcome) -> float:
    return -1.0 * o.idle_gpus


def allocator_carbon(o: TickOutcome) -> float:
    return -o.carbon_over_kg


def allocator_escalation(o: TickOutcome) -> float:
    return -o.justified_pressure


def allocator_fairness(o: TickOutcome) -> float:
    """Jain's index of true-need satisfaction over teams with a need, minus 1 (so 0 is fair)."""
    return o.fairness - 1.0


def allocator_invalid(o: TickOutcome) -> float:
    return -1.0 * o.allocator_invalid


def team_job_value(t: TeamOutcome) -> float:
    return t.completed_value


def team_missed(t: TeamOutcome) -> float:
    return -t.missed_value


def team_credibility(t: TeamOutcome) -> float:
    return -t.credibility_lost


def broker_profit(o: TickOutcome) -> float:
    return o.broker_profit


def broker_invalid(o: TickOutcome) -> float:
    return -1.0 * o.broker_invalid


ALLOCATOR_TERMS: dict[str, Callable[[TickOutcome], float]] = {
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
BROKER_TERMS: dict[str, Callable[[TickOutcome], float]] = {
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
    """The scenario's weights bound to the term tables; ``*_terms`` give weighted terms (floats for
    one arena's :class:`TickOutcome`, arrays for the batched core's outcome)."""

    def __init__(self, weights: RewardWeights) -> None:
        self.allocator = [(n, getattr(weights.allocator, n), f) for n, f in ALLOCATOR_TERMS.items()]
        self.team = [(n, getattr(weights.team, n), f) for n, f in TEAM_TERMS.items()]
        self.broker = [(n, getattr(weights.broker, n), f) for n, f in BROKER_TERMS.items()]

    def term_names(self, role: str) -> tuple[str, ...]:
        """Names of a role's terms (``"allocator"``, ``"team"`` or ``"broker"``), in the order its terms come."""
        return tuple(name for name, _, _ in getattr(self, role))

    def allocator_terms(self, o: TickOutcome) -> dict[str, float]:
        return {name: w * term(o) for name, w, term in self.allocator}

    def team_terms(self, o: TickOutcome, i: int) -> dict[str, float]:
        team = o.team(i)
        return {name: w * term(team) for name, w, term in self.team}

    def broker_terms(self, o: TickOutcome) -> dict[str, float]:
        return {name: w * term(o) for name, w, term in self.broker}

    def stacked(self, role: str, o: Any) -> np.ndarray:
        """A role's weighted terms over arrays (the batched core's), stacked: ``(n_terms, *shape)``;
        for ``"team"``, ``o`` is a :class:`TeamOutcome` of every team, ``(B, N)`` arrays."""
        table = getattr(self, role)
        raw = np.array([term(o) for _, _, term in table], dtype=np.float64)
        return raw * np.array([w for _, w, _ in table]).reshape(-1, *(1,) * (raw.ndim - 1))
