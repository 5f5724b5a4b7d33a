"""Scripted allocator baselines (docs/rules.md §9), each working only from its observation.

Every baseline reads the allocator observation through its named fields (never the env's
hidden state) plus public, static scenario facts (tier memory, horizon); the teams' job
lists in the config are never read. Each tick it:

1. **estimates demand** per (team, tier): the team's *revealed* true need once revealed
   (``revealed`` / ``revealed_need``), its *declared* request otherwise;
2. **buys spot** GPUs from the visible offer (rule below);
3. **grants** the capacity ``online + bought`` by its own rule (table below).

Each baseline is defined once, over N arenas, in :mod:`policies.batch_allocators` (a per-arena
baseline is a batch of one of it), but ``best_fit``, whose per-arena class is here (its batch of one
is too slow for per-arena play); :class:`AllocatorBaseline` is also the base of the reference
mechanisms (:mod:`policies.mechanisms`). Every baseline ends with one shared step
(:meth:`AllocatorBaseline.fit`, ``policies/limits.py``; over a batch ``policies/batch_limits.py``): purchases within the offer and the budget, grants within
``online + bought`` per tier and within a hard carbon cap's carbon left (counting every
granted GPU busy at this tick's intensity, as the env's cut does), units of the team last in
:meth:`AllocatorBaseline.trim_order` given up first (the most urgent team keeps its GPUs
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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from commons_arena.enums import Stance
from commons_arena.scenario import ScenarioConfig
from commons_arena.spaces import Layout
from policies.base import ScriptedPolicy
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
class AllocatorView:
    """The fields of one allocator observation the baselines use, as Python numbers."""

    tick: int
    budget: float
    online: list[int]  # per tier
    offer_qty: list[int]  # per tier
    offer_price: list[float]  # per tier
    demand: list[list[int]]  # per team, per tier: revealed need if revealed, else declared
    pressure: list[float]  # per team
    escalating: list[bool]  # per team: stance on last tick's grant was "escalate"


class AllocatorBaseline(ScriptedPolicy):
    """Shared plumbing: demand estimate, shortfall buying, action assembly.

    Small integer arithmetic on Python lists (the arrays are a handful of numbers; numpy
    call overhead would dominate).
    """

    role = "allocator"

    def __init__(self, config: ScenarioConfig, agent: str = "allocator", seed: int | None = None, pacing: float = 2.0):
        if not pacing > 0:
            raise ValueError(f"pacing must be > 0, got {pacing}")
        self.pacing = float(pacing)
        super().__init__(config, agent, seed)
        sl = self.obs_layout.slices
        self._i_tick = sl["tick"].start
        self._i_budget = sl["budget"].start
        self._sl = {name: (sl[name].start, sl[name].stop) for name in sl}
        self._i_escalate = escalate_indices(config, self.obs_layout)
        self._max_ticks = config.max_ticks
        self._by_memory = tiers_by_memory(config)
        self._rank = {k: r for r, k in enumerate(self._by_memory)}
        # tiers whose GPUs can serve a demand declared on tier k, smallest first
        self._serves = [[j for j in self._by_memory if self._rank[j] >= self._rank[k]] for k in range(self.n_tiers)]
        self._limits = LimitReader(config, self.obs_layout)

    @property
    def params(self) -> dict[str, Any]:
        return {"pacing": self.pacing}

    # ------------------------------------------------------------------ pieces
    def read(self, obs: np.ndarray) -> AllocatorView:
        o = obs.tolist()
        N, T, sl = self.n_teams, self.n_tiers, self._sl
        a, b = sl["declared"]
        declared = [int(x) for x in o[a:b]]
        a, b = sl["revealed"]
        if max(o[a:b]) > 0.5:
            revealed = o[a:b]
            c, d = sl["revealed_need"]
            need = [int(x) for x in o[c:d]]
            declared = [need[j] if revealed[j // T] > 0.5 else declared[j] for j in range(N * T)]
        a, b = sl["online"]
        c, d = sl["offer_qty"]
        e, f = sl["offer_price"]
        g, h = sl["pressure"]
        return AllocatorView(
            tick=int(o[self._i_tick]),
            budget=o[self._i_budget],
            online=[int(x) for x in o[a:b]],
            offer_qty=[int(x) for x in o[c:d]],
            offer_price=o[e:f],
            demand=[declared[i * T : (i + 1) * T] for i in range(N)],
            pressure=o[g:h],
            escalating=[o[i] > 0.5 for i in self._i_escalate],
        )

    def spend_cap(self, v: AllocatorView) -> float:
        """Money this tick's purchases may use: ``budget x min(1, pacing / ticks_left)``."""
        ticks_left = max(self._max_ticks - v.tick, 1)
        return max(v.budget * min(1.0, self.pacing / ticks_left) - SPEND_EPS, 0.0)

    def buy_within(self, v: AllocatorView, want: list[int], money: float) -> list[int]:
        """Buy up to ``want`` per tier from the offer, cheapest unit price first, within ``money``."""
        buy = [0] * self.n_tiers
        for k in sorted(range(self.n_tiers), key=lambda k: (v.offer_price[k], k)):
            n = min(want[k], v.offer_qty[k])
            if n <= 0:
                continue
            price = v.offer_price[k] * PRICE_SLACK
            if price > 0:
                n = min(n, int(money // price))
                money -= n * price
            buy[k] = n
        return buy

    def shortfall_buy(self, v: AllocatorView) -> list[int]:
        want = [sum(row[k] for row in v.demand) - v.online[k] for k in range(self.n_tiers)]
        if max(want) <= 0:
            return [0] * self.n_tiers
        return self.buy_within(v, want, self.spend_cap(v))

    def trim_order(self, v: AllocatorView) -> list[int]:
        """Every team, the one whose GPUs this allocator gives up last first (when a limit
        binds, :meth:`fit` cuts from the end): most urgent first (``pressure``, an escalating
        stance), then smaller total demand, then team order."""
        totals = [sum(row) for row in v.demand]
        return sorted(range(self.n_teams), key=lambda i: (-v.pressure[i], not v.escalating[i], totals[i], i))

    def fit(self, obs: np.ndarray, v: AllocatorView, buy: list[int], grant: list[list[int]]) -> list[int]:
        """The flat action, cut within every limit the observation shows (``policies.limits``;
        unchanged where none binds)."""
        buy, grant = fit_action(self._limits(obs), buy, grant, self.trim_order(v))
        return buy + [g for row in grant for g in row]

    # ------------------------------------------------------------------ template
    def decide(self, obs: np.ndarray) -> list[int]:
        v = self.read(obs)
        buy = self.buy(v)
        grant = self.grant(v, [v.online[k] + buy[k] for k in range(self.n_tiers)])
        return self.fit(obs, v, buy, grant)

    def buy(self, v: AllocatorView) -> list[int]:
        return self.shortfall_buy(v)

    def grant(self, v: AllocatorView, capacity: list[int]) -> list[list[int]]:
        raise NotImplementedError

    def serve_in_order(self, order: list[int], demand: list[list[int]], capacity: list[int]) -> list[list[int]]:
        """Serve teams one after another, each in full per tier while capacity lasts."""
        left = list(capacity)
        grant = [[0] * self.n_tiers for _ in range(self.n_teams)]
        for i in order:
            row = grant[i]
            for k, d in enumerate(demand[i]):
                give = d if d < left[k] else left[k]
                row[k] = give
                left[k] -= give
        return grant


# ---------------------------------------------------------------------------- baselines


class BestFitAllocator(AllocatorBaseline):
    name = "best_fit"

    def __init__(
        self,
        config: ScenarioConfig,
        agent: str = "allocator",
        seed: int | None = None,
        pacing: float = 2.0,
        defer: bool = True,
    ):
        self.defer = bool(defer)
        super().__init__(config, agent, seed, pacing)

    @property
    def params(self) -> dict[str, Any]:
        return {"pacing": self.pacing, "defer": self.defer}

    def decide(self, obs: np.ndarray) -> list[int]:
        v = self.read(obs)
        N, T, rank = self.n_teams, self.n_tiers, self._rank
        grant = [[0] * T for _ in range(N)]
        left = list(v.online)
        requests = [(i, k, v.demand[i][k]) for i in range(N) for k in range(T) if v.demand[i][k] > 0]
        requests.sort(key=lambda r: (-rank[r[1]], -r[2], r[0]))
        unmet = []
        for i, k, n in requests:
            if self.defer and v.pressure[i] < 0.5 and left[k] < n:
                # not urgent: take what the best-fitting tier has, the rest waits for it
                give = left[k]
                grant[i][k] += give
                left[k] -= give
                continue
            tiers = self._serves[k]
            whole = next((j for j in tiers if left[j] >= n), None)
            if whole is not None:
                grant[i][whole] += n
                left[whole] -= n
                continue
            for j in tiers:
                give = min(n, left[j])
                grant[i][j] += give
                left[j] -= give
                n -= give
            if n > 0:
                unmet.append((i, k, n))
        buy = [0] * T
        if unmet:
            money = self.spend_cap(v)
            price = [p * PRICE_SLACK for p in v.offer_price]
            for i, k, n in unmet:
                # cheapest offered tier that fits (ties: smaller tier)
                for j in sorted(self._serves[k], key=lambda j: (price[j], rank[j])):
                    offered = v.offer_qty[j] - buy[j]
                    if offered <= 0:
                        continue
                    give = min(n, offered) if price[j] <= 0 else min(n, offered, int(money // price[j]))
                    if give <= 0:
                        continue
                    buy[j] += give
                    grant[i][j] += give
                    money -= give * price[j]
                    n -= give
                    if n == 0:
                        break
        return self.fit(obs, v, buy, grant)


def water_fill(demand: list[int], capacity: int, start: int) -> list[int]:
    """Max-min fair integer shares of ``capacity`` over ``demand``; odd units rotate from ``start``."""
    n = len(demand)
    grant = [0] * n
    left = capacity
    active = [i for i in ((start + j) % n for j in range(n)) if demand[i] > 0]
    while left > 0 and active:
        share = left // len(active)
        if share == 0:
            for i in active[:left]:
                grant[i] += 1
            break
        for i in active:
            give = min(share, demand[i] - grant[i])
            grant[i] += give
            left -= give
        active = [i for i in active if grant[i] < demand[i]]
    return grant
