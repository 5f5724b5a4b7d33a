"""The oracle allocator: reads the hidden state and solves each tick exactly as a MILP.

**Privileged hook.** ``OracleAllocator(env)`` keeps the environment it was built with and
calls ``env.hidden_state()`` (the documented privileged accessor of
:class:`commons_arena.ArenaEnv`) in every ``act``; it ignores its observation. It is the
score ceiling of SPEC §11 (normalised score: random 0, oracle 1), not a fair player.

**What it knows.** Every team's jobs (ready or not, remaining work, deadlines, values,
memory fit, dependencies), the runner's EDF order, online capacity, the visible offer,
budget and carbon used, plus the public scenario file — including shocks *scheduled* for
this tick (their injected jobs, offline GPUs and intensity spikes are modelled). Random
shocks are not foreseen.

**Decision model (one tick, exact).** Binary ``x[j, k]`` places ready job ``j`` (gang:
all its GPUs) on fitting tier ``k``; integer ``b[k]`` buys spot GPUs; binary ``s[i]``
marks team ``i`` starved; continuous ``o >= 0`` is the kg over a soft carbon cap.
Constraints::

    sum_k x[j,k] <= 1                                   one tier per job
    sum_j gpus_j x[j,k] - b[k] <= online[k]             capacity (owned online + bought)
    b[k] <= offer_qty[k],  sum_k price[k] b[k] <= budget
    sum_{j in i} gpus_j x[j,.] + R_i s[i] >= R_i        starved unless all ready GPUs run
    o >= intensity x sum_k power[k] g[k] - headroom     soft cap (hard cap: g within headroom)
    runner consistency (below)

Grants are exactly the placed jobs' GPUs (``g[i,k] = sum gpus_j x[j,k]``), so nothing is
idle and nothing is repaired. **Runner consistency** makes the env's own job runner (EDF
order, first fitting tier with room) reproduce the planned placement: for a ready job
``j`` and each tier ``k'`` it fits, the GPUs planned on ``k'`` for jobs *after* ``j`` in
its team's order must be ``< gpus_j`` unless ``j`` is placed on ``k'`` or on a tier it
prefers to ``k'``. (By induction over the order, the free GPUs on ``k'`` at ``j``'s turn
are exactly those later jobs' GPUs.)

**Objective (maximised; weights ``w`` from the scenario's allocator rubric).** A job's
stake is ``V_j = (w.job_value + w.missed) x value_j`` (completing pays the value and
avoids the missed penalty) plus half the stake of pending dependants it unlocks. Its
chance of completing is modelled from its slack ``s = ticks left (incl. now) - ticks it
needs on its fastest fitting tier`` as ``q(s) = 1 - rho^(s+1)`` (``q = 0`` once ``s < 0``;
``rho = contention``, default 0.5). Running ``j`` on ``k`` now is worth::

    V_j x (q_after(j, k) - q(s_j - 1))        q_after = 1 if it completes now,
                                              else q(slack left after this tick's progress)

— high for urgent jobs and for jobs it can finish, near zero for lax jobs, and zero on a
tier too slow to keep the deadline. Costs: ``w.spend x`` (operating cost of placed GPUs +
spot price of bought GPUs), ``w.carbon x o``, and for each starved team
``w.escalation x board_pressure x belief`` with ``belief = min(1, (streak + 1) / 2)``
(a team starved for longer is likelier to escalate next tick). Fairness (Jain) is not in
the per-tick objective. Progress credit, not completions alone, is what lets the oracle
start long jobs in time; the slack model is what stops it buying spot for work that can
wait for owned GPUs.

Speed: a handful of ready jobs per tick gives a MILP of a few dozen variables; HiGHS
solves it in a few milliseconds (``experiments/bench_scripted.py`` prints the figure).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from commons_arena.enums import ALLOCATOR, CarbonMode
from commons_arena.mechanics import carbon, shocks
from commons_arena.mechanics.jobs import DONE, PENDING, edf_key, fitting_tiers
from commons_arena.spaces import action_layout

EPS_MONEY = 1e-6
BUY_TIEBREAK = 1e-6  # a tiny cost per bought GPU so free offers are not bought for nothing
# The feasibility-jump heuristic costs several ms per solve on these tiny models and
# never helps them (measured: 5x faster without it, same optima).
HIGHS_OPTIONS = {"mip_heuristic_run_feasibility_jump": False}


@dataclass(slots=True)
class _Ready:
    """One job that can run this tick, as the planner sees it."""

    team: int
    gpus: int
    fits: tuple[int, ...]
    remaining: float
    deadline: int
    stake: float


class OracleAllocator:
    """Exact per-tick MILP allocator with privileged access (see the module docstring)."""

    role = "allocator"
    name = "oracle"

    def __init__(
        self,
        env: Any,
        agent: str = ALLOCATOR,
        seed: int | None = None,
        contention: float = 0.5,
        dependant_share: float = 0.5,
        time_limit: float = 2.0,
    ) -> None:
        env = getattr(env, "unwrapped", env)
        if not hasattr(env, "hidden_state"):
            raise TypeError(f"the oracle needs an ArenaEnv (with hidden_state()), got {type(env).__name__}")
        if agent != ALLOCATOR:
            raise ValueError(f"the oracle plays the allocator, not {agent!r}")
        if not 0.0 <= contention < 1.0:
            raise ValueError(f"contention must be in [0, 1), got {contention}")
        self.env = env
        self.agent = agent
        self.config = config = env.config
        self.contention = float(contention)
        self.dependant_share = float(dependant_share)
        self.time_limit = float(time_limit)
        tiers = config.gpu_tiers
        self.n_tiers, self.n_teams = len(tiers), len(config.teams)
        self.high = action_layout(config, agent).high.astype(np.int64)
        self._speed = np.array([t.speed for t in tiers], dtype=np.float64)
        self._op_cost = np.array([t.op_cost for t in tiers], dtype=np.float64)
        self._power = np.array([t.power_kw for t in tiers], dtype=np.float64)
        self._owned = np.array([t.owned for t in tiers], dtype=np.int64)
        self._pressure = np.array([t.board_pressure for t in config.teams], dtype=np.float64)
        self._team_index = {name: i for i, name in enumerate(config.team_names)}
        self._tier_index = {name: k for k, name in enumerate(config.tier_names)}
        w = config.rewards.allocator
        self._w = w
        self._stake_weight = w.job_value + w.missed
        self.last_solve: dict[str, Any] = {}

    @property
    def params(self) -> dict[str, Any]:
        return {"contention": self.contention, "dependant_share": self.dependant_share}

    def reset(self, seed: int | None = None) -> None:
        """Deterministic: nothing to reseed."""
        self.last_solve = {}

    def act(self, observation: np.ndarray | None = None) -> np.ndarray:
        return np.clip(self.plan(), 0, self.high)

    # ------------------------------------------------------------------ model pieces
    def _q(self, slack: int) -> float:
        return 0.0 if slack < 0 else 1.0 - self.contention ** (slack + 1)

    def _slack(self, remaining: float, rate: float, deadline: int, t: int) -> int:
        return (deadline - t + 1) - math.ceil(remaining / rate - 1e-9)

    def _scheduled(self, t: int) -> list:
        return [spec for spec in self.config.shocks if spec.tick == t]

    def _ready_jobs(self, s, t: int, scheduled: list) -> list[list[_Ready]]:
        """Per team, this tick's ready jobs in the env runner's order (scheduled injections included)."""
        tiers = self.config.gpu_tiers
        out: list[list[_Ready]] = []
        injected: dict[int, list] = {}
        for spec in scheduled:
            if spec.job is not None:
                injected.setdefault(self._team_index[spec.target_team], []).append(spec.job)
        for i, team_jobs in enumerate(s.jobs):
            keyed = []
            for idx in s.orders[i]:
                job = team_jobs[idx]
                if job.status != PENDING or job.arrival > t:
                    continue
                if any(team_jobs[d].status != DONE for d in job.deps):
                    continue
                keyed.append((edf_key(job, idx), job.gpus, job.fits, job.remaining, job.deadline, job.value, job, idx))
            for m, tmpl in enumerate(injected.get(i, ())):
                fits = fitting_tiers(tmpl.min_memory_gb, tiers)
                idx = len(team_jobs) + m
                key = (t + tmpl.slack, -tmpl.priority, idx)
                keyed.append((key, tmpl.gpus, fits, tmpl.work, t + tmpl.slack, tmpl.value, None, idx))
            keyed.sort(key=lambda r: r[0])
            ready = []
            for _, gpus, fits, remaining, deadline, value, job, idx in keyed:
                stake = self._stake_weight * value
                if job is not None and self.dependant_share > 0:
                    stake += self.dependant_share * self._dependants_stake(team_jobs, idx, t)
                ready.append(_Ready(i, gpus, fits, remaining, deadline, stake))
            out.append(ready)
        return out

    def _dependants_stake(self, team_jobs: list, idx: int, t: int) -> float:
        total = 0.0
        for job in team_jobs:
            if job.status == PENDING and idx in job.deps:
                rate = job.gpus * max(self._speed[k] for k in job.fits)
                if self._slack(job.remaining, rate, job.deadline, t + 1) >= 0:
                    total += self._stake_weight * job.value
        return total

    def _uncontended(self, ready, xs, coef, online, intensity: float, carbon_used: float) -> np.ndarray | None:
        """The optimum without a solver when there is no contention, else None.

        If every ready job placed on its best tier (largest objective coefficient) has a
        positive coefficient, fits the *online* capacity, is what the env's runner would
        do with those grants, and stays within the carbon headroom, then that placement
        attains the upper bound ``sum_j max_k coef[j, k]`` with nothing bought, nobody
        starved and no carbon cost: it is optimal, and the MILP is skipped.
        """
        best: dict[tuple[int, int], tuple[float, int]] = {}
        for (i, p, k), value in zip(xs, coef, strict=True):
            if (i, p) not in best or value > best[(i, p)][0]:
                best[(i, p)] = (value, k)
        if len(best) != sum(len(r) for r in ready) or any(v <= 0 for v, _ in best.values()):
            return None
        grant = np.zeros((self.n_teams, self.n_tiers), dtype=np.int64)
        for (i, p), (_, k) in best.items():
            grant[i, k] += ready[i][p].gpus
        used = grant.sum(axis=0)
        if (used > online).any():
            return None
        cfg = self.config
        kg = float(used @ self._power) * intensity * carbon.TICK_HOURS
        if kg > cfg.carbon.cap_kg - carbon_used - 1e-7 and (
            cfg.carbon.carbon_mode is CarbonMode.HARD or self._w.carbon != 0
        ):
            return None
        for i, team_ready in enumerate(ready):  # the runner must reproduce the placement
            free = grant[i].tolist()
            for p, job in enumerate(team_ready):
                tier = next((k for k in job.fits if free[k] >= job.gpus), None)
                if tier != best[(i, p)][1]:
                    return None
                free[tier] -= job.gpus
        return grant

    # ------------------------------------------------------------------ the MILP
    def plan(self) -> np.ndarray:
        env_state = self.env.hidden_state()
        s, cfg, T, N = env_state, self.config, self.n_tiers, self.n_teams
        t = s.t
        w = self._w
        scheduled = self._scheduled(t)
        effects = list(shocks.active(s.effects, t))
        for spec in scheduled:  # effects of shocks scheduled now (random ones can't be known)
            tier = self._tier_index[spec.tier] if spec.tier is not None else -1
            effects.append(shocks.Effect(spec=spec, tier_index=tier, until=t + spec.duration - 1))
        online = np.maximum(self._owned - shocks.offline_gpus(effects, T), 0)
        intensity = carbon.intensity_at(cfg.carbon.intensity, t, shocks.intensity_multiplier(effects))
        offer_qty = np.asarray(s.offer_qty, dtype=np.int64)
        price = np.asarray(s.offer_price, dtype=np.float64)
        budget = float(s.budget)
        ready = self._ready_jobs(s, t, scheduled)
        action = np.zeros(T + N * T, dtype=np.int64)
        if not any(ready):
            self.last_solve = {"variables": 0, "status": "nothing ready"}
            return action

        # ---- variables: x[j,k] for fitting tiers that could hold the job at all
        max_cap = online + offer_qty
        xs: list[tuple[int, int, int]] = []  # (team, position in team's ready list, tier)
        coef: list[float] = []
        for i, team_ready in enumerate(ready):
            for p, job in enumerate(team_ready):
                rate = job.gpus * max(self._speed[k] for k in job.fits)
                slack = self._slack(job.remaining, rate, job.deadline, t)
                q_skip = self._q(slack - 1)
                for k in job.fits:
                    if max_cap[k] < job.gpus:
                        continue
                    progress = job.gpus * self._speed[k]
                    if progress >= job.remaining - 1e-9:
                        q_run = 1.0
                    else:
                        q_run = self._q(self._slack(job.remaining - progress, rate, job.deadline, t + 1))
                    gain = job.stake * max(q_run - q_skip, 0.0)
                    xs.append((i, p, k))
                    coef.append(gain - w.spend * self._op_cost[k] * job.gpus)
        nx = len(xs)
        fast = self._uncontended(ready, xs, coef, online, intensity, s.carbon_used)
        if fast is not None:
            self.last_solve = {"variables": 0, "status": "uncontended"}
            action[T:] = fast.ravel()
            return action
        buy_tiers = [k for k in range(T) if offer_qty[k] > 0]
        nb = len(buy_tiers)
        starve_teams = [i for i in range(N) if ready[i]]
        ns = len(starve_teams)
        soft = cfg.carbon.carbon_mode is CarbonMode.SOFT and w.carbon != 0
        headroom = cfg.carbon.cap_kg - s.carbon_used
        n = nx + nb + ns + (1 if soft else 0)
        c = np.zeros(n)
        c[:nx] = -np.asarray(coef)
        for m, k in enumerate(buy_tiers):
            c[nx + m] = w.spend * price[k] + BUY_TIEBREAK
        for m, i in enumerate(starve_teams):
            belief = min(1.0, (float(s.streak[i]) + 1.0) / 2.0)
            c[nx + nb + m] = w.escalation * self._pressure[i] * belief
        if soft:
            c[-1] = w.carbon
        lb = np.zeros(n)
        ub = np.ones(n)
        for m, k in enumerate(buy_tiers):
            ub[nx + m] = offer_qty[k]
        if soft:
            ub[-1] = np.inf
        integrality = np.ones(n)
        if soft:
            integrality[-1] = 0

        rows: list[np.ndarray] = []
        rlo: list[float] = []
        rhi: list[float] = []

        def row() -> np.ndarray:
            r = np.zeros(n)
            rows.append(r)
            return r

        by_job: dict[tuple[int, int], list[int]] = {}
        for v, (i, p, k) in enumerate(xs):
            by_job.setdefault((i, p), []).append(v)
        # one tier per job
        for vs in by_job.values():
            if len(vs) > 1:
                r = row()
                r[vs] = 1.0
                rlo.append(-np.inf)
                rhi.append(1.0)
        # capacity per tier (+ purchases)
        gpus_of = np.array([ready[i][p].gpus for (i, p, _) in xs], dtype=np.float64)
        tier_of = np.array([k for (_, _, k) in xs])
        for k in range(T):
            vs = np.flatnonzero(tier_of == k)
            if not len(vs):
                continue
            r = row()
            r[vs] = gpus_of[vs]
            if k in buy_tiers:
                r[nx + buy_tiers.index(k)] = -1.0
            rlo.append(-np.inf)
            rhi.append(float(online[k]))
        # budget
        if nb:
            r = row()
            for m, k in enumerate(buy_tiers):
                r[nx + m] = price[k]
            rlo.append(-np.inf)
            rhi.append(max(budget - EPS_MONEY, 0.0))
        # starvation indicator
        team_of = np.array([i for (i, _, _) in xs])
        for m, i in enumerate(starve_teams):
            total = float(sum(job.gpus for job in ready[i]))
            r = row()
            vs = np.flatnonzero(team_of == i)
            r[vs] = gpus_of[vs]
            r[nx + nb + m] = total
            rlo.append(total)
            rhi.append(np.inf)
        # carbon
        kg_per_gpu = self._power * intensity * carbon.TICK_HOURS
        if cfg.carbon.carbon_mode is CarbonMode.HARD:
            r = row()
            r[:nx] = gpus_of * kg_per_gpu[tier_of]
            rlo.append(-np.inf)
            rhi.append(max(headroom, 0.0) - 1e-7)
        elif soft:
            r = row()
            r[:nx] = gpus_of * kg_per_gpu[tier_of]
            r[-1] = -1.0
            rlo.append(-np.inf)
            rhi.append(max(headroom, 0.0))
        # runner consistency
        index = {(i, p, k): v for v, (i, p, k) in enumerate(xs)}
        for i, team_ready in enumerate(ready):
            for p, job in enumerate(team_ready):
                for r_pos, k2 in enumerate(job.fits):
                    later = [(index[(i, q, k2)], team_ready[q].gpus) for q in range(p + 1, len(team_ready))
                             if (i, q, k2) in index]
                    if not later:
                        continue
                    big_m = sum(g for _, g in later) - (job.gpus - 1)
                    if big_m <= 0:
                        continue
                    r = row()
                    for v, g in later:
                        r[v] = g
                    for k_pref in job.fits[: r_pos + 1]:
                        if (i, p, k_pref) in index:
                            r[index[(i, p, k_pref)]] = -big_m
                    rlo.append(-np.inf)
                    rhi.append(job.gpus - 1.0)

        constraints = LinearConstraint(np.array(rows), np.array(rlo), np.array(rhi)) if rows else None
        with warnings.catch_warnings():
            # HiGHS options scipy does not list are passed through verbatim, with a warning
            warnings.simplefilter("ignore")
            res = milp(
                c,
                integrality=integrality,
                bounds=Bounds(lb, ub),
                constraints=constraints,
                options={"time_limit": self.time_limit, "presolve": True, **HIGHS_OPTIONS},
            )
        self.last_solve = {"variables": n, "constraints": len(rows), "status": res.status, "objective": res.fun}
        if res.x is None:
            return action  # no solution in time: grant nothing (never happens in practice)
        sol = np.rint(res.x).astype(np.int64)
        grant = np.zeros((N, T), dtype=np.int64)
        for v, (i, p, k) in enumerate(xs):
            if sol[v]:
                grant[i, k] += ready[i][p].gpus
        buy = np.zeros(T, dtype=np.int64)
        for m, k in enumerate(buy_tiers):
            buy[k] = sol[nx + m]
        # never buy more than the placed jobs use beyond online capacity
        buy = np.minimum(buy, np.maximum(grant.sum(axis=0) - online, 0))
        action[:T] = buy
        action[T:] = grant.ravel()
        return action


def make_oracle(config, agent: str = ALLOCATOR, seed: int | None = None, env: Any = None, **params: Any) -> OracleAllocator:
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
