"""One arena of a batch read as one game: its tick report and its hidden state.

The rules run once, in the batched core (:mod:`commons_arena.batched`); the per-arena env
(:class:`commons_arena.arena.ArenaEnv`) is a batch of one. What the env's readers want of one
arena is derived here from the batch's arrays, when asked:

* :class:`TickReport`: everything one played tick did (what the render, the recording and the
  server's causes read), from the core's :class:`~commons_arena.batched.tick.TickResult`;
* :class:`ArenaState`: the privileged, live view of the hidden state (``env.hidden_state()``):
  the jobs with their true numbers, true needs, starvation; what the oracle plans with. Reads
  go to the batch's arrays, so the view always shows the state now; writes to a job's fields
  (the privacy tests perturb hidden values) go to them too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from commons_arena.batched.state import DONE, PENDING, BatchState, Tables
from commons_arena.batched.tick import Outcome, TickResult
from commons_arena.enums import ShockKind
from commons_arena.mechanics.shocks import Effect
from commons_arena.rewards import Repairs

Event = dict[str, Any]  # a fired shock as plain data: tick, kind, until, and team/job or tier/gpus_offline


class TeamTick(NamedTuple):
    """What happened to one team's jobs in one tick (raw measurements, no weights)."""

    need: list[int]  # per tier: GPUs to run every ready job (true need)
    ready_gpus: int
    placed_gpus: int
    completed: int  # jobs completed
    missed: int  # jobs missed
    completed_value: float
    missed_value: float

    @property
    def satisfaction(self) -> float:
        """Share of the true need that ran; 1.0 when nothing was needed."""
        return 1.0 if self.ready_gpus == 0 else self.placed_gpus / self.ready_gpus

    @property
    def starved(self) -> bool:
        return self.placed_gpus < self.ready_gpus


class Before(NamedTuple):
    """What the allocator acted on in a tick (the state before it is played)."""

    tick: int
    declared: np.ndarray  # teams x tiers: requests made last tick for this tick
    offer_qty: np.ndarray  # tiers: the offer posted last tick
    offer_price: np.ndarray  # tiers: its unit prices (= prices paid)
    budget: float

    @classmethod
    def of(cls, s: BatchState, b: int = 0) -> Before:
        # the core replaces these arrays when a tick moves on (never writes them in place): kept as they are
        return cls(int(s.t[b]), s.declared[b], s.offer_qty[b], s.offer_price[b], float(s.budget[b]))


class TickReport(NamedTuple):
    """Everything one played tick did: what the render, the recording and the server read.
    Immutable (a NamedTuple); its arrays are the core's, so treat them as read-only."""

    tick: int  # the tick played
    # what the allocator acted on
    declared: np.ndarray  # teams x tiers: requests made last tick for this tick
    offer_qty: np.ndarray  # tiers: the offer posted last tick
    offer_price: np.ndarray  # tiers: its unit prices (= prices paid)
    budget_before: float  # before this tick's purchase
    # what happened
    bought: np.ndarray  # tiers, repaired
    purchase_cost: float
    granted: np.ndarray  # teams x tiers, repaired
    used: np.ndarray  # tiers: granted GPUs that ran a job
    used_total: int  # Σ used
    granted_total: int  # Σ granted
    need: np.ndarray  # teams x tiers: true need this tick (hidden)
    intensity: float  # grid kg/kWh this tick
    events: list[Event]  # shocks fired
    repairs: Repairs
    teams: list[TeamTick]  # per team: its jobs' tick (need, completed, missed, starved)
    exposed_bluffs: list[bool]  # per team (audits only)
    justified: list[bool]  # per team: justified escalations
    unjustified: list[bool]  # per team
    outcome: Outcome  # raw measurements the rubric scores (this arena's row)
    terms: dict[str, dict[str, float]]  # agent -> weighted reward terms
    rewards: dict[str, float]  # agent -> Σ terms

    @classmethod
    def of(cls, before: Before, tick: TickResult, events: list[Event], terms: dict[str, dict[str, float]],
           rewards: dict[str, float], b: int = 0) -> TickReport:
        """Arena ``b``'s report of a played tick; ``terms`` and ``rewards`` as the env gave them out."""
        run, purchase, grants = tick.run, tick.purchase, tick.grants
        need = run.need[b]
        rows = zip(need.tolist(), run.ready_gpus[b].tolist(), run.placed_gpus[b].tolist(), run.completed[b].tolist(),
                   run.missed[b].tolist(), run.completed_value[b].tolist(), run.missed_value[b].tolist(), strict=True)
        return cls(
            tick=before.tick,
            declared=before.declared,
            offer_qty=before.offer_qty,
            offer_price=before.offer_price,
            budget_before=before.budget,
            bought=purchase.bought[b],
            purchase_cost=float(purchase.cost[b]),
            granted=grants.granted[b],
            used=run.used[b],
            used_total=int(run.used_total[b]),
            granted_total=int(run.granted_total[b]),
            need=need,
            intensity=float(grants.intensity[b]),
            events=events,
            repairs=Repairs(*(int(u[b]) for u in tick.repair_units())),
            teams=[TeamTick(*row) for row in rows],
            exposed_bluffs=tick.bluffs[b].tolist(),
            justified=tick.justified[b].tolist(),
            unjustified=tick.unjustified[b].tolist(),
            outcome=Outcome(*(field[b] for field in tick.outcome)),
            terms=terms,
            rewards=rewards,
        )


JOB_FIELDS = ("id", "gpus", "min_memory_gb", "work", "arrival", "deadline", "value", "priority", "deps", "fits",
              "remaining", "status", "done_tick")


class JobView:
    """One job of one arena, read from (and written to) the batch's job tables.

    ``work`` is its size (the core keeps the work still to do: ``remaining``)."""

    __slots__ = ("_arena", "_at", "id")

    def __init__(self, arena: ArenaState, team: int, slot: int, job_id: str) -> None:
        self._arena, self._at, self.id = arena, (arena.row, team, slot), job_id

    def _get(self, name: str) -> Any:
        return getattr(self._arena.batch, name)[self._at].item()

    def _set(self, name: str, value: Any) -> None:
        getattr(self._arena.batch, name)[self._at] = value
        self._arena.touched = True

    gpus = property(lambda self: self._get("gpus"), lambda self, v: self._set("gpus", v))
    min_memory_gb = property(lambda self: self._get("memory"), lambda self, v: self._set("memory", v))
    remaining = property(lambda self: self._get("work"), lambda self, v: self._set("work", v))
    arrival = property(lambda self: self._get("arrival"), lambda self, v: self._set("arrival", v))
    deadline = property(lambda self: self._get("deadline"), lambda self, v: self._set("deadline", v))
    value = property(lambda self: self._get("value"), lambda self, v: self._set("value", v))
    priority = property(lambda self: self._get("priority"), lambda self, v: self._set("priority", v))
    status = property(lambda self: self._get("status"), lambda self, v: self._set("status", v))
    done_tick = property(lambda self: self._get("done_tick"), lambda self, v: self._set("done_tick", v))

    @property
    def work(self) -> float:
        return float(self._arena.size[self._at[1:]])

    @work.setter
    def work(self, value: float) -> None:
        self._arena.size[self._at[1:]] = value
        self._arena.touched = True

    @property
    def deps(self) -> tuple[int, ...]:
        """Indices into the team's job list."""
        return tuple(d for d in self._arena.batch.deps[self._at].tolist() if d >= 0)

    @property
    def fits(self) -> tuple[int, ...]:
        """Tier indices with enough memory, smallest memory first."""
        return tuple(k for k in self._arena.batch.fits[self._at].tolist() if k >= 0)

    def ready(self, t: int, jobs: list[JobView]) -> bool:
        return self.status == PENDING and self.arrival <= t and all(jobs[d].status == DONE for d in self.deps)

    def __repr__(self) -> str:
        return f"JobView({', '.join(f'{name}={getattr(self, name)!r}' for name in JOB_FIELDS)})"


@dataclass(eq=False)
class ArenaState:
    """The hidden state of arena ``row`` of a batch, read live (module docstring): every field of
    the game's state for one arena, arrays as views of the batch's rows."""

    tables: Tables
    batch: BatchState
    row: int
    size: np.ndarray  # (N, J) each job's work when it was created
    injected_jobs: dict[tuple[int, int], str]  # (team, slot) -> the name of a job a shock injected
    touched: bool = False  # a job was written through this view since the env last looked

    @classmethod
    def of(cls, tables: Tables, batch: BatchState, row: int = 0) -> ArenaState:
        """The view of a freshly reset arena."""
        return cls(tables, batch, row, batch.work[row].copy(), {})

    def fire(self, fired: np.ndarray, tick: int, n_jobs: np.ndarray, injected: int) -> list[Event]:
        """The events of the shocks ``fired`` (K,) at ``tick``, in file order; names and sizes of the jobs
        they inject (``n_jobs``: each team's jobs before the tick, ``injected``: jobs injected before it)."""
        tables = self.tables
        config = tables.rules.config
        events: list[Event] = []
        slots = n_jobs.tolist()
        for k in np.flatnonzero(fired).tolist():
            spec = config.shocks[k]
            kind = ShockKind(int(tables.shock_kind[k])).label
            event: Event = {"tick": tick, "kind": kind, "until": tick + spec.duration - 1}
            team = int(tables.shock_team[k])
            if team >= 0:
                injected += 1
                job = f"{kind}_{injected}"
                self.injected_jobs[(team, slots[team])] = job
                self.size[team, slots[team]] = tables.job_work[k]
                slots[team] += 1
                event.update(team=config.team_names[team], job=job)
            if spec.tier is not None:
                event.update(tier=spec.tier, gpus_offline=spec.gpus_offline)
            events.append(event)
        return events

    # scalars
    t = property(lambda self: int(self.batch.t[self.row]), doc="the tick about to be played")
    budget = property(lambda self: float(self.batch.budget[self.row]))
    carbon_used = property(lambda self: float(self.batch.carbon_used[self.row]), doc="kg CO2 so far")
    injected = property(lambda self: int(self.batch.injected[self.row]), doc="jobs injected by shocks so far")
    # (T,)
    online = property(lambda self: self.batch.online[self.row], doc="owned GPUs not offline")
    offer_qty = property(lambda self: self.batch.offer_qty[self.row], doc="the broker's offer for this tick")
    offer_price = property(lambda self: self.batch.offer_price[self.row], doc="its unit prices")
    last_sold = property(lambda self: self.batch.last_sold[self.row], doc="GPUs bought last tick")
    last_price = property(lambda self: self.batch.last_price[self.row], doc="prices of last tick's offer")
    # (N, T) and (N,)
    declared = property(lambda self: self.batch.declared[self.row], doc="requests declared last tick for this tick")
    stance = property(lambda self: self.batch.stance[self.row], doc="latest stance of each team")
    last_grant = property(lambda self: self.batch.last_grant[self.row], doc="grants of last tick")
    need = property(lambda self: self.batch.need[self.row], doc="true need this tick (hidden)")
    starved_last = property(lambda self: self.batch.starved_last[self.row], doc="starved last tick (hidden)")
    streak = property(lambda self: self.batch.streak[self.row], doc="consecutive starved ticks")
    revealed = property(lambda self: self.batch.revealed[self.row])
    credibility = property(lambda self: self.batch.credibility[self.row])
    escalations = property(lambda self: self.batch.escalations[self.row], doc="escalations so far")
    shocks_seen = property(lambda self: self.batch.shocks_seen[self.row], doc="shocks fired so far, per kind")

    @property
    def jobs(self) -> list[list[JobView]]:
        """Each team's jobs in creation order (hidden)."""
        sources = self.tables.rules.job_sources
        out = []
        for team, count in enumerate(self.batch.n_jobs[self.row].tolist()):
            fixed = sources[team].fixed
            arrivals = self.batch.arrival[self.row, team, :count].tolist()
            out.append([JobView(self, team, slot, self._job_id(team, slot, len(fixed), arrivals[slot]))
                        for slot in range(count)])
        return out

    def _job_id(self, team: int, slot: int, listed: int, arrival: int) -> str:
        injected = self.injected_jobs.get((team, slot))
        if injected is not None:
            return injected
        if slot < listed:
            return self.tables.rules.job_sources[team].fixed[slot].id
        return f"{self.tables.rules.config.team_names[team]}_g{arrival}"

    @property
    def orders(self) -> list[list[int]]:
        """Per team: the execution (EDF) order of its jobs, as indices into ``jobs``."""
        return [self.batch.order[self.row, team, :count].tolist()
                for team, count in enumerate(self.batch.n_jobs[self.row].tolist())]

    @property
    def effects(self) -> list[Effect]:
        """The timed effects of fired shocks still active, in firing order."""
        shocks, tables = self.tables.rules.config.shocks, self.tables
        return [Effect(spec=shocks[k], tier_index=int(tables.shock_tier[k]), until=until)
                for k, until in zip(self.batch.effect_spec[self.row].tolist(), self.batch.effect_until[self.row].tolist(),
                                    strict=True) if k >= 0]
