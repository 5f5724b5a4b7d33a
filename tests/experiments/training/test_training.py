"""RLlib for real, on a tiny budget: train, checkpoint, reload without Ray, play, resume.

One Ray session for the test run (``ray_session`` in conftest.py); heavy training is a
script (``commons-arena train``), not a test.
"""

from __future__ import annotations

import json
import pickle
import shutil
from dataclasses import asdict

import numpy as np
import pytest

import commons_arena
from commons_arena.enums import ALLOCATOR
from experiments.evaluation.results import QUIET
from experiments.evaluation.roster import RosterError, roster_from_dict
from experiments.evaluation.store import ChangedError, ResultStore
from experiments.evaluation.tournament import run_tournament
from experiments.training.rl_modules import convert_pickled_checkpoint
from experiments.training.runs import saved_args
from experiments.training.train import TrainArgs, train
from policies.checkpoint_format import SIDECAR, WEIGHTS, CheckpointError
from policies.focal import run_episode
from policies.learned import LearnedPolicy, module_dir, read_sidecar
from policies.population import Population
from policies.registry import make_policy
from tests.figures import assert_drawn

pytestmark = [pytest.mark.slow, pytest.mark.rllib, pytest.mark.ray, pytest.mark.timeout(600)]

TINY = dict(
    iterations=1,
    eval_every=1,
    eval_seeds=2,
    train_batch_size=200,
    minibatch_size=50,
    num_epochs=1,
    num_envs_per_env_runner=2,
    hidden=(16, 16),
    quiet=True,
)


@pytest.fixture(scope="module")
def trained(ray_session, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    checkpoint = train(TrainArgs(out=out, run_name="ci", **TINY))
    return checkpoint


def test_training_writes_checkpoint_history_and_plot(trained):
    run = trained.parent
    history = json.loads((run / "history.json").read_text())
    assert len(history) == 1 and history[0]["iteration"] == 1
    assert np.isfinite(history[0]["score"]) and history[0]["scenario"] == "standard"
    assert_drawn(run / "learning_curve.png")
    meta = read_sidecar(trained)
    assert meta["agent"] == ALLOCATOR and meta["scenario"] == "standard"
    # by default the scripted population plays inside the env: RLlib holds only the allocator
    assert [p.name for p in (trained / "learner_group" / "learner" / "rl_module").iterdir() if p.is_dir()] == ["allocator"]
    assert len(meta["observation_scale"]) == meta["observation_shape"][0]
    assert list((run / "tb").iterdir()), "no TensorBoard event file"
    assert read_sidecar(run / "best") == meta  # the best held-out checkpoint, loadable the same way


def test_learned_allocator_plays_like_any_policy(trained):
    """Loaded by name, without Ray calls, it plays a whole episode with in-space actions."""
    env = commons_arena.parallel_env("standard")
    policy = make_policy(f"learned:{trained}", env.config, ALLOCATOR)
    assert isinstance(policy, LearnedPolicy)
    obs, _ = env.reset(seed=3)
    action = policy.act(obs[ALLOCATOR])
    assert env.action_space(ALLOCATOR).contains(action)
    population = Population.default(env.config).with_agent(ALLOCATOR, f"learned:{trained}")
    first = run_episode(env, population, seed=11)
    again = run_episode(env, population, seed=11)
    assert np.isfinite(first[ALLOCATOR]["return"])
    assert first == again  # greedy module + seeded population: reproducible


def test_learned_allocator_runs_on_other_curriculum_tiers(trained):
    for scenario in ("elevated", "crisis"):
        policy = LearnedPolicy.load(trained, scenario, ALLOCATOR)
        env = commons_arena.parallel_env(scenario)
        obs, _ = env.reset(seed=0)
        assert env.action_space(ALLOCATOR).contains(policy.act(obs[ALLOCATOR]))


def test_learned_allocator_loads_from_a_relative_path(trained, monkeypatch):
    monkeypatch.chdir(trained.parent.parent)
    policy = make_policy(f"learned:{trained.parent.name}/{trained.name}", "standard", ALLOCATOR)
    obs, _ = commons_arena.parallel_env("standard").reset(seed=0)
    assert policy.act(obs[ALLOCATOR]).shape == (12,)


def test_real_checkpoint_with_a_trojaned_module_state_plays_without_running_it(trained, tmp_path):
    from tests.policies.test_checkpoint_format import Trojan

    copy, marker = tmp_path / "checkpoint", tmp_path / "ran"
    shutil.copytree(trained, copy)
    state = module_dir(copy, ALLOCATOR) / "module_state.pkl"
    assert state.is_file(), "RLlib's module state file moved: point the trojan at the new one"
    state.write_bytes(pickle.dumps(Trojan(marker)))
    env = commons_arena.parallel_env("standard")
    trojaned = run_episode(env, Population.default(env.config).with_agent(ALLOCATOR, f"learned:{copy}"), seed=2)
    clean = run_episode(env, Population.default(env.config).with_agent(ALLOCATOR, f"learned:{trained}"), seed=2)
    assert not marker.exists()
    assert trojaned == clean  # the weights come from the safetensors file alone


def test_old_pickled_checkpoint_converts_to_the_same_policy(trained, tmp_path):
    """A format-1 checkpoint (sidecar without a network, weights only in RLlib's pickles) is
    refused, and the trusted-conversion path rebuilds exactly the same policy."""
    old = tmp_path / "old"
    shutil.copytree(trained, old)
    meta = read_sidecar(trained)
    (old / WEIGHTS).unlink()
    (old / SIDECAR).write_text(json.dumps({
        "env": "commons_arena_v0", "agent": meta["agent"], "scenario": meta["scenario"],
        "scenario_hash": meta["scenario_hash"], "observation_shape": meta["observation_shape"],
        "action_nvec": meta["action_nvec"], "observation_scale": meta["observation_scale"],
        "action_codec": meta["action_codec"]["name"]}))
    with pytest.raises(CheckpointError, match="old pickled checkpoint"):
        LearnedPolicy.load(old, "standard", ALLOCATOR)
    convert_pickled_checkpoint(old)
    assert read_sidecar(old) == meta
    before, after = LearnedPolicy.load(trained, "standard", ALLOCATOR), LearnedPolicy.load(old, "standard", ALLOCATOR)
    env = commons_arena.parallel_env("standard")
    obs, _ = env.reset(seed=5)
    assert np.array_equal(before.act(obs[ALLOCATOR]), after.act(obs[ALLOCATOR]))
    with pytest.raises(CheckpointError, match="already in the data-only format"):
        convert_pickled_checkpoint(old)


def test_learned_checkpoints_in_a_tournament(trained, tmp_path):
    """A checkpoint as an entrant and inside a background; one that does not fit, or that changed, is refused."""
    checkpoint = tmp_path / "ckpt"
    shutil.copytree(trained, checkpoint)
    quiet = {"options": QUIET}
    roster = {"scenarios": ["standard"], "seeds": [1, 2], "entrants": {"ppo": f"learned:{checkpoint}", "edf": "edf"},
              "backgrounds": {"default": {}, "bluffers": {"roles": {"team": "greedy_bluffer"}}}}
    result = run_tournament(roster_from_dict(roster), tmp_path / "a", **quiet)
    with ResultStore(result.store) as store:
        rows = {(r["player"], r["background"], r["seed"]): r for r in store.rows()}
    direct = run_episode(commons_arena.parallel_env("standard"),
                         Population.default("standard").with_agent(ALLOCATOR, f"learned:{trained}"), 2)
    assert rows[("ppo", "default", 2)]["episode"] == direct
    assert [r["entrant"] for r in result.aggregates.crossplay] == ["ppo", "edf"]

    teams = {"seat": "search", "scenarios": ["standard"], "seeds": [1], "entrants": ["truthful", "greedy_bluffer"],
             "backgrounds": {"ppo": {"agents": {"allocator": f"learned:{checkpoint}"}}}}
    assert run_tournament(roster_from_dict(teams), tmp_path / "b", **quiet).play.played == 3

    with pytest.raises(RosterError, match=r"entrants.ppo: checkpoint .* does not fit agent 'allocator' of scenario 'market_baseline'"):
        roster_from_dict({**roster, "scenarios": ["standard", "market_baseline"]})
    with open(checkpoint / SIDECAR, "a") as fh:
        fh.write("\n")  # same policy, different bytes: a different checkpoint as far as results go
    with pytest.raises(ChangedError, match="player 'ppo' is now"):
        run_tournament(roster_from_dict(roster), tmp_path / "a", **quiet)


def test_resume_continues_from_the_last_checkpoint(trained, tmp_path):
    run = tmp_path / trained.parent.name  # a copy: the other tests read the one-iteration run, in any order
    shutil.copytree(trained.parent, run, symlinks=True)
    before = json.loads((run / "state.json").read_text())
    train(TrainArgs(resume=run, iterations=before["iterations"] + 1, quiet=True))  # the run's total
    after = json.loads((run / "state.json").read_text())
    assert after["iterations"] == before["iterations"] + 1
    assert after["env_steps"] > before["env_steps"]  # RLlib's counters came back from the checkpoint
    assert [row["iteration"] for row in after["history"]] == [1, 2]


def test_resuming_a_run_saved_before_a_flag_existed_keeps_what_it_trained_with(tmp_path):
    """A run whose args.json predates --gae-lambda / --vf-clip trained with RLlib's values
    then (1.0, 10): resuming it must not switch to today's defaults; a run that saved them
    keeps its own; session arguments come from the command line."""
    from experiments.training.runs import resumed_args

    saved = {**json.loads(json.dumps(asdict(TrainArgs(out=tmp_path)), default=str)), "minutes": 99.0}
    old = {k: v for k, v in saved.items() if k not in ("gae_lambda", "vf_clip")}
    args = resumed_args(old, TrainArgs(minutes=2.0))
    assert (args.gae_lambda, args.vf_clip, args.minutes) == (1.0, 10.0, 2.0)
    args = resumed_args({**saved, "gae_lambda": 0.8}, TrainArgs())
    assert (args.gae_lambda, args.vf_clip) == (0.8, float("inf"))


def test_scripted_agents_as_rllib_modules(ray_session, tmp_path):
    """The other wiring: every scripted agent is an untrained ScriptedRLModule."""
    checkpoint = train(TrainArgs(out=tmp_path, run_name="modules", scripted_in_env=False, **TINY))
    modules = {p.name for p in (checkpoint / "learner_group" / "learner" / "rl_module").iterdir() if p.is_dir()}
    assert modules == {"allocator", "search", "robotics", "safety", "broker"}


def test_same_config_runs_on_appo(ray_session, tmp_path):
    """Nothing in the experiment is PPO-specific."""
    checkpoint = train(TrainArgs(out=tmp_path, run_name="appo", algo="APPO", **TINY))
    assert read_sidecar(checkpoint)["agent"] == ALLOCATOR


def test_curriculum_callback_promotes_through_every_stage(ray_session, tmp_path):
    run_args = {**TINY, "iterations": 2, "eval_every": 2}
    train(TrainArgs(out=tmp_path, run_name="cur", experiment="allocator_curriculum",
                    promote_at=-1e9, promote_after=1, **run_args))
    state = json.loads((tmp_path / "cur" / "state.json").read_text())
    assert state["stage"] == 2  # standard -> elevated -> crisis, one promotion per iteration
    assert state["history"][-1]["scenario"] == "crisis"
    final = json.loads((tmp_path / "cur" / "final_scores.json").read_text())
    assert set(final) == {"standard", "elevated", "crisis"}


@pytest.mark.parametrize("codec", ["need", "residual"])
def test_mixed_tier_residual_training_starts_as_the_planner(ray_session, tmp_path, codec):
    """allocator_mixed with a codec built on the planner and two stacked ticks: before any
    learning (lr 0) the greedy module is the zero correction, so the checkpoint plays exactly
    the planner on every tier; the sidecar records codec and history."""
    checkpoint = train(TrainArgs(out=tmp_path, run_name="mixed", experiment="allocator_mixed", history=2, lr=0.0,
                                 action_codec=codec, **TINY))
    meta = read_sidecar(checkpoint)
    assert meta["action_codec"]["name"] == codec and meta["history"] == 2
    final = json.loads((checkpoint.parent / "final_scores.json").read_text())
    assert set(final) == {"standard", "elevated", "crisis"}
    for scenario in ("standard", "crisis"):
        env = commons_arena.parallel_env(scenario)

        def returns(allocator: str, env=env) -> list[float]:
            population = Population.default(env.config).with_agent(ALLOCATOR, allocator)
            return [run_episode(env, population, seed)[ALLOCATOR]["return"] for seed in (1, 2)]

        assert returns(f"learned:{checkpoint}") == returns("planner"), scenario


def test_the_critic_is_not_clipped_and_gae_lambda_reaches_rllib(ray_session):
    """RLlib's default vf_clip_param (10, on the squared error) zeroes the critic's gradient at
    this game's returns; the defaults turn it off and pass lambda through, and both flags
    reach the algorithm RLlib builds."""
    from experiments.training.algorithm import build_algorithm
    from experiments.training.setup import resolve, with_unit_scales

    for args, clip, lam in ((TrainArgs(**TINY), float("inf"), 0.9),
                            (TrainArgs(vf_clip=10.0, gae_lambda=1.0, **TINY), 10.0, 1.0)):
        algo = build_algorithm(with_unit_scales(resolve(args)))
        try:
            assert (algo.config.vf_clip_param, algo.config.lambda_) == (clip, lam)
        finally:
            algo.stop()


def test_recurrent_module_trains_and_its_checkpoint_plays_as_learned(ray_session, tmp_path):
    """use_lstm (on the lean path): the checkpoint holds the LSTM as data (policies.checkpoint_format's ``lstm``
    layer), so held-out evaluation and ``learned:`` play the same network, its state carried through an episode."""
    from policies.checkpoint_format import load_network

    checkpoint = train(TrainArgs(out=tmp_path, run_name="lstm", use_lstm=True, action_codec="relative",
                                 **{**TINY, "sampler": "lean"}))
    history = json.loads((checkpoint.parent / "history.json").read_text())
    assert np.isfinite(history[0]["score"])
    _, network = load_network(checkpoint)
    assert network.recurrent and [x.type for x in network.spec.layers].count("lstm") == 1
    env = commons_arena.parallel_env("standard")
    population = Population.default(env.config).with_agent(ALLOCATOR, f"learned:{checkpoint}")
    assert run_episode(env, population, seed=5) == run_episode(env, population, seed=5)  # reset: from zero


def test_a_new_run_never_reuses_another_runs_folder(ray_session, tmp_path):
    first = train(TrainArgs(out=tmp_path, **TINY)).parent  # the default name
    kept = {p: p.read_bytes() for p in first.rglob("*") if p.is_file() and p.parent.name != "tb"}
    with pytest.raises(ValueError, match=r"already holds a run; continue it with --resume .*or choose another --run-name"):
        train(TrainArgs(out=tmp_path, run_name=first.name, **TINY))
    # the second run has a budget too small for even one iteration: it still trains one and saves the
    # checkpoint it names
    checkpoint = train(TrainArgs(out=tmp_path, **{**TINY, "iterations": None, "minutes": 1e-6}))
    assert (checkpoint / WEIGHTS).is_file()
    LearnedPolicy.load(checkpoint, "standard", ALLOCATOR)
    second = checkpoint.parent
    assert second.name == f"{first.name}-2"
    assert (tmp_path / "latest").resolve() == second.resolve()
    assert not (second / "args.json").exists()  # the run's one record of its arguments is its experiment.toml
    assert saved_args(second)["seed"] == TINY.get("seed", 0) and "run_name" not in saved_args(second)
    assert {p: p.read_bytes() for p in kept} == kept  # the first run's files, byte for byte
