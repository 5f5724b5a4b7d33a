"""The oracle allocator: reads the hidden state and plans exactly, as a MILP, every tick.

**Privileged hook.** ``OracleAllocator(env)`` keeps the environment it was built with and
calls ``env.hidden_state()`` (the documented privileged accessor of
:class:`commons_arena.ArenaEnv`) in every ``act``; it ignores its observation. It is the
score ceiling of docs/rules.md §9 (normalised score: random 0, oracle 1), not a fair player.

**What it knows.** Every team's jobs — including those that have not arrived yet — with
remaining work, deadlines, values, memory fit and dependencies; the job runner's order;
online capacity, the visible offer, budget and carbon used; and the public scenario file,
including *scheduled* shocks (their injected jobs, offline GPUs, market crises and
intensity spikes). Random shocks are not foreseen; the plan is re-solved every tick
(receding horizon), so they are absorbed when they happen.

**Model (a time-indexed MILP over ticks t .. t+H-1, H = the rest of the episode by
default; only tick t's part is executed).** Variables:

* ``x[j,k,u]``: job ``j`` runs on tier ``k`` (a fitting tier that can hold all its GPUs at
  once — gang placement) in tick ``u`` of its window (arrival .. deadline; tick ``t`` only
  if it is ready now). **Binary at tick t** — the decision actually played is exact —
  and LP-relaxed to [0, 1] for later ticks (``exact_ticks=1``; a plan, re-made next tick,
  so an optimistic but structure-keeping estimate of the future is enough, and it keeps
  every solve in milliseconds; ``exact_ticks=None`` makes the whole horizon binary);
* ``c[j]`` binary: ``j`` completes within the horizon (``sum gpus*speed*x >= remaining*c``,
  with the valid cut ``sum x >= c * ceil(remaining / best rate)``); ``z[j]`` in [0, 1]
  instead when its deadline lies past a truncated horizon (its progress share);
* ``b[k,u]`` spot purchases (tick t: integer, from the visible offer at its price; later
  ticks: the broker's inventory at an estimated price — the base price of the current
  offer, scaled by scheduled crises), all within the budget;
* ``s[i]`` binary: team ``i`` starved at tick t (some ready job not placed);
* ``o >= 0``: kg over a soft carbon cap over the horizon (a hard cap bounds the kg instead).

Constraints: one tier per job and tick; per tier and tick, placed GPUs <= online (incidents
known) + bought; dependencies (a job runs at ``u`` only if its predecessor has completed by
``u-1``); and **runner consistency** at tick t: the env's own runner (team order, first
fitting tier with room) must reproduce the planned placement — for a ready job ``j`` and a
tier ``k'`` it fits, the GPUs planned on ``k'`` for jobs after ``j`` in its team's order
must be ``< gpus_j`` unless ``j`` is placed on ``k'`` or on a tier it prefers (by induction
over the order, those are exactly the GPUs free on ``k'`` at ``j``'s turn). Grants at tick
t are exactly the planned GPUs, so nothing is idle and nothing is repaired.

**Objective (maximised; ``w`` = the scenario's allocator weights — the allocator's own rubric):**

* ``(w.job_value + w.missed) x value`` per completed job whose deadline falls in the
  episode (completing pays the value and avoids the missed penalty); ``w.job_value x value``
  if its deadline is past the episode's end (it can never be missed); ``z`` jobs earn that
  stake times their progress share;
* ``- w.spend x`` (operating cost of every planned GPU-tick + price of planned purchases);
* ``- w.carbon x o``;
* ``- w.escalation x board_pressure x min(1, (streak + 1) / 2)`` per team starved now
  (it will probably escalate next tick, justified);
* ``+ early x stake x progress share x (ticks left in horizon after u) / H`` with
  ``early = 0.02``: among equally good plans, progress sooner (robust to random shocks).

Fairness (Jain, a small term) and escalations after tick t are left out.

Speed: when every unresolved job is ready now and can finish this tick on its cheapest
tier within the online GPUs, that placement is optimal and the solver is skipped;
otherwise HiGHS (``scipy.optimize.milp``, feasibility-jump heuristic off) solves a model
of a few hundred columns in a few milliseconds. ``experiments/bench/scripted.py`` prints
the mean time per tick.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from commons_arena.enums import ALLOCATOR, CarbonMode
from commons_arena.mechanics import carbon, shocks
from commons_arena.mechanics.jobs import DONE, MISSED, PENDING, fitting_tiers
from commons_arena.numerics import dot
from commons_arena.rules import rules_for
from commons_arena.spaces import action_layout

EPS_MONEY = 1e-6
BUY_TIEBREAK = 1e-6  # a tiny cost per bought GPU so free offers are not bought for nothing
# The feasibility-jump heuristic costs several ms per solve on these small models and
# never helps them (measured: about 5x faster without it, same optima).
HIGHS_OPTIONS = {"mip_heuristic_run_feasibility_jump": False, "output_flag": False}


@contextlib.contextmanager
def native_stdout_silenced() -> Iterator[None]:
    """Discard what native code writes to file descriptor 1 meanwhile.

    HiGHS prints some internal traces (``HighsMipSolverData::...``, seen on hard-cap and
    8-team scenarios) with C ``printf`` even with ``output_flag`` off; they would corrupt the
    stdout of a command (tables, JSON). Python's own ``sys.stdout`` is flushed first and
    C's stdio buffer before the descriptor is restored, so nothing else is lost or reordered.
    """
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # no real descriptor (captured, notebook): nothing to do
        yield
        return
    sys.stdout.flush()
    saved = os.dup(fd)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
        yield
    finally:
        _flush_c_stdio()
        os.dup2(saved, fd)
        os.close(saved)
        os.close(devnull)


def _flush_c_stdio() -> None:
    try:
        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError):  # no libc symbols (e.g. Windows): HiGHS output then stays
        pass


@dataclass(slots=True)
class _Job:
    """One unresolved job as the planner sees it."""

    team: int
    key: tuple  # the runner's order key within the team
    gpus: int
    fits: tuple[int, ...]  # fitting tiers that can ever hold the whole gang, preferred first
    remaining: float
    first: int  # first tick it may run in the horizon
    last: int  # last tick it may run in the horizon
    stake: float
    ready_now: bool
    beyond: bool  # deadline past a truncated horizon: progress credit instead of completion
    preds: list[int] = field(default_factory=list)  # planner indices of pending predecessors
    xs: dict[tuple[int, int], int] = field(default_factory=dict)  # (tier, tick) -> variable


class _Builder:
    """Variables and sparse constraint rows of one MILP."""

    def __init__(self) -> None:
        self.cost: list[float] = []
        self.lb: list[float] = []
        self.ub: list[float] = []
        self.integer: list[int] = []
        self.data: list[float] = []
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.rlo: list[float] = []
        self.rhi: list[float] = []

    def var(self, cost: float, lb: float = 0.0, ub: float = 1.0, integer: bool = True) -> int:
        self.cost.append(cost)
        self.lb.append(lb)
        self.ub.append(ub)
        self.integer.append(1 if integer else 0)
        return len(self.cost) - 1

    def row(self, terms: list[tuple[int, float]], lo: float = -np.inf, hi: float = np.inf) -> None:
        r = len(self.rlo)
        for col, coef in terms:
            self.rows.append(r)
            self.cols.append(col)
            self.data.append(coef)
        self.rlo.append(lo)
        self.rhi.append(hi)

    def solve(self, time_limit: float, mip_gap: float):
        from scipy.optimize import Bounds, LinearConstraint, milp  # here: scipy.optimize costs ~1 s at start-up
        from scipy.sparse import csr_array

        n = len(self.cost)
        constraints = None
        if self.rlo:
            matrix = csr_array((self.data, (self.rows, self.cols)), shape=(len(self.rlo), n))
            constraints = LinearConstraint(matrix, np.array(self.rlo), np.array(self.rhi))
        with warnings.catch_warnings(), native_stdout_silenced():
            # HiGHS options scipy does not list are passed through verbatim, with a warning
            warnings.simplefilter("ignore")
            return milp(
                np.array(self.cost),
                integrality=np.array(self.integer),
                bounds=Bounds(np.array(self.lb), np.array(self.ub)),
                constraints=constraints,
                options={"time_limit": time_limit, "presolve": True, "mip_rel_gap": mip_gap, **HIGHS_OPTIONS},
            )


class OracleAllocator:
    """Receding-horizon MILP allocator with privileged access (see the module docstring)."""

    role = "allocator"
    name = "oracle"

    def __init__(
        self,
        env: Any,
        agent: str = ALLOCATOR,
        seed: int | None = None,
        horizon: int | None = None,
        early: float = 0.02,
        mip_gap: float = 1e-4,
        time_limit: float = 5.0,
        cuts: bool = True,
        exact_ticks: int | None = 1,
    ) -> None:
        env = getattr(env, "unwrapped", env)
        if not hasattr(env, "hidden_state"):
            raise TypeError(f"the oracle needs an ArenaEnv (with hidden_state()), got {type(env).__name__}")
        if agent != ALLOCATOR:
            raise ValueError(f"the oracle plays the allocator, not {agent!r}")
        if horizon is not None and horizon < 1:
            raise ValueError(f"horizon must be >= 1 tick (or None for the rest of the episode), got {horizon}")
        self.env = env
        self.agent = agent
        self.config = config = env.config
        self.horizon = horizon
        self.early = float(early)
        self.time_limit = float(time_limit)
        self.mip_gap = float(mip_gap)
        self.cuts = bool(cuts)
        # ticks t .. t+exact_ticks-1 keep binary placements; later ones are LP-relaxed
        self.exact_ticks = 10**6 if exact_ticks is None else max(int(exact_ticks), 1)
        rules = rules_for(config)  # the tables the env plays with
        self.n_tiers, self.n_teams = rules.n_tiers, rules.n_teams
        self.high = action_layout(config, agent).high.astype(np.int64)
        # lists where the planner reads single entries, arrays where it computes with vectors
        self._speed = list(rules.speed)
        self._op_cost = rules.op_cost.tolist()
        self._power = rules.power_kw
        self._owned = rules.owned
        self._inventory = np.array(rules.spot_inventory, dtype=np.int64)
        self._max_gpus = [int(c) for c in rules.capacity]  # most a tier can ever hold
        self._unit_cost = rules.spot_unit_cost.tolist()
        self._pressure = list(rules.board_pressure)
        self._team_index = rules.team_index
        self._tier_index = rules.tier_index
        self._w = config.rewards.allocator
        self.last_solve: dict[str, Any] = {}

    @property
    def params(self) -> dict[str, Any]:
        return {"horizon": self.horizon, "early": self.early}

    def reset(self, seed: int | None = None) -> None:
        """Deterministic: nothing to reseed."""
        self.last_solve = {}

    def act(self, observation: np.ndarray | None = None) -> np.ndarray:
        return np.clip(self.plan(), 0, self.high)

    # ------------------------------------------------------------------ the world ahead
    def _effects(self, s, t: int, last: int) -> list[shocks.Effect]:
        """Effects active now plus those of shocks scheduled in ticks t .. last."""
        effects = list(s.effects)
        for spec in self.config.shocks:
            if spec.tick is not None and t <= spec.tick <= last:
                tier = self._tier_index[spec.tier] if spec.tier is not None else -1
                effects.append(shocks.Effect(spec=spec, tier_index=tier, until=spec.tick + spec.duration - 1))
        return effects

    @staticmethod
    def _active_at(effects: list[shocks.Effect], u: int) -> list[shocks.Effect]:
        return [e for e in effects if e.until - e.spec.duration + 1 <= u <= e.until]

    def _timeline(self, s, t: int, last: int):
        """Per tick u in t..last: online GPUs, offer qty, offer price, kg per busy GPU."""
        effects = self._effects(s, t, last)
        cfg, T = self.config, self.n_tiers
        online, qty, price, kg = [], [], [], []
        # the broker's base (no-crisis) price, from the offer visible now
        posted_mult = shocks.price_multiplier(self._active_at(effects, t - 1)) if t > 0 else 1.0
        base = []
        for k in range(T):
            if s.offer_qty[k] > 0 and s.offer_price[k] > 0:
                base.append(float(s.offer_price[k]) / posted_mult)
            else:
                base.append(1.5 * self._unit_cost[k])  # a cost-covering guess
        for u in range(t, last + 1):
            now = self._active_at(effects, u)
            online.append(np.maximum(self._owned - shocks.offline_gpus(now, T), 0).tolist())
            if u == t:
                qty.append([int(q) for q in s.offer_qty])
                price.append([float(p) for p in s.offer_price])
            else:  # the offer bought at u was posted at u - 1
                posted = self._active_at(effects, u - 1)
                qty.append(np.floor(self._inventory * shocks.inventory_factor(posted)).astype(int).tolist())
                price.append([b * shocks.price_multiplier(posted) for b in base])
            intensity = carbon.intensity_at(cfg.carbon.intensity, u, shocks.intensity_multiplier(now))
            kg.append((self._power * intensity * carbon.TICK_HOURS).tolist())
        return online, qty, price, kg

    def _jobs(self, s, t: int, last: int) -> list[_Job]:
        """Unresolved jobs (scheduled injections included) in the planner's terms."""
        cfg, w, tiers = self.config, self._w, self.config.gpu_tiers
        truncated = last < cfg.max_ticks - 1
        # team, order key, fits, gpus, remaining, arrival, deadline, value, ready, pending predecessors, (team, index)
        raw: list[tuple[int, tuple, tuple[int, ...], int, float, int, int, float, bool, list[tuple[int, int]],
                        tuple[int, int]]] = []
        for i, team_jobs in enumerate(s.jobs):
            for idx in s.orders[i]:
                job = team_jobs[idx]
                if job.status != PENDING:
                    continue
                deps = [team_jobs[d] for d in job.deps]
                if any(d.status == MISSED for d in deps):
                    continue  # can never run
                pending = [(i, job.deps[m]) for m, d in enumerate(deps) if d.status != DONE]
                ready = job.arrival <= t and not pending
                raw.append(
                    (
                        i,
                        (job.deadline, -job.priority, idx),  # the runner's order: EDF, then priority, then creation
                        job.fits,
                        job.gpus,
                        job.remaining,
                        job.arrival,
                        job.deadline,
                        job.value,
                        ready,
                        pending,
                        (i, idx),
                    )
                )
        for m, spec in enumerate(spec for spec in cfg.shocks if spec.tick is not None and t <= spec.tick <= last):
            if spec.job is None:
                continue
            i = self._team_index[cfg.target_team(spec)]
            tmpl = spec.job
            idx = len(s.jobs[i]) + m
            deadline = spec.tick + tmpl.slack
            raw.append(
                (
                    i,
                    (deadline, -tmpl.priority, idx),
                    fitting_tiers(tmpl.min_memory_gb, tiers),
                    tmpl.gpus,
                    tmpl.work,
                    spec.tick,
                    deadline,
                    tmpl.value,
                    spec.tick == t,
                    [],
                    (i, idx),
                )
            )
        planner_index = {r[-1]: n for n, r in enumerate(raw)}
        jobs = []
        for i, key, fits, gpus, remaining, arrival, deadline, value, ready, pending, _ in raw:
            usable = tuple(k for k in fits if self._max_gpus[k] >= gpus)
            missable = deadline < cfg.max_ticks
            stake = (w.job_value + (w.missed if missable else 0.0)) * value
            jobs.append(
                _Job(
                    team=i,
                    key=key,
                    gpus=gpus,
                    fits=usable,
                    remaining=remaining,
                    first=max(t, arrival) if ready or arrival > t else t + 1,
                    last=min(deadline, last),
                    stake=stake,
                    ready_now=ready,
                    beyond=truncated and deadline > last,
                    preds=[planner_index[p] for p in pending if p in planner_index],
                )
            )
        return jobs

    # ------------------------------------------------------------------ planning
    def plan(self) -> np.ndarray:
        s, cfg, T, N = self.env.hidden_state(), self.config, self.n_tiers, self.n_teams
        t = s.t
        last = cfg.max_ticks - 1 if self.horizon is None else min(cfg.max_ticks - 1, t + self.horizon - 1)
        last = max(last, t)
        w = self._w
        jobs = self._jobs(s, t, last)
        online, qty, price, kg = self._timeline(s, t, last)
        action = np.zeros(T + N * T, dtype=np.int64)
        ready = [[j for j in jobs if j.team == i and j.ready_now] for i in range(N)]
        for team_ready in ready:
            team_ready.sort(key=lambda j: j.key)
        if not any(ready):
            self.last_solve = {"variables": 0, "status": "nothing ready"}
            return action
        fast = self._uncontended(jobs, ready, online[0], kg[0], s.carbon_used, t, last)
        if fast is not None:
            self.last_solve = {"variables": 0, "status": "uncontended"}
            action[T:] = fast.ravel()
            return action

        m = _Builder()
        span = last - t + 1
        # ---- placements and completion
        for j in jobs:
            if not j.fits:
                continue
            rate = max(j.gpus * self._speed[k] for k in j.fits)
            window = range(j.first, j.last + 1)
            can_finish = len(window) * rate >= j.remaining - 1e-9
            for u in window:
                if u == t and not j.ready_now:
                    continue
                if u > t and not (can_finish or j.beyond):
                    continue  # hopeless: only tick t matters (to avoid starving the team)
                for k in j.fits:
                    if online[u - t][k] + qty[u - t][k] < j.gpus:
                        continue
                    progress = j.gpus * self._speed[k]
                    bonus = 0.0
                    if can_finish or j.beyond:  # hopeless jobs earn nothing (placing one only avoids starving)
                        bonus = self.early * j.stake * min(progress / j.remaining, 1.0) * (last - u + 1) / span
                    j.xs[(k, u)] = m.var(
                        -(bonus - w.spend * self._op_cost[k] * j.gpus), integer=u < t + self.exact_ticks
                    )
            if not j.xs:
                continue
            ticks = {u for (_, u) in j.xs}
            for u in ticks:
                vs = [v for (k, uu), v in j.xs.items() if uu == u]
                if len(vs) > 1:
                    m.row([(v, 1.0) for v in vs], hi=1.0)
            progress_terms = [(v, j.gpus * self._speed[k]) for (k, _), v in j.xs.items()]
            if j.beyond:
                z = m.var(-j.stake, integer=False)
                m.row(progress_terms + [(z, -j.remaining)], lo=0.0)
            elif can_finish:
                c = m.var(-j.stake)
                m.row(progress_terms + [(c, -j.remaining)], lo=0.0)
                if self.cuts:
                    # valid cut: completing takes at least ceil(remaining / best rate) ticks
                    n_min = -(-j.remaining // rate) if rate > 0 else 1
                    m.row([(v, 1.0) for v in j.xs.values()] + [(c, -float(n_min))], lo=0.0)
        # ---- dependencies: a job runs at u only if each predecessor completed by u - 1
        for j in jobs:
            for p_index in j.preds:
                pred = jobs[p_index]
                for (_, u), v in list(j.xs.items()):
                    done_before = [
                        (pv, pred.gpus * self._speed[pk] / pred.remaining) for (pk, pu), pv in pred.xs.items() if pu < u
                    ]
                    if not done_before:
                        m.ub[v] = 0.0
                        continue
                    # x[j,k,u] <= share of p's work done before u (reaching 1 means completed)
                    m.row([(v, 1.0)] + [(pv, -a) for pv, a in done_before], hi=0.0)
        # ---- capacity and purchases per tier and tick
        by_slot: dict[tuple[int, int], list[tuple[int, float]]] = {}
        for j in jobs:
            for slot, v in j.xs.items():
                by_slot.setdefault(slot, []).append((v, float(j.gpus)))
        buys: dict[tuple[int, int], int] = {}
        spend_terms: list[tuple[int, float]] = []
        for (k, u), terms in sorted(by_slot.items(), key=lambda item: (item[0][1], item[0][0])):
            if qty[u - t][k] > 0:
                b = m.var(
                    w.spend * price[u - t][k] + BUY_TIEBREAK,
                    ub=float(qty[u - t][k]),
                    integer=u < t + self.exact_ticks,
                )
                buys[(k, u)] = b
                terms = terms + [(b, -1.0)]
                spend_terms.append((b, price[u - t][k]))
            m.row(terms, hi=float(online[u - t][k]))
        if spend_terms:
            m.row(spend_terms, hi=max(float(s.budget) - EPS_MONEY, 0.0))
        # ---- starvation now
        for i, team_ready in enumerate(ready):
            if not team_ready:
                continue
            total = float(sum(j.gpus for j in team_ready))
            belief = min(1.0, (float(s.streak[i]) + 1.0) / 2.0)
            starved = m.var(w.escalation * self._pressure[i] * belief)
            terms = [(v, float(j.gpus)) for j in team_ready for (_, u), v in j.xs.items() if u == t]
            m.row(terms + [(starved, total)], lo=total)
        # ---- carbon over the horizon
        headroom = cfg.carbon.cap_kg - s.carbon_used
        emitted = [(v, j.gpus * kg[u - t][k]) for j in jobs for (k, u), v in j.xs.items()]
        if cfg.carbon.carbon_mode is CarbonMode.HARD and emitted:
            m.row(emitted, hi=max(headroom, 0.0) - 1e-7)  # the env cuts grants past the cap
        elif w.carbon != 0 and emitted:
            over = m.var(w.carbon, ub=np.inf, integer=False)
            m.row(emitted + [(over, -1.0)], hi=max(headroom, 0.0))
        # ---- runner consistency at tick t
        for team_ready in ready:
            for p, j in enumerate(team_ready):
                for pos, k2 in enumerate(j.fits):
                    later = [(q.xs[(k2, t)], q.gpus) for q in team_ready[p + 1 :] if (k2, t) in q.xs]
                    if not later:
                        continue
                    big_m = sum(g for _, g in later) - (j.gpus - 1)
                    if big_m <= 0:
                        continue
                    terms = [(v, float(g)) for v, g in later]
                    terms += [(j.xs[(kp, t)], -float(big_m)) for kp in j.fits[: pos + 1] if (kp, t) in j.xs]
                    m.row(terms, hi=j.gpus - 1.0)

        res = m.solve(self.time_limit, self.mip_gap)
        self.last_solve = {
            "variables": len(m.cost),
            "constraints": len(m.rlo),
            "status": res.status,
            "objective": res.fun,
        }
        if res.x is None:
            return action  # no solution in time: grant nothing (never seen in practice)
        sol = np.rint(res.x).astype(np.int64)
        grant = np.zeros((N, T), dtype=np.int64)
        for j in jobs:
            for (k, u), v in j.xs.items():
                if u == t and sol[v]:
                    grant[j.team, k] += j.gpus
        buy = np.zeros(T, dtype=np.int64)
        for (k, u), b in buys.items():
            if u == t:
                buy[k] = sol[b]
        # never buy more than this tick's placements use beyond online capacity
        buy = np.minimum(buy, np.maximum(grant.sum(axis=0) - np.asarray(online[0]), 0))
        action[:T] = buy
        action[T:] = grant.ravel()
        return action

    def _uncontended(self, jobs, ready, online, kg, carbon_used: float, t: int, last: int) -> np.ndarray | None:
        """The optimum without a solver when nothing competes, else None.

        Applies when every unresolved job is ready now and finishes this tick on its first
        fitting tier (where the runner puts it), that tier is its cheapest to run, all of
        them fit the online GPUs together, each is worth more than its operating cost and
        the carbon stays within the cap. Every job then completes now at the least
        possible cost, with nothing bought and nobody starved: no plan does better.
        """
        if any(not j.ready_now for j in jobs):
            return None
        w = self._w
        grant = np.zeros((self.n_teams, self.n_tiers), dtype=np.int64)
        for j in jobs:
            if not j.fits:
                return None
            k = j.fits[0]
            cheapest = min(self._op_cost[kk] for kk in j.fits)
            if self._op_cost[k] > cheapest or j.gpus * self._speed[k] < j.remaining - 1e-9:
                return None
            if j.stake <= w.spend * self._op_cost[k] * j.gpus:
                return None
            grant[j.team, k] += j.gpus
        used = grant.sum(axis=0)
        if (used > np.asarray(online)).any():
            return None
        emitted = dot(used, kg)
        headroom = self.config.carbon.cap_kg - carbon_used
        if emitted > headroom - 1e-7 and (self.config.carbon.carbon_mode is CarbonMode.HARD or w.carbon != 0):
            return None
        return grant


def make_oracle(
    config, agent: str = ALLOCATOR, seed: int | None = None, env: Any = None, **params: Any
) -> OracleAllocator:
    """Registry constructor: the oracle needs ``env`` (it reads ``env.hidden_state()``)."""
    if env is None:
        raise ValueError("policy 'oracle' reads the env's hidden state: pass env=<the ArenaEnv it will play in>")
    unwrapped = getattr(env, "unwrapped", env)
    if getattr(unwrapped, "config", None) is not None and unwrapped.config.content_hash != config.content_hash:
        raise ValueError(
            f"oracle: env plays scenario {unwrapped.config.name!r} but the policy was asked for {config.name!r}"
        )
    return OracleAllocator(unwrapped, agent=agent, seed=seed, **params)


__all__ = ["OracleAllocator", "make_oracle"]
