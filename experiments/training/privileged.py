"""What the ``privileged`` critic reads beside the cell view (``--critic privileged``): hidden state per cell.

An input-dependent baseline (Mao et al. 2019, Decima's "variance reduction for reinforcement learning in
input-driven environments"): much of a tick's return is set by inputs the allocator neither sees nor moves (the
jobs that arrive, the shocks that fire), so a critic that reads them explains that part of the return, and an
advantage measured against it is left with the part the allocator's codes made. The policy never reads these
numbers (the checkpoint plays from the cell view alone); only the critic's baseline does, which changes no
expectation of the gradient, since the inputs are drawn whatever the allocator plays.

Per (team, tier) cell, from the batched core's live state at the tick about to be played (the moment the cell view
is taken), each a share of the tier's capacity like the view's own (:data:`PRIVILEGED_FEATURES`):

* ``need``, ``need_minus_declared``: the team's true need this tick on the tier (its ready jobs on their smallest
  fitting tier, the quantity ``planner`` estimates from declarations) and how far its declaration is from it (the
  bluff in this cell, whichever policy plays the team);
* ``arriving_next``, ``arriving_soon``: the GPUs of its jobs that arrive next tick, and within three ticks (drawn at
  the episode's start: the raises nothing in the observation foretells, docs/training.md);
* ``offline_soon``: GPUs of the tier that shocks firing this tick or the next two take offline;
* ``injected_soon``: GPUs of the jobs such shocks inject into the team (on the job's smallest fitting tier);
* ``shocks_soon``: how many shocks of any kind fire this tick or the next two (a third each, cut at 1).

Padded cells are 0. Computed per scenario group of the batch in numpy (:func:`privileged_cells`); the features
are cut to [-10, 10] like the view's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from commons_arena.batched.state import PENDING
from commons_arena.batched.tick import shocks_due
from policies.universal import CELLS, FEATURE_BOUND, MAX_TEAMS, MAX_TIERS

PRIVILEGED_FEATURES = ("need", "need_minus_declared", "arriving_next", "arriving_soon", "offline_soon",
                       "injected_soon", "shocks_soon")
SOON = 3  # ticks: this one and the next two
CRITICS = ("pooled", "cells", "privileged")  # --critic of a cell network (experiments/training/cell_module.py)


def privileged_width(critic: str) -> int:
    """The per-cell privileged inputs ``critic`` reads (``--critic``): :data:`PRIVILEGED_FEATURES` for
    ``privileged``, none for the others."""
    return len(PRIVILEGED_FEATURES) if critic == "privileged" else 0


def privileged_cells(core: Any) -> np.ndarray:
    """``(B, CELLS * len(PRIVILEGED_FEATURES))``: every arena's privileged cell inputs, padded team-major like the
    cell view, from a batched core (:class:`commons_arena.batched.env.VectorArenaEnv`) after a reset or a step."""
    tables, state = core.tables, core.state
    rules = tables.rules
    N, T, B = rules.n_teams, rules.n_tiers, state.t.shape[0]
    capacity = np.maximum(np.asarray(rules.capacity, dtype=np.float64), 1.0)
    J = state.slots_in_use()
    tier = np.maximum(state.fits[:, :, :J, 0], 0)
    arrival = state.arrival[..., :J] - state.t[:, None, None]
    pending = state.status[..., :J] == PENDING
    gpus = np.where(pending, state.gpus[..., :J], 0).astype(np.float64)

    def per_cell(weights: np.ndarray) -> np.ndarray:  # (B, N, J) on each job's tier -> (B, N, T)
        cell = (np.arange(B * N).reshape(B, N, 1) * T + tier).ravel()
        return np.bincount(cell, weights=weights.ravel(), minlength=B * N * T).reshape(B, N, T)

    K = tables.shock_tick.shape[0]
    offline, injected, count = np.zeros((B, T)), np.zeros((B, N, T)), np.zeros(B)
    if K:
        fired = np.stack([shocks_due(tables, state, state.t + ahead) for ahead in range(SOON)]).sum(axis=0)  # (B, K) times
        count = fired.sum(axis=1)
        for k in range(K):
            if tables.shock_tier[k] >= 0:
                offline[:, tables.shock_tier[k]] += fired[:, k] * tables.shock_offline[k]
            if tables.shock_team[k] >= 0:
                injected[:, tables.shock_team[k], max(int(tables.job_fits[k, 0]), 0)] += fired[:, k] * tables.job_gpus[k]
    need = np.asarray(state.need, dtype=np.float64)
    features = np.stack([
        need, need - state.declared, per_cell(np.where(arrival == 1, gpus, 0.0)),
        per_cell(np.where((arrival >= 1) & (arrival < 1 + SOON), gpus, 0.0)),
        np.broadcast_to(offline[:, None, :], (B, N, T)), injected,
    ], axis=-1) / capacity[None, None, :, None]
    shocks = np.broadcast_to(np.minimum(count / SOON, 1.0)[:, None, None, None], (B, N, T, 1))
    cells = np.clip(np.concatenate([features, shocks], axis=-1), -FEATURE_BOUND, FEATURE_BOUND)
    padded = np.zeros((B, MAX_TEAMS, MAX_TIERS, len(PRIVILEGED_FEATURES)), dtype=np.float32)
    padded[:, :N, :T] = cells
    return padded.reshape(B, CELLS * len(PRIVILEGED_FEATURES))


__all__ = ["CRITICS", "PRIVILEGED_FEATURES", "SOON", "privileged_cells", "privileged_width"]
