"""Batched scripted policies act exactly as N per-arena policies (policies/batch*.py, issue 40 item 3).

* on recorded reference-env episodes (tests/policies/batch_cases.py) of ``standard`` and the hard-cap
  cluster (the carbon fit step cuts there), every batched team,
  broker and allocator, with overridden parameters too, gives every arena the action of its own
  per-arena policy, through partial resets; every shipped scenario, 8 generated ``broad`` ones and
  8 perturbed shipped scenarios with binding limits are the slow sweep;
* on random observations within the observation space (hypothesis), the same;
* ``batch_policy`` gives the batched form where one exists and the loop otherwise, and refuses
  bad input with a message naming what to fix.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import commons_arena
from commons_arena.family import generate_scenarios
from commons_arena.scenario import ScenarioConfig, load_scenario
from commons_arena.spaces import observation_layout
from policies.allocators import SCRIPTED_ALLOCATORS
from policies.batch import BatchPolicy, LoopBatchPolicy
from policies.registry import BATCHED, available_policies, batch_policy, make_policy
from policies.teams import ARCHETYPE_PROFILES
from tests.limits_property import perturbed_scenarios
from tests.policies.batch_cases import CASES, HARD_CAP, assert_equivalent, record_episodes, seats_for

FAST = ("standard", "hard_cap")


@functools.cache
def scenario(key: str) -> ScenarioConfig:
    kind, _, index = key.partition(":")
    if key == "hard_cap":
        return load_scenario(HARD_CAP)
    if key.startswith("broad_"):
        return generate_scenarios("broad", int(key.removeprefix("broad_")) + 1, seed=40)[-1]
    if kind == "perturbed":
        return perturbed_scenarios(int(index) + 1, seed=40)[-1]
    return load_scenario(key)


@functools.cache
def episodes(key: str) -> dict[str, list[np.ndarray]]:
    return record_episodes(scenario(key), episodes=6, seed=7)


SLOW = [*(s for s in commons_arena.list_scenarios() if s != "standard"), *(f"broad_{i}" for i in range(8)),
        *(f"perturbed:{i}" for i in range(8))]


def _check_all_seats(key: str, name: str, params: dict) -> None:
    config = scenario(key)
    compared = 0
    for agent in seats_for(config, name):
        compared += assert_equivalent(name, config, agent, episodes(key)[agent], num_envs=5, seed=3, **params)
    assert compared > 0


@pytest.mark.parametrize(("name", "params"), CASES, ids=[f"{n}{p or ''}" for n, p in CASES])
@pytest.mark.parametrize("key", FAST)
def test_batched_equals_per_arena_on_recorded_episodes(key: str, name: str, params: dict) -> None:
    _check_all_seats(key, name, params)


@pytest.mark.slow
@pytest.mark.parametrize("key", SLOW)
def test_batched_equals_per_arena_sweep(key: str) -> None:
    for name, params in CASES:
        _check_all_seats(key, name, params)


# ---------------------------------------------------------------------------- random observations
def random_observations(config: ScenarioConfig, agent: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` observations within the observation space's bounds: small integers, small reals and
    anything up to the bound, mixed per entry (float32, as the env gives them)."""
    layout = observation_layout(config, agent)
    low, high = layout.low, layout.high
    kind = rng.integers(0, 3, size=(n, layout.size))
    small_int = np.minimum(low + rng.integers(0, 9, size=(n, layout.size)), high)
    small = low + rng.random((n, layout.size)) * (np.minimum(high, low + 20.0) - low)
    wide = low + rng.random((n, layout.size)) * (high - low)
    obs = np.where(kind == 0, small_int, np.where(kind == 1, small, wide)).astype(np.float32)
    return np.clip(obs, low.astype(np.float32), high.astype(np.float32))


def _acts(policy: BatchPolicy, obs: np.ndarray) -> np.ndarray | type[Exception]:
    try:
        return policy.act(obs)
    except ValueError as err:  # a draw the per-arena policy cannot make either
        return type(err)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(CASES), key=st.sampled_from(["standard", "hard_cap", "broad_0", "broad_3"]),
       seed=st.integers(0, 2**32 - 1))
def test_batched_equals_per_arena_on_random_observations(case: tuple[str, dict], key: str, seed: int) -> None:
    name, params = case
    config = scenario(key)
    rng = np.random.default_rng(seed)
    agents = seats_for(config, name)
    agent = agents[int(rng.integers(len(agents)))]
    batched = batch_policy(name, config, agent, 6, **params)
    loop = LoopBatchPolicy(lambda: make_policy(name, config, agent, **params), 6)
    seeds = rng.integers(0, 2**31, size=6).tolist()
    batched.reset(seeds)
    loop.reset(seeds)
    for _ in range(3):  # stateful policies carry state from tick to tick
        obs = random_observations(config, agent, 6, rng)
        got, want = _acts(batched, obs), _acts(loop, obs)
        if isinstance(want, type):
            assert got is want
            return
        np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------------------- one way to get a batched seat
def test_every_scripted_team_broker_and_allocator_has_a_batched_form() -> None:
    scripted = {*ARCHETYPE_PROFILES, *available_policies("broker"), *SCRIPTED_ALLOCATORS}
    assert scripted <= set(BATCHED)
    for name in scripted:
        config = load_scenario("standard")
        agent = seats_for(config, name)[0]
        policy = batch_policy(name, config, agent, 3)
        assert isinstance(policy, BatchPolicy) and not isinstance(policy, LoopBatchPolicy) and policy.num_envs == 3


def test_a_policy_without_a_batched_form_acts_through_the_loop() -> None:
    config = load_scenario("standard")
    team = config.teams[0].name
    fixed = batch_policy("fixed:bluff:5,3", config, team, 4)  # a codec's fixed code: no batched form
    assert isinstance(fixed, LoopBatchPolicy)
    eps = episodes("standard")[team][0]
    fixed.reset([1, 2, 3, 4])
    actions = fixed.act(np.stack([eps[0]] * 4))
    assert actions.shape == (4, len(make_policy("fixed:bluff:5,3", config, team).act(eps[0])))
    assert not isinstance(batch_policy("planner", config, "allocator", 2), LoopBatchPolicy)  # batched (BatchPlanner)


def test_parameters_reach_the_batched_form() -> None:
    config = load_scenario("standard")
    team = config.teams[0].name
    policy = batch_policy("growth", config, team, 2, bluff=3.0)
    assert policy.params["bluff"] == 3.0  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda c: batch_policy("growth", c, "allocator", 2), "team role"),
        (lambda c: batch_policy("growth", c, c.teams[0].name, 2, bluf=1.0), "unknown parameter"),
        (lambda c: batch_policy("fixed_price", c, "broker", 2, level=99), "level must be"),
        (lambda c: batch_policy("edf", c, "allocator", 0), "num_envs"),
        (lambda c: batch_policy("edf", c, "allocator", 2.5), "num_envs"),
        (lambda c: batch_policy("oracle", c, "allocator", 2), "hidden state"),
        (lambda c: batch_policy("nope", c, "allocator", 2), "unknown policy"),
    ],
)
def test_batch_policy_refuses_bad_input(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call(load_scenario("standard"))


@pytest.mark.parametrize("name", ["edf", "random", "truthful"])
def test_reset_and_act_refuse_bad_shapes(name: str) -> None:
    config = load_scenario("standard")
    agent = seats_for(config, name)[0]
    policy = batch_policy(name, config, agent, 3)
    with pytest.raises(ValueError, match="one seed per arena"):
        policy.reset([1, 2])
    with pytest.raises(ValueError, match="outside 0..2"):
        policy.reset([1], np.array([3]))
    size = observation_layout(config, agent).size
    with pytest.raises(ValueError, match=rf"shape \(3, {size}\)"):
        policy.act(np.zeros((2, size), dtype=np.float32))


def test_a_partial_reset_restarts_only_the_arenas_it_names() -> None:
    config = load_scenario("standard")
    eps = episodes("standard")["allocator"]
    seq = eps[0]
    policy = batch_policy("random", config, "allocator", 3)
    single = make_policy("random", config, "allocator")
    policy.reset([5, 6, 7])
    first = [policy.act(np.stack([seq[t]] * 3)) for t in range(2)]
    policy.reset([5], np.array([1]))  # arena 1 starts again with seed 5: it now plays as arena 0 did
    again = policy.act(np.stack([seq[0]] * 3))
    np.testing.assert_array_equal(again[1], first[0][0])
    single.reset(7)
    single.act(seq[0])
    single.act(seq[1])
    np.testing.assert_array_equal(again[2], single.act(seq[0]))  # arena 2 went on: its third draw
