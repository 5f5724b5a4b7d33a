"""One or several focal seats of N arenas as a Gymnasium vector env (policies/focal_vector.py): arena *i*
plays exactly the episode the per-arena focal env plays with its seed and background, across NEXT_STEP
restarts and through a mixture of backgrounds drawn per episode; its spaces, dtypes and refusals."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.vector import VectorEnv

from commons_arena.errors import EpisodeStateError
from policies.focal import FocalEnv
from policies.focal_vector import BackgroundMixture, FocalVectorEnv, entry_of, seat_observation_scale
from policies.population import Population, thresholds

SEAT = "allocator"


def replay(env: FocalVectorEnv, seat: str, backgrounds: list[Population], steps: int, seed: int = 0) -> int:
    """Step ``env`` with random actions for ``steps`` and play every arena's episodes in a per-arena
    FocalEnv (the entry the arena drew); every observation, reward and flag equal. Returns episodes checked."""
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=100)
    n, cuts = env.num_envs, env.groups[0].cuts
    seeds = [100 + i for i in range(n)]
    arenas = [FocalEnv.from_scenario(env.groups[0].config, [seat], backgrounds[entry_of(s, cuts)]) for s in seeds]
    want = [a.reset(seed=s)[0][seat] for a, s in zip(arenas, seeds, strict=True)]
    restarting = np.zeros(n, dtype=bool)
    checked = 0
    for _ in range(steps):
        assert all(np.array_equal(obs[i], want[i]) for i in range(n))
        actions = rng.integers(0, env.single_action_space.nvec, size=(n, len(env.single_action_space.nvec)))
        obs, rewards, terminated, truncated, infos = env.step(actions)
        assert rewards.dtype == np.float64 and obs.dtype == np.float32 and terminated.dtype == bool
        for i in range(n):
            if restarting[i]:  # NEXT_STEP: a new episode of the arena's next seed
                seeds[i] += n
                assert infos["_restarted"][i] and rewards[i] == 0 and not terminated[i]
                assert infos["episode_seed"][i] == seeds[i]
                arenas[i] = FocalEnv.from_scenario(env.groups[0].config, [seat], backgrounds[entry_of(seeds[i], cuts)])
                want[i] = arenas[i].reset(seed=seeds[i])[0][seat]
                continue
            o, r, te, tr, info = arenas[i].step({seat: actions[i]})
            want[i] = o[seat]
            assert rewards[i] == r[seat] and terminated[i] == te[seat] and truncated[i] == tr[seat]
            if te[seat] or tr[seat]:
                assert infos["_episode"][i]
                assert infos["episode"]["return"][i] == pytest.approx(info[seat]["episode"]["return"], abs=1e-9)
                checked += 1
        restarting = terminated | truncated
    return checked


@pytest.mark.parametrize(("scenario", "seat"), [("crisis", "allocator"), ("standard", "search"), ("elevated", "broker")])
def test_every_arena_plays_the_per_arena_focal_episode(scenario, seat):
    env = FocalVectorEnv(scenario, num_envs=5, focal=seat)
    assert isinstance(env, VectorEnv)
    assert replay(env, seat, [Population.default(scenario)], steps=40) >= 5


def test_a_mixture_of_backgrounds_is_drawn_per_episode_from_its_seed():
    bluffers = Population.default("crisis").with_agent("search", "greedy_bluffer").with_agent("safety", "greedy_bluffer")
    mixture = BackgroundMixture(("own", "bluffers"), (None, bluffers), (0.5, 0.5))
    env = FocalVectorEnv("crisis", num_envs=6, focal=SEAT, background=mixture)
    assert replay(env, SEAT, [Population.default("crisis"), bluffers], steps=40) >= 6
    entries = [entry_of(s, thresholds([0.5, 0.5])) for s in range(200)]
    assert 60 < sum(entries) < 140  # both entries play


def test_several_focal_seats_are_dicts_and_spaces_batch():
    env = FocalVectorEnv("standard", num_envs=3, focal=["allocator", "broker"])
    obs, infos = env.reset(seed=1)
    assert set(obs) == {"allocator", "broker"} and obs["allocator"].shape == (3, *env.single_observation_space["allocator"].shape)
    assert env.observation_space.contains(obs)
    out = env.step(env.action_space.sample())
    assert set(out[1]) == {"allocator", "broker"} and out[1]["broker"].shape == (3,)


def test_the_observation_scale_makes_every_feature_order_one():
    scale = seat_observation_scale("crisis", SEAT, arenas=16)
    env = FocalVectorEnv("crisis", num_envs=16, focal=SEAT)
    obs, _ = env.reset(seed=9)
    assert scale.shape == obs.shape[1:] and (scale >= 1).all()
    assert np.abs(obs / scale).max() <= 2.0
    assert float(env.single_observation_space.high.max()) > 1e20  # why the bounds are no scale


def test_bad_input_is_refused_with_what_to_fix():
    with pytest.raises(ValueError, match="not seats of"):
        FocalVectorEnv("standard", num_envs=2, focal="nobody")
    with pytest.raises(ValueError, match="num_envs"):
        FocalVectorEnv("standard", num_envs=0)
    env = FocalVectorEnv("standard", num_envs=2)
    with pytest.raises(EpisodeStateError, match="reset"):
        env.step(np.zeros((2, len(env.single_action_space.nvec)), np.int64))
    env.reset(seed=0)
    with pytest.raises(ValueError, match="one row per arena"):
        env.step(np.zeros((3, len(env.single_action_space.nvec)), np.int64))
    with pytest.raises(ValueError, match="other spaces"):
        FocalVectorEnv(["standard", "tests/data/scenarios/hard_cap_cluster.toml"], num_envs=2)
    with pytest.raises(ValueError, match="weight"):
        BackgroundMixture(("own",), (None,), (-1.0,))


def test_an_idle_group_keeps_its_arenas_state_and_returns_their_last_observation():
    from commons_arena.spaces import make_action_space

    env = FocalVectorEnv(["standard", "crisis"], num_envs=6, focal=SEAT, shapes="any")
    env.reset_groups(seed=3)
    rng = np.random.default_rng(0)
    nvec = [make_action_space(g.config, SEAT).nvec for g in env.groups]

    def codes() -> list[dict[str, np.ndarray]]:
        return [{SEAT: rng.integers(0, n, size=(g.size, len(n)))} for g, n in zip(env.groups, nvec, strict=True)]

    before = env.groups[1].raw[SEAT].copy()
    first = codes()
    idle = env.step_groups([first[0], None])[1]  # crisis idles this tick
    assert np.array_equal(idle.obs[SEAT], before) and not idle.reward[SEAT].any()
    assert not (idle.terminated[SEAT] | idle.truncated[SEAT]).any() and not env.restarted[env.groups[1].rows].any()
    ours = [env.step_groups(codes())[1].obs[SEAT] for _ in range(30)]
    # crisis played on from where it was, through its restarts: as an env that never idled, one tick behind
    fresh = FocalVectorEnv(["standard", "crisis"], num_envs=6, focal=SEAT, shapes="any")
    fresh.reset_groups(seed=3)
    replay = np.random.default_rng(0)
    steps = [[{SEAT: replay.integers(0, n, size=(g.size, len(n)))} for g, n in zip(env.groups, nvec, strict=True)]
             for _ in range(31)]
    crisis = [fresh.step_groups(s)[1].obs[SEAT] for s in steps[1:]]
    assert all(np.array_equal(a, b) for a, b in zip(ours, crisis, strict=True))
