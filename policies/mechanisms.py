"""Reference mechanisms from the literature (issue 42): where honesty is meant to pay.

Three scripted allocators that mechanism design proposes for sharing a resource without money,
each observation-only and each ending with the baselines' limits step (``policies/limits.py``;
``credit`` and ``uniform_rule`` are defined once, over N arenas, as the baselines are, and play a
single arena as a batch of one; ``fair_planner`` is ``planner`` with a headroom, a batch of one the same
way). Their points on the welfare-exploitability frontier, and why they sit there, are in docs/negotiation.md.

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

from typing import Any

import numpy as np

from commons_arena.scenario import ScenarioConfig
from policies.allocators import BatchAllocator, BatchView, water_fill_batch
from policies.planner import BatchPlanner


def rotated(tick: np.ndarray, n: int) -> np.ndarray:
    """Per row the team order starting at ``tick mod n`` (who gets the odd unit, who wins a tie): ``(N, n)``."""
    return (tick[:, None] + np.arange(n)[None, :]) % n


def even_split(total: np.ndarray, n: int) -> np.ndarray:
    """Per row ``total`` units split evenly over ``n`` teams in rotation order, the odd ones to the first."""
    share, extra = np.divmod(np.maximum(total, 0), n)
    return share[:, None] + (np.arange(n)[None, :] < extra[:, None])


def raise_lowest(base: np.ndarray, units: np.ndarray) -> np.ndarray:
    """Per row ``base`` (in rotation order) with ``units`` more, one at a time to the lowest (ties: the
    first): integer ``max(base, L)``."""
    out, rows, units = base.copy(), np.arange(len(base)), units.copy()
    while (live := units > 0).any():
        i = np.argmin(out, axis=1)
        out[rows[live], i[live]] += 1
        units -= live
    return out


class BatchCredit(BatchAllocator):
    """Karma-style credits per tier (module docstring), every arena at once: teams in rotation order."""

    name = "credit"

    def __init__(self, config: ScenarioConfig, agent: str, num_envs: int, pacing: float = 2.0,
                 guaranteed: float = 0.5, endowment: float = 2.0) -> None:
        if not 0.0 <= guaranteed <= 1.0:
            raise ValueError(f"guaranteed must be in [0, 1], got {guaranteed}")
        if not endowment >= 0:
            raise ValueError(f"endowment must be >= 0, got {endowment}")
        self.guaranteed = float(guaranteed)
        self.endowment = float(endowment)
        self._fair = np.array([t.owned / len(config.teams) for t in config.gpu_tiers])  # owned GPUs per team, per tier
        self.credits = np.zeros((num_envs, len(config.teams), len(config.gpu_tiers)))  # arena, team, tier: balance
        super().__init__(config, agent, num_envs, pacing)

    @property
    def params(self) -> dict[str, Any]:
        return {"pacing": self.pacing, "guaranteed": self.guaranteed, "endowment": self.endowment}

    def clear(self, arenas: np.ndarray) -> None:
        self.credits[arenas] = self.endowment * self._fair

    def grant(self, v: BatchView, capacity: np.ndarray) -> np.ndarray:
        rows, M = self._rows, self.n_teams
        order = rotated(v.tick, M)
        grant = np.zeros_like(v.demand)
        for k in range(self.n_tiers):
            cap = capacity[:, k]
            demand = np.take_along_axis(v.demand[:, :, k], order, axis=1)
            credits = np.take_along_axis(self.credits[:, :, k], order, axis=1)
            share = even_split(np.floor(self.guaranteed * cap).astype(np.int64), M)
            got = np.minimum(demand, share)  # the guaranteed share, free
            donated = share - got
            pool, borrowed = cap - got.sum(axis=1), np.zeros_like(cap)
            # one GPU at a time to the team with unmet demand and the most credits (the first of the rotation on a tie)
            while (live := (pool > 0) & (wanting := got < demand).any(axis=1)).any():
                i = np.argmax(np.where(wanting, credits, -np.inf), axis=1)[live]
                got[rows[live], i] += 1
                credits[rows[live], i] -= 1.0
                pool, borrowed = pool - live, borrowed + live
            # donations supply the borrowed GPUs first; each pays its donor (fewest credits first)
            paid = np.minimum(borrowed, donated.sum(axis=1))
            while (live := paid > 0).any():
                i = np.argmin(np.where(donated > 0, credits, np.inf), axis=1)[live]
                donated[rows[live], i] -= 1
                credits[rows[live], i] += 1.0
                paid = paid - live
            credits += ((cap - share.sum(axis=1)) / M)[:, None]  # everyone's share of the shared slice
            np.put_along_axis(self.credits[:, :, k], order, credits, axis=1)
            np.put_along_axis(grant[:, :, k], order, got, axis=1)
        return grant


class BatchUniformRule(BatchAllocator):
    """Sprumont's uniform rule per tier (module docstring), every arena at once."""

    name = "uniform_rule"

    def __init__(self, config: ScenarioConfig, agent: str, num_envs: int, pacing: float = 2.0,
                 surplus: float = 1.0) -> None:
        if not 0.0 <= surplus <= 1.0:
            raise ValueError(f"surplus must be in [0, 1], got {surplus}")
        self.surplus = float(surplus)
        super().__init__(config, agent, num_envs, pacing)

    @property
    def params(self) -> dict[str, Any]:
        return {"pacing": self.pacing, "surplus": self.surplus}

    def grant(self, v: BatchView, capacity: np.ndarray) -> np.ndarray:
        start = v.tick % self.n_teams
        order = rotated(start, self.n_teams)
        grant = np.zeros_like(v.demand)
        for k in range(self.n_tiers):
            cap, column = capacity[:, k], v.demand[:, :, k]
            spare = cap - column.sum(axis=1)
            raised = raise_lowest(np.take_along_axis(column, order, axis=1),  # max(demand, L)
                                  np.where(spare > 0, np.floor(self.surplus * spare), 0).astype(np.int64))
            np.put_along_axis(raised, order, raised.copy(), axis=1)
            filled = water_fill_batch(column, np.maximum(cap, 0), start)  # min(demand, L)
            grant[:, :, k] = np.where((spare <= 0)[:, None], filled, raised)
        return grant


class BatchFairPlanner(BatchPlanner):
    """``planner`` whose headroom is ``headroom`` x the deflated need (module docstring): the whole
    inflation undone (``margin`` 0), then the same share of need added for every team."""

    name = "fair_planner"

    def __init__(self, config: ScenarioConfig, agent: str, num_envs: int, pacing: float = 2.0,
                 gpu_tick_value: float = 6.0, prior_sigma: float = 0.1, headroom: float = 0.5,
                 heed_escalation: bool = True, buy_headroom: bool = True) -> None:
        super().__init__(config, agent, num_envs, pacing, gpu_tick_value, prior_sigma, margin=0.0, headroom=headroom,
                         heed_escalation=heed_escalation, buy_headroom=buy_headroom)

    @property
    def params(self) -> dict[str, Any]:
        return {"pacing": self.pacing, "gpu_tick_value": self.gpu_tick_value, "prior_sigma": self.prior_sigma,
                "headroom": self.headroom, **self._flags}

    @property
    def arguments(self) -> dict[str, Any]:
        return {**self.params, "heed_escalation": self.heed_escalation, "buy_headroom": self.buy_headroom}


# the reference mechanisms by name (registered beside the baselines: policies/registry.py)
REFERENCE_MECHANISMS: dict[str, type[BatchAllocator] | type[BatchPlanner]] = {
    cls.name: cls for cls in (BatchCredit, BatchUniformRule, BatchFairPlanner)
}

__all__ = ["REFERENCE_MECHANISMS", "BatchCredit", "BatchFairPlanner", "BatchUniformRule", "even_split",
           "raise_lowest", "rotated"]
