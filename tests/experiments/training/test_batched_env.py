"""The batched sampler (experiments/training/batched_env.py): every arena of the batch is the focal
env RLlib would otherwise step one by one (the same observations, rewards, flags and infos), runs it
cannot play are refused with the reason, and a run sampled by it trains and is reproducible."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from experiments.training.batched_env import BatchedFocalEnv, unsupported_reason
from experiments.training.env import ArenaRLlibEnv
from experiments.training.env_config import ArenaEnvConfig, BackgroundMix, Curriculum
from experiments.training.networks import MLP, NETWORKS
from experiments.training.train import TrainArgs, train
from policies.focal import FocalEnv
from policies.focal_vector import split_arenas

pytestmark = [pytest.mark.slow, pytest.mark.rllib]

ALLOCATOR = "allocator"
SEARCH = "search"


def config(scenario: str = "crisis", codec: str | None = "need", **extra) -> ArenaEnvConfig:
    return ArenaEnvConfig(**{"scenario": scenario, "scripted_in_env": True, "learned_agents": (ALLOCATOR,),
                             "action_codec": {} if codec is None else {ALLOCATOR: codec}, **extra})


def team_config(scenario: str = "crisis", allocator: str = "proportional") -> ArenaEnvConfig:
    """A best response's env: the search team learns (``bluff`` codec) against a scripted allocator."""
    return ArenaEnvConfig(scenario=scenario, scripted_in_env=True, learned_agents=(SEARCH,),
                          action_codec={SEARCH: "bluff"}, background={"agents": {ALLOCATOR: allocator}})


def play_first_episodes(cfg, n, seed=100, action_seed=0):
    """Step a batch and n stock envs with the same module actions until every first episode ended;
    assert every output equal; return the batch (its arenas have just restarted or will at the next step)."""
    seat = cfg.learned_agents[0]
    batch = BatchedFocalEnv(cfg, n)
    stock = [ArenaRLlibEnv(cfg) for _ in range(n)]
    obs, infos = batch.reset(seed=seed)
    for i, env in enumerate(stock):
        o, info = env.reset(seed=seed + i)
        assert np.array_equal(obs[i][seat], o[seat])
        assert infos[i][seat]["episode_seed"] == info[seat]["episode_seed"]
    rng = np.random.default_rng(action_seed)
    nvec = batch.single_action_spaces[seat].nvec
    done = [False] * n
    while not all(done):
        actions = [{seat: rng.integers(0, nvec)} for _ in range(n)]
        o, r, t, tr, info = batch.step(actions)
        for i, env in enumerate(stock):
            if done[i]:
                continue
            so, sr, st, strunc, sinfo = env.step(actions[i])
            assert np.array_equal(o[i][seat], so[seat])
            assert r[i] == sr and t[i] == st and tr[i] == strunc
            assert info[i][seat]["reward_terms"] == sinfo[seat]["reward_terms"]
            if st["__all__"] or strunc["__all__"]:
                assert info[i][seat]["episode"] == sinfo[seat]["episode"]
                done[i] = True
    return batch


@pytest.mark.parametrize("scenario, codec", [("crisis", "need"), ("standard", "residual"), ("elevated", None),
                                             ("market_baseline", "need")])
def test_every_arena_plays_the_stock_focal_env(scenario, codec):
    play_first_episodes(config(scenario, codec), n=6)


@pytest.mark.parametrize("scenario, features", [("crisis", "cells_v1"), ("broad", "cells_v1"), ("crisis", "cells_v2"),
                                                ("broad", "cells_v2")])
def test_the_universal_allocators_cell_view_plays_the_stock_focal_env(scenario, features):
    """cells_v2: the memory the lean and batched samplers train on is the one the stock env (and play) keeps."""
    from commons_arena.family import generate_scenarios

    config_ = generate_scenarios("broad", 3, seed=5)[-1] if scenario == "broad" else scenario
    network = NETWORKS["cells"].with_features(features)
    play_first_episodes(config(config_, "need", network={ALLOCATOR: network}), n=4)


def test_clusters_of_different_shapes_share_one_batch_through_the_cell_view():
    from commons_arena.family import generate_scenarios

    shapes = [c for c in generate_scenarios("broad", 12, seed=5)]
    picked = [shapes[0], next(c for c in shapes if len(c.teams) != len(shapes[0].teams))]
    batch = BatchedFocalEnv(config(scenarios=tuple(picked), network={ALLOCATOR: NETWORKS["cells"]}), 4)
    views = batch.reset_arrays(seed=1)
    assert views[ALLOCATOR].shape[0] == 4
    nvec = batch.single_action_spaces[ALLOCATOR].nvec
    rng = np.random.default_rng(0)
    for _ in range(30):
        step = batch.step_arrays({ALLOCATOR: rng.integers(0, nvec, size=(4, len(nvec)))})
    assert step.obs[ALLOCATOR].shape == views[ALLOCATOR].shape and step.restarted.dtype == bool


@pytest.mark.parametrize("allocator", ["proportional", "planner"])
def test_a_best_responses_team_seat_plays_the_stock_focal_env(allocator):
    play_first_episodes(team_config("crisis", allocator), n=5)


def test_a_restarted_arena_plays_the_cores_next_seed_from_a_clean_start():
    n = 5
    batch = play_first_episodes(config("standard", "need"), n)
    first = [view.episode_seed for view in batch.envs]
    restarting = np.flatnonzero(batch.groups[0].ended).tolist()  # the arenas whose episode ended last step
    assert restarting
    zeros = np.zeros(len(batch.single_action_spaces[ALLOCATOR].nvec), dtype=np.int64)
    obs, rewards, terminateds, _, infos = batch.step([{ALLOCATOR: zeros} for _ in range(n)])
    for i in restarting:  # NEXT_STEP: these reset now, their actions ignored
        seed = infos[i][ALLOCATOR]["episode_seed"]
        assert seed == first[i] + n and rewards[i] == {ALLOCATOR: 0.0} and not terminateds[i]["__all__"]
        focal = FocalEnv.from_scenario("standard", focal=[ALLOCATOR])
        interface = MLP.interface(focal.config, ALLOCATOR, None, "need")
        raw, _ = focal.reset(seed=seed)
        interface.reset()
        assert np.array_equal(obs[i][ALLOCATOR], interface.observe(raw[ALLOCATOR]))


def test_mixed_scenarios_split_the_arenas_and_keep_each_arenas_scenario():
    assert split_arenas(32, [1, 1, 1]) == [11, 11, 10]
    assert split_arenas(10, [0.9, 0.05, 0.05]) == [8, 1, 1]
    with pytest.raises(ValueError, match="at least one each"):
        split_arenas(2, [1, 1, 1])
    batch = BatchedFocalEnv(config(scenarios=("standard", "elevated", "crisis")), 6)
    _, infos = batch.reset(seed=3)
    assert [info[ALLOCATOR]["scenario"] for info in infos] == ["standard"] * 2 + ["elevated"] * 2 + ["crisis"] * 2


@pytest.mark.parametrize("extra, reason", [
    ({"curriculum": Curriculum(("standard", "crisis"), promote_at=0.6)}, "curriculum"),
    ({"scripted_in_env": False}, "scripted_in_env"),
])
def test_runs_it_cannot_play_are_refused_with_the_reason(extra, reason):
    cfg = replace(config(), **extra)
    assert reason in (unsupported_reason(cfg) or "")
    with pytest.raises(ValueError, match="--sampler stock"):
        BatchedFocalEnv(cfg, 4)


def test_a_mix_background_is_drawn_per_episode_and_tagged_in_the_last_infos():
    from experiments.training.env import MIX_INFO

    cfg = config("crisis", "need", background_mix=BackgroundMix({"agents": {"search": "greedy_bluffer"}}, 0.5))
    batch = BatchedFocalEnv(cfg, 8)
    batch.reset(seed=4)
    nvec = batch.single_action_spaces[ALLOCATOR].nvec
    tags = []
    for _ in range(30):
        *_, infos = batch.step([{ALLOCATOR: np.zeros(len(nvec), np.int64)} for _ in range(8)])
        tags += [info[ALLOCATOR][MIX_INFO] for info in infos if "episode" in info[ALLOCATOR]]
    assert tags and set(tags) == {0.0, 1.0}  # both backgrounds played, each episode tagged with its draw


def test_a_kinds_start_on_its_own_scenario_is_kept_and_a_switch_is_refused():
    batch = BatchedFocalEnv(config("crisis", "need"), 2)
    for view in batch.envs:
        view.set_scenario("crisis")  # a kind's start: every env on the run's own scenario
    with pytest.raises(ValueError, match="--sampler lean or stock"):
        batch.envs[0].set_scenario("standard")
    lean = BatchedFocalEnv(config("crisis", "need"), 2, lean=True)  # the lean sampler restarts on the new one
    lean.envs[0].set_scenario("standard")
    assert lean.switched and set(lean.scenario_names) == {"standard"}


def test_a_privileged_background_is_refused():
    BatchedFocalEnv(config(background={"agents": {"search": "truthful"}}), 2)  # scripted: fine
    with pytest.raises(ValueError, match="hidden state"):
        BatchedFocalEnv(config("standard", None, learned_agents=("search",),
                               background={"agents": {ALLOCATOR: "oracle"}}), 2)


TINY = dict(eval_every=1, eval_seeds=2, train_batch_size=128, minibatch_size=64, num_epochs=1,
            num_envs_per_env_runner=8, hidden=(8, 8), quiet=True, iterations=2, sampler="batched")


@pytest.mark.ray
@pytest.mark.timeout(900)
def test_the_main_jobs_kind_trains_on_the_batched_sampler_reproducibly(ray_session, tmp_path):
    weights = [(train(TrainArgs(out=tmp_path, run_name=name, experiment="allocator_mixed", **TINY))
                / "arena_policy.safetensors").read_bytes() for name in ("a", "b")]
    assert weights[0] == weights[1]  # same file and seed: identical weights
    with pytest.raises(ValueError, match="--sampler stock"):  # refused before Ray builds anything
        train(TrainArgs(out=tmp_path, run_name="c", experiment="allocator_curriculum", **TINY))
