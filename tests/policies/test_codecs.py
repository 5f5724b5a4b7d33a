"""Action codecs and the module interface (issue 8): what each codec can express, that
decoded actions never need repair, that training and play see the same inputs, and that each
codec, defined once over N arenas, is the per-arena codec it replaced in every arena (issues 40, 51)."""

from __future__ import annotations

import numpy as np
import pytest

import commons_arena
from commons_arena.enums import ALLOCATOR, BROKER, Role
from commons_arena.spaces import observation_layout
from policies import Population
from policies.codecs import (
    CODECS,
    AbsoluteAllocatorCodec,
    FairNeedCodec,
    ImpartialNeedCodec,
    NeedResidualCodec,
    ResidualPlannerCodec,
    ThriftyNeedCodec,
    codecs_for_role,
    make_batch_codec,
    make_codec,
    within_budget,
)
from policies.learned import ModuleInterface
from tests.policies.batch_streams import case_config, cases, episodes, mixed_actor, schedule
from tests.reference import codecs as reference
from tests.reference.planner import ReferencePlanner


def random_observation(config, rng) -> np.ndarray:
    layout = observation_layout(config, ALLOCATOR)
    T, N = len(config.gpu_tiers), len(config.teams)
    obs = np.zeros(layout.size, dtype=np.float32)
    view = layout.view(obs)
    view["tick"][...] = rng.integers(0, config.max_ticks)
    view["owned"][...] = [t.owned for t in config.gpu_tiers]
    view["online"][...] = rng.integers(0, [t.owned + 1 for t in config.gpu_tiers])
    view["budget"][...] = rng.uniform(0, config.budget)
    view["offer_qty"][...] = rng.integers(0, np.array([t.spot_inventory for t in config.gpu_tiers]) + 1)
    view["offer_price"][...] = rng.uniform(0, 12, T)
    view["declared"][...] = rng.integers(0, 6, (N, T))
    view["pressure"][...] = rng.integers(0, 3, N)
    view["credibility"][...] = 1.0
    return obs


@pytest.mark.parametrize("name", codecs_for_role("allocator"))
def test_decoded_actions_never_need_repair(name):
    config = commons_arena.load_scenario("crisis")
    codec = make_codec(name, config)
    layout = observation_layout(config, ALLOCATOR)
    rng = np.random.default_rng(1)
    T, N = len(config.gpu_tiers), len(config.teams)
    for _ in range(200):
        obs = random_observation(config, rng)
        view = layout.view(obs)
        codec.reset()
        codec.features(obs)
        action = codec.decode(obs, rng.integers(0, codec.nvec))
        buy, grant = action[:T], action[T:].reshape(N, T)
        assert (buy <= view["offer_qty"]).all()
        assert float(buy @ view["offer_price"].astype(np.float64)) <= float(view["budget"][0]) + 1e-9
        assert (grant.sum(axis=0) <= view["online"] + buy).all()
        assert (grant >= 0).all() and (buy >= 0).all()


FAIR = {"margin": 0.0, "headroom": 0.5}  # fair_planner's parameters


@pytest.mark.parametrize(("codec_class", "base"), [(ResidualPlannerCodec, {}), (NeedResidualCodec, {}),
                                                   (FairNeedCodec, FAIR),
                                                   (ImpartialNeedCodec, {**FAIR, "heed_escalation": False}),
                                                   (ThriftyNeedCodec, {**FAIR, "heed_escalation": False,
                                                                       "buy_headroom": False})])
def test_residual_zero_code_plays_the_planner_exactly(codec_class, base):
    """The zero code plays its base planner: the list-based spec (tests/reference/planner.py) with those parameters."""
    env = commons_arena.parallel_env("crisis")
    codec = codec_class(env.config)
    planner = ReferencePlanner(env.config, **base)
    policies = Population.default(env.config).build(env.config, env=env)
    for seed in range(3):
        codec.reset()
        planner.reset()
        obs, _ = env.reset(seed=seed)
        while env.agents:
            features = codec.features(obs[ALLOCATOR])
            assert features.shape == (codec.n_features,)
            mine = codec.decode(obs[ALLOCATOR], codec.zero_code)
            assert mine.tolist() == planner.act(obs[ALLOCATOR]).tolist()
            obs, *_ = env.step({**{a: policies[a].act(obs[a]) for a in env.agents}, ALLOCATOR: mine})


def test_residual_and_absolute_grant_without_a_declaration_and_on_another_tier():
    """At tick 0 every declaration is zero: relative can grant nothing, the others can
    grant robotics two medium GPUs (its first job's need) or put a small need on medium."""
    config = commons_arena.load_scenario("standard")
    layout = observation_layout(config, ALLOCATOR)
    obs = np.zeros(layout.size, dtype=np.float32)
    view = layout.view(obs)
    view["owned"][...] = view["online"][...] = [4, 3, 1]
    view["budget"][...] = config.budget
    T = len(config.gpu_tiers)
    relative = make_codec("relative", config)
    assert not relative.decode(obs, relative.nvec - 1)[T:].any()  # the most generous level: still nothing

    residual = ResidualPlannerCodec(config)
    residual.features(obs)
    code = residual.zero_code.copy()
    code[1 * T + 1] = residual.DELTAS.index(2)  # robotics, medium: +2
    code[0 * T + 1] = residual.DELTAS.index(1)  # search, medium: +1
    grant = residual.decode(obs, code)[T:].reshape(-1, T)
    assert grant[1].tolist() == [0, 2, 0] and grant[0].tolist() == [0, 1, 0]

    absolute = AbsoluteAllocatorCodec(config)
    wanted = np.zeros((len(config.teams), T), dtype=np.int64)
    wanted[1, 1] = 2
    assert absolute.decode(obs, wanted.ravel())[T:].reshape(-1, T).tolist() == wanted.tolist()


def test_need_codec_plans_corrected_needs_with_the_planner():
    """A correction to the need estimate goes through the planner's plan: at tick 0 (nothing
    declared) +2 on robotics' medium need is granted on medium; when medium is full, the
    planner spills it onto the larger tier; -2 on a declared need shrinks its grant."""
    config = commons_arena.load_scenario("standard")
    layout = observation_layout(config, ALLOCATOR)
    T = len(config.gpu_tiers)
    obs = np.zeros(layout.size, dtype=np.float32)
    view = layout.view(obs)
    view["owned"][...] = view["online"][...] = [4, 3, 1]
    view["budget"][...] = config.budget
    view["credibility"][...] = 1.0
    codec = NeedResidualCodec(config)
    features = codec.features(obs)
    assert features.shape == (codec.n_features,)
    assert features[-codec.ticks:].tolist() == [1.0] + [0.0] * config.max_ticks  # tick 0, one-hot
    code = codec.zero_code.copy()
    code[1 * T + 1] = codec.DELTAS.index(2)  # robotics, medium: +2
    assert codec.decode(obs, code)[T:].reshape(-1, T)[1].tolist() == [0, 2, 0]

    view["online"][1] = 1  # one medium GPU online: the second spills onto the large tier
    codec.reset()
    codec.features(obs)
    assert codec.decode(obs, code)[T:].reshape(-1, T)[1].tolist() == [0, 1, 1]

    later = obs.copy()
    layout.view(later)["tick"][...] = 3
    layout.view(later)["online"][...] = [4, 3, 1]
    layout.view(later)["declared"][0] = [3, 0, 0]  # search declares 3 small GPUs
    codec.reset()
    assert codec.features(later)[-codec.ticks:].argmax() == 3
    planned = codec.decode(later, codec.zero_code)[T:].reshape(-1, T)[0, 0]
    code = codec.zero_code.copy()
    code[0] = codec.DELTAS.index(-2)
    assert codec.decode(later, code)[T:].reshape(-1, T)[0, 0] == max(planned - 2, 0) < planned


def test_absolute_codec_buys_what_its_grants_need():
    config = commons_arena.load_scenario("standard")
    codec = AbsoluteAllocatorCodec(config)
    layout = observation_layout(config, ALLOCATOR)
    obs = np.zeros(layout.size, dtype=np.float32)
    view = layout.view(obs)
    view["online"][...] = [4, 3, 1]
    view["offer_qty"][...] = [2, 2, 1]
    view["offer_price"][...] = [1.0, 2.0, 50.0]
    view["budget"][...] = 10.0
    wanted = np.array([[5, 0, 1], [0, 4, 0], [0, 0, 1]])
    action = codec.decode(obs, wanted.ravel())
    assert action[:3].tolist() == [1, 1, 0]  # the large GPU costs more than the budget
    assert action[3:].reshape(3, 3)[:, 2].sum() == 1  # so only the one online large GPU is granted


def test_unknown_codec_is_named():
    with pytest.raises(ValueError, match="unknown action codec 'nope'; codecs for allocator seats: relative, absolute, "
                       "residual, need"):
        make_codec("nope", commons_arena.load_scenario("standard"))


def test_module_interface_stacks_history_newest_first_and_resets():
    config = commons_arena.load_scenario("standard")
    layout = observation_layout(config, ALLOCATOR)
    scale = np.full(layout.size, 2.0, dtype=np.float32)
    interface = ModuleInterface(config, ALLOCATOR, scale, "residual", history=3)
    space = interface.observation_space()
    frame = interface.batched.frame_size
    assert frame == layout.size + 2 * len(config.teams) * len(config.gpu_tiers)
    assert space.shape == (3 * frame,)
    env = commons_arena.parallel_env("standard")
    obs, _ = env.reset(seed=0)
    interface.reset()
    first = interface.observe(obs[ALLOCATOR])
    assert space.contains(first)
    assert np.array_equal(first[: layout.size], obs[ALLOCATOR] / 2.0)
    assert not first[frame:].any()  # no earlier ticks yet: zeros
    policies = Population.default(env.config).build(env.config, env=env)
    obs2, *_ = env.step({a: policies[a].act(obs[a]) for a in env.agents})
    second = interface.observe(obs2[ALLOCATOR])
    assert np.array_equal(second[frame : 2 * frame], first[:frame])
    interface.reset()
    assert not interface.observe(obs[ALLOCATOR])[frame:].any()
    with pytest.raises(ValueError, match="history must be >= 1"):
        ModuleInterface(config, ALLOCATOR, scale, None, history=0)
    with pytest.raises(ValueError, match="observation scale has shape"):
        ModuleInterface(config, ALLOCATOR, scale[:-1], None)


# ---------------------------------------------------------------------- in N arenas (issues 40, 51)
# Observations come from reference-env episodes of the codec's seat (uniform random actions, the
# codec's zero code, its random codes) dealt to N arenas with episodes cut at random lengths, so
# arenas reset mid-batch (tests/policies/batch_streams.py). Per step the codec in N arenas, N
# batches of one (each given its one observation) and N per-arena codecs of the spec
# (tests/reference/codecs.py) get the same resets, then features, then random module outputs (some
# rows the zero code) to decode; now and then decode comes without features first, or twice on one
# observation (the ``need`` and ``residual`` codecs' planner sees each observation once; ``bluff``
# keeps what it declared). The fast loop holds ``crisis`` and a generated ``broad`` scenario for
# every codec; the full run every shipped scenario, both unusual shapes and 8 generated ones.


def seat(config, name: str) -> str:
    role = CODECS[name].role
    return ALLOCATOR if role == Role.ALLOCATOR else BROKER if role == Role.BROKER else config.teams[-1].name


def assert_codecs_agree(config, name: str, num_envs: int = 5, n_episodes: int = 9, seed: int = 0) -> None:
    agent = seat(config, name)
    played = episodes(config, agent, range(seed, seed + n_episodes), mixed_actor(config, agent, name, seed))
    spec = reference.LoopCodec(name, config, agent, num_envs)
    batch = make_batch_codec(name, config, num_envs, agent)
    ones = [make_codec(name, config, agent) for _ in range(num_envs)]  # batches of one, given one observation each
    assert type(batch) is CODECS[name] and all(type(one) is CODECS[name] for one in ones)
    nvec, zero = batch.nvec, batch.zero_code
    rng = np.random.default_rng(seed)
    for step, (index, _, obs) in enumerate(schedule(played, num_envs, seed)):
        spec.reset(index)
        batch.reset(index)
        for i in index.tolist():
            ones[i].reset()
        if step % 5 != 3:  # sometimes decode without asking for features first
            expected, got = spec.features(obs), batch.features(obs)
            assert got.shape == (num_envs, batch.n_features) and got.dtype == np.float32
            assert got.tobytes() == expected.tobytes(), f"{name}, step {step}: features differ"
            alone = np.stack([one.features(o) for one, o in zip(ones, obs, strict=True)])
            assert alone.tobytes() == expected.tobytes(), f"{name}, step {step}: one arena's features differ"
        for _ in range(2 if step % 7 == 2 else 1):  # sometimes twice on one observation
            codes = rng.integers(0, nvec, (num_envs, len(nvec)))
            if zero is not None:
                codes[rng.random(num_envs) < 0.3] = zero
            expected, got = spec.decode(obs, codes), batch.decode(obs, codes)
            assert got.dtype == np.int64 and np.array_equal(got, expected), f"{name}, step {step}: actions differ"
            alone = np.stack([one.decode(o, c) for one, o, c in zip(ones, obs, codes, strict=True)])
            assert np.array_equal(alone, expected), f"{name}, step {step}: one arena's actions differ"


FAST_CASES = ("crisis", "broad:1")


@pytest.mark.parametrize("name", sorted(CODECS))
@pytest.mark.parametrize("case", cases(broad=8, fast=FAST_CASES))
def test_a_codec_in_n_arenas_is_the_per_arena_spec_in_every_arena(case, name):
    # the fast loop's cases play each of the three ways twice (dealt over 40 steps), the full run's three times
    assert_codecs_agree(case_config(case), name, n_episodes=6 if case in FAST_CASES else 9)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["standard", "crisis", "broad:4"])
def test_the_need_codec_in_many_arenas(case):
    assert_codecs_agree(case_config(case), "need", num_envs=32, n_episodes=40, seed=3)


def test_a_codec_in_n_arenas_refuses_bad_input():
    config = commons_arena.load_scenario("standard")
    with pytest.raises(ValueError, match="drives allocator seats"):
        make_batch_codec("need", config, 2, config.teams[0].name)
    with pytest.raises(ValueError, match="unknown action codec"):
        make_batch_codec("nope", config, 2)
    batch = make_batch_codec("need", config, 2)
    size = batch.obs.size
    with pytest.raises(ValueError, match=r"observations must be \(2, \d+\)"):
        batch.features(np.zeros((3, size), np.float32))
    with pytest.raises(ValueError, match=r"observations must be \(2, \d+\)"):
        batch.features(np.zeros(size, np.float32))  # one observation is a batch of one only
    with pytest.raises(ValueError, match="codes must be"):
        batch.decode(np.zeros((2, size), np.float32), np.full((2, len(batch.nvec)), 9))
    with pytest.raises(ValueError, match="num_envs must be at least 1"):
        make_batch_codec("bluff", config, 0, config.teams[0].name)


def test_the_budget_cut_is_the_per_arena_rule_row_by_row():
    rng = np.random.default_rng(1)
    for tiers in (1, 3, 6):  # MAX_TIERS is 6
        buy = rng.integers(0, 6, (200, tiers))
        price = rng.random((200, tiers)).astype(np.float32) * 9
        budget = rng.random(200) * 40
        expected = np.stack([reference.within_budget(b, p, float(m)) for b, p, m in zip(buy, price, budget, strict=True)])
        assert np.array_equal(within_budget(buy, price, budget), expected)
