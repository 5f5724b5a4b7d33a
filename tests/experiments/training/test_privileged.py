"""The ``privileged`` critic's inputs (experiments/training/privileged.py): the batched core's hidden state per cell,
checked against the state itself and a job-by-job count, on a scenario with shocks, bluffers and arriving jobs."""

from __future__ import annotations

import numpy as np
import pytest

from commons_arena.batched.state import PENDING
from commons_arena.batched.tick import shocks_due
from experiments.training.privileged import PRIVILEGED_FEATURES, SOON, privileged_cells, privileged_width
from policies.focal_vector import FocalVectorEnv
from policies.universal import MAX_TEAMS, MAX_TIERS

P = len(PRIVILEGED_FEATURES)


def _arriving(state, b: int, team: int, tier: int, ticks: range) -> float:
    """GPUs of the team's pending jobs whose smallest fitting tier is ``tier`` and that arrive ``ticks`` after now."""
    return float(sum(state.gpus[b, team, j] for j in range(state.n_jobs[b, team])
                     if state.status[b, team, j] == PENDING and state.fits[b, team, j, 0] == tier
                     and state.arrival[b, team, j] - state.t[b] in ticks))


def test_the_inputs_are_the_hidden_state_of_each_cell_padded_like_the_view():
    assert privileged_width("privileged") == P and privileged_width("cells") == privileged_width("pooled") == 0
    focal = FocalVectorEnv("crisis", 6, focal="allocator")  # its teams play their scripted policies (two bluff)
    focal.reset_groups(11)
    env = focal.groups[0].core
    rules = env.tables.rules
    nothing = np.zeros((6, *focal.seat_action_spaces["allocator"].shape), np.int64)  # the allocator grants nothing
    N, T = rules.n_teams, rules.n_tiers
    capacity = np.maximum(np.asarray(rules.capacity, dtype=np.float64), 1.0)
    fired_seen = arrivals_seen = bluffs_seen = shocked_seen = 0
    for _ in range(rules.config.max_ticks):
        state = env.state
        cells = privileged_cells(env).reshape(6, MAX_TEAMS, MAX_TIERS, P)
        assert not cells[:, N:].any() and not cells[:, :, T:].any()  # padded cells: 0
        real = cells[:, :N, :T]
        np.testing.assert_allclose(real[..., 0], state.need / capacity, atol=1e-6)
        np.testing.assert_allclose(real[..., 1], (state.need - state.declared) / capacity, atol=1e-6)
        for b in range(6):
            for team in range(N):
                for tier in range(T):
                    assert real[b, team, tier, 2] * capacity[tier] == pytest.approx(
                        _arriving(state, b, team, tier, range(1, 2)), abs=1e-5)
                    assert real[b, team, tier, 3] * capacity[tier] == pytest.approx(
                        _arriving(state, b, team, tier, range(1, 1 + SOON)), abs=1e-5)
        arrivals_seen += int((real[..., 3] > 0).sum())
        bluffs_seen += int((real[..., 1] < 0).sum())
        shocked_seen += int((real[..., 4] > 0).sum() and (real[..., 5] > 0).sum() and (real[..., 6] > 0).sum())
        now = shocks_due(env.tables, state, state.t)  # the shocks this tick's step fires, told before it
        seen = state.shocks_seen.copy()
        (step,) = focal.step_groups([{"allocator": nothing}])
        fired = env.state.shocks_seen - seen
        expected = np.zeros_like(fired)
        np.add.at(expected, (np.nonzero(now)[0], env.tables.shock_kind[np.nonzero(now)[1]]), 1)
        np.testing.assert_array_equal(fired, expected)
        fired_seen += int(fired.sum())
        if (step.terminated["allocator"] | step.truncated["allocator"]).any():
            break
    # the checks above saw shocks fire, jobs arrive and teams overclaim; shocks were told ahead, with their GPUs
    assert fired_seen and arrivals_seen and bluffs_seen and shocked_seen
