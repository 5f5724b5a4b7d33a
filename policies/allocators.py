"""Scripted allocator baselines (docs/rules.md §9), each working only from its observation, each
defined once, over N arenas (a per-arena baseline is a batch of one: :class:`policies.batch.OneArena`).

Every baseline reads the allocator observation through its named fields (never the env's
hidden state) plus public, static scenario facts (tier memory, horizon); the teams' job
lists in the config are never read. Each tick it:

1. **estimates demand** per (team, tier): the team's *revealed* true need once revealed
   (``revealed`` / ``revealed_need``), its *declared* request otherwise;
2. **buys spot** GPUs from the visible offer (rule below);
3. **grants** the capacity ``online + bought`` by its own rule (table below).

Every baseline ends with one shared step, :meth:`BatchAllocator.fit` (``policies/limits.py``'s
``fit_action``): purchases within the offer and the budget, grants within
``online + bought`` per tier and within a hard carbon cap's carbon left (counting every
granted GPU busy at this tick's intensity, as the env's cut does), units of the team last in
:meth:`BatchAllocator.trim_order` given up first (the most urgent team keeps its GPUs
longest; ``random`` gives up the last team's first, ``fifo`` the latest in its queue's). It
changes nothing where no limit binds (on every shipped scenario), so a baseline is repaired
(``invalid`` units) only when a shock it could not see coming fires in the tick it acts: an
incident (capacity) or a grid spike (a hard cap).

**Shortfall buying** (every baseline except ``random`` and ``best_fit``): per tier, buy
``min(offer, total demand - online)``, cheapest unit price first, while the tick's spend
stays within ``budget x min(1, pacing / ticks_left)`` (``pacing=2``: at most twice an even
share of the remaining budget per tick, all of it in the last two ticks).

==================  ==============================================================================
baseline            grant rule per tick
==================  ==============================================================================
``random``          buys a uniform random amount of each offered tier (then cut to the budget);
                    grants each tier a uniform random number of its GPUs, split uniformly at
                    random (multinomial) among the teams — feasible (a hard cap's carbon left
                    included, by the shared fit step), but blind to demand
``equal_split``     per tier, the teams with demand there get ``capacity // k`` each, capped at
                    their demand; the remainder goes one GPU each, rotating the starting team by
                    tick; what a capped team does not take is *not* redistributed
``proportional``    per tier, demand in full when it fits; otherwise shares proportional to
                    demand, ``floor`` then largest remainder (ties: earlier team)
``fifo``            teams queue in the order their current run of non-zero demand began
                    (first declared, first served; ties: team order); each is served in full
                    per tier before the next
``edf``             urgency first: teams ordered by ``pressure`` (ready jobs due within two
                    ticks: 0/1/2+), then by an escalate stance, then by smaller total demand
                    (shortest first), then team order; each served in full per tier
``best_fit``        requests are placed largest-memory tier first (the large-memory demand gets
                    the big GPUs before small jobs spill into them), each on the *smallest* tier
                    with at least the requested memory. When that tier is full, a team with no
                    urgent work (``pressure`` 0) takes what it has and *waits* for the rest
                    (best fit defers rather than upgrade or buy: the best-fitting GPUs free up
                    or come back online); an urgent team's request goes whole onto the smallest
                    larger tier with room, else is split upward, and only what owned capacity
                    cannot hold is bought, from the cheapest offered tier that fits (same pacing
                    cap). ``defer=False``: nobody waits
``max_min_fair``    per tier, water-filling on demand: equal shares, capped at demand, the excess
                    redistributed until capacity or demand runs out (odd GPUs rotate by tick)
``drf``             dominant resource fairness across tiers: repeatedly give one GPU to the team
                    with the lowest dominant share ``max_k grant[k] / capacity[k]``, on the tier
                    where its demand is least satisfied, until no demand can be met
==================  ==============================================================================

Every rule runs on every row at once, with the per-arena rules' floats (observed float32 values widened
to float64; ``int / int`` of small integers, correctly rounded), looping only over the small fixed axes
(teams, tiers, the (team, tier) requests of ``best_fit``) and over rounds that end when no row has work
left (``max_min_fair``'s water-filling, ``drf``'s one GPU per step); per-row orders are stable sorts.
``random`` keeps one generator per arena, seeded by ``reset``, and draws from each in a loop over
arenas (the amounts to buy, the per-tier counts, the multinomial split).

At N = 1 a batched baseline costs 3-11x the per-arena class it replaced per act (``python -m
experiments.bench.policies --sizes 1``: 0.2-0.7 ms against 0.06-0.1 ms), 1.0-2.8x a whole per-arena
episode (``best_fit`` the most); per-arena play of a scripted allocator is the server's, a few
reference episodes and groups of fewer than 8 seeds (tournaments and evaluations of more play on the
batched core).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from commons_arena.enums import Stance
from commons_arena.scenario import ScenarioConfig
from commons_arena.spaces import Layout
from policies.batch import BatchScripted, OneArena
from policies.limits import PRICE_SLACK, LimitReader, fit_action

SPEND_EPS = 1e-4  # money kept back from the observed (float32) budget


def tiers_by_memory(config: ScenarioConfig) -> list[int]:
    """The tiers from least to most memory (ties: lower index), as jobs pick them."""
    memory = [t.memory_gb for t in config.gpu_tiers]
    return sorted(range(len(memory)), key=lambda k: (memory[k], k))


def escalate_indices(config: ScenarioConfig, layout: Layout) -> list[int]:
    """Per team: the index of its one-hot ``escalate`` stance in an allocator observation."""
    start = layout.slices["stance"].start
    return [start + i * len(Stance) + int(Stance.ESCALATE) for i in range(len(config.teams))]


@dataclass(slots=True)
class BatchView:
    """The fields of N allocator observations the baselines use, as arrays."""

    tick: np.ndarray  # (N,) int64
    budget: np.ndarray  # (N,) float64
    online: np.ndarray  # (N, T) int64
    offer_qty: np.ndarray  # (N, T) int64
    offer_price: np.ndarray  # (N, T) float64
    demand: np.ndarray  # (N, M, T) int64: revealed need if revealed, else declared
    pressure: np.ndarray  # (N, M) float64
    escalating: np.ndarray  # (N, M) bool: stance on last tick's grant was "escalate"


def _floor_div(money: np.ndarray, price: np.ndarray, where: np.ndarray) -> np.ndarray:
    """``money // price`` (Python's float floor division) where ``where`` (a positive price), else 0."""
    return np.floor_divide(money, price, out=np.zeros(money.shape), where=where)


class BatchAllocator(BatchScripted):
    """Shared plumbing of the batched baselines: demand estimate, shortfall buying, fit step."""

    role = "allocator"

    def __init__(self, config: ScenarioConfig, agent: str, num_envs: int, pacing: float = 2.0) -> None:
        if not pacing > 0:
            raise ValueError(f"pacing must be > 0, got {pacing}")
        self.pacing = float(pacing)
        M = len(config.teams)
        self._rows = np.arange(num_envs)
        self._team_index = np.broadcast_to(np.arange(M), (num_envs, M))
        self.by_memory = tiers_by_memory(config)
        self._rank = np.argsort(self.by_memory).astype(np.int64)  # tier -> its place in by_memory
        super().__init__(config, agent, num_envs)
        self._limits = LimitReader(config, self.obs_layout)
        self._i_escalate = escalate_indices(config, self.obs_layout)

    @property
    def params(self) -> dict[str, Any]:
        return {"pacing": self.pacing}

    # ------------------------------------------------------------------ pieces
    def read(self, obs: np.ndarray) -> BatchView:
        N, T = self.num_envs, self.n_tiers
        o = obs.astype(np.float64)  # float32 -> float64 is exact, as .tolist() is
        sl = self.obs_layout.slices
        declared = o[:, sl["declared"]].astype(np.int64).reshape(N, -1, T)
        need = o[:, sl["revealed_need"]].astype(np.int64).reshape(N, -1, T)
        revealed = o[:, sl["revealed"]] > 0.5
        return BatchView(
            tick=o[:, sl["tick"].start].astype(np.int64),
            budget=o[:, sl["budget"].start],
            online=o[:, sl["online"]].astype(np.int64),
            offer_qty=o[:, sl["offer_qty"]].astype(np.int64),
            offer_price=o[:, sl["offer_price"]],
            demand=np.where(revealed[:, :, None], need, declared),
            pressure=o[:, sl["pressure"]],
            escalating=o[:, self._i_escalate] > 0.5,
        )

    def spend_cap(self, v: BatchView) -> np.ndarray:
        """Money this tick's purchases may use: ``budget x min(1, pacing / ticks_left)``."""
        ticks_left = np.maximum(self.config.max_ticks - v.tick, 1)
        return np.maximum(v.budget * np.minimum(1.0, self.pacing / ticks_left) - SPEND_EPS, 0.0)

    def buy_within(self, v: BatchView, want: np.ndarray, money: np.ndarray) -> np.ndarray:
        """Buy up to ``want`` per tier from the offer, cheapest unit price first, within ``money``."""
        rows = self._rows
        buy = np.zeros((self.num_envs, self.n_tiers), dtype=np.int64)
        for k in np.argsort(v.offer_price, axis=1, kind="stable").T:  # per row: (price, tier)
            n = np.minimum(want[rows, k], v.offer_qty[rows, k])
            wanted = n > 0
            price = v.offer_price[rows, k] * PRICE_SLACK
            paid = wanted & (price > 0)
            n = np.where(paid, np.minimum(n, _floor_div(money, price, paid)), n).astype(np.int64)
            money = np.where(paid, money - n * price, money)
            buy[rows, k] = np.where(wanted, n, 0)
        return buy

    def shortfall_buy(self, v: BatchView) -> np.ndarray:
        return self.buy_within(v, v.demand.sum(axis=1) - v.online, self.spend_cap(v))

    def trim_order(self, v: BatchView) -> np.ndarray:
        """Per row every team, most urgent first (``pressure``, an escalating stance), then smaller
        total demand, then team order ."""
        return np.lexsort((self._team_index, v.demand.sum(axis=2), ~v.escalating, -v.pressure), axis=-1)

    def fit(self, obs: np.ndarray, v: BatchView, buy: np.ndarray, grant: np.ndarray) -> np.ndarray:
        """The flat actions, cut within every limit each observation shows."""
        buy, grant = fit_action(self._limits(obs), buy, grant, self.trim_order(v))
        return np.concatenate([buy, grant.reshape(self.num_envs, -1)], axis=1)

    # ------------------------------------------------------------------ template
    def decide(self, obs: np.ndarray) -> np.ndarray:
        v = self.read(obs)
        buy = self.buy(v)
        grant = self.grant(v, v.online + buy)
        return self.fit(obs, v, buy, grant)

    def buy(self, v: BatchView) -> np.ndarray:
        return self.shortfall_buy(v)

    def grant(self, v: BatchView, capacity: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def serve_in_order(self, order: np.ndarray, served: np.ndarray, demand: np.ndarray, capacity: np.ndarray) -> np.ndarray:
        """Serve teams one after another (per row ``order``; a team is served where ``served``,
        aligned with ``order``), each in full per tier while capacity lasts."""
        rows = self._rows
        left = capacity.copy()
        grant = np.zeros_like(demand)
        for pos in range(self.n_teams):
            i = order[:, pos]
            give = np.where(served[:, pos, None], np.minimum(demand[rows, i], left), 0)
            grant[rows, i] = give
            left -= give
        return grant

    def wanting_first(self, wanting: np.ndarray, *keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per row: the teams with demand sorted by ``keys`` (most significant first, then team
        order), the others after them; and which positions of that order want."""
        order = np.lexsort((self._team_index, *reversed(keys), ~wanting), axis=-1)
        return order, np.take_along_axis(wanting, order, axis=1)


# ---------------------------------------------------------------------------- baselines


class BatchRandom(BatchAllocator):
    """``random``: one generator per arena, drawn in a loop over arenas."""

    name = "random"

    def __init__(self, config: ScenarioConfig, agent: str, num_envs: int, pacing: float = 2.0) -> None:
        self.rngs = [np.random.default_rng() for _ in range(num_envs)]  # unseeded until reset
        super().__init__(config, agent, num_envs, pacing)

    def reseed(self, arenas: np.ndarray, seeds: Sequence[int | None]) -> None:
        for i, seed in zip(arenas.tolist(), seeds, strict=True):
            self.rngs[i] = np.random.default_rng(seed)

    def buy(self, v):
        want = np.stack([rng.integers(0, q + 1) for rng, q in zip(self.rngs, v.offer_qty, strict=True)])
        return self.buy_within(v, want, np.maximum(v.budget - SPEND_EPS, 0.0))

    def grant(self, v, capacity):
        M = self.n_teams
        pvals = np.full(M, 1.0 / M)
        grant = np.empty((self.num_envs, M, self.n_tiers), dtype=np.int64)
        for n, (rng, cap) in enumerate(zip(self.rngs, capacity, strict=True)):
            grant[n] = rng.multinomial(rng.integers(0, cap + 1), pvals).T  # (tiers, teams) -> (teams, tiers)
        return grant

    def trim_order(self, v):
        return self._team_index  # blind to demand: the last team gives up first


class BatchEqualSplit(BatchAllocator):
    name = "equal_split"

    def grant(self, v, capacity):
        rows, M = self._rows, self.n_teams
        grant = np.zeros_like(v.demand)
        for k in range(self.n_tiers):
            cap = capacity[:, k]
            count = (v.demand[:, :, k] > 0).sum(axis=1)
            live = (count > 0) & (cap > 0)
            share, extra = np.divmod(cap, np.maximum(count, 1))
            for j in range(M):
                i = (v.tick + j) % M  # the rotation starts at team tick % M
                d = v.demand[rows, i, k]
                give = np.minimum(share, d)
                bump = (give < d) & (extra > 0)
                give = give + bump
                extra = extra - (bump & live & (d > 0))
                grant[rows, i, k] = np.where(live & (d > 0), give, 0)
        return grant


class BatchProportional(BatchAllocator):
    name = "proportional"

    def grant(self, v, capacity):
        rows, M = self._rows, self.n_teams
        grant = v.demand.copy()
        for k in range(self.n_tiers):
            cap = capacity[:, k]
            column = v.demand[:, :, k]
            total = column.sum(axis=1)
            over = total > cap
            if not over.any():
                continue
            # int / int, correctly rounded (rows within capacity divide by 1 and are not used)
            shares = (column * cap[:, None]).astype(np.float64) / np.where(over, total, 1)[:, None]
            kept = np.floor(shares + 1e-9).astype(np.int64)
            leftover = cap - kept.sum(axis=1)
            # the first `leftover` teams by (kept - share, team) get one more, as a Python slice [:leftover] takes
            limit = np.where(leftover >= 0, leftover, np.maximum(M + leftover, 0))
            by_remainder = np.argsort(kept - shares, axis=1, kind="stable")
            kept[rows[:, None], by_remainder] += np.arange(M)[None, :] < limit[:, None]
            grant[over, :, k] = kept[over]
        return grant


class BatchFifo(BatchAllocator):
    name = "fifo"
    NOT_QUEUED = -1  # a team with no current run of demand

    def __init__(self, config: ScenarioConfig, agent: str, num_envs: int, pacing: float = 2.0) -> None:
        self._since = np.full((num_envs, len(config.teams)), self.NOT_QUEUED, dtype=np.int64)
        super().__init__(config, agent, num_envs, pacing)

    def clear(self, arenas):
        self._since[arenas] = self.NOT_QUEUED

    def grant(self, v, capacity):
        wanting = v.demand.sum(axis=2) > 0
        since = np.where(self._since == self.NOT_QUEUED, v.tick[:, None], self._since)
        self._since = np.where(wanting, since, self.NOT_QUEUED)
        order, served = self.wanting_first(wanting, self._since)
        return self.serve_in_order(order, served, v.demand, capacity)

    def trim_order(self, v):
        queued = self._since != self.NOT_QUEUED  # the queue grant() just updated; teams not queued give up first
        return np.lexsort((self._team_index, np.where(queued, self._since, 0), ~queued), axis=-1)


class BatchEdf(BatchAllocator):
    name = "edf"

    def grant(self, v, capacity):
        totals = v.demand.sum(axis=2)
        order, served = self.wanting_first(totals > 0, -v.pressure, ~v.escalating, totals)
        return self.serve_in_order(order, served, v.demand, capacity)


class BatchBestFit(BatchAllocator):
    name = "best_fit"

    def __init__(self, config: ScenarioConfig, agent: str, num_envs: int, pacing: float = 2.0, defer: bool = True) -> None:
        self.defer = bool(defer)
        super().__init__(config, agent, num_envs, pacing)

    @property
    def params(self) -> dict[str, Any]:
        return {"pacing": self.pacing, "defer": self.defer}

    def decide(self, obs):
        v = self.read(obs)
        rows, rank = self._rows, self._rank
        N, M, T = self.num_envs, self.n_teams, self.n_tiers
        by_memory = self.by_memory
        grant = np.zeros((N, M, T), dtype=np.int64)
        left = v.online.copy()
        # requests (team, tier) with demand, largest-memory tier first, then larger, then team order
        flat = v.demand.reshape(N, M * T)
        team_of, tier_of = np.divmod(np.arange(M * T), T)
        requests = np.lexsort((np.broadcast_to(team_of, (N, M * T)), -flat, -np.broadcast_to(rank[tier_of], (N, M * T)),
                               flat <= 0), axis=-1)
        unmet = []  # per request position: (team, tier, units still wanted) per row
        for pos in range(M * T):
            r = requests[:, pos]
            i, k, n = team_of[r], tier_of[r], flat[rows, r]
            ok = n > 0
            if not ok.any():
                break  # requests with demand come first
            if self.defer:  # not urgent: take what the best-fitting tier has, the rest waits for it
                waits = ok & (v.pressure[rows, i] < 0.5) & (left[rows, k] < n)
                give = np.where(waits, left[rows, k], 0)
                grant[rows, i, k] += give
                left[rows, k] -= give
                ok &= ~waits
            # the smallest tier that serves k with room for the whole request
            whole = np.full(N, -1)
            for j in by_memory:
                fits = ok & (whole < 0) & (rank[j] >= rank[k]) & (left[:, j] >= n)
                whole[fits] = j
            placed = ok & (whole >= 0)
            w = np.where(placed, whole, 0)
            grant[rows, i, w] += np.where(placed, n, 0)
            left[rows, w] -= np.where(placed, n, 0)
            # else split upward over the tiers that serve k, smallest first
            split = ok & ~placed
            rest = np.where(split, n, 0)
            for j in by_memory:
                give = np.where(split & (rank[j] >= rank[k]), np.minimum(rest, left[:, j]), 0)
                grant[rows, i, j] += give
                left[:, j] -= give
                rest = rest - give
            unmet.append((i, k, rest))
        buy = np.zeros((N, T), dtype=np.int64)
        if any(bool(np.any(rest > 0)) for _, _, rest in unmet):
            money = self.spend_cap(v)
            price = v.offer_price * PRICE_SLACK
            cheapest = np.lexsort((np.broadcast_to(rank, (N, T)), price), axis=-1)  # per row: (price, rank)
            for i, k, n in unmet:
                if not np.any(n > 0):
                    continue
                for j in cheapest.T:  # the cheapest offered tier that fits (ties: smaller tier)
                    offered = v.offer_qty[rows, j] - buy[rows, j]
                    pj = price[rows, j]
                    paid = pj > 0
                    give = np.minimum(n, offered)
                    give = np.where(paid, np.minimum(give, _floor_div(money, pj, paid)), give).astype(np.int64)
                    give = np.where((n > 0) & (rank[j] >= rank[k]) & (offered > 0) & (give > 0), give, 0)
                    buy[rows, j] += give
                    grant[rows, i, j] += give
                    money = money - give * pj
                    n = n - give
        return self.fit(obs, v, buy, grant)


def water_fill_batch(demand: np.ndarray, capacity: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Per row, max-min fair integer shares of ``capacity (N,)``
    over ``demand (N, M)``; odd units rotate from team ``start (N,)``."""
    N, M = demand.shape
    rotation = (start[:, None] + np.arange(M)[None, :]) % M  # position j -> team
    d = np.take_along_axis(demand, rotation, axis=1)
    g = np.zeros_like(d)
    left = capacity.copy()
    active = d > 0  # in rotation order
    while True:
        going = (left > 0) & active.any(axis=1)
        if not going.any():
            break
        share = np.where(going, left // np.maximum(active.sum(axis=1), 1), 0)
        last = going & (share == 0)  # one unit each to the first `left` active teams, then done
        g += last[:, None] & active & (np.cumsum(active, axis=1) <= left[:, None])
        give = np.where((going & (share > 0))[:, None] & active, np.minimum(share[:, None], d - g), 0)
        g += give
        left = np.where(last, 0, left - give.sum(axis=1))
        active &= g < d
    grant = np.zeros_like(g)
    np.put_along_axis(grant, rotation, g, axis=1)
    return grant


class BatchMaxMinFair(BatchAllocator):
    name = "max_min_fair"

    def grant(self, v, capacity):
        grant = np.zeros_like(v.demand)
        start = v.tick % self.n_teams
        for k in range(self.n_tiers):
            cap = capacity[:, k]
            column = v.demand[:, :, k]
            run = (cap > 0) & np.any(column != 0, axis=1)
            if run.any():
                grant[:, :, k] = np.where(run[:, None], water_fill_batch(column, np.where(run, cap, 0), start), 0)
        return grant


class BatchDrf(BatchAllocator):
    name = "drf"

    def grant(self, v, capacity):
        rows = self._rows
        d = v.demand
        left = capacity.copy()
        g = np.zeros_like(d)
        dominant = np.zeros(d.shape[:2])
        while True:
            can = (g < d) & (left[:, None, :] > 0)  # (N, M, T)
            eligible = can.any(axis=2)
            live = eligible.any(axis=1)
            if not live.any():
                break
            # the team with the lowest dominant share (ties: lower index) ...
            i = np.argmin(np.where(eligible, dominant, np.inf), axis=1)
            # ... on the tier where its demand is least satisfied (ties: lower index)
            ok = can[rows, i]
            ratio = np.where(ok, g[rows, i] / np.where(ok, d[rows, i], 1), np.inf)  # d > g >= 0 where ok
            k = np.argmin(ratio, axis=1)
            one = live.astype(np.int64)
            g[rows, i, k] += one
            left[rows, k] -= one
            share = g[rows, i, k] / np.maximum(capacity[rows, k], 1)
            dominant[rows, i] = np.where(live, np.maximum(dominant[rows, i], share), dominant[rows, i])
        return g


# Every scripted allocator by name (random included), in the order they are listed.
SCRIPTED_ALLOCATORS: dict[str, type[BatchAllocator]] = {
    cls.name: cls for cls in (BatchRandom, BatchEqualSplit, BatchProportional, BatchFifo, BatchEdf, BatchBestFit,
                              BatchMaxMinFair, BatchDrf)
}


def per_arena(allocator: type) -> Any:
    """The per-arena factory ``(config, agent, seed=None, **params)`` of an allocator class: a batch of one of a
    batched one (:class:`~policies.batch.OneArena`), else the class itself."""
    return OneArena.maker(allocator) if issubclass(allocator, BatchScripted) else allocator


__all__ = ["SCRIPTED_ALLOCATORS", "SPEND_EPS", "escalate_indices", "per_arena", "tiers_by_memory", "BatchAllocator", "BatchBestFit", "BatchDrf", "BatchEdf", "BatchEqualSplit", "BatchFifo",
           "BatchMaxMinFair", "BatchProportional", "BatchRandom", "BatchView", "water_fill_batch"]
