"""Batched state -> each agent's observations, ``(B, obs_dim)`` float32 (docs/rules.md §7).

What each role may see is decided here and only here; the privacy tests perturb hidden values
and check that no other agent's observation moves. Values are written field by field into the
slices :func:`commons_arena.spaces.observation_layout` names, gathered as float64 and converted
to float32 once (the reference, tests/reference/observations.py, writes the same values).
"""

from __future__ import annotations

import numpy as np

from commons_arena.batched.state import BatchState, Tables
from commons_arena.batched.tick import Effects, Queue, in_edf_order, spot_inventory
from commons_arena.enums import ALLOCATOR, BROKER, Stance
from commons_arena.mechanics import carbon
from commons_arena.spaces import JOB_SLOT_FIELDS, observation_layout

# The allocator's one deliberate, coarse leak of hidden state (docs/rules.md §7): per team, how many of
# its arrived, unresolved jobs are due within this many ticks (0, 1, 2 for two or more).
PRESSURE_WINDOW = 2  # ticks


class BatchObserver:
    """Builds every agent's stacked observations; static parts are computed once."""

    def __init__(self, tables: Tables) -> None:
        self.tables = tables
        rules = tables.rules
        config = rules.config
        self.teams = config.team_names
        self.layouts = {agent: observation_layout(config, agent) for agent in config.agents}
        cfg = config.carbon
        self.forecasts = np.array([carbon.forecast(cfg.intensity, t, cfg.forecast_horizon)
                                   for t in range(config.max_ticks + 2)], dtype=np.float64)
        self.queue_slots = config.queue_slots
        self.stance_base = np.arange(rules.n_teams) * len(Stance)
        self.others = np.array([[j for j in range(rules.n_teams) if j != i] for i in range(rules.n_teams)],
                               dtype=np.int64).reshape(rules.n_teams, rules.n_teams - 1)
        assert all(self.layouts[team].slices == self.layouts[self.teams[0]].slices for team in self.teams)

    def all(self, s: BatchState, queue: Queue, effects: Effects) -> dict[str, np.ndarray]:
        """Every agent's observations at tick ``s.t``; ``queue`` and ``effects``: those of tick ``s.t``."""
        B = s.t.shape[0]
        rules = self.tables.rules
        N, T = rules.n_teams, rules.n_tiers
        t = s.t.astype(np.float64)
        declared = s.declared.reshape(B, N * T)
        obs: dict[str, np.ndarray] = {}

        # allocator
        layout = self.layouts[ALLOCATOR]
        out = np.zeros((B, layout.size))
        sl = layout.slices
        out[:, sl["tick"]] = t[:, None]
        out[:, sl["owned"]] = rules.owned
        out[:, sl["online"]] = s.online
        out[:, sl["budget"]] = s.budget[:, None]
        out[:, sl["carbon_used"]] = s.carbon_used[:, None]
        out[:, sl["carbon_cap"]] = rules.config.carbon.cap_kg
        out[:, sl["intensity_forecast"]] = self.forecasts[np.minimum(s.t, self.forecasts.shape[0] - 1)]
        out[:, sl["offer_qty"]] = s.offer_qty
        out[:, sl["offer_price"]] = s.offer_price
        out[:, sl["declared"]] = declared
        stance = np.zeros((B, N * len(Stance)))  # one-hot per team
        stance[np.arange(B)[:, None], self.stance_base + s.stance] = 1.0
        out[:, sl["stance"]] = stance
        out[:, sl["escalations"]] = s.escalations
        out[:, sl["credibility"]] = s.credibility
        due = queue.waiting & (s.deadline[..., : queue.waiting.shape[2]] - s.t[:, None, None] < PRESSURE_WINDOW)
        out[:, sl["pressure"]] = np.minimum(due.sum(axis=2), 2)
        out[:, sl["revealed"]] = s.revealed
        out[:, sl["revealed_need"]] = np.where(s.revealed[:, :, None], s.need, 0).reshape(B, -1)
        out[:, sl["shocks_seen"]] = s.shocks_seen
        out[:, sl["shocks_active"]] = effects.kinds
        obs[ALLOCATOR] = out.astype(np.float32)

        # teams
        K = self.queue_slots
        packed = in_edf_order(queue.waiting, s.order)[:, :, :K]  # the most urgent waiting jobs
        n_slots = packed.shape[2]
        present = packed >= 0
        at = (np.arange(B)[:, None, None], np.arange(N)[None, :, None], np.maximum(packed, 0))  # the packed slots

        jobs = np.zeros((B, N, K, len(JOB_SLOT_FIELDS)))
        if n_slots:
            jobs[:, :, :n_slots] = np.where(present[..., None], np.stack([
                present,
                s.gpus[at],
                s.memory[at],
                s.work[at],
                s.deadline[at] - s.t[:, None, None],
                s.value[at],
                s.priority[at],
                queue.ready[at],
            ], axis=3), 0.0)
        layout = self.layouts[self.teams[0]]  # every team's layout is the same: all teams at once, (N, B, size)
        sl = layout.slices
        out = np.zeros((N, B, layout.size))
        out[:, :, sl["tick"]] = t[None, :, None]
        by_team = s.declared.transpose(1, 0, 2)
        out[:, :, sl["need"]] = s.need.transpose(1, 0, 2)
        out[:, :, sl["last_grant"]] = s.last_grant.transpose(1, 0, 2)
        out[:, :, sl["declared"]] = by_team
        out[:, :, sl["credibility"]] = s.credibility.T[:, :, None]
        out[:, :, sl["starved_streak"]] = s.streak.T[:, :, None]
        out[:, :, sl["offer_qty"]] = s.offer_qty
        out[:, :, sl["offer_price"]] = s.offer_price
        out[:, :, sl["others_declared"]] = by_team[self.others].transpose(0, 2, 1, 3).reshape(N, B, -1)
        out[:, :, sl["jobs"]] = jobs.transpose(1, 0, 2, 3).reshape(N, B, -1)
        teams = out.astype(np.float32)
        for i, team in enumerate(self.teams):
            obs[team] = teams[i]

        # broker
        layout = self.layouts[BROKER]
        sl = layout.slices
        out = np.zeros((B, layout.size))
        out[:, sl["tick"]] = t[:, None]
        out[:, sl["inventory"]] = spot_inventory(self.tables, effects)
        out[:, sl["unit_cost"]] = rules.spot_unit_cost
        out[:, sl["last_sold"]] = s.last_sold
        out[:, sl["last_price"]] = s.last_price
        out[:, sl["offer_qty"]] = s.offer_qty
        out[:, sl["offer_price"]] = s.offer_price
        out[:, sl["demand"]] = s.declared.sum(axis=1)
        out[:, sl["crisis"]] = effects.crisis[:, None]
        obs[BROKER] = out.astype(np.float32)
        return obs
