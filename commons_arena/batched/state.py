"""The batched state: every field of :class:`commons_arena.state.ArenaState` as an array with a
leading batch axis (B arenas), and the per-scenario tables the batched phases read.

Jobs live in fixed-size slot tables per (arena, team, slot), in creation order as the
reference's job lists (so a dependency is a slot index); ``order`` holds each team's EDF
execution order (:func:`commons_arena.mechanics.jobs.edf_order`), empty slots last. The
timed effects of fired shocks are a table per arena in firing order (``effect_spec``, the
index of the shock in the scenario file, -1 when empty), compacted to the active ones at
every tick as ``shocks.active`` filters the reference's list, so products over them come in
the reference's order.

Reset draws each arena's jobs with the reference's own :meth:`TeamJobSource.draw` and then
the whole horizon's random-shock uniforms in one call: the generator's stream is sequential,
so these are the numbers ``shocks.due_shocks`` draws one tick at a time (the equivalence
test holds it).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np

from commons_arena.batched.draws import ResetDraws, TeamJobs, draw_resets
from commons_arena.enums import JobStatus, ShockKind
from commons_arena.rewards import Rubric
from commons_arena.rules import Rules
from commons_arena.scenario import MAX_PRIORITY

PENDING, DONE, MISSED = int(JobStatus.PENDING), int(JobStatus.DONE), int(JobStatus.MISSED)
EMPTY = 3  # a slot with no job (never pending)
NO_DEADLINE = 10**6  # the deadline key of an empty slot: after every job in EDF order


@dataclass(frozen=True, eq=False)
class Tables:
    """What the batched phases read of a scenario, as arrays (derived once from :class:`Rules`)."""

    rules: Rules
    n_jobs_max: int  # J: job slots per team (listed + generated + shock-injected jobs)
    n_deps: int  # D: dependency slots per job
    dep_slots: int  # slots that may hold a job with dependencies (listed jobs only; 0: none has any)
    n_effects: int  # E: effects active at once, at most
    price_grid: np.ndarray  # (T, levels)
    speed: np.ndarray  # (T,)
    inventory: np.ndarray  # (T,) int
    intensity: np.ndarray  # (ticks of the profile,)
    board_pressure: np.ndarray  # (N,)
    # shocks, one entry per shock of the scenario file, in file order
    shock_tick: np.ndarray  # (K,) scheduled tick, -1 when random
    shock_rate: np.ndarray  # (K,) probability per tick (0 when scheduled)
    shock_random: np.ndarray  # (K,) index of its uniform among the random shocks, -1 when scheduled
    shock_kind: np.ndarray  # (K,) ShockKind value
    shock_until: np.ndarray  # (K,) duration - 1
    shock_tier: np.ndarray  # (K,) tier index, -1 when none
    shock_offline: np.ndarray  # (K,) GPUs offline
    shock_price: np.ndarray  # (K,) price multiplier
    shock_inventory: np.ndarray  # (K,) inventory factor
    shock_intensity: np.ndarray  # (K,) intensity multiplier
    shock_crisis: np.ndarray  # (K,) bool: counts as a market crisis for the broker
    shock_team: np.ndarray  # (K,) team index of its injected job, -1 when none
    job_gpus: np.ndarray  # (K,) the injected job's fields (0 when none)
    job_memory: np.ndarray
    job_work: np.ndarray
    job_slack: np.ndarray
    job_value: np.ndarray
    job_priority: np.ndarray
    job_fits: np.ndarray  # (K, T) fitting tiers, smallest memory first, padded -1
    team_jobs: tuple[TeamJobs, ...]  # the seed-independent numbers of each team's jobs

    @property
    def n_random(self) -> int:
        return int((self.shock_random >= 0).sum())

    @functools.cached_property
    def rubric(self) -> Rubric:
        """The scenario's reward weights on the one term table (``commons_arena.rewards``)."""
        return Rubric(self.rules.config.rewards)

    @classmethod
    def of(cls, rules: Rules) -> Tables:
        from commons_arena.mechanics.jobs import fitting_tiers

        config, T = rules.config, rules.n_tiers
        specs = config.shocks
        K = len(specs)
        random_index = np.cumsum([spec.tick is None for spec in specs], dtype=np.int64) - 1
        targets = list(config.shock_targets)  # None: the shock injects no job
        team_of = [-1 if target is None else rules.team_index[target] for target in targets]
        # a random job shock may fire at every tick (one more for the tick an ended arena plays before its reset)
        injected = [sum((1 if spec.tick is not None else config.max_ticks + 1) for spec, team in zip(specs, team_of, strict=True)
                        if team == i) for i in range(rules.n_teams)]
        generated = [
            (src.generator.last_tick - src.generator.first_tick + 1) if src.generator is not None else 0
            for src in rules.job_sources
        ]
        n_jobs = max(len(src.fixed) + g + inj for src, g, inj in zip(rules.job_sources, generated, injected, strict=True))
        n_deps = max([len(job.deps) for src in rules.job_sources for job in src.fixed] + [1])
        n_effects = sum(1 if spec.tick is not None else min(spec.duration, config.max_ticks) + 1 for spec in specs)
        fits = np.full((K, T), -1, dtype=np.int64)
        for k, spec in enumerate(specs):
            if spec.job is not None:
                tiers = fitting_tiers(spec.job.min_memory_gb, config.gpu_tiers)
                fits[k, : len(tiers)] = tiers

        def column(get, dtype) -> np.ndarray:
            return np.array([get(spec) for spec in specs], dtype=dtype).reshape(K)

        def job_column(get, dtype) -> np.ndarray:
            return column(lambda spec: get(spec.job) if spec.job is not None else 0, dtype)

        return cls(
            rules=rules,
            n_jobs_max=max(n_jobs, 1),
            n_deps=n_deps,
            dep_slots=max([j + 1 for src in rules.job_sources for j, job in enumerate(src.fixed) if job.deps] + [0]),
            n_effects=max(n_effects, 1),
            price_grid=np.array(rules.price_grid, dtype=np.float64),
            speed=np.array(rules.speed, dtype=np.float64),
            inventory=np.array(rules.spot_inventory, dtype=np.int64),
            intensity=np.array(config.carbon.intensity, dtype=np.float64),
            board_pressure=np.array(rules.board_pressure, dtype=np.float64),
            shock_tick=column(lambda s: -1 if s.tick is None else s.tick, np.int64),
            shock_rate=column(lambda s: 0.0 if s.rate is None else s.rate, np.float64),
            shock_random=np.where(column(lambda s: s.tick is None, bool), random_index, -1),
            shock_kind=column(lambda s: int(s.shock_kind), np.int64),
            shock_until=column(lambda s: s.duration - 1, np.int64),
            shock_tier=column(lambda s: rules.tier_index[s.tier] if s.tier is not None else -1, np.int64),
            shock_offline=column(lambda s: s.gpus_offline, np.int64),
            shock_price=column(lambda s: s.price_multiplier, np.float64),
            shock_inventory=column(lambda s: s.inventory_factor, np.float64),
            shock_intensity=column(lambda s: s.intensity_multiplier, np.float64),
            shock_crisis=column(lambda s: s.price_multiplier > 1 or s.inventory_factor < 1, bool),
            shock_team=np.array(team_of, dtype=np.int64).reshape(K),
            job_gpus=job_column(lambda j: j.gpus, np.int64),
            job_memory=job_column(lambda j: j.min_memory_gb, np.float64),
            job_work=job_column(lambda j: j.work, np.float64),
            job_slack=job_column(lambda j: j.slack, np.int64),
            job_value=job_column(lambda j: j.value, np.float64),
            job_priority=job_column(lambda j: j.priority, np.int64),
            job_fits=fits,
            team_jobs=tuple(TeamJobs.of(rules, i, n_deps) for i in range(rules.n_teams)),
        )


def edf_key(deadline: np.ndarray, priority: np.ndarray) -> np.ndarray:
    """One integer per slot whose stable ascending sort is the reference's EDF order
    (deadline, then higher priority; ties keep creation order)."""
    return deadline * (MAX_PRIORITY + 1) + (MAX_PRIORITY - priority)


@dataclass(eq=False)
class BatchState:
    """Every arena's state; field comments give the shape (B arenas, N teams, T tiers, J job slots)."""

    t: np.ndarray  # (B,) the tick about to be played
    budget: np.ndarray  # (B,)
    carbon_used: np.ndarray  # (B,)
    injected: np.ndarray  # (B,) jobs injected by shocks so far
    online: np.ndarray  # (B, T)
    offer_qty: np.ndarray  # (B, T)
    offer_price: np.ndarray  # (B, T)
    last_sold: np.ndarray  # (B, T)
    last_price: np.ndarray  # (B, T)
    declared: np.ndarray  # (B, N, T)
    stance: np.ndarray  # (B, N)
    last_grant: np.ndarray  # (B, N, T)
    need: np.ndarray  # (B, N, T)
    starved_last: np.ndarray  # (B, N) bool
    streak: np.ndarray  # (B, N)
    revealed: np.ndarray  # (B, N) bool
    credibility: np.ndarray  # (B, N)
    escalations: np.ndarray  # (B, N)
    shocks_seen: np.ndarray  # (B, kinds)
    # jobs, (B, N, J) unless said
    gpus: np.ndarray
    memory: np.ndarray
    work: np.ndarray  # remaining work
    arrival: np.ndarray
    deadline: np.ndarray
    value: np.ndarray
    priority: np.ndarray
    status: np.ndarray  # PENDING / DONE / MISSED / EMPTY
    done_tick: np.ndarray
    fits: np.ndarray  # (B, N, J, T) fitting tiers, smallest memory first, padded -1
    deps: np.ndarray  # (B, N, J, D) slot indices, padded -1
    n_jobs: np.ndarray  # (B, N) slots in use
    order: np.ndarray  # (B, N, J) slot indices in EDF order, empty slots last
    # effects of fired shocks, in firing order, (B, E)
    effect_spec: np.ndarray  # index into the scenario's shocks, -1 when empty
    effect_until: np.ndarray  # last tick it is active, -1 when empty
    uniforms: np.ndarray  # (B, max_ticks + 1, random shocks) each tick's draws of the random shocks

    @classmethod
    def empty(cls, tables: Tables, B: int) -> BatchState:
        rules = tables.rules
        T, N, J, D, E = rules.n_tiers, rules.n_teams, tables.n_jobs_max, tables.n_deps, tables.n_effects
        i64, f64 = np.int64, np.float64
        return cls(
            t=np.zeros(B, i64), budget=np.zeros(B, f64), carbon_used=np.zeros(B, f64), injected=np.zeros(B, i64),
            online=np.zeros((B, T), i64), offer_qty=np.zeros((B, T), i64), offer_price=np.zeros((B, T), f64),
            last_sold=np.zeros((B, T), i64), last_price=np.zeros((B, T), f64),
            declared=np.zeros((B, N, T), i64), stance=np.zeros((B, N), i64), last_grant=np.zeros((B, N, T), i64),
            need=np.zeros((B, N, T), i64), starved_last=np.zeros((B, N), bool), streak=np.zeros((B, N), i64),
            revealed=np.zeros((B, N), bool), credibility=np.ones((B, N), f64), escalations=np.zeros((B, N), i64),
            shocks_seen=np.zeros((B, len(ShockKind)), i64),
            gpus=np.zeros((B, N, J), i64), memory=np.zeros((B, N, J), f64), work=np.zeros((B, N, J), f64),
            arrival=np.zeros((B, N, J), i64), deadline=np.full((B, N, J), NO_DEADLINE, i64),
            value=np.zeros((B, N, J), f64), priority=np.zeros((B, N, J), i64),
            status=np.full((B, N, J), EMPTY, np.int8), done_tick=np.full((B, N, J), -1, i64),
            fits=np.full((B, N, J, T), -1, i64), deps=np.full((B, N, J, D), -1, i64),
            n_jobs=np.zeros((B, N), i64), order=np.broadcast_to(np.arange(J), (B, N, J)).copy(),
            effect_spec=np.full((B, E), -1, i64), effect_until=np.full((B, E), -1, i64),
            uniforms=np.zeros((B, rules.config.max_ticks + 1, tables.n_random), f64),
        )

    @classmethod
    def started(cls, tables: Tables, seeds: Sequence[int]) -> BatchState:
        """New arenas at tick 0, one per seed, drawn with numpy's own code (few arenas: see :meth:`reset`)."""
        state = cls.empty(tables, len(seeds))
        index = np.arange(len(seeds))
        state.budget[:] = tables.rules.config.budget
        state.online[:] = tables.rules.owned
        state.draw_with_reference(tables, index, seeds)
        state.sort_jobs(index)
        return state

    def reset(self, tables: Tables, index: np.ndarray, seeds: Sequence[int], drawn: ResetDraws | None = None) -> None:
        """Tick 0 in arenas ``index``, seeded ``seeds`` (one each): the reference's
        ``initial_state`` and the whole episode's shock draws, one stream per arena
        (:mod:`commons_arena.batched.draws`; an arena it cannot draw goes through
        :meth:`draw_with_reference`); ``drawn``: those draws, when made ahead."""
        rules = tables.rules
        config = rules.config
        blank = BatchState.empty(tables, len(index))
        for f in fields(self):
            getattr(self, f.name)[index] = getattr(blank, f.name)
        self.budget[index] = config.budget
        self.online[index] = rules.owned
        if drawn is None:
            drawn = draw_resets(rules, seeds, tables.n_random)
        assert drawn.seeds == tuple(seeds), "draws made for other seeds"
        fast = ~drawn.redo
        b = index[fast]
        D = tables.n_deps
        for team, (jobs, draws) in enumerate(zip(tables.team_jobs, drawn.teams, strict=True)):
            L = jobs.gpus.shape[0]
            if L:
                self.gpus[b, team, :L], self.memory[b, team, :L] = jobs.gpus, jobs.memory
                self.work[b, team, :L], self.arrival[b, team, :L] = jobs.work, jobs.arrival
                self.deadline[b, team, :L], self.priority[b, team, :L] = jobs.deadline, jobs.priority
                self.value[b, team, :L] = draws.fixed_value[fast]
                self.fits[b, team, :L], self.deps[b, team, :L, :D] = jobs.fits, jobs.deps
                self.status[b, team, :L] = PENDING
            arrived = draws.arrived[fast]
            generated = arrived.sum(axis=1)
            if generated.any():
                r, g = arrived.nonzero()
                at = (b[r], team, L + (np.cumsum(arrived, axis=1) - 1)[r, g])
                memory = draws.memory[fast][r, g]
                self.gpus[at], self.memory[at] = draws.gpus[fast][r, g], jobs.memories[memory]
                self.work[at], self.arrival[at] = draws.work[fast][r, g], jobs.first_tick + g
                self.deadline[at] = jobs.first_tick + g + draws.slack[fast][r, g]
                self.value[at], self.priority[at] = draws.value[fast][r, g], draws.priority[fast][r, g]
                self.fits[at] = jobs.memory_fits[memory]
                self.status[at] = PENDING
            self.n_jobs[b, team] = L + generated
        self.uniforms[b, : config.max_ticks] = drawn.uniforms[fast]
        if drawn.redo.any():
            redo = np.flatnonzero(drawn.redo)
            self.draw_with_reference(tables, index[redo], [seeds[i] for i in redo.tolist()])
        self.sort_jobs(index)

    def draw_with_reference(self, tables: Tables, index: np.ndarray, seeds: Sequence[int]) -> None:
        """The draws of a reset in arenas ``index`` (blank otherwise) made by the reference's own code:
        ``TeamJobSource.draw``, then ``random()`` for each tick's random shocks."""
        rules = tables.rules
        n_random, ticks = tables.n_random, rules.config.max_ticks
        rows: list[tuple] = []
        fit_rows: list[tuple] = []
        dep_rows: list[tuple] = []
        for arena, seed in zip(index.tolist(), seeds, strict=True):
            rng = np.random.default_rng(seed)
            for t, source in enumerate(rules.job_sources):
                for k, job in enumerate(source.draw(rng)):
                    rows.append((arena, t, k, job.gpus, job.min_memory_gb, job.work, job.arrival, job.deadline,
                                 job.value, job.priority))
                    fit_rows += [(arena, t, k, f, tier) for f, tier in enumerate(job.fits)]
                    dep_rows += [(arena, t, k, d, dep) for d, dep in enumerate(job.deps)]
            if n_random:  # every tick's draws at once: the same numbers as one call per tick
                self.uniforms[arena, :ticks] = rng.random(ticks * n_random).reshape(ticks, n_random)
        if rows:
            b, team, j, gpus, memory, work, arrival, deadline, value, priority = (np.array(c) for c in zip(*rows, strict=True))
            at = (b, team, j)
            self.gpus[at], self.memory[at], self.work[at] = gpus, memory, work
            self.arrival[at], self.deadline[at], self.value[at], self.priority[at] = arrival, deadline, value, priority
            self.status[at] = PENDING
            np.add.at(self.n_jobs, (b, team), 1)
        if fit_rows:
            b, team, j, f, tier = (np.array(c) for c in zip(*fit_rows, strict=True))
            self.fits[b, team, j, f] = tier
        if dep_rows:
            b, team, j, d, dep = (np.array(c) for c in zip(*dep_rows, strict=True))
            self.deps[b, team, j, d] = dep

    def slots_in_use(self) -> int:
        """Job slots any team of any arena uses: the rest are empty everywhere (and last in EDF order)."""
        return max(int(self.n_jobs.max()), 1)

    def sort_jobs(self, index: np.ndarray) -> None:
        """EDF order of every team's jobs in arenas ``index`` (stable: ties keep creation order)."""
        J = self.slots_in_use()  # the empty slots after them keep their order: last, by index
        key = edf_key(self.deadline[index, :, :J], self.priority[index, :, :J])
        self.order[index, :, :J] = np.argsort(key, axis=-1, kind="stable")
