"""The reference's observations: state → each agent's observation (docs/rules.md §7; the
batched core writes the same values in ``commons_arena/batched/observations.py``).

What each role may see is decided here and only here; the test suite perturbs hidden
values and checks that no other agent's observation moves. The one deliberate coarse
leak is the allocator's ``pressure`` signal: per team, how many of its ready jobs are due
within ``PRESSURE_WINDOW`` ticks (0, 1, 2+), like a board's low/medium/high mood.

Each observation is one flat list of Python numbers, written field by field in the order
the layout declares them (``spaces.py``, the one declaration; ``tests/commons_arena/test_env_api.py``
checks that each field lands where the layout says) and converted to float32 in one call (one numpy call per agent instead of one per field): a
new array per agent and step, which the env never touches again. Numbers that never
change (owned GPUs, unit costs, the carbon cap, the published forecast of each tick) are
prepared once.
"""

from __future__ import annotations

import numpy as np

from commons_arena.batched.observations import PRESSURE_WINDOW
from commons_arena.enums import ALLOCATOR, BROKER, ShockKind, Stance
from commons_arena.mechanics import carbon
from commons_arena.rules import rules_for
from commons_arena.scenario import ScenarioConfig
from commons_arena.spaces import JOB_SLOT_FIELDS, observation_layout
from tests.reference.mechanics import shocks
from tests.reference.mechanics.jobs import Queue, queue_at
from tests.reference.state import ArenaState


class ObservationBuilder:
    """Builds every agent's flat observation from the state; static parts are computed once."""

    def __init__(self, config: ScenarioConfig) -> None:
        self.config = config
        self.teams = config.team_names
        self.layouts = {agent: observation_layout(config, agent) for agent in config.agents}
        rules = rules_for(config)
        self.n_tiers = rules.n_tiers
        # static fields, once
        self.owned = rules.owned.tolist()
        self.inventory = list(rules.spot_inventory)
        self.unit_cost = rules.spot_unit_cost.tolist()
        # the published profile does not depend on the seed: one forecast per tick, as float32 values
        self.forecasts = [self._forecast(t) for t in range(config.max_ticks + 1)]
        self.queue_slots = config.queue_slots
        self.team_size = self.layouts[self.teams[0]].size
        self.carbon_cap = config.carbon.cap_kg
        self.empty_slots = [0.0] * (self.queue_slots * len(JOB_SLOT_FIELDS))
        self.n_stances = len(Stance)
        self.no_stance = [0.0] * (len(self.teams) * self.n_stances)
        self.no_shock = [0.0] * len(ShockKind)
        self.no_revealed_need = [0] * (len(self.teams) * self.n_tiers)

    def all(self, s: ArenaState, queues: list[Queue] | None = None) -> dict[str, np.ndarray]:
        """Every agent's observation, each a new array. ``queues``: each team's
        :func:`queue_at` tick ``s.t`` (the env has them already; computed here when not given)."""
        t, T = s.t, self.n_tiers
        if queues is None:
            queues = [queue_at(s.jobs[i], s.orders[i], t, T) for i in range(len(self.teams))]
        active = shocks.active(s.effects, t)
        declared = s.declared.ravel().tolist()  # team-major: team i is declared[i*T:(i+1)*T]
        offer = s.offer_qty.tolist() + s.offer_price.tolist()
        obs = {ALLOCATOR: np.array(self._allocator(s, queues, active, declared, offer), dtype=np.float32)}
        need, last_grant = s.need.tolist(), s.last_grant.tolist()
        credibility, streak = s.credibility.tolist(), s.streak.tolist()
        for i, team in enumerate(self.teams):
            own = slice(i * T, (i + 1) * T)
            values = [t, *need[i], *last_grant[i], *declared[own], credibility[i], streak[i], *offer,
                      *declared[: own.start], *declared[own.stop :]]  # others_declared, in team order
            values += self._job_slots(queues[i], t)
            values += self.empty_slots[: self.team_size - len(values)]
            obs[team] = np.array(values, dtype=np.float32)
        obs[BROKER] = np.array(self._broker(s, active, declared, offer), dtype=np.float32)
        return obs

    def _allocator(self, s: ArenaState, queues: list[Queue], active: list, declared: list, offer: list) -> list:
        t = s.t
        stance = self.no_stance.copy()  # one-hot per team
        for i, k in enumerate(s.stance.tolist()):
            stance[i * self.n_stances + k] = 1.0
        active_kinds = self.no_shock.copy()
        for effect in active:
            active_kinds[effect.spec.shock_kind] = 1.0
        revealed = s.revealed.tolist()
        revealed_need = self.no_revealed_need
        if any(revealed):
            hidden = [0] * self.n_tiers
            rows = zip(s.need.tolist(), revealed, strict=True)
            revealed_need = [n for row, shown in rows for n in (row if shown else hidden)]
        forecast = self.forecasts[t] if t < len(self.forecasts) else self._forecast(t)
        pressure = [self._pressure(q, t) for q in queues]
        return [t, *self.owned, *s.online.tolist(), s.budget, s.carbon_used, self.carbon_cap, *forecast,
                *offer, *declared, *stance, *s.escalations.tolist(), *s.credibility.tolist(), *pressure, *revealed,
                *revealed_need, *s.shocks_seen.tolist(), *active_kinds]

    def _broker(self, s: ArenaState, active: list, declared: list, offer: list) -> list:
        crisis = any(e.spec.price_multiplier > 1 or e.spec.inventory_factor < 1 for e in active)
        T = self.n_tiers
        demand = [sum(declared[k::T]) for k in range(T)]  # Σ over teams, per tier
        return [s.t, *shocks.spot_inventory(self.inventory, active), *self.unit_cost, *s.last_sold.tolist(),
                *s.last_price.tolist(), *offer, *demand, crisis]

    def _job_slots(self, queue: Queue, t: int) -> list:
        """The most urgent waiting jobs (EDF order), a row of JOB_SLOT_FIELDS each; no row for an empty slot."""
        values: list = []
        for job, ready in queue.waiting[: self.queue_slots]:
            values += (1.0, job.gpus, job.min_memory_gb, job.remaining, job.deadline - t, job.value, job.priority,
                       ready)
        return values

    def _forecast(self, t: int) -> list[float]:
        cfg = self.config.carbon
        return carbon.forecast(cfg.intensity, t, cfg.forecast_horizon).tolist()

    @staticmethod
    def _pressure(queue: Queue, t: int) -> int:
        due = sum(1 for job, _ in queue.waiting if job.deadline - t < PRESSURE_WINDOW)
        return min(due, 2)
