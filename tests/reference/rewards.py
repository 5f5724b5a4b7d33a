"""The reference's tick outcome: one arena's raw measurements as floats, scored by the rubric
(``commons_arena.rewards``) as the batched core's arrays are."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from commons_arena.numerics import dot, numpy_sum
from commons_arena.rewards import TeamOutcome


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
