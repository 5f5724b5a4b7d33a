"""The shape-free allocator without RLlib: the cell view, a universal checkpoint played on
clusters of 2 and 8 teams, 1 and 4 tiers, the refusal beyond the family's maximum, and the
training reports' finite numbers (docs/training.md, "One allocator for any cluster")."""

from __future__ import annotations

import copy
import io
import json
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import commons_arena
from commons_arena.enums import ALLOCATOR
from commons_arena.scenario import ScenarioConfig, scenario_from_dict
from commons_arena.spaces import make_action_space
from policies.checkpoint_format import SIDECAR, CheckpointError, NetworkSpec, PolicyNetwork
from policies.codecs import make_codec
from policies.focal import FocalEnv, run_episode
from policies.learned import LearnedPolicy, read_sidecar, save_universal_policy
from policies.population import Population
from policies.registry import make_policy
from policies.universal import (
    CELLS,
    MAX_TEAMS,
    MAX_TIERS,
    N_FEATURES,
    OBS_SIZE,
    CellNetwork,
    UniversalInterface,
    split_view,
)
from tests.conftest import UNUSUAL, toml_dumps
from tests.reference.planner import ReferencePlanner
from tests.sweeps import swept


def _octet_four_tiers() -> dict[str, Any]:
    """The conftest's eight-team cluster cut to four tiers (the largest shape the view holds)."""
    data = UNUSUAL["octet_five_tiers"]()
    data["name"] = "octet_four_tiers"
    data["gpu_tiers"] = data["gpu_tiers"][:4]
    data["gpu_tiers"][3]["memory_gb"] = 40.0  # room for the generators' 33 GB jobs
    return data


def _shapes() -> dict[str, ScenarioConfig]:
    """Clusters of 2 teams x 1 tier, 8 x 4, 3 x 3 (shipped) and 3 x 1 (shipped)."""
    return {
        "duo_one_tier_hard": scenario_from_dict(UNUSUAL["duo_one_tier_hard"]()),
        "octet_four_tiers": scenario_from_dict(_octet_four_tiers()),
        "standard": commons_arena.load_scenario("standard"),
        "market_baseline": commons_arena.load_scenario("market_baseline"),
    }


SHAPES = _shapes()


def random_cell_network(seed: int = 0, hidden: int = 16, n_actions: int = 5) -> PolicyNetwork:
    """A per-cell network with random weights (its greedy codes are anything but the zero one)."""
    gen = torch.Generator().manual_seed(seed)
    layers = [{"type": "linear", "in": N_FEATURES, "out": hidden}, {"type": "tanh"},
              {"type": "linear", "in": hidden, "out": n_actions}]
    spec = NetworkSpec.model_validate({"layers": layers, "weights_sha256": "0" * 64,
                                       "action_distribution": {"type": "multi_categorical", "nvec": [n_actions]}})
    tensors = {"layers.0.weight": torch.randn(hidden, N_FEATURES, generator=gen),
               "layers.0.bias": torch.randn(hidden, generator=gen),
               "layers.2.weight": torch.randn(n_actions, hidden, generator=gen),
               "layers.2.bias": torch.randn(n_actions, generator=gen)}
    return PolicyNetwork(spec, tensors)


@pytest.mark.parametrize("name", swept(sorted(SHAPES)))
def test_the_cell_view_is_finite_bounded_and_masks_the_real_cells(name):
    config = SHAPES[name]
    interface = UniversalInterface(config)
    space = interface.observation_space()
    env = FocalEnv.from_scenario(config, [ALLOCATOR])
    obs, _ = env.reset(seed=3)
    interface.reset()
    while env.agents:
        view = interface.observe(obs[ALLOCATOR])
        assert view.shape == (OBS_SIZE,) and space.contains(view)
        cells, mask = split_view(view)
        assert mask.reshape(MAX_TEAMS, MAX_TIERS)[: len(config.teams), : len(config.gpu_tiers)].all()
        assert mask.sum() == len(config.teams) * len(config.gpu_tiers)
        assert not cells[mask < 0.5].any()  # padded cells hold zeros
        obs, *_ = env.step({ALLOCATOR: interface.act(obs[ALLOCATOR], np.full(CELLS, interface.batched.zero))})


@pytest.mark.parametrize("name", ["duo_one_tier_hard", "octet_four_tiers"])
def test_the_zero_code_on_every_cell_plays_the_planner(name):
    config = SHAPES[name]
    interface = UniversalInterface(config)
    planner = ReferencePlanner(config)
    env = FocalEnv.from_scenario(config, [ALLOCATOR])
    obs, _ = env.reset(seed=5)
    interface.reset()
    planner.reset(seed=5)
    while env.agents:
        interface.observe(obs[ALLOCATOR])
        ours = interface.act(obs[ALLOCATOR], np.full(CELLS, interface.batched.zero))
        np.testing.assert_array_equal(ours, planner.act(obs[ALLOCATOR]))
        obs, *_ = env.step({ALLOCATOR: ours})


def test_one_network_gives_valid_actions_on_two_shapes():
    network = CellNetwork(random_cell_network(), zero=2)
    moved = 0
    for name in ("duo_one_tier_hard", "octet_four_tiers"):
        config = SHAPES[name]
        interface = UniversalInterface(config)
        env = FocalEnv.from_scenario(config, [ALLOCATOR])
        obs, _ = env.reset(seed=1)
        interface.reset()
        space = make_action_space(config, ALLOCATOR)
        N, T = len(config.teams), len(config.gpu_tiers)
        while env.agents:
            code = network.greedy(interface.observe(obs[ALLOCATOR]))
            assert code.shape == (CELLS,) and ((code >= 0) & (code < 5)).all()
            padded = code.reshape(MAX_TEAMS, MAX_TIERS).copy()
            padded[:N, :T] = 2
            assert (padded == 2).all()  # padded cells keep the zero correction
            moved += int((code.reshape(MAX_TEAMS, MAX_TIERS)[:N, :T] != 2).sum())
            action = interface.act(obs[ALLOCATOR], code)
            assert space.contains(np.asarray(action, dtype=space.dtype))
            obs, _, _, _, infos = env.step({ALLOCATOR: action})
    assert moved > 0  # the random network does correct the planner somewhere


@pytest.fixture
def universal_checkpoint(tmp_path: Path) -> Path:
    folder = tmp_path / "universal"
    save_universal_policy(folder, random_cell_network(seed=7), "split:test", "")
    return folder


def test_a_long_list_of_training_scenarios_is_stored_as_mixed(tmp_path: Path) -> None:
    save_universal_policy(tmp_path / "long", random_cell_network(seed=7), "+".join(["split:broad-train"] * 40), "")
    assert read_sidecar(tmp_path / "long")["scenario"] == "mixed"
    save_universal_policy(tmp_path / "short", random_cell_network(seed=7), "split:broad-train+standard", "")
    assert read_sidecar(tmp_path / "short")["scenario"] == "split:broad-train+standard"


@pytest.mark.parametrize("name", swept(sorted(SHAPES)))
def test_one_checkpoint_plays_2_and_8_teams_1_and_4_tiers(universal_checkpoint, name):
    config = SHAPES[name]
    policy = make_policy(f"learned:{universal_checkpoint}", config, ALLOCATOR)
    assert isinstance(policy, LearnedPolicy)
    env = commons_arena.parallel_env(scenario=config)
    policies = Population.default(config).build(config, env=env)
    policies[ALLOCATOR] = policy
    first = run_episode(env, policies, 11)[ALLOCATOR]
    again = run_episode(env, policies, 11)[ALLOCATOR]
    assert np.isfinite(first["return"]) and first == again  # same seed, same episode


def test_the_gate_plays_a_correction_only_where_the_network_is_sure_of_it():
    config = SHAPES["octet_four_tiers"]
    interface = UniversalInterface(config)
    env = FocalEnv.from_scenario(config, [ALLOCATOR])
    obs, _ = env.reset(seed=3)
    interface.reset()
    view = interface.observe(obs[ALLOCATOR])
    net = random_cell_network(seed=1)
    cells, mask = split_view(view)
    logits = net.logits(cells)
    sure = torch.softmax(torch.as_tensor(logits, dtype=torch.float64), dim=-1).max(dim=-1).values.numpy()
    real = mask > 0.5
    gate = float(np.median(sure[real]))  # about half of the real cells below it
    argmax = CellNetwork(net, zero=2).greedy(view)
    gated = CellNetwork(net, zero=2, gate=gate).greedy(view)
    kept, dropped = real & (sure >= gate), real & (sure < gate)
    assert kept.any() and dropped.any() and (argmax[dropped] != 2).any()  # the gate has something to do
    np.testing.assert_array_equal(gated[kept], argmax[kept])
    assert (gated[dropped] == 2).all() and (gated[~real] == 2).all()
    np.testing.assert_array_equal(CellNetwork(net, zero=2, gate=0.0).greedy(view), argmax)
    assert (CellNetwork(net, zero=2, gate=0.999999).greedy(view)[sure < 0.999999] == 2).all()
    with pytest.raises(ValueError, match=r"gate must be in \[0, 1\)"):
        CellNetwork(net, zero=2, gate=1.0)


def test_a_gate_is_a_universal_checkpoints_parameter_batched_alike(universal_checkpoint):
    from policies.registry import batch_policy

    config = SHAPES["octet_four_tiers"]
    name = f"learned:{universal_checkpoint}"
    policy = make_policy(name, config, ALLOCATOR, gate=0.4)
    assert isinstance(policy, LearnedPolicy) and policy.module.gate == 0.4  # type: ignore[attr-defined]
    assert batch_policy(name, config, ALLOCATOR, 3, gate=0.4).network.gate == 0.4  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match=r"gate must be in \[0, 1\)"):
        make_policy(name, config, ALLOCATOR, gate=2.0)
    with pytest.raises(ValueError, match=r"'learned:honest' got unknown parameter\(s\) \['gate'\]; it accepts none"):
        make_policy("learned:honest", "crisis", ALLOCATOR, gate=0.5)  # one scenario's own view: no cells to gate


def test_a_users_own_file_plays_through_learned(universal_checkpoint, tmp_path):
    path = tmp_path / "own.toml"
    path.write_text(toml_dumps(_octet_four_tiers()))
    policy = LearnedPolicy.load(universal_checkpoint, str(path), ALLOCATOR)
    env = commons_arena.parallel_env(scenario=str(path))
    policies = Population.default(env.config).build(env.config, env=env)
    policies[ALLOCATOR] = policy
    assert np.isfinite(run_episode(env, policies, 2)[ALLOCATOR]["return"])


def test_a_cluster_beyond_the_familys_maximum_is_refused_clearly(universal_checkpoint):
    five_tiers = scenario_from_dict(UNUSUAL["octet_five_tiers"]())
    with pytest.raises(CheckpointError, match=r"8 teams x 5 tiers.*at most 8 teams x 4 tiers"):
        LearnedPolicy.load(universal_checkpoint, five_tiers, ALLOCATOR)
    with pytest.raises(CheckpointError, match="at most 8 teams x 4 tiers"):
        make_policy(f"learned:{universal_checkpoint}", five_tiers, ALLOCATOR)


def test_a_universal_sidecar_is_checked(universal_checkpoint):
    meta = read_sidecar(universal_checkpoint)
    assert meta["universal"]["cell_features"] == N_FEATURES and meta["observation_scale"] == []
    path = universal_checkpoint / SIDECAR
    tampered = copy.deepcopy(json.loads(path.read_text()))
    tampered["observation_scale"] = [1.0]
    path.write_text(json.dumps(tampered))
    with pytest.raises(CheckpointError, match="observation_scale must be empty"):
        read_sidecar(universal_checkpoint)
    tampered = {**json.loads(path.read_text()), "observation_scale": []}
    tampered["universal"] = {**tampered["universal"], "cell_features": N_FEATURES + 1}
    path.write_text(json.dumps(tampered))
    with pytest.raises(CheckpointError):
        LearnedPolicy.load(universal_checkpoint, "standard", ALLOCATOR)


def test_only_per_cell_codecs_and_the_allocator_are_shape_free():
    with pytest.raises(CheckpointError, match="per-\\(team, tier\\) codec"):
        UniversalInterface(SHAPES["standard"], ALLOCATOR, "absolute")
    with pytest.raises(CheckpointError, match="allocator seat"):
        UniversalInterface(SHAPES["standard"], "search", "need")


# --------------------------------------------------------------------------- no NaN


def test_a_tier_without_gpus_gives_finite_codec_features():
    """A tier with no owned GPUs and no spot market is valid; its codec features divided 0 by 0."""
    data = UNUSUAL["duo_one_tier_hard"]()
    data["gpu_tiers"].append({"name": "empty", "owned": 0, "memory_gb": 8.0, "speed": 1.0, "op_cost": 0.1,
                              "power_kw": 0.1, "spot_inventory": 0})
    config = scenario_from_dict(data)
    env = FocalEnv.from_scenario(config, [])
    obs, _ = env.reset(seed=0)
    seats = env.seat_observations
    for codec in (make_codec("need", config), make_codec("residual", config), make_codec("bluff", config, "alpha")):
        codec.reset()
        agent = codec.agent
        assert np.isfinite(codec.features(seats[agent])).all(), codec.name
        if agent != ALLOCATOR:
            codec.decode(seats[agent], codec.zero_code)
            assert np.isfinite(codec.features(seats[agent])).all(), codec.name
    interface = UniversalInterface(config)
    assert np.isfinite(interface.observe(seats[ALLOCATOR])).all()


@pytest.mark.slow  # imports tensorboardX
def test_an_iteration_without_a_finished_episode_reports_no_nan(tmp_path):
    """Episodes longer than an iteration's samples: RLlib's means are NaN or absent until one ends."""
    from experiments.training.reporting import Reporter, scalars
    from experiments.training.runs import RunState

    nothing_yet = {"env_runners": {"agent_episode_returns_mean": {}, "num_episodes": 0, "num_env_steps_sampled": 64,
                                   "allocator_episode": {"normalised_score": float("nan"), "return": float("nan")}}}
    values = scalars(nothing_yet)
    assert "return_mean" not in values and all(np.isfinite(v) for v in values.values())
    finished = {"env_runners": {"agent_episode_returns_mean": {ALLOCATOR: 12.5}, "num_episodes": 3,
                                "num_env_steps_sampled": 64, "allocator_episode": {"return": 12.5}}}
    assert scalars(finished) == {"return_mean": 12.5, "return_mean/allocator": 12.5, "allocator_episode/return": 12.5,
                                 "episodes": 3.0, "steps": 64.0}
    nothing_sampled = {"env_runners": {}}
    reporter = Reporter(tmp_path, quiet=False)
    out = io.StringIO()
    with redirect_stdout(out):
        reporter.iteration(RunState(), nothing_yet, values, 0.1)
        reporter.iteration(RunState(), finished, scalars(finished), 0.2)
        reporter.iteration(RunState(), nothing_sampled, scalars(nothing_sampled), 0.3)
    reporter.close()
    lines = out.getvalue().splitlines()
    assert "sampled nothing this iteration" in lines[2]
    assert "no episode finished yet" in lines[0] and "nan" not in out.getvalue()
    assert "return    12.50" in lines[1] and "score(train) n/a" in lines[1]


@pytest.mark.slow  # imports tensorboardX
def test_the_learners_kl_and_entropy_are_reported_per_module(tmp_path):
    from experiments.training.reporting import Reporter, scalars
    from experiments.training.runs import RunState

    result = {"env_runners": {"agent_episode_returns_mean": {ALLOCATOR: 1.0}, "num_episodes": 1,
                              "num_env_steps_sampled": 8},
              "learners": {ALLOCATOR: {"mean_kl_loss": 0.004, "entropy": 1.25, "vf_explained_var": float("nan"),
                                       "num_module_steps_trained": 8},
                           "__all_modules__": {"entropy": 9.0}}}
    values = scalars(result)
    assert values[f"learner/{ALLOCATOR}/mean_kl_loss"] == 0.004 and values[f"learner/{ALLOCATOR}/entropy"] == 1.25
    assert not any("vf_explained_var" in k or "__all_modules__" in k or "num_module" in k for k in values)
    reporter, out = Reporter(tmp_path, quiet=False), io.StringIO()
    with redirect_stdout(out):
        reporter.iteration(RunState(), result, values, 0.1)
    reporter.close()
    assert "kl 0.0040  entropy 1.250" in out.getvalue()


# --------------------------------------------------------------------------- the run's arguments


def test_the_arguments_of_a_shape_free_run_are_checked():
    from experiments.training.args import TrainArgs

    with pytest.raises(ValueError, match="pass --network cells"):
        TrainArgs(experiment="allocator_family").validate()
    with pytest.raises(ValueError, match="--action-codec need or residual"):
        TrainArgs(network="cells", action_codec="absolute").validate()
    with pytest.raises(ValueError, match="--history 1"):
        TrainArgs(network="cells", history=2).validate()
    family = TrainArgs(experiment="allocator_family", network="cells")
    assert family.stages == ("split:broad-train",) and family.name == "allocator_family-broad-train-s0"
    beside = TrainArgs(experiment="allocator_family", network="cells", family_scenarios=("standard",))
    assert beside.name == "allocator_family-mixed-s0"  # each episode one of several: a mix
    assert TrainArgs(scenario="some/where/own.toml").name == "allocator_ppo-own-s0"  # a file's stem, not a path


def test_training_refuses_a_held_out_scenario(tmp_path):
    from commons_arena.family import generate_one, load_family, scenario_to_toml, split_file
    from experiments.training.args import TrainArgs
    from experiments.training.setup import resolve

    split = split_file("broad-heldout")
    held = generate_one(load_family(split.family), split.seed, 0)
    assert held.content_hash == split.hashes[0]
    path = tmp_path / "looks_like_mine.toml"
    path.write_text(scenario_to_toml(held))
    with pytest.raises(ValueError, match="training must not read held-out scenarios"):
        resolve(TrainArgs(scenario=str(path), network="cells"))
    with pytest.raises(ValueError, match="training must not read held-out scenarios"):
        resolve(TrainArgs(experiment="allocator_family", network="cells", split="broad-heldout"))


def test_a_roster_accepts_a_universal_checkpoint_where_it_fits(universal_checkpoint):
    from policies.learned import check_fits

    meta = read_sidecar(universal_checkpoint)
    for config in SHAPES.values():
        check_fits(meta, config, ALLOCATOR, universal_checkpoint)
    with pytest.raises(CheckpointError, match="universal allocator; 'search'"):
        check_fits(meta, SHAPES["standard"], "search", universal_checkpoint)
    with pytest.raises(CheckpointError, match="at most 8 teams x 4 tiers"):
        check_fits(meta, scenario_from_dict(UNUSUAL["octet_five_tiers"]()), ALLOCATOR, universal_checkpoint)
