"""``planner``: the strongest allocator that plays fair (SPEC §9), observation-only.

**What it knows.** Its own observation, read through the named fields of
``observation_layout`` (declared requests, revealed true needs, pressure, stances,
credibility, escalations, shocks seen, online GPUs, the offer, budget, carbon), and the
scenario's public parameters: the GPU tiers (memory, speed, owned counts, operating cost,
power, spot inventory), the carbon cap and intensity profile, the budget and horizon,
the team names, each team's archetype *name* and board pressure, the audit tolerance and
credibility losses, and its own reward weights. It never reads job lists, job generators,
shock rates or ``env.hidden_state()``: it is built from the config alone and is never
given the env.

**What it estimates.** Each team's *inflation* (bluff factor ``b``: a team declares
``ceil(need x b)`` per tier) as a posterior over a grid of factors, starting from a prior
centred on the factor its archetype name stands for (``policies.teams.ARCHETYPE_PROFILES``; an
unknown style starts from a broad prior around 1.25). The team's own history updates it:

* every declared count must be reachable as ``ceil(n x b)`` for some integer ``n``
  (a factor of 2 never yields an odd count);
* once a team's true need is revealed, the declaration that follows it must equal
  ``ceil(revealed need x b)`` tier by tier;
* an audit that exposes (or clears) a team's declaration says its declared total was
  above (or within) ``need x (1 + tolerance)``.

A team's need this tick is then its revealed need once revealed, else its declaration
(made last tick for this tick) undone with the posterior's most likely factor ``b``, less
``margin`` of the inflation (it deflates by ``1 + (1 - margin) x (b - 1)``; default
``margin=0.5``). The estimate is one tick late — jobs that arrived this tick are not seen
yet, jobs that finished last tick still are — and the kept headroom catches some of the
new ones (measured: fully deflating scores a little higher on ``standard`` and lower on
``crisis``).

**How it plans (a greedy per tick).** Teams are served in order of urgency (``pressure``,
an escalating stance, board pressure; then smaller need first):

1. each team's estimated need on its own tier from online GPUs, large-memory tiers first
   (their GPUs go to the jobs that need them before small jobs spill into them);
2. what is left unmet goes whole onto the smallest larger tier with room (a job fits any
   tier with at least its memory), else split upward;
3. what is still unmet is bought, cheapest fitting offered tier first, when its price plus
   operating and carbon cost stays below the value a GPU-tick is worth to that team
   (``gpu_tick_value``, more when the team is urgent), within a paced budget
   (``budget x min(1, pacing / ticks_left)``) — the allocator's own rubric decides.

It then fits the plan within every limit it observes (``policies.limits.fit_action``, the
baselines' step): purchases within the offer and the budget, grants within online + bought
GPUs and within a hard carbon cap's carbon left, the teams it serves last giving up their
units first, purchases the carbon cut leaves unused given back. So the planner is repaired
only when an incident or a grid spike fires in the tick it acts. (It prices a soft cap's kg
once its pace would exceed the cap; a hard cap it does not yet pace over the episode.)
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from commons_arena.enums import ShockKind, Stance
from commons_arena.scenario import ScenarioConfig
from policies.allocators import PRICE_SLACK, SPEND_EPS
from policies.base import ScriptedPolicy
from policies.limits import LimitReader, fit_action
from policies.teams import ARCHETYPE_PROFILES

BLUFF_GRID = np.round(np.arange(1.0, 3.0001, 0.05), 2)  # candidate inflation factors
UNKNOWN_STYLE_BLUFF = 1.25  # prior centre for a team whose archetype name says nothing
# log-likelihood penalties of evidence that contradicts a factor
UNREACHABLE = -2.0  # a declared count no integer need maps to under this factor
MISMATCH = -6.0  # a declaration that does not follow from the revealed need
AUDIT = -4.0  # an audit outcome this factor does not explain
# count d -> per factor of the grid: is d = ceil(n x factor) for some integer n? (pure, shared)
_REACHABLE: dict[int, np.ndarray] = {}


def inflate(need: np.ndarray | int, bluff: float) -> np.ndarray:
    """What a team with this factor declares for ``need`` (the teams' own rounding)."""
    return np.ceil(np.asarray(need) * bluff - 1e-6).astype(np.int64)


def deflate(declared: int, bluff: float, ceiling: int | None = None) -> int:
    """The integer need whose declaration under ``bluff`` is ``declared`` (closest if none).

    A declaration at ``ceiling`` (the most a request may ask for) may have been cut: the
    need is then at least the smallest one that reaches the ceiling, which is returned."""
    if declared <= 0:
        return 0
    if ceiling is not None and declared >= ceiling:
        n = 1
        while int(inflate(n, bluff)) < ceiling:
            n += 1
        return n
    guess = declared / bluff
    candidates = range(max(int(guess) - 1, 0), int(guess) + 3)
    return min(candidates, key=lambda n: (abs(int(inflate(n, bluff)) - declared), abs(n - guess)))


# (declared, bluff, ceiling) -> deflate(...): a handful of distinct arguments per episode,
# each an exact integer function of them (memoised: the planner asks every tick)
_deflate = functools.lru_cache(maxsize=65_536)(deflate)


def reachable_by(d: int) -> np.ndarray:
    """Per factor of ``BLUFF_GRID``: is ``d = ceil(n x factor)`` for some integer ``n``?"""
    if d not in _REACHABLE:
        counts = inflate(np.outer(BLUFF_GRID, np.arange(1, d + 2)), 1.0)  # factor x need
        _REACHABLE[d] = (counts == d).any(axis=1)
    return _REACHABLE[d]


class InflationBelief:
    """Posterior (log weights over ``BLUFF_GRID``) of one team's inflation factor."""

    def __init__(self, prior_centre: float, prior_sigma: float) -> None:
        log_ratio = np.log(BLUFF_GRID / prior_centre)
        # a Gaussian in log-factor plus a small uniform floor, so evidence can overrule the prior
        prior = np.exp(-0.5 * (log_ratio / prior_sigma) ** 2) + 0.02
        self.log_w = np.log(prior / prior.sum())

    @property
    def factor(self) -> float:
        return float(BLUFF_GRID[int(np.argmax(self.log_w))])

    def saw_declaration(self, declared: np.ndarray, ceiling: np.ndarray) -> None:
        for d, top in zip(declared.tolist(), ceiling.tolist(), strict=True):
            if 0 < d < top:  # a count at the ceiling may have been cut: no evidence
                self.log_w += np.where(reachable_by(int(d)), 0.0, UNREACHABLE)

    def saw_revealed_pair(self, need: np.ndarray, declared: np.ndarray, ceiling: np.ndarray) -> None:
        """``declared`` was made in the tick whose true need was ``need`` (revealed)."""
        for n, d, top in zip(need.tolist(), declared.tolist(), ceiling.tolist(), strict=True):
            hit = np.minimum(inflate(n * BLUFF_GRID, 1.0), top) == d  # every factor at once
            self.log_w += np.where(hit, 0.0, MISMATCH)

    def saw_audit(self, declared_total: int, exposed: bool, tolerance: float) -> None:
        """An audit compared ``declared_total`` (this tick's declaration) with the true need."""
        if declared_total <= 0:
            return
        # under factor b the need behind the declaration is about declared / b
        exposed_if = declared_total / BLUFF_GRID * (1 + tolerance) < declared_total - 1e-9
        self.log_w += np.where(exposed_if == exposed, 0.0, AUDIT)


@dataclass(slots=True)
class _Seen:
    """What the previous tick's observation showed (for the evidence of this tick)."""

    declared: np.ndarray
    revealed: np.ndarray
    revealed_need: np.ndarray
    credibility: np.ndarray
    audits: float


class PlannerAllocator(ScriptedPolicy):
    """Observation-only planner; see the module docstring for what it knows and does."""

    role = "allocator"
    name = "planner"

    def __init__(
        self,
        config: ScenarioConfig,
        agent: str = "allocator",
        seed: int | None = None,
        pacing: float = 2.0,
        gpu_tick_value: float = 6.0,
        prior_sigma: float = 0.1,
        margin: float = 0.5,
    ) -> None:
        if not pacing > 0:
            raise ValueError(f"pacing must be > 0, got {pacing}")
        if not gpu_tick_value >= 0:
            raise ValueError(f"gpu_tick_value must be >= 0, got {gpu_tick_value}")
        if not prior_sigma > 0:
            raise ValueError(f"prior_sigma must be > 0, got {prior_sigma}")
        if not 0.0 <= margin <= 1.0:
            raise ValueError(f"margin must be in [0, 1], got {margin}")
        self.margin = float(margin)
        self.pacing = float(pacing)
        self.gpu_tick_value = float(gpu_tick_value)
        self.prior_sigma = float(prior_sigma)
        # public scenario parameters, read once
        tiers = config.gpu_tiers
        self._memory = [t.memory_gb for t in tiers]
        self._op_cost = [t.op_cost for t in tiers]
        self._power = [t.power_kw for t in tiers]
        self._board = [t.board_pressure for t in config.teams]
        self._archetype = [t.archetype for t in config.teams]
        self._max_ticks = config.max_ticks
        self._tolerance = config.credibility.audit_tolerance
        self._bluff_loss = config.credibility.bluff_loss
        self._w = config.rewards.allocator
        # the most a team may request per tier (requests are cut to owned + spot inventory)
        self._ceiling = np.array([t.owned + t.spot_inventory for t in tiers], dtype=np.int64)
        # tier, declared count (0 .. the largest ceiling) -> what the declaration adds to the
        # log-weights: UNREACHABLE for each factor no need maps to d; 0.0 where it says nothing
        # (d = 0, or at the tier's ceiling: a count there may have been cut)
        self._unreachable = np.array([
            [np.where(reachable_by(d) | (not 0 < d < top), 0.0, UNREACHABLE) for d in range(int(self._ceiling.max(initial=0)) + 1)]
            for top in self._ceiling.tolist()
        ]).reshape(len(tiers), -1, len(BLUFF_GRID))
        super().__init__(config, agent, seed)
        T = self.n_tiers
        self._by_memory = sorted(range(T), key=lambda k: (self._memory[k], k))
        self._rank = {k: r for r, k in enumerate(self._by_memory)}
        self._larger = [[j for j in self._by_memory if self._rank[j] > self._rank[k]] for k in range(T)]
        self._fits = [[j for j in self._by_memory if self._rank[j] >= self._rank[k]] for k in range(T)]
        self._i_escalate = int(Stance.ESCALATE)
        self._tier_index = np.arange(T)[None, :]  # row index of self._unreachable per (team, tier)
        self._limits = LimitReader(config, self.obs_layout)

    @property
    def params(self) -> dict[str, Any]:
        return {"pacing": self.pacing, "gpu_tick_value": self.gpu_tick_value, "prior_sigma": self.prior_sigma,
                "margin": self.margin}

    def clear(self) -> None:
        self.beliefs = [self._prior(a) for a in getattr(self, "_archetype", [])]
        # one row per team; each belief keeps a view of its row (observe updates all at once)
        self._log_w = np.stack([b.log_w for b in self.beliefs]) if self.beliefs else np.zeros((0, len(BLUFF_GRID)))
        for belief, row in zip(self.beliefs, self._log_w, strict=True):
            belief.log_w = row
        self._seen: _Seen | None = None
        self.last_estimate: np.ndarray | None = None

    def _prior(self, archetype: str) -> InflationBelief:
        style = ARCHETYPE_PROFILES.get(archetype)
        if style is None:
            return InflationBelief(UNKNOWN_STYLE_BLUFF, 3 * self.prior_sigma)
        return InflationBelief(style.bluff, self.prior_sigma)

    # ------------------------------------------------------------------ belief
    def observe(self, obs: np.ndarray) -> np.ndarray:
        """Update the inflation beliefs with this observation; return the need estimate (teams x tiers).

        Every team at once: the teams' log-weights are the rows of one array (each belief's
        ``log_w`` a view of its row), and each row receives the same additions in the same
        order as :class:`InflationBelief`'s methods make them one team at a time (a tier's
        declaration, then a revealed pair's, then an audit), so the result is bit for bit
        theirs (tests/policies/test_planner_identical.py). Teams without evidence add 0.0.
        """
        declared = self.field(obs, "declared").astype(np.int64)
        revealed = self.field(obs, "revealed") > 0.5
        revealed_need = self.field(obs, "revealed_need").astype(np.int64)
        credibility = self.field(obs, "credibility").astype(np.float64)
        audits = float(self.field(obs, "shocks_seen")[int(ShockKind.COMPLIANCE_AUDIT)])
        prev = self._seen
        log_w, top = self._log_w, self._ceiling
        # each evidence term is computed for every (team, tier) at once (teams x tiers x factors),
        # then added tier by tier: the same float additions in the same order as one at a time
        counts = np.minimum(declared, self._unreachable.shape[1] - 1)
        unreachable = self._unreachable[self._tier_index, counts]
        for k in range(self.n_tiers):
            log_w += unreachable[:, k]
        if prev is not None and prev.revealed.any():
            # the declaration seen now was made in the tick whose need was revealed then
            hit = np.minimum(inflate(prev.revealed_need[:, :, None] * BLUFF_GRID, 1.0), top[:, None]) == declared[:, :, None]
            mismatch = np.where(hit | ~prev.revealed[:, None, None], 0.0, MISMATCH)
            for k in range(self.n_tiers):
                log_w += mismatch[:, k]
        if prev is not None and audits > prev.audits:
            for i, belief in enumerate(self.beliefs):
                if prev.credibility[i] >= self._bluff_loss:
                    exposed = prev.credibility[i] - credibility[i] >= self._bluff_loss - 1e-6
                    belief.saw_audit(int(prev.declared[i].sum()), exposed, self._tolerance)
        self._seen = _Seen(declared, revealed, revealed_need, credibility, audits)
        # keep ``margin`` of the estimated inflation: the estimate is a tick late, and a
        # little headroom catches jobs that arrived since
        estimate = revealed_need.copy()
        tops = top.tolist()
        for i, g in enumerate(np.argmax(log_w, axis=1).tolist()):
            if not revealed[i]:
                estimate[i] = self.estimate_need(declared[i].tolist(), float(BLUFF_GRID[g]), tops)
        self.last_estimate = estimate
        return estimate

    def estimate_need(self, declared: list[int], factor: float, ceilings: list[int]) -> list[int]:
        """A team's need per tier from its declaration and its most likely inflation ``factor``:
        undone with all but ``margin`` of the inflation (``fair_planner``: another headroom)."""
        bluff = 1.0 + (1.0 - self.margin) * (factor - 1.0)
        return [_deflate(d, bluff, c) for d, c in zip(declared, ceilings, strict=True)]

    # ------------------------------------------------------------------ plan
    def decide(self, obs: np.ndarray) -> list[int]:
        need = self.observe(obs).tolist()
        return self.plan(obs, need)

    def plan(self, obs: np.ndarray, need: list[list[int]]) -> list[int]:
        N, T = self.n_teams, self.n_tiers
        tick = int(self.field(obs, "tick")[0])
        online = [int(x) for x in self.field(obs, "online")]
        offer_qty = [int(x) for x in self.field(obs, "offer_qty")]
        offer_price = self.field(obs, "offer_price").tolist()
        budget = float(self.field(obs, "budget")[0])
        pressure = self.field(obs, "pressure").tolist()
        stance = self.field(obs, "stance")
        escalating = [bool(stance[i, self._i_escalate] > 0.5) for i in range(N)]
        totals = [sum(row) for row in need]
        order = sorted(
            (i for i in range(N) if totals[i] > 0),
            key=lambda i: (-pressure[i], not escalating[i], -self._board[i], totals[i], i),
        )
        grant = [[0] * T for _ in range(N)]
        left = list(online)
        unmet = [[0] * T for _ in range(N)]
        # 1. own tier, large-memory tiers first
        for k in reversed(self._by_memory):
            for i in order:
                give = min(need[i][k], left[k])
                grant[i][k] += give
                left[k] -= give
                unmet[i][k] = need[i][k] - give
        # 2. spill upward: whole onto the smallest larger tier with room, else split
        for i in order:
            for k in reversed(self._by_memory):
                n = unmet[i][k]
                if n <= 0:
                    continue
                whole = next((j for j in self._larger[k] if left[j] >= n), None)
                if whole is not None:
                    grant[i][whole] += n
                    left[whole] -= n
                    unmet[i][k] = 0
                    continue
                for j in self._larger[k]:
                    give = min(n, left[j])
                    grant[i][j] += give
                    left[j] -= give
                    n -= give
                unmet[i][k] = n
        # 3. buy what is worth buying
        buy = [0] * T
        if any(n > 0 for row in unmet for n in row):
            ticks_left = max(self._max_ticks - tick, 1)
            money = max(budget * min(1.0, self.pacing / ticks_left) - SPEND_EPS, 0.0)
            kg_cost = self._kg_cost(obs, tick)
            w = self._w
            for i in order:
                worth = self.gpu_tick_value * (1.0 + 0.5 * pressure[i] + 0.5 * escalating[i])
                for k in reversed(self._by_memory):
                    n = unmet[i][k]
                    if n <= 0:
                        continue
                    for j in sorted(self._fits[k], key=lambda j: (offer_price[j], self._rank[j])):
                        avail = offer_qty[j] - buy[j]
                        price = offer_price[j] * PRICE_SLACK
                        cost = w.spend * (price + self._op_cost[j]) + kg_cost[j]
                        if avail <= 0 or cost > worth:
                            continue
                        give = min(n, avail) if price <= 0 else min(n, avail, int(money // price))
                        if give <= 0:
                            continue
                        buy[j] += give
                        grant[i][j] += give
                        money -= give * price
                        n -= give
                        if n == 0:
                            break
                    unmet[i][k] = n
        # within every observed limit (a hard cap's carbon left above all): teams it serves last give up first
        served = set(order)
        trim_order = order + [i for i in range(N) if i not in served]
        buy, grant = fit_action(self._limits(obs), buy, grant, trim_order)
        return buy + [g for row in grant for g in row]

    def _kg_cost(self, obs: np.ndarray, tick: int) -> list[float]:
        """Carbon cost of one more busy GPU-tick per tier: charged only past the soft cap."""
        used = float(self.field(obs, "carbon_used")[0])
        cap = float(self.field(obs, "carbon_cap")[0])
        intensity = float(self.field(obs, "intensity_forecast")[0])
        # expect the rest of the episode to emit at about the pace so far
        pace = used / max(tick, 1)
        projected = used + pace * (self._max_ticks - tick)
        if projected <= cap or self._w.carbon == 0:
            return [0.0] * self.n_tiers
        return [self._w.carbon * p * intensity for p in self._power]


__all__ = ["BLUFF_GRID", "InflationBelief", "PlannerAllocator", "deflate", "inflate", "reachable_by"]
