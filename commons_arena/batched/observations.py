"""Batched state -> each agent's observations, ``(B, obs_dim)`` float32, exactly the reference's.

The fields are those of :class:`commons_arena.observations.ObservationBuilder` (what each
role may see is decided there; this module writes the same values, field by field, into the
slices :func:`commons_arena.spaces.observation_layout` names). Values are gathered as float64
and converted to float32 once, as the reference converts its list of Python numbers.
"""

from __future__ import annotations

import numpy as np

from commons_arena.batched.state import BatchState, Tables
from commons_arena.batched.tick import Effects, Queue, in_edf_order, spot_inventory
from commons_arena.enums import ALLOCATOR, BROKER, Stance
from commons_arena.mechanics import carbon
from commons_arena.observations import PRESSURE_WINDOW
from commons_arena.spaces import JOB_SLOT_FIELDS, observation_layout


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
        stance = np.zeros((B, N, len(Stance)))
        np.put_along_axis(stance, s.stance[:, :, None], 1.0, axis=2)
        out[:, sl["stance"]] = stance.reshape(B, -1)
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
        team_row = np.arange(B * N).reshape(B, N, 1)
        slot = np.maximum(packed, 0)

        def field(values: np.ndarray) -> np.ndarray:  # a (B, N, J') array's entries at the packed slots
            flat = (team_row * values.shape[2] + slot).ravel()
            return np.where(present, np.ascontiguousarray(values).ravel()[flat].reshape(packed.shape), 0)

        jobs = np.zeros((B, N, K, len(JOB_SLOT_FIELDS)))
        if n_slots:
            jobs[:, :, :n_slots] = np.stack([
                present.astype(np.float64),
                field(s.gpus),
                field(s.memory),
                field(s.work),
                field(s.deadline) - s.t[:, None, None] * present,
                field(s.value),
                field(s.priority),
                field(queue.ready),
            ], axis=3)
        for i, team in enumerate(self.teams):
            layout = self.layouts[team]
            sl = layout.slices
            out = np.zeros((B, layout.size))
            out[:, sl["tick"]] = t[:, None]
            out[:, sl["need"]] = s.need[:, i]
            out[:, sl["last_grant"]] = s.last_grant[:, i]
            out[:, sl["declared"]] = s.declared[:, i]
            out[:, sl["credibility"]] = s.credibility[:, i, None]
            out[:, sl["starved_streak"]] = s.streak[:, i, None]
            out[:, sl["offer_qty"]] = s.offer_qty
            out[:, sl["offer_price"]] = s.offer_price
            out[:, sl["others_declared"]] = np.delete(s.declared, i, axis=1).reshape(B, -1)
            out[:, sl["jobs"]] = jobs[:, i].reshape(B, -1)
            obs[team] = out.astype(np.float32)

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
