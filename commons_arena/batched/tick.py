"""One tick of every arena at once: :mod:`commons_arena.tick`'s phases, one for one, over arrays.

Each phase here has the name, the number and the order of its reference in
``commons_arena/tick.py`` (read them side by side); the rules are those of
:mod:`commons_arena.mechanics`, written over a leading batch axis (B arenas). Loops run over
small fixed axes only (tiers, teams, job positions in EDF order, effects), never over arenas
(a hard carbon cap's unit-by-unit cut runs in blocks of ``np.subtract.accumulate``).

Floats are the reference's to the bit: where it sums a few floats in Python (left to right
from 0.0, ``numerics.numpy_sum`` below 8 entries) the sums here add column by column in that
order (``numerics.numpy_sum_rows``), and every product and difference comes in the reference's order.
Integers are free.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from commons_arena import rewards
from commons_arena.batched.state import DONE, MISSED, PENDING, BatchState, Tables
from commons_arena.enums import ALLOCATOR, BROKER, ShockKind, Stance
from commons_arena.mechanics import carbon
from commons_arena.numerics import dot_rows, left_to_right_sum, numpy_sum_rows
from commons_arena.spaces import Intents

TOLERANCE = 1e-9  # the reference's float slack in budget, hard-cap and completion tests


def py_max(a: np.ndarray | float, b: np.ndarray | float) -> np.ndarray:
    """Python's ``max(a, b)`` elementwise (``a`` unless ``b`` is larger)."""
    return np.where(np.asarray(b) > np.asarray(a), b, a)


# ---------------------------------------------------------------------------- effects
class Effects(NamedTuple):
    """The products and sums over each arena's active effects (``shocks.price_multiplier`` ...)."""

    price: np.ndarray  # (B,)
    inventory: np.ndarray  # (B,)
    intensity: np.ndarray  # (B,)
    offline: np.ndarray  # (B, T)
    kinds: np.ndarray  # (B, kinds) bool: a shock of that kind has effect
    crisis: np.ndarray  # (B,) bool: a market crisis lasts


def effects_at(tables: Tables, s: BatchState) -> Effects:
    """The effects active at each arena's tick ``s.t``, multiplied in firing order (``math.prod``'s)."""
    B, T = s.t.shape[0], tables.rules.n_tiers
    spec = s.effect_spec
    price, inventory, intensity = np.ones(B), np.ones(B), np.ones(B)
    offline = np.zeros((B, T), dtype=np.int64)
    kinds = np.zeros((B, len(ShockKind)), dtype=bool)
    crisis = np.zeros(B, dtype=bool)
    if spec[:, 0].max() < 0:  # no effect in any arena (the table is packed from the front)
        return Effects(price, inventory, intensity, offline, kinds, crisis)
    active = (s.effect_until >= s.t[:, None]) & (spec >= 0)
    used = int(np.flatnonzero(active.any(axis=0)).max()) + 1 if active.any() else 0
    rows = np.arange(B)
    for e in range(used):
        on, k = active[:, e], spec[:, e]
        price = price * np.where(on, tables.shock_price[k], 1.0)
        inventory = inventory * np.where(on, tables.shock_inventory[k], 1.0)
        intensity = intensity * np.where(on, tables.shock_intensity[k], 1.0)
        tier = tables.shock_tier[k]
        hit = on & (tier >= 0)
        np.add.at(offline, (rows[hit], tier[hit]), tables.shock_offline[k][hit])
        kinds[rows[on], tables.shock_kind[k][on]] = True
        crisis |= on & tables.shock_crisis[k]
    return Effects(price, inventory, intensity, offline, kinds, crisis)


def spot_inventory(tables: Tables, effects: Effects) -> np.ndarray:
    """``shocks.spot_inventory``: GPUs the broker may offer now, ``floor(inventory x factor)``."""
    return np.floor(tables.inventory[None, :] * effects.inventory[:, None]).astype(np.int64)


# ---------------------------------------------------------------------------- phases
class Offer(NamedTuple):
    qty: np.ndarray  # (B, T)
    price: np.ndarray  # (B, T)
    cut: np.ndarray  # (B,) units above the inventory


def post_offer(tables: Tables, intents: Intents, active: Effects) -> Offer:
    """1. The broker's offer for next tick, under the effects active now (``market.post_offer``)."""
    quantity = intents.offer_quantity
    qty = np.minimum(quantity, spot_inventory(tables, active))
    cut = quantity.sum(axis=1) - qty.sum(axis=1)
    T = tables.rules.n_tiers
    price = tables.price_grid[np.arange(T)[None, :], intents.price_level] * active.price[:, None]
    return Offer(qty, price, cut)


def take_requests(intents: Intents, s: BatchState) -> tuple[np.ndarray, np.ndarray]:
    """2. Teams' declarations and who escalates (no grant to answer at tick 0)."""
    escalating = (intents.stances == int(Stance.ESCALATE)) & (s.t[:, None] > 0)
    return intents.requests, escalating


class Purchase(NamedTuple):
    bought: np.ndarray  # (B, T)
    cost: np.ndarray  # (B,)
    offer_cut: np.ndarray  # (B,)
    budget_cut: np.ndarray  # (B,)


def buy_spot(s: BatchState, intents: Intents) -> Purchase:
    """3. Purchases cut to the offer, then to the budget (``market.repair_purchases``); paid now."""
    purchase = repair_purchases_rows(intents.buy, s.offer_qty, s.offer_price, s.budget)
    s.budget = py_max(0.0, s.budget - purchase.cost)
    return purchase


def repair_purchases_rows(buys: np.ndarray, offer_qty: np.ndarray, price: np.ndarray, budget: np.ndarray) -> Purchase:
    """:func:`commons_arena.mechanics.market.repair_purchases` of each row: buys cut to the offer,
    then, on rows over budget, the most expensive tier first (ties: the higher tier) unit by unit,
    thousands at once but the last few; the same running float cost, step for step. Also the
    limits step of the scripted allocators (``policies/limits.py``)."""
    fixed = np.minimum(buys, offer_qty)
    offer_cut = buys.sum(axis=1) - fixed.sum(axis=1)
    cost = dot_rows(fixed, price)
    budget_cut = np.zeros_like(offer_cut)
    over = np.flatnonzero(cost > budget + TOLERANCE)
    if over.size:
        f, p, c, limit = fixed[over], price[over], cost[over], budget[over] + TOLERANCE
        spent, cut = budget[over], np.zeros(over.size, dtype=np.int64)
        T = p.shape[1]
        # most expensive first; equal prices: the higher tier first (sorted(..., reverse=True))
        by_price = np.lexsort((np.broadcast_to(np.arange(T), p.shape), p), axis=-1)[:, ::-1]
        rows = np.arange(over.size)
        for position in range(T):
            tier = by_price[:, position]
            pt, ft = p[rows, tier], f[rows, tier]
            going = c > limit
            free = going & (pt <= 0)  # free units do not lower the cost: all go
            cut += np.where(free, ft, 0)
            ft = np.where(free, 0, ft)
            paid = going & (pt > 0)
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                bulk = np.trunc(np.minimum((c - spent) / np.where(paid, pt, 1.0), ft + 2.0)).astype(np.int64) - 2
            bulk = np.where(paid & (bulk > 64), bulk, 0)
            ft = ft - bulk
            c = np.where(bulk > 0, c - bulk * pt, c)
            cut += bulk
            while True:
                step = paid & (ft > 0) & (c > limit)
                if not step.any():
                    break
                ft = ft - step
                c = np.where(step, c - pt, c)
                cut += step
            f[rows, tier] = ft
        fixed[over] = f
        budget_cut[over] = cut
        cost[over] = dot_rows(f, p)  # the price of what is left, not the running difference
    return Purchase(fixed, cost, offer_cut, budget_cut)


def shocks_due(tables: Tables, s: BatchState, tick: np.ndarray) -> np.ndarray:
    """``(B, K)``: which of the scenario's shocks fire at ``tick`` ``(B,)`` of each arena: a scheduled one at its
    tick, a random one when that tick's drawn uniform is below its rate (the draws are made at reset, so a tick
    ahead can be read too: training's privileged critic does)."""
    B, K = s.t.shape[0], tables.shock_tick.shape[0]
    draws = np.ones((B, K))
    if tables.n_random:
        at = np.minimum(tick, s.uniforms.shape[1] - 1)
        draws = s.uniforms[np.arange(B)[:, None], at[:, None], np.maximum(tables.shock_random, 0)[None, :]]
    scheduled = tables.shock_tick >= 0
    return np.where(scheduled[None, :], tables.shock_tick[None, :] == tick[:, None], draws < tables.shock_rate[None, :])


def fire_shocks(tables: Tables, s: BatchState) -> np.ndarray:
    """4. Shocks due this tick start their effects and inject their jobs (``shocks.due_shocks``).

    Returns ``fired`` (B, K): which of the scenario's shocks fired in each arena."""
    B, K = s.t.shape[0], tables.shock_tick.shape[0]
    if K == 0:
        return np.zeros((B, 0), dtype=bool)
    t = s.t
    fired = shocks_due(tables, s, t)
    if not fired.any():
        return fired
    rows, ks = fired.nonzero()
    np.add.at(s.shocks_seen, (rows, tables.shock_kind[ks]), 1)
    count = (s.effect_spec >= 0).sum(axis=1)
    position = count[:, None] + np.cumsum(fired, axis=1) - 1
    s.effect_spec[rows, position[rows, ks]] = ks
    s.effect_until[rows, position[rows, ks]] = t[rows] + tables.shock_until[ks]
    injecting = np.zeros(B, dtype=bool)
    for k in np.flatnonzero(tables.shock_team >= 0).tolist():  # file order: a team's jobs append in it
        b = np.flatnonzero(fired[:, k])
        if not b.size:
            continue
        team = int(tables.shock_team[k])
        slot = s.n_jobs[b, team]
        at = (b, team, slot)
        s.gpus[at], s.memory[at], s.work[at] = tables.job_gpus[k], tables.job_memory[k], tables.job_work[k]
        s.arrival[at], s.deadline[at] = t[b], t[b] + tables.job_slack[k]
        s.value[at], s.priority[at] = tables.job_value[k], tables.job_priority[k]
        s.status[at], s.done_tick[at] = PENDING, -1
        s.fits[at] = tables.job_fits[k]
        s.n_jobs[b, team] += 1
        s.injected[b] += 1
        injecting[b] = True
    if injecting.any():
        s.sort_jobs(np.flatnonzero(injecting))
    return fired


def online_gpus(tables: Tables, effects: Effects) -> np.ndarray:
    """Owned GPUs not offline from incidents."""
    return np.maximum(tables.rules.owned[None, :] - effects.offline, 0)


class Grants(NamedTuple):
    granted: np.ndarray  # (B, N, T)
    capacity_cut: np.ndarray  # (B,)
    carbon_cut: np.ndarray  # (B,)
    intensity: np.ndarray  # (B,)


def repair_grants(grant: np.ndarray, available: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Grants (B, N, T) cut to ``available`` (B, T): when a tier's grants exceed what is available,
    each team keeps ``floor(grant x available / total granted)`` and the GPUs left go one each to
    the largest remainders (ties: the earlier team); returns the grants and the units cut per arena."""
    fixed = grant.copy()
    B, N, T = grant.shape
    cut = np.zeros(B, dtype=np.int64)
    total = grant.sum(axis=1)
    over = total > available
    if not over.any():
        return fixed, cut  # every tier within what is available: the common case
    b = np.flatnonzero(over.any(axis=1))
    r, tot, hit = grant[b], total[b][:, None, :], over[b]
    c = np.where(hit, available[b], 0)[:, None, :]  # (R, 1, T); tiers within their capacity are kept below
    kept = r * c // np.maximum(tot, 1)  # exact integer arithmetic: floors, then the largest remainders
    leftover = c[:, 0, :] - kept.sum(axis=1)
    remainders = r * c % np.maximum(tot, 1)
    earlier = np.tri(N, k=-1, dtype=bool).T  # earlier[j, i]: team j comes before team i
    ahead = (remainders[:, :, None] > remainders[:, None, :]) | (
        (remainders[:, :, None] == remainders[:, None, :]) & earlier[None, :, :, None])
    kept = kept + (ahead.sum(axis=1) < leftover[:, None, :])  # teams sorted before team i, per tier
    fixed[b] = np.where(hit[:, None, :], kept, r)
    cut[b] = np.where(hit, tot[:, 0, :] - kept.sum(axis=1), 0).sum(axis=1)
    return fixed, cut


def grant_gpus(tables: Tables, s: BatchState, intents: Intents, bought: np.ndarray, active: Effects) -> Grants:
    """5. Grants cut to online + bought GPUs (largest remainder), then to a hard carbon cap."""
    rules = tables.rules
    granted, capacity_cut = repair_grants(intents.grant, s.online + bought)
    profile = tables.intensity
    intensity = profile[np.minimum(s.t, profile.shape[0] - 1)] * active.intensity
    carbon_cut = np.zeros_like(capacity_cut)
    if rules.hard_cap:
        headroom = rules.config.carbon.cap_kg - s.carbon_used
        granted, carbon_cut = cut_for_hard_cap(granted, rules.power_kw, intensity, headroom)
    return Grants(granted, capacity_cut, carbon_cut, intensity)


def cut_for_hard_cap(
    grants: np.ndarray, power_kw: np.ndarray, intensity: np.ndarray, headroom_kg: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``carbon.cut_for_hard_cap`` of every arena: granted GPUs removed one at a time from the most
    power-hungry tier (ties: the higher index), last team first, until full use fits the headroom.

    The reference subtracts a GPU's emissions from the excess once per GPU removed and stops at
    the first GPU that brings it under the tolerance; here each (tier, team) takes its run of
    subtractions at once (``np.subtract.accumulate``, the same left-to-right roundings)."""
    fixed = grants.copy()
    B, N, T = fixed.shape
    cut = np.zeros(B, dtype=np.int64)
    excess = emissions(fixed.sum(axis=1), power_kw, intensity) - py_max(headroom_kg, 0.0)
    over = np.flatnonzero(excess > TOLERANCE)
    if not over.size:
        return fixed, cut  # fits already: the common case
    kg = power_kw[None, :] * intensity[over, None] * carbon.TICK_HOURS  # (R, T) per GPU
    by_kg = np.lexsort((np.broadcast_to(np.arange(T), kg.shape), kg), axis=-1)[:, ::-1]
    rows = np.arange(over.size)
    e = excess[over]
    stopped = np.zeros(over.size, dtype=bool)
    for position in range(T):
        tier = by_kg[:, position]
        k = kg[rows, tier]
        stopped |= k <= 0  # the tiers after it emit nothing either
        for team in range(N - 1, -1, -1):
            count = fixed[over, team, tier]
            going = np.flatnonzero(~stopped & (e > TOLERANCE) & (count > 0))
            if not going.size:
                continue
            removed, e[going] = _subtract_until(e[going], k[going], count[going])
            fixed[over[going], team, tier[going]] -= removed
            cut[over[going]] += removed
    return fixed, cut


def _subtract_until(excess: np.ndarray, step: np.ndarray, most: np.ndarray, block: int = 256) -> tuple[
        np.ndarray, np.ndarray]:
    """Per row: subtract ``step`` from ``excess`` (rounding after each) until it is at most the
    tolerance or ``most`` times; returns (times, excess after)."""
    times = np.zeros(excess.shape[0], dtype=np.int64)
    e = excess.copy()
    todo = np.arange(excess.shape[0])
    while todo.size:
        width = int(min(block, (most[todo] - times[todo]).max()))
        run = np.empty((todo.size, width + 1))
        run[:, 0], run[:, 1:] = e[todo], step[todo, None]
        run = np.subtract.accumulate(run, axis=1)[:, 1:]  # the excess after 1, 2, ... more GPUs
        allowed = np.arange(1, width + 1)[None, :] <= (most[todo] - times[todo])[:, None]
        under = (run <= TOLERANCE) & allowed
        reached = under.any(axis=1)
        taken = np.where(reached, under.argmax(axis=1) + 1, allowed.sum(axis=1))
        e[todo] = run[np.arange(todo.size), taken - 1]
        times[todo] += taken
        todo = todo[~reached & (times[todo] < most[todo])]
    return times, e


def emissions(busy: np.ndarray, power_kw: np.ndarray, intensity: np.ndarray) -> np.ndarray:
    """``carbon.emissions`` per arena: busy GPUs (B, T) x power x intensity x one tick."""
    return dot_rows(busy, np.broadcast_to(power_kw, busy.shape)) * intensity * carbon.TICK_HOURS


class Queue(NamedTuple):
    """``jobs.queue_at`` for every team of every arena, as masks over the job slots."""

    ready: np.ndarray  # (B, N, J): pending, arrived, dependencies done
    waiting: np.ndarray  # (B, N, J): pending and arrived
    need: np.ndarray  # (B, N, T) true need
    pending: np.ndarray  # (B, N) pending jobs, arrived or not


def queue_at(tables: Tables, s: BatchState) -> Queue:
    """Masks over the job slots in use (the first ``s.slots_in_use()`` of each team)."""
    J = s.slots_in_use()
    B, N = s.status.shape[:2]
    T = tables.rules.n_tiers
    status = s.status[..., :J]
    pending = status == PENDING
    waiting = pending & (s.arrival[..., :J] <= s.t[:, None, None])
    ready = waiting.copy()
    flat_status = status.reshape(B * N, J)
    rows = np.arange(B * N)[:, None]
    L = min(J, tables.dep_slots)  # only listed jobs have dependencies
    for d in range(s.deps.shape[-1] if L else 0):
        dep = s.deps[:, :, :L, d].reshape(B * N, L)
        ready[:, :, :L] &= ((dep < 0) | (flat_status[rows, np.maximum(dep, 0)] == DONE)).reshape(B, N, L)
    # true need: each ready job's GPUs on its smallest fitting tier, summed per (arena, team, tier)
    cell = (np.arange(B * N).reshape(B, N, 1) * T + np.maximum(s.fits[:, :, :J, 0], 0)).ravel()
    need = np.bincount(cell, weights=np.where(ready, s.gpus[..., :J], 0).ravel(), minlength=B * N * T)
    return Queue(ready, waiting, need.astype(np.int64).reshape(B, N, T), pending.sum(axis=2))


def in_edf_order(mask: np.ndarray, order: np.ndarray) -> np.ndarray:
    """The slots of ``mask`` (B, N, J) in EDF order, packed to the front: (B, N, M), padded -1.

    ``mask`` may cover the first J slots only (those in use): the EDF order lists them first."""
    B, N, J = mask.shape
    flat_order = order[..., :J].reshape(B * N, J)
    in_order = mask.reshape(B * N, J)[np.arange(B * N)[:, None], flat_order]
    position = np.cumsum(in_order, axis=1) - 1
    M = int(position[:, -1].max()) + 1 if J else 0
    packed = np.full((B * N, max(M, 0)), -1, dtype=np.int64)
    r, p = in_order.nonzero()
    packed[r, position[r, p]] = flat_order[r, p]
    return packed.reshape(B, N, -1)


class JobsRun(NamedTuple):
    need: np.ndarray  # (B, N, T) true need this tick
    ready_gpus: np.ndarray  # (B, N)
    placed_gpus: np.ndarray  # (B, N)
    completed: np.ndarray  # (B, N) jobs completed
    missed: np.ndarray  # (B, N) jobs missed
    completed_value: np.ndarray  # (B, N)
    missed_value: np.ndarray  # (B, N)
    used: np.ndarray  # (B, T) granted GPUs that ran a job
    used_total: np.ndarray  # (B,)
    granted_total: np.ndarray  # (B,)
    granted_by_tier: np.ndarray  # (B, T)
    carbon_before: np.ndarray  # (B,)

    @property
    def starved(self) -> np.ndarray:
        return self.placed_gpus < self.ready_gpus

    @property
    def satisfaction(self) -> np.ndarray:
        ready = self.ready_gpus
        return np.where(ready == 0, 1.0, self.placed_gpus / np.maximum(ready, 1))


def run_jobs(tables: Tables, s: BatchState, granted: np.ndarray, intensity: np.ndarray, queue: Queue | None = None
             ) -> JobsRun:
    """6. Each team runs its ready jobs on its grant; busy GPUs emit. ``queue``: the jobs' queue at
    ``s.t`` when the caller has it (readiness is decided for every job before any runs)."""
    B, N, J = s.status.shape
    T = tables.rules.n_tiers
    R = B * N
    if queue is None:
        queue = queue_at(tables, s)
    # the job fields written below are updated through (R, J) views of the state
    s.work, s.status, s.done_tick = (np.ascontiguousarray(a) for a in (s.work, s.status, s.done_tick))
    packed = in_edf_order(queue.ready, s.order).reshape(R, -1)
    gpus, work, value = s.gpus.reshape(R, J), s.work.reshape(R, J), s.value.reshape(R, J)
    status, done_tick, fits = s.status.reshape(R, J), s.done_tick.reshape(R, J), s.fits.reshape(R, J, T)
    free = granted.reshape(R, T).copy()
    used = np.zeros((R, T), dtype=np.int64)
    placed_gpus = np.zeros(R, dtype=np.int64)
    completed = np.zeros(R, dtype=np.int64)
    completed_value = np.zeros(R)
    t = np.repeat(s.t, N)
    for w in range(packed.shape[1]):  # the w-th ready job of every team, in EDF order
        rows = np.flatnonzero(packed[:, w] >= 0)
        if not rows.size:
            break
        slot = packed[rows, w]
        g = gpus[rows, slot]
        tiers = fits[rows, slot]  # its fitting tiers, smallest memory first: it runs on the first with room
        ok = (tiers >= 0) & (free[rows[:, None], np.maximum(tiers, 0)] >= g[:, None])
        placed = ok.any(axis=1)
        if not placed.any():
            continue
        r, n, k = rows[placed], g[placed], tiers[placed, ok[placed].argmax(axis=1)]
        free[r, k] -= n  # one job per (arena, team) row: no index repeats
        used[r, k] += n
        placed_gpus[r] += n
        j = slot[placed]
        work[r, j] -= n * tables.speed[k]
        done = work[r, j] <= TOLERANCE
        r, j = r[done], j[done]
        work[r, j] = 0.0
        status[r, j] = DONE
        done_tick[r, j] = t[r]
        completed[r] += 1
        completed_value[r] += value[r, j]
    # missed at the end of their deadline tick, in EDF order
    J_used = queue.ready.shape[2]
    late = (s.status[..., :J_used] == PENDING) & (s.deadline[..., :J_used] <= s.t[:, None, None])
    missed = late.sum(axis=2).reshape(R)
    missed_value = np.zeros(R)
    late_packed = in_edf_order(late, s.order).reshape(R, -1) if missed.any() else np.zeros((R, 0), dtype=np.int64)
    for w in range(late_packed.shape[1]):
        rows = np.flatnonzero(late_packed[:, w] >= 0)
        slot = late_packed[rows, w]
        status[rows, slot] = MISSED
        missed_value[rows] += value[rows, slot]
    used_bt = used.reshape(B, N, T).sum(axis=1)
    granted_bt = granted.sum(axis=1)
    carbon_before = s.carbon_used
    s.carbon_used = s.carbon_used + emissions(used_bt, tables.rules.power_kw, intensity)
    return JobsRun(
        need=queue.need,
        ready_gpus=queue.need.sum(axis=2),
        placed_gpus=placed_gpus.reshape(B, N),
        completed=completed.reshape(B, N),
        missed=missed.reshape(B, N),
        completed_value=completed_value.reshape(B, N),
        missed_value=missed_value.reshape(B, N),
        used=used_bt,
        used_total=used_bt.sum(axis=1),
        granted_total=granted_bt.sum(axis=1),
        granted_by_tier=granted_bt,
        carbon_before=carbon_before,
    )


def audit(tables: Tables, s: BatchState, fired: np.ndarray, need: np.ndarray) -> np.ndarray:
    """7. A compliance audit compares this tick's declarations with this tick's true need."""
    audited = (fired & (tables.shock_kind == int(ShockKind.COMPLIANCE_AUDIT))[None, :]).any(axis=1)
    tolerance = tables.rules.config.credibility.audit_tolerance
    bluffs = s.declared.sum(axis=2) > need.sum(axis=2) * (1.0 + tolerance) + TOLERANCE
    return bluffs & audited[:, None]


def track_starvation(tables: Tables, s: BatchState, starved: np.ndarray) -> None:
    """8. Consecutive starved ticks; ``reveal_after`` of them reveal a team's true need for good."""
    s.streak = np.where(starved, s.streak + 1, 0)
    s.revealed = s.revealed | (s.streak >= tables.rules.config.reveal_after)


def judge_escalations(
    tables: Tables, s: BatchState, escalating: np.ndarray, bluffs: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """9. Escalations about last tick's grant: justified if the team was starved then.

    Returns (justified, unjustified, credibility lost)."""
    justified = escalating & s.starved_last
    unjustified = escalating & ~s.starved_last
    cred = tables.rules.config.credibility
    loss = bluffs * cred.bluff_loss + unjustified * cred.unjustified_escalation_loss
    before = s.credibility
    s.credibility = py_max(before - loss, 0.0)
    s.escalations = s.escalations + escalating
    return justified, unjustified, before - s.credibility


class Outcome(NamedTuple):
    """``rewards.TickOutcome`` of every arena (per-team fields (B, N), the rest (B,))."""

    completed_value: np.ndarray
    missed_value: np.ndarray
    satisfaction: np.ndarray
    has_need: np.ndarray
    credibility_lost: np.ndarray
    purchase_cost: np.ndarray
    operating_cost: np.ndarray
    idle_gpus: np.ndarray
    carbon_over_kg: np.ndarray
    justified_pressure: np.ndarray
    allocator_invalid: np.ndarray
    broker_profit: np.ndarray
    broker_invalid: np.ndarray
    completed_total: np.ndarray
    missed_total: np.ndarray
    fairness: np.ndarray


def jain_index(x: np.ndarray, counted: np.ndarray) -> np.ndarray:
    """``rewards.jain_index`` of each row's entries where ``counted`` (the reference's list of them)."""
    n = counted.sum(axis=1)
    values = np.where(counted, x, 0.0)  # adding 0.0 left to right changes no sum
    squares, total = dot_rows(values, values), numpy_sum_rows(values)
    if x.shape[1] >= 8:  # a full row of 8 or more goes through numpy's pairwise sum in the reference
        short = n < 8
        squares = np.where(short, left_to_right_sum(values * values), squares)
        total = np.where(short, left_to_right_sum(values), total)
    # the reference squares with Python's ``**`` (libm's pow, which may round one ulp away from
    # ``x * x``); numpy squares an array by multiplying, so each row's square is Python's own
    squared = np.array([t**2 for t in total.tolist()], dtype=np.float64).reshape(total.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        index = squared / (n * squares)
    return np.where((n == 0) | (squares == 0.0), 1.0, index)


def score(
    tables: Tables,
    s: BatchState,
    run: JobsRun,
    purchase: Purchase,
    offer: Offer,
    granted: Grants,
    justified: np.ndarray,
    lost: np.ndarray,
) -> tuple[Outcome, dict[str, np.ndarray]]:
    """10. The tick's raw measurements and every agent's weighted terms, ``(B, n_terms)`` per agent."""
    rules = tables.rules
    has_need = run.ready_gpus > 0
    pressure = np.zeros(s.t.shape[0])
    for i in range(rules.n_teams):  # a sum over the justified teams, in team order
        pressure = pressure + np.where(justified[:, i], tables.board_pressure[i], 0.0)
    if rules.hard_cap:
        over = np.zeros(s.t.shape[0])
    else:
        cap = rules.config.carbon.cap_kg
        over = py_max(0.0, s.carbon_used - cap) - py_max(0.0, run.carbon_before - cap)
    outcome = Outcome(
        completed_value=run.completed_value,
        missed_value=run.missed_value,
        satisfaction=run.satisfaction,
        has_need=has_need,
        credibility_lost=lost,
        purchase_cost=purchase.cost,
        operating_cost=dot_rows(run.granted_by_tier, np.broadcast_to(rules.op_cost, run.granted_by_tier.shape)),
        idle_gpus=run.granted_total - run.used_total,
        carbon_over_kg=over,
        justified_pressure=pressure,
        allocator_invalid=purchase.offer_cut + purchase.budget_cut + granted.capacity_cut + granted.carbon_cut,
        broker_profit=dot_rows(purchase.bought, s.offer_price - rules.spot_unit_cost),
        broker_invalid=offer.cut,
        completed_total=numpy_sum_rows(run.completed_value),
        missed_total=numpy_sum_rows(run.missed_value),
        fairness=jain_index(run.satisfaction, has_need),
    )
    rubric = tables.rubric  # its terms read the batched outcome's arrays as they read one arena's floats
    team_terms = rubric.stacked("team", rewards.TeamOutcome(run.completed_value, run.missed_value, lost))
    terms: dict[str, np.ndarray] = {ALLOCATOR: rubric.stacked("allocator", outcome).T}  # (B, n_terms) each
    for i, team in enumerate(rules.config.team_names):
        terms[team] = team_terms[:, :, i].T
    terms[BROKER] = rubric.stacked("broker", outcome).T
    return outcome, terms


def advance(
    tables: Tables,
    s: BatchState,
    requests: np.ndarray,
    stances: np.ndarray,
    granted: np.ndarray,
    starved: np.ndarray,
    bought: np.ndarray,
    offer: Offer,
) -> Effects:
    """The state of the next tick; effects no longer active are dropped (the table stays in firing order).

    Returns the effects active at the next tick (``s.online`` follows them)."""
    s.t = s.t + 1
    s.declared = requests.astype(np.int64, copy=True)
    s.stance = stances.astype(np.int64, copy=True)
    s.last_grant = granted
    s.starved_last = starved
    s.last_sold, s.last_price = bought, s.offer_price
    s.offer_qty, s.offer_price = offer.qty, offer.price
    keep = (s.effect_until >= s.t[:, None]) & (s.effect_spec >= 0)
    if (keep != (s.effect_spec >= 0)).any():
        position = np.cumsum(keep, axis=1) - 1
        spec, until = np.full_like(s.effect_spec, -1), np.full_like(s.effect_until, -1)
        b, e = keep.nonzero()
        spec[b, position[b, e]] = s.effect_spec[b, e]
        until[b, position[b, e]] = s.effect_until[b, e]
        s.effect_spec, s.effect_until = spec, until
    effects = effects_at(tables, s)
    s.online = online_gpus(tables, effects)
    return effects


class TickResult(NamedTuple):
    """What one batched tick did that the env reports (the reference's ``TickReport``, in part)."""

    outcome: Outcome
    terms: dict[str, np.ndarray]  # agent -> (B, n_terms) weighted terms
    rewards: dict[str, np.ndarray]  # agent -> (B,) Σ terms
    run: JobsRun
    purchase: Purchase
    grants: Grants
    offer: Offer
    justified: np.ndarray
    unjustified: np.ndarray
    bluffs: np.ndarray
    fired: np.ndarray  # (B, K) which of the scenario's shocks fired
    effects: Effects  # active at the next tick

    def repair_units(self) -> tuple[np.ndarray, ...]:
        """Each arena's repaired units ``(B,)`` per rule, in the order of :class:`~commons_arena.rewards.Repairs`' fields."""
        return (self.purchase.offer_cut, self.purchase.budget_cut, self.grants.capacity_cut, self.grants.carbon_cut,
                self.offer.cut)


def play_tick(tables: Tables, s: BatchState, intents: Intents, active: Effects | None = None,
              queue: Queue | None = None) -> TickResult:
    """Play tick ``s.t`` of every arena with ``intents``; ``s`` ends at tick ``s.t + 1``.

    ``active``: the effects active at ``s.t`` when the caller has them (``effects_at``); ``queue``:
    the jobs' queue at ``s.t`` (``queue_at``) when the caller has it and no job changed since."""
    if active is None:
        active = effects_at(tables, s)
    offer = post_offer(tables, intents, active)
    requests, escalating = take_requests(intents, s)
    purchase = buy_spot(s, intents)
    fired = fire_shocks(tables, s)
    if fired.any():  # new effects; otherwise ``s.online`` is still the one advance() derived from them
        active = effects_at(tables, s)
        s.online = online_gpus(tables, active)
        if (fired & (tables.shock_team >= 0)[None, :]).any():
            queue = None  # injected jobs: the queue is made again
    granted = grant_gpus(tables, s, intents, purchase.bought, active)
    run = run_jobs(tables, s, granted.granted, granted.intensity, queue)
    bluffs = audit(tables, s, fired, run.need)
    starved = run.starved
    track_starvation(tables, s, starved)
    justified, unjustified, lost = judge_escalations(tables, s, escalating, bluffs)
    outcome, terms = score(tables, s, run, purchase, offer, granted, justified, lost)
    effects = advance(tables, s, requests, intents.stances, granted.granted, starved, purchase.bought, offer)
    rewards = {}
    for agent, values in terms.items():
        total = np.zeros(values.shape[0])
        for k in range(values.shape[1]):  # Python's sum() of the terms, left to right
            total = total + values[:, k]
        rewards[agent] = total
    return TickResult(outcome, terms, rewards, run, purchase, granted, offer, justified, unjustified, bluffs, fired,
                      effects)
