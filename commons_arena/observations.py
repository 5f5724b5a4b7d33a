"""State → each agent's observation (SPEC §6), filled field by field through the layouts.

What each role may see is decided here and only here; the test suite perturbs hidden
values and checks that no other agent's observation moves. The one deliberate coarse
leak is the allocator's ``pressure`` signal: per team, how many of its ready jobs are due
within ``PRESSURE_WINDOW`` ticks (0, 1, 2+), like a board's low/medium/high mood.
"""

from __future__ import annotations

import numpy as np

from commons_arena.enums import ALLOCATOR, BROKER
from commons_arena.mechanics import carbon, shocks
from commons_arena.mechanics.jobs import PENDING
from commons_arena.scenario import ScenarioConfig
from commons_arena.spaces import JOB_SLOT_FIELDS, observation_layout
from commons_arena.state import ArenaState

PRESSURE_WINDOW = 2  # ticks


class ObservationBuilder:
    """Builds every agent's flat observation from the state; static parts are computed once."""

    def __init__(self, config: ScenarioConfig) -> None:
        self.config = config
        self.teams = config.team_names
        self.layouts = {agent: observation_layout(config, agent) for agent in config.agents}
        self.slices = {agent: layout.slices for agent, layout in self.layouts.items()}
        self.owned = np.array([t.owned for t in config.gpu_tiers], dtype=np.float32)
        self.inventory = np.array([t.spot_inventory for t in config.gpu_tiers])
        self.unit_cost = np.array([t.spot_unit_cost for t in config.gpu_tiers], dtype=np.float32)
        self.job_width = len(JOB_SLOT_FIELDS)
        n = len(self.teams)
        self.others = [np.array([j for j in range(n) if j != i]) for i in range(n)]
        self.team_rows = np.arange(n)

    def all(self, s: ArenaState) -> dict[str, np.ndarray]:
        obs = {ALLOCATOR: self.allocator(s)}
        for i, team in enumerate(self.teams):
            obs[team] = self.team(s, i)
        obs[BROKER] = self.broker(s)
        return obs

    def allocator(self, s: ArenaState) -> np.ndarray:
        cfg, sl = self.config, self.slices[ALLOCATOR]
        o = np.zeros(self.layouts[ALLOCATOR].size, dtype=np.float32)
        active = shocks.active(s.effects, s.t)
        o[sl["tick"]] = s.t
        o[sl["owned"]] = self.owned
        o[sl["online"]] = s.online
        o[sl["budget"]] = s.budget
        o[sl["carbon_used"]] = s.carbon_used
        o[sl["carbon_cap"]] = cfg.carbon.cap_kg
        o[sl["intensity_forecast"]] = carbon.forecast(cfg.carbon.intensity, s.t, cfg.carbon.forecast_horizon)
        o[sl["offer_qty"]] = s.offer_qty
        o[sl["offer_price"]] = s.offer_price
        o[sl["declared"]] = s.declared.ravel()
        o[sl["stance"].start + self.team_rows * 3 + s.stance] = 1.0
        o[sl["escalations"]] = s.escalations
        o[sl["credibility"]] = s.credibility
        o[sl["pressure"]] = [self._pressure(team_jobs, s.t) for team_jobs in s.jobs]
        o[sl["revealed"]] = s.revealed
        o[sl["revealed_need"]] = (s.need * s.revealed[:, None]).ravel()
        o[sl["shocks_seen"]] = s.shocks_seen
        for effect in active:
            o[sl["shocks_active"].start + effect.spec.shock_kind] = 1.0
        return o

    def team(self, s: ArenaState, i: int) -> np.ndarray:
        sl = self.slices[self.teams[i]]
        o = np.zeros(self.layouts[self.teams[i]].size, dtype=np.float32)
        o[sl["tick"]] = s.t
        o[sl["need"]] = s.need[i]
        o[sl["last_grant"]] = s.last_grant[i]
        o[sl["declared"]] = s.declared[i]
        o[sl["credibility"]] = s.credibility[i]
        o[sl["starved_streak"]] = s.streak[i]
        o[sl["offer_qty"]] = s.offer_qty
        o[sl["offer_price"]] = s.offer_price
        o[sl["others_declared"]] = s.declared[self.others[i]].ravel()
        start, width = sl["jobs"].start, self.job_width
        jobs = s.jobs[i]
        slot = 0
        rows = []
        for j in s.orders[i]:  # EDF order = most urgent first
            job = jobs[j]
            if job.status != PENDING or job.arrival > s.t:
                continue
            rows.append((1.0, job.gpus, job.min_memory_gb, job.remaining, job.deadline - s.t,
                         job.value, job.priority, job.ready(s.t, jobs)))
            if len(rows) == self.config.queue_slots:
                break
        if rows:
            o[start : start + len(rows) * width] = np.array(rows, dtype=np.float32).ravel()
        return o

    def broker(self, s: ArenaState) -> np.ndarray:
        sl = self.slices[BROKER]
        o = np.zeros(self.layouts[BROKER].size, dtype=np.float32)
        active = shocks.active(s.effects, s.t)
        o[sl["tick"]] = s.t
        o[sl["inventory"]] = np.floor(self.inventory * shocks.inventory_factor(active))
        o[sl["unit_cost"]] = self.unit_cost
        o[sl["last_sold"]] = s.last_sold
        o[sl["last_price"]] = s.last_price
        o[sl["offer_qty"]] = s.offer_qty
        o[sl["offer_price"]] = s.offer_price
        o[sl["demand"]] = s.declared.sum(axis=0)
        o[sl["crisis"]] = any(e.spec.price_multiplier > 1 or e.spec.inventory_factor < 1 for e in active)
        return o

    @staticmethod
    def _pressure(jobs: list, t: int) -> int:
        due = 0
        for job in jobs:
            if job.status == PENDING and job.arrival <= t and job.deadline - t < PRESSURE_WINDOW:
                due += 1
                if due == 2:
                    break
        return due
