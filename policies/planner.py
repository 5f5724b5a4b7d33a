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
once its pace would exceed the cap.) A hard cap it spends as work waits, not as a budget paced
over the episode: pacing it (by the carbon left, the intensity forecast and the urgency of the
waiting work) was measured below this on every binding-cap cluster tried, since carbon held
back turns work in progress into missed deadlines. Once the carbon left is below
``CAP_HORIZON`` ticks of every team's need, it spends it on work that can finish
(:func:`cap_admission`): the teams it has served in full for the most ticks first, and a team
is started only if the carbon not yet reserved covers ``CAP_HORIZON`` ticks of its need
(docs/bring_your_own_cluster.md, "When a hard cap binds"; ``scripts/planner_hard_cap.py``).
Under a soft cap none of this runs.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from commons_arena.enums import ShockKind, Stance
from commons_arena.scenario import ScenarioConfig
from policies.allocators import PRICE_SLACK, SPEND_EPS
from policies.base import ScriptedPolicy
from policies.batch import reset_indices
from policies.batch_limits import BatchLimitReader, fit_action_batch
from policies.limits import LimitReader, fit_action
from policies.teams import ARCHETYPE_PROFILES

BLUFF_GRID = np.round(np.arange(1.0, 3.0001, 0.05), 2)  # candidate inflation factors
UNKNOWN_STYLE_BLUFF = 1.25  # prior centre for a team whose archetype name says nothing
# log-likelihood penalties of evidence that contradicts a factor
UNREACHABLE = -2.0  # a declared count no integer need maps to under this factor
MISMATCH = -6.0  # a declaration that does not follow from the revealed need
AUDIT = -4.0  # an audit outcome this factor does not explain
CAP_HORIZON = 4.0  # ticks of a team's full need the carbon left must cover to start (or finish) its work
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


def cap_admission(need: np.ndarray, kg_per_gpu: np.ndarray, headroom_kg: np.ndarray, streak: np.ndarray,
                  rank: np.ndarray, horizon: float = CAP_HORIZON) -> tuple[np.ndarray, np.ndarray]:
    """Which teams' work a binding hard cap still pays for, in ``n`` arenas: ``(admitted, first)``,
    both ``(n, teams)`` bool.

    Under a hard cap a job pays only if it completes, on all its GPUs at once, so carbon spent
    on work the cap later stops is lost. The cap *binds* in an arena when its carbon left
    (``headroom_kg``) is below ``horizon`` ticks of every team's full need (``need``
    ``(n, teams, tiers)`` at this tick's ``kg_per_gpu`` ``(n, tiers)``). There, teams are
    taken in progress first (``streak`` ``(n, teams)``: consecutive ticks served in full; the
    longest first, its work the closest to done), then in the planner's order (``rank``
    ``(n, teams)``), and each is admitted only if the carbon not yet reserved covers what it
    may still burn: ``horizon`` ticks of its need, less the ticks it has run. A team not
    admitted is not started (its need is dropped, not cut to a part that runs no job). Where
    the cap does not bind, every team is admitted and none goes first (the plan is unchanged).
    ``first``: the admitted teams in progress, which the plan serves before the others.
    """
    n, N = streak.shape
    need_kg = (need * kg_per_gpu[:, None, :]).sum(axis=2)
    live = need_kg > 0
    binding = headroom_kg < horizon * need_kg.sum(axis=1)
    running = live & (streak > 0)
    ar = np.arange(n)
    walk = np.lexsort((rank, np.where(running, -streak, 0), ~running), axis=-1)
    left = np.asarray(headroom_kg, dtype=np.float64).copy()
    admitted = np.ones((n, N), dtype=bool)
    for p in range(N):
        i = walk[:, p]
        reserve = need_kg[ar, i] * np.where(running[ar, i], np.maximum(horizon - streak[ar, i], 1.0), horizon)
        ok = ~binding | (reserve <= left)
        left = np.where(binding & ok, left - reserve, left)
        admitted[ar, i] = ok
    return admitted, running & admitted & binding[:, None]


def served_streak(streak: np.ndarray, need: np.ndarray, grant: np.ndarray) -> np.ndarray:
    """Each team's consecutive ticks served in full (its grant at least its estimated need, some
    need): ``streak`` ``(..., teams)`` after a tick planned for ``need`` and granted ``grant``
    (``(..., teams, tiers)`` each)."""
    want = need.sum(axis=-1)
    return np.where((want > 0) & (grant.sum(axis=-1) >= want), streak + 1, 0)


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
        headroom: float | None = None,
        heed_escalation: bool = True,
    ) -> None:
        if not pacing > 0:
            raise ValueError(f"pacing must be > 0, got {pacing}")
        if not gpu_tick_value >= 0:
            raise ValueError(f"gpu_tick_value must be >= 0, got {gpu_tick_value}")
        if not prior_sigma > 0:
            raise ValueError(f"prior_sigma must be > 0, got {prior_sigma}")
        if not 0.0 <= margin <= 1.0:
            raise ValueError(f"margin must be in [0, 1], got {margin}")
        if headroom is not None and not 0.0 <= headroom <= 1.0:
            raise ValueError(f"headroom must be in [0, 1], got {headroom}")
        self.margin = float(margin)
        self.headroom = None if headroom is None else float(headroom)
        self.heed_escalation = bool(heed_escalation)  # False: a team's escalating stance buys it no precedence
        self.pacing = float(pacing)
        self.gpu_tick_value = float(gpu_tick_value)
        self.prior_sigma = float(prior_sigma)
        # public scenario parameters, read once
        tiers = config.gpu_tiers
        self.memory = [t.memory_gb for t in tiers]
        self.op_cost = [t.op_cost for t in tiers]
        self.power = [t.power_kw for t in tiers]
        self.board = [t.board_pressure for t in config.teams]
        self.archetype = [t.archetype for t in config.teams]
        self.max_ticks = config.max_ticks
        self.tolerance = config.credibility.audit_tolerance
        self.bluff_loss = config.credibility.bluff_loss
        self.weights = config.rewards.allocator
        # the most a team may request per tier (requests are cut to owned + spot inventory)
        self.ceiling = np.array([t.owned + t.spot_inventory for t in tiers], dtype=np.int64)
        # tier, declared count (0 .. the largest ceiling) -> what the declaration adds to the
        # log-weights: UNREACHABLE for each factor no need maps to d; 0.0 where it says nothing
        # (d = 0, or at the tier's ceiling: a count there may have been cut)
        self.unreachable = np.array([
            [np.where(reachable_by(d) | (not 0 < d < top), 0.0, UNREACHABLE) for d in range(int(self.ceiling.max(initial=0)) + 1)]
            for top in self.ceiling.tolist()
        ]).reshape(len(tiers), -1, len(BLUFF_GRID))
        super().__init__(config, agent, seed)
        T = self.n_tiers
        self.by_memory = sorted(range(T), key=lambda k: (self.memory[k], k))
        self.rank = {k: r for r, k in enumerate(self.by_memory)}
        self.larger = [[j for j in self.by_memory if self.rank[j] > self.rank[k]] for k in range(T)]
        self.fits = [[j for j in self.by_memory if self.rank[j] >= self.rank[k]] for k in range(T)]
        self.i_escalate = int(Stance.ESCALATE)
        self._tier_index = np.arange(T)[None, :]  # row index of self.unreachable per (team, tier)
        self._limits = LimitReader(config, self.obs_layout)

    @property
    def params(self) -> dict[str, Any]:
        return {"pacing": self.pacing, "gpu_tick_value": self.gpu_tick_value, "prior_sigma": self.prior_sigma,
                "margin": self.margin, **({} if self.heed_escalation else {"heed_escalation": False})}

    @property
    def settings(self) -> dict[str, Any]:
        """Every constructor parameter (:attr:`params` names a policy; ``fair_planner`` leaves out what it fixes)."""
        return {"pacing": self.pacing, "gpu_tick_value": self.gpu_tick_value, "prior_sigma": self.prior_sigma,
                "margin": self.margin, "headroom": self.headroom, "heed_escalation": self.heed_escalation}

    def prior_log_weights(self) -> np.ndarray:
        """The teams' log-weights over the bluff grid at the start of an episode ``(teams, factors)``."""
        return np.stack([self._prior(a).log_w for a in self.archetype]) if self.archetype else np.zeros((0, len(BLUFF_GRID)))

    def clear(self) -> None:
        self.beliefs = [self._prior(a) for a in getattr(self, "archetype", [])]
        # one row per team; each belief keeps a view of its row (observe updates all at once)
        self._log_w = np.stack([b.log_w for b in self.beliefs]) if self.beliefs else np.zeros((0, len(BLUFF_GRID)))
        for belief, row in zip(self.beliefs, self._log_w, strict=True):
            belief.log_w = row
        self._seen: _Seen | None = None
        self.last_estimate: np.ndarray | None = None
        self._streak = np.zeros((1, getattr(self, "n_teams", 0)), dtype=np.int64)  # see cap_admission

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
        log_w, top = self._log_w, self.ceiling
        # each evidence term is computed for every (team, tier) at once (teams x tiers x factors),
        # then added tier by tier: the same float additions in the same order as one at a time
        counts = np.minimum(declared, self.unreachable.shape[1] - 1)
        unreachable = self.unreachable[self._tier_index, counts]
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
                if prev.credibility[i] >= self.bluff_loss:
                    exposed = prev.credibility[i] - credibility[i] >= self.bluff_loss - 1e-6
                    belief.saw_audit(int(prev.declared[i].sum()), exposed, self.tolerance)
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
        undone with all but ``margin`` of the inflation; with a ``headroom`` (``fair_planner``), that
        share of the need so deflated is added (rounded half up, within the ceiling), the same for every team."""
        bluff = 1.0 + (1.0 - self.margin) * (factor - 1.0)
        deflated = [_deflate(d, bluff, c) for d, c in zip(declared, ceilings, strict=True)]
        if self.headroom is None:
            return deflated
        return [min(n + math.floor(self.headroom * n + 0.5), top) for n, top in zip(deflated, ceilings, strict=True)]

    # ------------------------------------------------------------------ plan
    def decide(self, obs: np.ndarray) -> list[int]:
        need = self.observe(obs).tolist()
        if not self._limits.hard:
            return self.plan(obs, need)
        action = self.plan(obs, need, self._streak[0])
        grant = np.array(action[self.n_tiers:], dtype=np.int64).reshape(1, self.n_teams, self.n_tiers)
        self._streak = served_streak(self._streak, np.array([need], dtype=np.int64), grant)
        return action

    def plan(self, obs: np.ndarray, need: list[list[int]], streak: np.ndarray | None = None) -> list[int]:
        """The action for ``need`` (teams x tiers), fitted within the observed limits; ``streak``
        (per team, under a hard cap): the ticks each has been served in full, for
        :func:`cap_admission` (None: every team's need is planned for)."""
        N, T = self.n_teams, self.n_tiers
        tick = int(self.field(obs, "tick")[0])
        online = [int(x) for x in self.field(obs, "online")]
        offer_qty = [int(x) for x in self.field(obs, "offer_qty")]
        offer_price = self.field(obs, "offer_price").tolist()
        budget = float(self.field(obs, "budget")[0])
        pressure = self.field(obs, "pressure").tolist()
        stance = self.field(obs, "stance")
        escalating = [self.heed_escalation and bool(stance[i, self.i_escalate] > 0.5) for i in range(N)]
        totals = [sum(row) for row in need]
        order = sorted(
            (i for i in range(N) if totals[i] > 0),
            key=lambda i: (-pressure[i], not escalating[i], -self.board[i], totals[i], i),
        )
        if streak is not None:
            # a binding hard cap: finish the work in progress, start only what the carbon left can finish
            limits = self._limits(obs)
            rank = np.empty((1, N), dtype=np.int64)
            rank[0, order + [i for i in range(N) if i not in set(order)]] = np.arange(N)
            admitted, first = cap_admission(np.array([need], dtype=np.int64), np.array([limits.kg_per_gpu]),
                                            np.array([limits.headroom_kg]), np.asarray(streak).reshape(1, N), rank)
            need = [row if admitted[0, i] else [0] * T for i, row in enumerate(need)]
            totals = [sum(row) for row in need]
            order = sorted(
                (i for i in range(N) if totals[i] > 0),
                key=lambda i: (not first[0, i], -pressure[i], not escalating[i], -self.board[i], totals[i], i),
            )
        grant = [[0] * T for _ in range(N)]
        left = list(online)
        unmet = [[0] * T for _ in range(N)]
        # 1. own tier, large-memory tiers first
        for k in reversed(self.by_memory):
            for i in order:
                give = min(need[i][k], left[k])
                grant[i][k] += give
                left[k] -= give
                unmet[i][k] = need[i][k] - give
        # 2. spill upward: whole onto the smallest larger tier with room, else split
        for i in order:
            for k in reversed(self.by_memory):
                n = unmet[i][k]
                if n <= 0:
                    continue
                whole = next((j for j in self.larger[k] if left[j] >= n), None)
                if whole is not None:
                    grant[i][whole] += n
                    left[whole] -= n
                    unmet[i][k] = 0
                    continue
                for j in self.larger[k]:
                    give = min(n, left[j])
                    grant[i][j] += give
                    left[j] -= give
                    n -= give
                unmet[i][k] = n
        # 3. buy what is worth buying
        buy = [0] * T
        if any(n > 0 for row in unmet for n in row):
            ticks_left = max(self.max_ticks - tick, 1)
            money = max(budget * min(1.0, self.pacing / ticks_left) - SPEND_EPS, 0.0)
            kg_cost = self._kg_cost(obs, tick)
            w = self.weights
            for i in order:
                worth = self.gpu_tick_value * (1.0 + 0.5 * pressure[i] + 0.5 * escalating[i])
                for k in reversed(self.by_memory):
                    n = unmet[i][k]
                    if n <= 0:
                        continue
                    for j in sorted(self.fits[k], key=lambda j: (offer_price[j], self.rank[j])):
                        avail = offer_qty[j] - buy[j]
                        price = offer_price[j] * PRICE_SLACK
                        cost = w.spend * (price + self.op_cost[j]) + kg_cost[j]
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
        projected = used + pace * (self.max_ticks - tick)
        if projected <= cap or self.weights.carbon == 0:
            return [0.0] * self.n_tiers
        return [self.weights.carbon * p * intensity for p in self.power]


# ---------------------------------------------------------------------- N arenas at once

DEFLATE_TABLE_WIDTH = 4096  # declared counts per tier the batched planner keeps undone in a table


INFLATE_TABLE_LIMIT = 1 << 16  # GPUs: the largest need the inflation table grows to (one row per count)


class BatchPlanner:
    """``planner`` in ``num_envs`` arenas of one scenario at once (a :class:`~policies.batch.BatchPolicy`).

    Row *i* of :meth:`act` is bit for bit the action a :class:`PlannerAllocator` returns for
    row *i*'s observations since that arena's last reset, and :attr:`last_estimate` row *i*
    its need estimate (tests/policies/test_batch_planner.py). The per-arena state is arrays
    with a leading arena axis: the teams' log-weights ``(N, teams, factors)`` and what the
    last observation showed. Every float is made by the same operations in the same order as
    the per-arena planner (element-wise, so each row rounds as one arena does); the loops run
    over the small fixed axes only (teams, tiers, a tier's larger tiers).

    Undoing a declaration (:func:`deflate`), too branchy to copy exactly, is looked up in a
    table per (factor, tier, declared count) filled on first use by :func:`deflate` itself
    (counts above ``DEFLATE_TABLE_WIDTH`` are computed one by one). Fitting the plan within
    the observed limits (:func:`~policies.limits.fit_action`) is the scripted allocators'
    batched fit step (``policies/batch_limits.py``'s ``fit_action_batch``).

    The planner's parameters (``pacing``, ``gpu_tick_value``, ``prior_sigma``, ``margin``) are
    :class:`PlannerAllocator`'s; one per-arena planner is kept in :attr:`planner` for its
    checked parameters and scenario tables.
    """

    def __init__(self, config: ScenarioConfig, num_envs: int, agent: str = "allocator", **params: Any) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, got {num_envs}")
        self.num_envs = num_envs
        self.planner = PlannerAllocator(config, agent, **params)
        self._limits = BatchLimitReader(config, self.planner.obs_layout)
        P = self.planner
        self.config, self.agent = config, agent
        self.n_teams, self.n_tiers = P.n_teams, P.n_tiers
        N, T, G = self.n_teams, self.n_tiers, len(BLUFF_GRID)
        self._fields = {f.name: (P.obs_layout.slices[f.name], f.shape) for f in P.obs_layout.fields}
        self._prior = P.prior_log_weights()  # the teams' log-weights at the start of an episode
        self.log_w = np.repeat(self._prior[None], num_envs, axis=0)  # (arenas, teams, factors)
        # what each arena's last observation showed (the evidence of the next one)
        self._has_prev = np.zeros(num_envs, dtype=bool)
        self._prev_declared = np.zeros((num_envs, N, T), dtype=np.int64)
        self._prev_revealed = np.zeros((num_envs, N), dtype=bool)
        self._prev_revealed_need = np.zeros((num_envs, N, T), dtype=np.int64)
        self._prev_credibility = np.zeros((num_envs, N), dtype=np.float64)
        self._prev_audits = np.zeros(num_envs, dtype=np.float64)
        self.last_estimate = np.zeros((num_envs, N, T), dtype=np.int64)
        self._streak = np.zeros((num_envs, N), dtype=np.int64)  # ticks each team has been served in full (hard cap)
        # per factor of the grid: the deflation the planner applies (its own expression, to the bit)
        self._deflation = [1.0 + (1.0 - P.margin) * (float(b) - 1.0) for b in BLUFF_GRID]
        # (factor, tier, column) -> deflate(...); column 0: nothing declared, else 1 + min(declared, ceiling)
        width = min(int(P.ceiling.max(initial=0)), DEFLATE_TABLE_WIDTH) + 2
        self._deflated = np.full((G, T, width), -1, dtype=np.int64)
        self._deflated[:, :, 0] = 0
        self._inflate_table = inflate(np.arange(64)[:, None] * BLUFF_GRID, 1.0)  # grown by _inflated as needs grow
        self._tiers = np.arange(T)
        self._board = np.array(P.board, dtype=np.float64)
        self._rank = np.array([P.rank[k] for k in range(T)], dtype=np.int64)
        self._fits = [np.array(P.fits[k], dtype=np.int64) for k in range(T)]
        self._op_cost = np.array(P.op_cost, dtype=np.float64)
        self._carbon_power = np.array([P.weights.carbon * p for p in P.power], dtype=np.float64)  # w.carbon x power_kw

    @classmethod
    def of(cls, planner: PlannerAllocator, num_envs: int) -> BatchPlanner:
        """``planner`` (its scenario, seat and parameters; ``fair_planner`` too) in ``num_envs`` arenas."""
        return cls(planner.config, num_envs, planner.agent, **planner.settings)

    @property
    def params(self) -> dict[str, Any]:
        return self.planner.params

    def _field(self, obs: np.ndarray, name: str) -> np.ndarray:
        sl, shape = self._fields[name]
        return obs[:, sl].reshape((len(obs), *shape))

    def _rows(self, obs: np.ndarray, index: np.ndarray | None) -> np.ndarray:
        rows = np.arange(self.num_envs) if index is None else np.asarray(index, dtype=np.int64).reshape(-1)
        if index is not None and (len(np.unique(rows)) != len(rows) or (rows.size and not 0 <= rows.min() <= rows.max() < self.num_envs)):
            raise ValueError(f"index must name distinct arenas of 0..{self.num_envs - 1}, got {rows.tolist()}")
        if obs.ndim != 2 or len(obs) != len(rows) or obs.shape[1] != self.planner.obs_layout.size:
            raise ValueError(f"planner observations must be (arenas, {self.planner.obs_layout.size}) with one row "
                             f"per arena ({len(rows)}), got shape {obs.shape}")
        return rows

    # ------------------------------------------------------------------ protocol
    def reset(self, seeds: Sequence[int | None], index: np.ndarray | None = None) -> None:
        """New episodes in arenas ``index`` (all when None): their beliefs back to the prior."""
        rows = reset_indices(self.num_envs, seeds, index)
        self.log_w[rows] = self._prior
        self._has_prev[rows] = False
        self.last_estimate[rows] = 0
        self._streak[rows] = 0

    def act(self, observations: np.ndarray, index: np.ndarray | None = None) -> np.ndarray:
        """Every arena's action (``index``: only these arenas, whose observations are the rows given)."""
        obs = np.asarray(observations)
        need = self.observe(obs, index)
        if not self._limits.one.hard:
            return np.clip(self.plan(obs, need), 0, self.planner.high)
        rows = self._rows(obs, index)
        action = self.plan(obs, need, self._streak[rows])
        grant = action[:, self.n_tiers:].reshape(len(obs), self.n_teams, self.n_tiers)
        self._streak[rows] = served_streak(self._streak[rows], need, grant)
        return np.clip(action, 0, self.planner.high)

    # ------------------------------------------------------------------ belief
    def observe(self, observations: np.ndarray, index: np.ndarray | None = None) -> np.ndarray:
        """Update the arenas' beliefs with their observations; their need estimates ``(arenas, teams, tiers)``.

        The same additions in the same order as :meth:`PlannerAllocator.observe` (each
        declaration's, tier by tier, then each revealed pair's, then an audit's), row by row."""
        obs = np.asarray(observations)
        rows = self._rows(obs, index)
        P = self.planner
        declared = self._field(obs, "declared").astype(np.int64)
        revealed = self._field(obs, "revealed") > 0.5
        revealed_need = self._field(obs, "revealed_need").astype(np.int64)
        credibility = self._field(obs, "credibility").astype(np.float64)
        audits = self._field(obs, "shocks_seen")[:, int(ShockKind.COMPLIANCE_AUDIT)].astype(np.float64)
        has_prev = self._has_prev[rows]
        log_w = self.log_w if index is None else self.log_w[rows]  # (a copy when some arenas: written back below)
        top = P.ceiling
        counts = np.minimum(declared, P.unreachable.shape[1] - 1)
        for k in range(self.n_tiers):
            log_w += P.unreachable[k][counts[:, :, k]]
        # the revealed pairs: only a team revealed last tick receives anything but 0.0 (adding 0.0 to a
        # log-weight, finite and negative, changes no bit, so the other teams are skipped)
        arena, team = np.nonzero(has_prev[:, None] & self._prev_revealed[rows])
        if arena.size:
            need = self._prev_revealed_need[rows[arena], team]  # pairs x tiers
            hit = np.minimum(self._inflated(need), top[:, None]) == declared[arena, team, :, None]
            mismatch = np.where(hit, 0.0, MISMATCH)
            sub = log_w[arena, team]
            for k in range(self.n_tiers):
                sub += mismatch[:, k]
            log_w[arena, team] = sub
        prev_credibility = self._prev_credibility[rows]
        audited = np.flatnonzero(has_prev & (audits > self._prev_audits[rows]))
        if audited.size:
            before, now = prev_credibility[audited], credibility[audited]
            total = self._prev_declared[rows[audited]].sum(axis=2)  # declared totals, arenas x teams
            heard = (before >= P.bluff_loss) & (total > 0)  # InflationBelief.saw_audit's cases
            exposed = before - now >= P.bluff_loss - 1e-6
            exposed_if = total[..., None] / BLUFF_GRID * (1 + P.tolerance) < total[..., None] - 1e-9
            sub = log_w[audited]
            sub[heard] += np.where(exposed_if == exposed[..., None], 0.0, AUDIT)[heard]
            log_w[audited] = sub
        if index is not None:
            self.log_w[rows] = log_w
        self._has_prev[rows] = True
        self._prev_declared[rows] = declared
        self._prev_revealed[rows] = revealed
        self._prev_revealed_need[rows] = revealed_need
        self._prev_credibility[rows] = credibility
        self._prev_audits[rows] = audits
        deflated = self._deflate(declared, np.argmax(log_w, axis=2))
        if P.headroom is not None:  # estimate_need's headroom, the same float64 operations
            deflated = np.minimum(deflated + np.floor(P.headroom * deflated + 0.5).astype(np.int64), P.ceiling)
        estimate = np.where(revealed[..., None], revealed_need, deflated)
        self.last_estimate[rows] = estimate
        return estimate

    def _inflated(self, need: np.ndarray) -> np.ndarray:
        """``inflate(need x factor, 1.0)`` for every factor of the grid (a last axis), from a table
        of ``inflate(n x BLUFF_GRID, 1.0)`` rows grown to the largest need seen."""
        top = int(need.max()) if need.size else 0
        if need.size and (int(need.min()) < 0 or top >= INFLATE_TABLE_LIMIT):
            # (no count is negative; a count past the table's limit, possible only far beyond any
            # shipped cluster, is computed as the planner would rather than grow a table to it)
            return inflate(need[..., None] * BLUFF_GRID, 1.0)
        if top >= len(self._inflate_table):
            size = min(max(top + 1, 2 * len(self._inflate_table)), INFLATE_TABLE_LIMIT)
            self._inflate_table = inflate(np.arange(size)[:, None] * BLUFF_GRID, 1.0)
        return self._inflate_table[need]

    def _deflate(self, declared: np.ndarray, factor: np.ndarray) -> np.ndarray:
        """:func:`deflate` of each declaration (arenas x teams x tiers) under the deflation of
        ``factor`` (an index of ``BLUFF_GRID`` per arena and team), through the table."""
        ceiling = self.planner.ceiling
        column = np.where(declared <= 0, 0, np.minimum(declared, ceiling) + 1)
        g = np.broadcast_to(factor[..., None], declared.shape)
        k = np.broadcast_to(self._tiers, declared.shape)
        table = self._deflated
        inside = column < table.shape[2]
        out = table[g, k, np.where(inside, column, 0)]
        missing = (out < 0) | ~inside
        if missing.any():
            # deflate(d, b, c) depends on d only through min(d, c) when d > 0 (at the ceiling: a lower bound)
            for gi, ki, ci in set(zip(g[missing].tolist(), k[missing].tolist(), column[missing].tolist(), strict=True)):
                value = _deflate(max(ci - 1, 1), self._deflation[gi], int(ceiling[ki]))
                if ci < table.shape[2]:
                    table[gi, ki, ci] = value
                out[missing & (g == gi) & (k == ki) & (column == ci)] = value
        return out

    # ------------------------------------------------------------------ plan
    def plan(self, observations: np.ndarray, need: np.ndarray, streak: np.ndarray | None = None) -> np.ndarray:
        """:meth:`PlannerAllocator.plan` of each row: the (unclipped) action for ``need``
        ``(arenas, teams, tiers)``, fitted within the observed limits (``streak`` ``(arenas, teams)``:
        :func:`cap_admission`'s, under a hard cap; None: every team's need is planned for)."""
        obs = np.asarray(observations)
        P = self.planner
        n, N, T = len(obs), self.n_teams, self.n_tiers
        ar = np.arange(n)
        need = np.asarray(need, dtype=np.int64).reshape(n, N, T)
        tick = self._field(obs, "tick")[:, 0].astype(np.int64)
        online = self._field(obs, "online").astype(np.int64)
        offer_qty = self._field(obs, "offer_qty").astype(np.int64)
        offer_price = self._field(obs, "offer_price").astype(np.float64)
        budget = self._field(obs, "budget")[:, 0].astype(np.float64)
        pressure = self._field(obs, "pressure").astype(np.float64)
        escalating = (self._field(obs, "stance")[:, :, P.i_escalate] > 0.5) & P.heed_escalation
        order = self._order(need, pressure, escalating)
        if streak is not None:
            # a binding hard cap: finish the work in progress, start only what the carbon left can finish
            limits = self._limits(obs)
            assert limits.headroom_kg is not None  # a streak is kept under a hard cap only
            rank = np.empty_like(order)
            rank[ar[:, None], order] = np.arange(N)[None, :]
            admitted, first = cap_admission(need, limits.kg_per_gpu, limits.headroom_kg, streak, rank)
            need = np.where(admitted[..., None], need, 0)
            order = self._order(need, pressure, escalating, first)
        totals = need.sum(axis=2)
        served = totals > 0
        # the teams in that order (position p: the p-th team served), so the greedy below reads columns
        served_at = np.arange(N)[None, :] < served.sum(axis=1)[:, None]
        need_at = np.take_along_axis(need, order[:, :, None], axis=1)
        grant_at = np.zeros((n, N, T), dtype=np.int64)
        unmet = np.zeros((n, N, T), dtype=np.int64)  # 0 for a team not served (nothing below touches it)
        left = online.copy()
        # 1. own tier, large-memory tiers first
        for k in reversed(P.by_memory):
            for p in range(N):
                wanted, on = need_at[:, p, k], served_at[:, p]
                give = np.where(on, np.minimum(wanted, left[:, k]), 0)
                grant_at[:, p, k] += give
                left[:, k] -= give
                unmet[:, p, k] = np.where(on, wanted - give, 0)
        # 2. spill upward: whole onto the smallest larger tier with room, else split (the arenas with unmet need)
        rows = np.flatnonzero((unmet > 0).any(axis=(1, 2)))
        if rows.size:
            grant_at[rows], left[rows], unmet[rows] = self._spill(grant_at[rows], left[rows], unmet[rows])
        # 3. buy what is worth buying (the arenas with need still unmet)
        buy = np.zeros((n, T), dtype=np.int64)
        rows = np.flatnonzero((unmet > 0).any(axis=(1, 2)))
        if rows.size:
            pick = order[rows]
            pressure_at = np.take_along_axis(pressure[rows], pick, axis=1)
            escalating_at = np.take_along_axis(escalating[rows], pick, axis=1)
            buy[rows], grant_at[rows] = self._buy(obs[rows], tick[rows], budget[rows], offer_qty[rows], offer_price[rows],
                                                  pressure_at, escalating_at, unmet[rows], grant_at[rows])
        grant = np.empty_like(grant_at)
        grant[ar[:, None], order] = grant_at
        # within every observed limit: teams it serves last give up first
        buy, grant = self._fit(obs, buy, grant, order)
        return np.concatenate([buy, grant.reshape(n, N * T)], axis=1)

    def _order(self, need: np.ndarray, pressure: np.ndarray, escalating: np.ndarray,
               first: np.ndarray | None = None) -> np.ndarray:
        """Per arena, the teams in urgency order (``first``: these teams before the others); the
        teams without need last, in index order (the trim order's tail)."""
        n, N = need.shape[:2]
        totals = need.sum(axis=2)
        served = totals > 0
        keys = [np.broadcast_to(np.arange(N), (n, N)), np.where(served, totals, 0), np.where(served, -self._board, 0.0),
                served & ~escalating, np.where(served, -pressure, 0.0)]
        if first is not None:
            keys.append(~(served & first))
        return np.lexsort((*keys, ~served), axis=-1)

    def _spill(self, grant: np.ndarray, left: np.ndarray, unmet: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Step 2 of the plan on teams in serving order: each unmet need whole onto the smallest
        larger tier with room, else split upward, team by team, large-memory tiers first."""
        ar = np.arange(len(grant))
        for p in range(self.n_teams):
            for k in reversed(self.planner.by_memory):
                larger = self.planner.larger[k]
                rest = unmet[:, p, k]
                todo = rest > 0
                if not larger or not todo.any():
                    continue
                whole = np.full(len(grant), -1, dtype=np.int64)
                for j in larger:
                    whole[todo & (whole < 0) & (left[:, j] >= rest)] = j
                w = np.flatnonzero(whole >= 0)
                grant[w, p, whole[w]] += rest[w]
                left[w, whole[w]] -= rest[w]
                split = todo & (whole < 0)
                rest = np.where(whole >= 0, 0, rest)
                if split.any():
                    for j in larger:
                        give = np.where(split, np.minimum(rest, left[:, j]), 0)
                        grant[:, p, j] += give
                        left[:, j] -= give
                        rest = rest - give
                unmet[ar, p, k] = rest
        return grant, left, unmet

    def _buy(self, obs: np.ndarray, tick: np.ndarray, budget: np.ndarray, offer_qty: np.ndarray, offer_price: np.ndarray,
             pressure: np.ndarray, escalating: np.ndarray, unmet: np.ndarray, grant: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Step 3 of the plan on teams in serving order: what is still unmet is bought, cheapest
        fitting offered tier first, while worth it and within the paced budget."""
        P = self.planner
        n, T = len(obs), self.n_tiers
        buy = np.zeros((n, T), dtype=np.int64)
        ticks_left = np.maximum(P.max_ticks - tick, 1)
        money = np.maximum(budget * np.minimum(1.0, P.pacing / ticks_left) - SPEND_EPS, 0.0)
        price = offer_price * PRICE_SLACK
        cost = P.weights.spend * (price + self._op_cost) + self._kg_cost(obs, tick)
        # per arena and tier: the tiers that fit, cheapest offer first (ties: smaller memory)
        cheapest = [f[np.lexsort((np.broadcast_to(self._rank[f], (n, len(f))), offer_price[:, f]), axis=-1)]
                    for f in self._fits]
        for p in range(self.n_teams):
            worth = P.gpu_tick_value * (1.0 + 0.5 * pressure[:, p] + 0.5 * escalating[:, p])
            for k in reversed(P.by_memory):
                r = np.flatnonzero(unmet[:, p, k] > 0)  # the arenas where this team still lacks GPUs of this tier
                if not r.size:
                    continue
                rest, left, value = unmet[r, p, k], money[r], worth[r]
                for j in cheapest[k][r].T:
                    avail = offer_qty[r, j] - buy[r, j]
                    unit = price[r, j]
                    free = unit <= 0
                    afford = np.floor_divide(left, np.where(free, 1.0, unit))  # Python's money // price
                    most = np.minimum(rest, avail)
                    give = np.where(free, most, np.minimum(most.astype(np.float64), afford).astype(np.int64))
                    ok = (rest > 0) & (avail > 0) & ~(cost[r, j] > value) & (give > 0)
                    give = np.where(ok, give, 0)
                    buy[r, j] += give
                    grant[r, p, j] += give
                    left = np.where(ok, left - give * unit, left)
                    rest = rest - give
                money[r] = left
        return buy, grant

    def _kg_cost(self, obs: np.ndarray, tick: np.ndarray) -> np.ndarray:
        """:meth:`PlannerAllocator._kg_cost` per arena ``(arenas, tiers)``."""
        used = self._field(obs, "carbon_used")[:, 0].astype(np.float64)
        cap = self._field(obs, "carbon_cap")[:, 0].astype(np.float64)
        intensity = self._field(obs, "intensity_forecast")[:, 0].astype(np.float64)
        pace = used / np.maximum(tick, 1)
        projected = used + pace * (self.planner.max_ticks - tick)
        charged = ~(projected <= cap) & (self.planner.weights.carbon != 0)
        return np.where(charged[:, None], self._carbon_power * intensity[:, None], 0.0)

    def _fit(self, obs: np.ndarray, buy: np.ndarray, grant: np.ndarray, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:func:`~policies.limits.fit_action` of every arena (the scripted allocators' batched fit step)."""
        return fit_action_batch(self._limits(obs), np.maximum(buy, 0), np.maximum(grant, 0), order)


__all__ = ["BLUFF_GRID", "BatchPlanner", "InflationBelief", "PlannerAllocator", "deflate", "inflate", "reachable_by"]
