"""Batched codecs (policies/batch_codecs.py) give every arena exactly what the per-arena codec
gives: features and decoded actions bit for bit (issue 40).

Observations come from reference-env episodes of the codec's seat (uniform random actions,
the codec's zero code, its random codes) dealt to N arenas with episodes cut at random
lengths, so arenas reset mid-batch (tests/policies/batch_streams.py). Per step the batched
codec and N per-arena codecs (:class:`~policies.batch_codecs.LoopBatchCodec`) get the same
resets, then features, then random module outputs (some rows the zero code) to decode; now
and then decode comes without features first, or twice on one observation (the ``need`` and
``residual`` codecs' planner sees each observation once; ``bluff`` keeps what it declared).
The fast loop holds ``crisis`` and a generated ``broad`` scenario for every codec; the full run
every shipped scenario, both unusual shapes and 8 generated ones (20 passed once, 2026-12-05).
"""

from __future__ import annotations

import numpy as np
import pytest

import commons_arena
from commons_arena.enums import ALLOCATOR, BROKER, Role
from policies.batch_codecs import (
    BATCH_CODECS,
    LoopBatchCodec,
    make_batch_codec,
    repair_grants_rows,
    within_budget_rows,
)
from policies.codecs import CODECS, make_codec, within_budget
from tests.policies.batch_streams import case_config, cases, episodes, mixed_actor, schedule


def seat(config, name: str) -> str:
    role = CODECS[name].role
    return ALLOCATOR if role == Role.ALLOCATOR else BROKER if role == Role.BROKER else config.teams[-1].name


def assert_codecs_agree(config, name: str, num_envs: int = 5, n_episodes: int = 9, seed: int = 0) -> None:
    agent = seat(config, name)
    played = episodes(config, agent, range(seed, seed + n_episodes), mixed_actor(config, agent, name, seed))
    loop = LoopBatchCodec(lambda: make_codec(name, config, agent), num_envs)
    batch = make_batch_codec(name, config, num_envs, agent)
    assert type(batch) is BATCH_CODECS[name]
    nvec, zero = loop.codec.nvec, loop.codec.zero_code
    rng = np.random.default_rng(seed)
    for step, (index, _, obs) in enumerate(schedule(played, num_envs, seed)):
        loop.reset(index)
        batch.reset(index)
        if step % 5 != 3:  # sometimes decode without asking for features first
            expected, got = loop.features(obs), batch.features(obs)
            assert got.shape == (num_envs, loop.codec.n_features) and got.dtype == np.float32
            assert got.tobytes() == expected.tobytes(), f"{name}, step {step}: features differ"
        for _ in range(2 if step % 7 == 2 else 1):  # sometimes twice on one observation
            codes = rng.integers(0, nvec, (num_envs, len(nvec)))
            if zero is not None:
                codes[rng.random(num_envs) < 0.3] = zero
            expected, got = loop.decode(obs, codes), batch.decode(obs, codes)
            assert got.dtype == np.int64 and np.array_equal(got, expected), f"{name}, step {step}: actions differ"


@pytest.mark.parametrize("name", sorted(BATCH_CODECS))
@pytest.mark.parametrize("case", cases(broad=8, fast=("crisis", "broad:1")))
def test_a_batched_codec_is_the_codec_in_every_arena(case, name):
    assert_codecs_agree(case_config(case), name)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["standard", "crisis", "broad:4"])
def test_the_need_codec_in_many_arenas(case):
    assert_codecs_agree(case_config(case), "need", num_envs=32, n_episodes=40, seed=3)


def test_every_codec_has_a_batched_form_and_a_loop_otherwise():
    assert set(BATCH_CODECS) == set(CODECS)
    config = commons_arena.load_scenario("standard")
    with pytest.raises(ValueError, match="drives allocator seats"):
        make_batch_codec("need", config, 2, config.teams[0].name)
    with pytest.raises(ValueError, match="unknown action codec"):
        make_batch_codec("nope", config, 2)
    batch = make_batch_codec("need", config, 2)
    size = batch.codec.obs.size
    with pytest.raises(ValueError, match=r"observations must be \(2, \d+\)"):
        batch.features(np.zeros((3, size), np.float32))
    with pytest.raises(ValueError, match="codes must be"):
        batch.decode(np.zeros((2, size), np.float32), np.full((2, len(batch.codec.nvec)), 9))


def test_the_row_helpers_are_the_per_arena_rules():
    from tests.reference.mechanics.grants import repair_grants

    rng = np.random.default_rng(1)
    for tiers in (1, 3, 6):  # MAX_TIERS is 6
        buy = rng.integers(0, 6, (200, tiers))
        price = rng.random((200, tiers)).astype(np.float32) * 9
        budget = rng.random(200) * 40
        expected = np.stack([within_budget(b, p, float(m)) for b, p, m in zip(buy, price, budget, strict=True)])
        assert np.array_equal(within_budget_rows(buy, price, budget), expected)
        wanted = rng.integers(0, 7, (200, 4, tiers))
        available = rng.integers(0, 12, (200, tiers))
        repaired = np.stack([repair_grants(w, a)[0] for w, a in zip(wanted, available, strict=True)])
        assert np.array_equal(repair_grants_rows(wanted, available), repaired)
