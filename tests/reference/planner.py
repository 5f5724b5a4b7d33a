"""The ``planner`` as first written: one arena, Python lists (the executable spec of ``policies.planner``).

``policies.planner.BatchPlanner`` is the planner's one definition (any number of arenas; the
per-arena policy is its batch of one). This is the per-arena planner it replaced, kept as the spec
it is held to bit for bit (tests/policies/test_batch_planner.py): the teams' beliefs one
:class:`InflationBelief` each, the plan a greedy over lists, fitted by the list-based limits step
(``tests/reference/limits.py``), on the per-arena base the scripted policies had
(:class:`ScriptedPolicy`). It is not shipped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from commons_arena.enums import ShockKind, Stance
from commons_arena.scenario import ScenarioConfig
from commons_arena.spaces import action_layout, observation_layout, role_of
from policies.allocators import PRICE_SLACK, SPEND_EPS
from policies.planner import (
    AUDIT,
    BLUFF_GRID,
    MISMATCH,
    UNKNOWN_STYLE_BLUFF,
    UNREACHABLE,
    _deflate,
    cap_admission,
    inflate,
    reachable_by,
    served_streak,
)
from policies.teams import ARCHETYPE_PROFILES
from tests.reference.limits import LimitReader, fit_action


class ScriptedPolicy:
    """Base of the per-arena scripted policies as first written (the reference planner's): config,
    agent, layouts, seeded generator.

    Subclasses set ``role`` (``"allocator"``, ``"team"`` or ``"broker"``) and ``name``,
    implement :meth:`decide` (observation fields → action vector) and, when they keep
    state across ticks, :meth:`clear` (called by ``reset``). Fields are read through
    ``self.obs_layout`` — the same named slices ``observation_layout(config, agent).view``
    gives — precomputed once so that a tick allocates no layout. Static, public scenario
    facts (tier memory, speed, prices, owned counts, horizon) may be read from
    ``self.config``; the teams' job lists in the config are hidden truth and are never read.
    """

    role: ClassVar[str] = ""
    name: ClassVar[str] = ""

    def __init__(self, config: ScenarioConfig, agent: str, seed: int | None = None) -> None:
        role = role_of(config, agent)
        if role != self.role:
            raise ValueError(
                f"policy {self.name!r} plays the {self.role} role, but agent {agent!r} of scenario "
                f"{config.name!r} is a {role}"
            )
        self.config = config
        self.agent = agent
        self.obs_layout = observation_layout(config, agent)
        self.act_layout = action_layout(config, agent)
        # every action entry lies in [0, high]; nvec = high + 1
        self.high = self.act_layout.high.astype(np.int64)
        self._fields = {f.name: (self.obs_layout.slices[f.name], f.shape) for f in self.obs_layout.fields}
        self.n_tiers = len(config.gpu_tiers)
        self.n_teams = len(config.teams)
        self.rng = np.random.default_rng(seed)
        self.clear()

    # ---------------------------------------------------------------- protocol
    def reset(self, seed: int | None = None) -> None:
        self.rng = np.random.default_rng(seed)
        self.clear()

    def act(self, observation: np.ndarray) -> np.ndarray:
        action = np.array(self.decide(np.asarray(observation)), dtype=np.int64)
        np.minimum(action, self.high, out=action)
        np.maximum(action, 0, out=action)
        return action

    # ---------------------------------------------------------------- for subclasses
    def clear(self) -> None:
        """Forget per-episode state (called by ``__init__`` and ``reset``)."""

    def decide(self, obs: np.ndarray) -> np.ndarray | list[int]:
        """The action for one observation (clipped into the space by ``act``)."""
        raise NotImplementedError

    def field(self, obs: np.ndarray, name: str) -> np.ndarray:
        """One named observation field in its shape (a view of ``obs``)."""
        sl, shape = self._fields[name]
        return obs[sl].reshape(shape)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, agent={self.agent!r}, scenario={self.config.name!r})"

    @property
    def params(self) -> dict[str, Any]:
        """The policy's tunable parameters (for reports and rosters)."""
        return {}



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


class ReferencePlanner(ScriptedPolicy):
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
        buy_headroom: bool = True,
    ) -> None:
        # (the parameters are checked where they are defined: policies.planner.BatchPlanner)
        self.margin = float(margin)
        self.headroom = None if headroom is None else float(headroom)
        self.heed_escalation = bool(heed_escalation)  # False: a team's escalating stance buys it no precedence
        self.buy_headroom = bool(buy_headroom)  # False: granted last, from GPUs online the needs leave; never bought
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
        # the headroom of each estimate (never bought when buy_headroom is False)
        self.last_headroom = estimate - np.where(revealed[:, None], revealed_need, np.array(
            [self.estimate_need(declared[i].tolist(), float(BLUFF_GRID[g]), tops, with_headroom=False)
             for i, g in enumerate(np.argmax(log_w, axis=1).tolist())], dtype=np.int64).reshape(estimate.shape))
        return estimate

    def estimate_need(self, declared: list[int], factor: float, ceilings: list[int], with_headroom: bool = True) -> list[int]:
        """A team's need per tier from its declaration and its most likely inflation ``factor``:
        undone with all but ``margin`` of the inflation; with a ``headroom`` (``fair_planner``), that
        share of the need so deflated is added (rounded half up, within the ceiling), the same for every team."""
        bluff = 1.0 + (1.0 - self.margin) * (factor - 1.0)
        deflated = [_deflate(d, bluff, c) for d, c in zip(declared, ceilings, strict=True)]
        if self.headroom is None or not with_headroom:
            return deflated
        return [min(n + math.floor(self.headroom * n + 0.5), top) for n, top in zip(deflated, ceilings, strict=True)]

    # ------------------------------------------------------------------ plan
    def decide(self, obs: np.ndarray) -> list[int]:
        need = self.observe(obs).tolist()
        headroom = None if self.buy_headroom else self.last_headroom.tolist()
        if not self._limits.hard:
            return self.plan(obs, need, headroom=headroom)
        action = self.plan(obs, need, self._streak[0], headroom)
        grant = np.array(action[self.n_tiers:], dtype=np.int64).reshape(1, self.n_teams, self.n_tiers)
        self._streak = served_streak(self._streak, np.array([need], dtype=np.int64), grant)
        return action

    def plan(self, obs: np.ndarray, need: list[list[int]], streak: np.ndarray | None = None,
             headroom: list[list[int]] | None = None) -> list[int]:
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
        # the headroom is served last, on its own tier from what the needs leave online, never spilled or bought
        spare = [[0] * T for _ in range(N)] if headroom is None else [
            [min(h, n) for h, n in zip(headroom[i], need[i], strict=True)] for i in range(N)]
        need = [[n - h for n, h in zip(need[i], spare[i], strict=True)] for i in range(N)]
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
        for k in range(T):
            for i in order:
                give = min(spare[i][k], left[k])
                grant[i][k] += give
                left[k] -= give
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

