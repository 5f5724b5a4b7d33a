"""Reference mechanisms from the literature (issue 42): where honesty is meant to pay.

Three scripted allocators that mechanism design proposes for sharing a resource without money,
each observation-only and each ending with the baselines' limits step
(:meth:`policies.allocators.AllocatorBaseline.fit`, ``policies/limits.py``). Their points on the
welfare-exploitability frontier, and why they sit there, are in docs/negotiation.md.

``credit`` (karma-style: Vuppalapati, Fikioris, Agarwal, Cidon, Khandelwal and Tardos, *Karma:
Resource Allocation for Dynamic Demands*, OSDI 2023; the artificial currencies of Gorokh, Banerjee
and Iyer, *From Monetary to Nonmonetary Mechanism Design via Artificial Currencies*; Guo, Conitzer
and Reeves, *Competitive Repeated Allocation Without Payments*, WINE 2009). Per tier ``k`` and tick,
with ``C`` GPUs (online + bought) and ``N`` teams:

1. **guaranteed**: ``floor(guaranteed x C)`` GPUs split evenly (the odd ones rotating by tick);
   a team takes ``min(demand, its guaranteed share)`` for free and *donates* the rest;
2. **borrowing**: every other GPU (the shared slice and the donations) goes one at a time to the
   team with unmet demand and the **most credits** on the tier (ties rotate by tick); each
   borrowed GPU costs its team one credit. Balances may go negative (the allocation stays
   work-conserving: a GPU nobody with credits wants still goes to a debtor), so a team that
   borrows more than it is paid back stands behind every other borrower later;
3. **earning**: each borrowed GPU that a donation supplied pays one credit to a donor (the donor
   with the fewest credits first, as Karma does); every team also earns an even share of the
   shared slice each tick (Karma's free credits), so a team whose demand stays within its share
   builds credit.

Every team starts with ``endowment`` ticks' worth of its fair share ``C_owned / N`` as credits.
A bluff that wins GPUs now is paid in credits that rank it last when GPUs are contested again:
the incentive is intertemporal, not per tick.

``uniform_rule`` (Sprumont, *The Division Problem with Single-Peaked Preferences*, Econometrica
1991; Ching 1994 for its characterisation). Per tier, over the demands: when they exceed the GPUs,
each team gets ``min(demand, L)`` with ``L`` the level that uses them all (water-filling); when the
GPUs exceed the demands, each gets ``max(demand, L)``: the surplus raises the lowest grants first
(``surplus`` of it, default 1: the textbook rule allocates the whole amount; ``surplus=0`` keeps
the surplus, i.e. free disposal, where the rule is ``max_min_fair``'s water-filling). It is
strategy-proof, efficient and symmetric when every agent's preference is single-peaked at its need
(more than the need is worse). Odd units rotate by tick.

``fair_planner``: ``planner`` (``policies/planner.py``) with a headroom that is a share of the
*deflated* need: each team's declaration is undone with its full estimated inflation factor, then
``headroom`` of that need is added (rounded half up; within the request ceiling), the same share
for every team. ``planner`` keeps half the estimated *inflation* as headroom instead, which pays a
bluffer in proportion to its bluff and a truth-teller nothing.
"""

from __future__ import annotations

import math
from typing import Any

from commons_arena.scenario import ScenarioConfig
from policies.allocators import AllocatorBaseline, AllocatorView, water_fill
from policies.planner import PlannerAllocator


def rotation(n: int, tick: int) -> list[int]:
    """Team order starting at ``tick mod n`` (who gets the odd unit, who wins a tie)."""
    return [(tick + j) % n for j in range(n)]


def even_split(total: int, n: int, tick: int) -> list[int]:
    """``total`` units split evenly over ``n`` teams, the odd ones rotating by tick."""
    share, extra = divmod(max(total, 0), n)
    out = [share] * n
    for i in rotation(n, tick)[:extra]:
        out[i] += 1
    return out


class CreditAllocator(AllocatorBaseline):
    """Karma-style credits per tier (module docstring)."""

    name = "credit"

    def __init__(self, config: ScenarioConfig, agent: str = "allocator", seed: int | None = None, pacing: float = 2.0,
                 guaranteed: float = 0.5, endowment: float = 2.0) -> None:
        if not 0.0 <= guaranteed <= 1.0:
            raise ValueError(f"guaranteed must be in [0, 1], got {guaranteed}")
        if not endowment >= 0:
            raise ValueError(f"endowment must be >= 0, got {endowment}")
        self.guaranteed = float(guaranteed)
        self.endowment = float(endowment)
        self._fair = [t.owned / len(config.teams) for t in config.gpu_tiers]  # owned GPUs per team, per tier
        super().__init__(config, agent, seed, pacing)

    @property
    def params(self) -> dict[str, Any]:
        return {"pacing": self.pacing, "guaranteed": self.guaranteed, "endowment": self.endowment}

    def clear(self) -> None:
        # credits[i][k]: team i's balance on tier k
        self.credits = [[self.endowment * f for f in self._fair] for _ in range(self.n_teams)]

    def grant(self, v: AllocatorView, capacity: list[int]) -> list[list[int]]:
        N = self.n_teams
        grant = [[0] * self.n_tiers for _ in range(N)]
        order = rotation(N, v.tick)
        for k, cap in enumerate(capacity):
            credits = [row[k] for row in self.credits]
            demand = [row[k] for row in v.demand]
            share = even_split(math.floor(self.guaranteed * cap), N, v.tick)
            free = [min(d, s) for d, s in zip(demand, share, strict=True)]
            donated = [s - f for s, f in zip(share, free, strict=True)]
            pool = cap - sum(free)
            got = list(free)
            borrowed = 0
            while pool > 0:
                wanting = [i for i in order if got[i] < demand[i]]
                if not wanting:
                    break
                i = max(wanting, key=lambda i: credits[i])  # the first of the rotation on a tie
                got[i] += 1
                credits[i] -= 1.0
                pool -= 1
                borrowed += 1
            # donations supply the borrowed GPUs first; each pays its donor (fewest credits first)
            for _ in range(min(borrowed, sum(donated))):
                i = min((i for i in order if donated[i] > 0), key=lambda i: credits[i])
                donated[i] -= 1
                credits[i] += 1.0
            shared_slice = cap - sum(share)
            for i in range(N):
                credits[i] += shared_slice / N
                self.credits[i][k] = credits[i]
                grant[i][k] = got[i]
        return grant


class UniformRuleAllocator(AllocatorBaseline):
    """Sprumont's uniform rule per tier (module docstring)."""

    name = "uniform_rule"

    def __init__(self, config: ScenarioConfig, agent: str = "allocator", seed: int | None = None, pacing: float = 2.0,
                 surplus: float = 1.0) -> None:
        if not 0.0 <= surplus <= 1.0:
            raise ValueError(f"surplus must be in [0, 1], got {surplus}")
        self.surplus = float(surplus)
        super().__init__(config, agent, seed, pacing)

    @property
    def params(self) -> dict[str, Any]:
        return {"pacing": self.pacing, "surplus": self.surplus}

    def grant(self, v: AllocatorView, capacity: list[int]) -> list[list[int]]:
        N = self.n_teams
        grant = [[0] * self.n_tiers for _ in range(N)]
        start = v.tick % N
        for k, cap in enumerate(capacity):
            column = [row[k] for row in v.demand]
            if sum(column) >= cap:
                shares = water_fill(column, cap, start)  # min(demand, L)
            else:
                shares = raise_lowest(column, math.floor(self.surplus * (cap - sum(column))), start)  # max(demand, L)
            for i, g in enumerate(shares):
                grant[i][k] = g
        return grant


def raise_lowest(base: list[int], units: int, start: int) -> list[int]:
    """``base`` with ``units`` more, one at a time to the lowest (ties: the first from ``start``):
    integer ``max(base, L)``."""
    out = list(base)
    order = [(start + j) % len(out) for j in range(len(out))]
    for _ in range(units):
        i = min(order, key=lambda i: out[i])
        out[i] += 1
    return out


class FairPlannerAllocator(PlannerAllocator):
    """``planner`` whose headroom is ``headroom`` x the deflated need (module docstring)."""

    name = "fair_planner"

    def __init__(self, config: ScenarioConfig, agent: str = "allocator", seed: int | None = None, pacing: float = 2.0,
                 gpu_tick_value: float = 6.0, prior_sigma: float = 0.1, headroom: float = 0.5) -> None:
        if not 0.0 <= headroom <= 1.0:
            raise ValueError(f"headroom must be in [0, 1], got {headroom}")
        self.headroom = float(headroom)
        super().__init__(config, agent, seed, pacing, gpu_tick_value, prior_sigma, margin=0.0)

    @property
    def params(self) -> dict[str, Any]:
        return {"pacing": self.pacing, "gpu_tick_value": self.gpu_tick_value, "prior_sigma": self.prior_sigma,
                "headroom": self.headroom}

    def estimate_need(self, declared: list[int], factor: float, ceilings: list[int]) -> list[int]:
        deflated = super().estimate_need(declared, factor, ceilings)  # margin 0: the whole inflation undone
        return [min(n + math.floor(self.headroom * n + 0.5), top) for n, top in zip(deflated, ceilings, strict=True)]


# the reference mechanisms by name (registered beside the baselines: policies/registry.py)
REFERENCE_MECHANISMS: dict[str, type[AllocatorBaseline] | type[PlannerAllocator]] = {
    cls.name: cls for cls in (CreditAllocator, UniformRuleAllocator, FairPlannerAllocator)
}

__all__ = ["REFERENCE_MECHANISMS", "CreditAllocator", "FairPlannerAllocator", "UniformRuleAllocator", "even_split",
           "raise_lowest", "rotation"]
