"""The batched fit step (policies/batch_limits.py) is row for row the per-arena one (policies/limits.py).

Random limits, purchases, grants and trim orders (hypothesis) make every cut bind: the offer,
the budget (the env's cut, in bulk and unit by unit), the capacity per tier and a hard cap's carbon left,
with ties in price and in kg per GPU; and the batched limit reader reads what the per-arena one
reads from random observations of a hard-cap and a soft-cap scenario.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from commons_arena.scenario import load_scenario
from commons_arena.spaces import observation_layout
from policies.batch_limits import BatchLimitReader, BatchLimits, fit_action_batch
from policies.limits import LimitReader, Limits, fit_action
from tests.policies.batch_cases import HARD_CAP
from tests.policies.test_batch_policies import random_observations


def _draw(rng: np.random.Generator, n: int, teams: int, tiers: int, hard: bool):
    offer_qty = rng.integers(0, 500 if rng.random() < 0.3 else 6, (n, tiers))  # hundreds: the bulk budget cut
    price = rng.choice([0.0, 1.5, 2.25, 3.7, 10.0, 1e-3], (n, tiers)).astype(np.float32).astype(np.float64)
    budget = rng.choice([0.0, 2.0, 9.5, 30.0, 1e4], n) * rng.random(n)
    online = rng.integers(0, 8, (n, tiers))
    headroom = rng.uniform(-5, 40, n) if hard else None
    kg = rng.choice([0.0, 0.3, 0.9, 1.7], (n, tiers)) * rng.choice([1.0, 1e-300], (n, 1)) if hard else np.zeros((n, tiers))
    buy = rng.integers(-1, 600, (n, tiers)) if rng.random() < 0.4 else rng.integers(-1, 8, (n, tiers))
    grant = rng.integers(-1, 6, (n, teams, tiers))
    order = np.argsort(rng.random((n, teams)), axis=1)
    return BatchLimits(offer_qty, price, budget, online, headroom, kg), buy, grant, order


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), teams=st.integers(2, 8), tiers=st.integers(1, 6), hard=st.booleans())
def test_fit_action_batch_is_fit_action_per_row(seed: int, teams: int, tiers: int, hard: bool) -> None:
    limits, buy, grant, order = _draw(np.random.default_rng(seed), 12, teams, tiers, hard)
    got_buy, got_grant = fit_action_batch(limits, buy, grant, order)
    for n in range(12):
        one = Limits(limits.offer_qty[n].tolist(), limits.offer_price[n].tolist(), float(limits.budget[n]),
                     limits.online[n].tolist(), None if limits.headroom_kg is None else float(limits.headroom_kg[n]),
                     limits.kg_per_gpu[n].tolist())
        want_buy, want_grant = fit_action(one, buy[n].tolist(), grant[n].tolist(), order[n].tolist())
        assert (got_buy[n].tolist(), got_grant[n].tolist()) == (want_buy, want_grant), f"row {n}"


def test_the_draws_make_every_cut_bind() -> None:
    """The property above is not vacuous: over its draws each limit cuts something."""
    rng = np.random.default_rng(0)
    cut = {"offer": 0, "budget": 0, "budget in bulk": 0, "capacity": 0, "carbon": 0}
    for _ in range(40):
        limits, buy, grant, order = _draw(rng, 12, 3, 2, hard=True)
        fixed_buy, fixed = fit_action_batch(limits, buy, grant, order)
        offered = np.minimum(np.maximum(buy, 0), limits.offer_qty)
        cut["offer"] += int((np.maximum(buy, 0) > limits.offer_qty).sum())
        soft = BatchLimits(limits.offer_qty, limits.offer_price, limits.budget, limits.online, None, limits.kg_per_gpu)
        soft_buy, soft_grant = fit_action_batch(soft, buy, grant, order)
        cut["budget"] += int((soft_buy < offered).sum())
        cut["budget in bulk"] += int((offered - soft_buy > 64).sum())
        cut["capacity"] += int((soft_grant < np.maximum(grant, 0)).sum())
        cut["carbon"] += int((fixed < soft_grant).sum())
    assert all(v > 0 for v in cut.values()), cut


def test_the_batched_reader_reads_what_the_per_arena_reader_reads() -> None:
    rng = np.random.default_rng(1)
    for config in (load_scenario(HARD_CAP), load_scenario("standard")):
        layout = observation_layout(config, "allocator")
        obs = random_observations(config, "allocator", 50, rng)
        batch = BatchLimitReader(config, layout)(obs)
        one = LimitReader(config, layout)
        for n in range(50):
            want = one(obs[n])
            assert batch.offer_qty[n].tolist() == want.offer_qty and batch.online[n].tolist() == want.online
            assert batch.offer_price[n].tolist() == want.offer_price and float(batch.budget[n]) == want.budget
            assert batch.kg_per_gpu[n].tolist() == want.kg_per_gpu
            assert (batch.headroom_kg is None) == (want.headroom_kg is None)
            if batch.headroom_kg is not None:
                assert float(batch.headroom_kg[n]) == want.headroom_kg
