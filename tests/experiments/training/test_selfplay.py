"""Any seat learns: a team as the only learner, every seat learning, checkpoints in every seat.

RLlib runs for real on a tiny budget (seconds per run)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import commons_arena
from commons_arena.enums import ALLOCATOR
from experiments.training.seats import SeatPlan, fold_identity
from experiments.training.train import TrainArgs, train
from policies import Population, run_episode
from policies.learned import LearnedPolicy, ModuleInterface, read_sidecar
from policies.policy_set import member_for
from policies.registry import make_policy
from tests.figures import assert_drawn

pytestmark = [pytest.mark.slow, pytest.mark.rllib, pytest.mark.ray, pytest.mark.timeout(300)]

TINY = dict(iterations=1, eval_every=1, eval_seeds=2, train_batch_size=200, minibatch_size=50, num_epochs=1,
            num_envs_per_env_runner=2, hidden=(16, 16), quiet=True)
TEAMS = ("search", "robotics", "safety")


def rllib_modules(checkpoint) -> set[str]:
    return {p.name for p in (checkpoint / "learner_group" / "learner" / "rl_module").iterdir() if p.is_dir()}


def test_seat_plans():
    config = commons_arena.load_scenario("standard")
    shared = SeatPlan.build(config, ["team"])
    assert shared.modules == {"team": list(TEAMS)}
    assert shared.identity == {"search": (0, 3), "robotics": (1, 3), "safety": (2, 3)}
    per_team = SeatPlan.build(config, ["broker", "robotics", "allocator"], "per_team")
    assert per_team.modules == {"allocator": ["allocator"], "robotics": ["robotics"], "broker": ["broker"]}
    assert per_team.identity == {}
    assert shared.mapping_fn()("safety") == "team" and shared.mapping_fn()("broker") == "broker"
    with pytest.raises(ValueError, match=r"unknown learner 'teams'.*'team' means every team"):
        SeatPlan.build(config, ["teams"])
    from experiments.training.kinds import plan_for

    assert plan_for("selfplay", config, ("allocator",), "per_team").modules == {
        seat: [seat] for seat in config.agents}
    with pytest.raises(ValueError, match="--learners is for --experiment seats_ppo"):
        plan_for("allocator_ppo", config, ("team",), "shared")


def test_a_team_alone_learns_and_plays_every_team_seat(ray_session, tmp_path):
    checkpoint = train(TrainArgs(out=tmp_path, run_name="team", experiment="seats_ppo", learners=("team",), **TINY))
    assert rllib_modules(checkpoint) == {"team"}  # one shared module; the rest played inside the env
    history = json.loads((checkpoint.parent / "history.json").read_text())
    assert set(history[0]["returns"]) == set(TEAMS) and np.isfinite(history[0]["score"])
    assert {read_sidecar(checkpoint / "policies" / t)["role"] for t in TEAMS} == {"team"}
    env = commons_arena.parallel_env("standard")
    name = f"learned:{checkpoint}"
    population = Population(roles={"team": name})
    first = run_episode(env, population, seed=4)
    assert first == run_episode(env, population, seed=4)
    with pytest.raises(ValueError, match="plays the team role, not allocator"):
        Population(agents={ALLOCATOR: name}).resolve("standard")
    # asked by name for a seat it does not hold, the policy set names what it holds and the seat
    make_policy(name, "standard", "search")
    with pytest.raises(ValueError, match=r"plays the team role.*'broker'"):
        make_policy(name, "standard", "broker")


@pytest.fixture(scope="module")
def selfplay_checkpoint(ray_session, tmp_path_factory):
    return train(TrainArgs(out=tmp_path_factory.mktemp("runs"), run_name="all", experiment="selfplay", **TINY))


def test_every_seat_learns_and_the_checkpoint_plays_every_seat(selfplay_checkpoint):
    checkpoint = selfplay_checkpoint
    assert rllib_modules(checkpoint) == {"allocator", "team", "broker"}
    name = f"learned:{checkpoint}"
    env = commons_arena.parallel_env("standard")
    everyone = Population(roles={"allocator": name, "team": name, "broker": name})
    policies = everyone.build(env.config, env=env)
    assert all(isinstance(p, LearnedPolicy) for p in policies.values())
    episode = run_episode(env, policies, seed=7)
    assert set(episode) == set(env.possible_agents) and episode == run_episode(env, everyone, seed=7)
    # a team seat of another scenario takes the first team policy that fits
    other = commons_arena.load_scenario("elevated")
    assert member_for(checkpoint, other, other.team_names[0]).parent.name == "policies"
    state = json.loads((checkpoint.parent / "state.json").read_text())
    assert state["iterations"] == 1


def test_a_multi_seat_checkpoint_is_an_entrant_in_any_seat_it_holds(selfplay_checkpoint):
    """Issue 18: the roster checked the spec's first role (allocator) and refused the set for a team seat."""
    from experiments.evaluation.evaluate import validate_lineup
    from experiments.evaluation.roster import roster_from_dict

    name = f"learned:{selfplay_checkpoint}"
    for seat in ("teams", "search", "broker"):
        roster = roster_from_dict({"seat": seat, "scenarios": ["standard"], "seeds": [1],
                                   "entrants": {"learned": name, "scripted": "truthful" if seat != "broker" else "fixed_price"}})
        assert [p.entry.policy for p in roster.entrants][0] == name
    validate_lineup(["standard"], [name], [1])  # and as an allocator
    team_only = selfplay_checkpoint.parent.parent / "team-only"
    import shutil

    shutil.copytree(selfplay_checkpoint, team_only, ignore=shutil.ignore_patterns("allocator", "broker"))
    with pytest.raises(ValueError, match="plays the team role, not allocator"):
        roster_from_dict({"seat": "allocator", "scenarios": ["standard"], "seeds": [1],
                          "entrants": {"learned": f"learned:{team_only}"}})


def test_folding_the_team_identity_is_exact():
    """A shared module exported per team gives the module's own logits on what the seat's
    ModuleInterface feeds it (observation + identity)."""
    import gymnasium as gym
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    from experiments.training.rl_modules import network_from_rl_module

    spec = PPOConfig().get_default_rl_module_spec()
    config = commons_arena.load_scenario("standard")
    size = commons_arena.parallel_env(scenario="standard").observation_space(TEAMS[0]).shape[0]
    spec.observation_space = gym.spaces.Box(-10, 10, (size + 3,), np.float32)
    spec.action_space = gym.spaces.MultiDiscrete([7, 6, 3, 3])
    spec.model_config = DefaultModelConfig(fcnet_hiddens=[16, 16], fcnet_activation="tanh", vf_share_layers=False)
    network = network_from_rl_module(spec.build(), [7, 6, 3, 3])
    obs = np.random.default_rng(0).normal(size=(5, size)).astype(np.float32)
    for index, team in enumerate(TEAMS):
        folded = fold_identity(network, (index, 3))
        assert folded.input_size == size
        interface = ModuleInterface(config, team, np.ones(size, np.float32), identity=(index, 3))
        assert interface.input_size == size + 3
        expected = network.logits(np.stack([interface.observe(o) for o in obs]))
        np.testing.assert_allclose(folded.logits(obs), expected, rtol=1e-5, atol=1e-5)


def test_analyze_reads_the_run_and_writes_figure_and_summary(selfplay_checkpoint, capsys):
    from commands.evaluate import Analyze

    run = selfplay_checkpoint.parent
    history = json.loads((run / "history.json").read_text())
    assert set(history[-1]["declared_to_need"]) == set(TEAMS)  # bluffing recorded over training
    png, md, data = Analyze(run_folder=run, seeds=2).run()
    assert_drawn(png)
    text = md.read_text()
    for heading in ("Learning or design?", "Every learning seat, trained together", "Do learned teams over-declare?", "The learned allocator's grants",
                    "The learned broker's prices", "What the allocator learned: discounting a bluffer"):
        assert heading in text
    report = json.loads(data.read_text())
    assert {r["allocator"] for r in report["teams_vs_allocators"]} >= {"proportional", "learned"}
    assert {g["allocator"] for g in report["misreport_gain"]} == {"learned", "planner", "proportional"}
    assert {r["seat"] for r in report["learning"]} == {"allocator", "broker", *TEAMS}  # every learning seat
    assert [r["seat"] for r in report["together"]] == report["learned"]  # trained vs iteration 0, every seat
    assert len(report["credit"]) == 5 and report["returns_over_training"][0]["env_steps"] == 0  # from iteration 0
    assert all(np.isfinite(g["slope_on_declared"]) for g in report["allocator_grants"])
    # per seat: the learned allocator's discount of a bluffer and generosity, beside planner's and proportional's
    assert [(r["seat"], r["vs"]) for r in report["what_it_learned"]] == [(t, "planner") for t in TEAMS]
    assert {(r["seat"], r["allocator"]) for r in report["discounting"]} == \
        {(t, a) for t in TEAMS for a in ("learned", "planner", "proportional")}
    assert all(r["verdict"] in ("discounts a bluffer", "more generous to everyone", "neither shows")
               for r in report["what_it_learned"])


def test_bluffers_declare_more_than_truthful_teams():
    """The analysis measures what it claims: greedy bluffers' declared/need ratio exceeds truthful teams'."""
    from experiments.evaluation.traces import declared_to_need, slope, traced

    config = commons_arena.load_scenario("standard")
    seeds = range(3)
    bluffers = traced(config, Population(roles={"team": "greedy_bluffer"}), seeds)
    truthful = traced(config, Population(roles={"team": "truthful"}), seeds)
    for team in TEAMS:
        assert declared_to_need(bluffers, team) > declared_to_need(truthful, team) > 0
    assert slope([(1.0, 2.0), (2.0, 4.0)]) == 2.0 and np.isnan(slope([]))


def test_seat_plan_and_mixed_tiers_share_one_interface_per_seat():
    """A shared team module's identity and the allocator's codec + history all go through the
    seat's ModuleInterface, in every tier of a mix."""
    from experiments.training.env import TRAINING_SEEDS, ArenaRLlibEnv
    from experiments.training.env_config import ArenaEnvConfig

    config = commons_arena.load_scenario("standard")
    plan = SeatPlan.build(config, ["allocator", "team"], "shared")
    raw = commons_arena.parallel_env(scenario="standard")
    learning = plan.seats
    env = ArenaRLlibEnv(ArenaEnvConfig(
        scenarios=("standard", "elevated", "crisis"), scripted_in_env=True, learned_agents=tuple(learning),
        observation_scale={s: np.ones(raw.observation_space(s).shape, np.float32) for s in learning},
        action_codec={ALLOCATOR: "residual"}, history={ALLOCATOR: 2}, seat_identity=dict(plan.identity),
    ))
    for team in TEAMS:
        assert env.observation_spaces[team].shape == (raw.observation_space(team).shape[0] + 3,)
    scenarios = set()
    for seed in range(6):
        obs, _ = env.reset(seed=seed)
        scenarios.add(env.par_env.config.name)
        # training never plays an evaluation seed (they are all below 2**20)
        assert TRAINING_SEEDS[0] <= env.seats.episode_seed < TRAINING_SEEDS[1]
        for seat, o in obs.items():
            assert env.observation_spaces[seat].contains(o), seat
        for index, team in enumerate(TEAMS):
            np.testing.assert_array_equal(obs[team][-3:], np.eye(3, dtype=np.float32)[index])
    assert len(scenarios) > 1  # the mix really switches tiers
    env.close()
