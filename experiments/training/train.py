"""Train the allocator with RLlib (new API stack) against the scenario's scripted population.

Two experiments, both read top to bottom:

* ``allocator_ppo``: one scenario, fixed background population.
* ``allocator_curriculum``: ``standard → elevated → crisis``; an RLlib callback
  (``CurriculumCallback``) promotes every env to the next stage when the training
  episodes' normalised score reaches ``promote_at``.

Every ``eval_every`` iterations the current allocator module plays ``eval_seeds``
held-out seeds (never used for training) outside RLlib; its normalised score
``(R - R_random) / (R_oracle - R_random)`` on those same seeds, the baselines' scores,
a checkpoint (plus ``arena_policy.json``, what ``learned:<dir>`` needs), ``history.json``
and ``learning_curve.png`` are written to the run folder. The per-term reward breakdown and
the training episodes' normalised score are RLlib custom metrics
(``result["env_runners"]["allocator_reward_terms"]``, ``["allocator_episode"]``) and go to
TensorBoard (tensorboardX) in ``<run>/tb``.

    commons-arena train --experiment allocator_ppo --scenario standard --minutes 10
    commons-arena train --resume runs/allocator_ppo-standard-s0     # continue a killed run
    RAY_ADDRESS=ray://head:10001 commons-arena train ...            # on an existing cluster
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

import numpy as np

import commons_arena
from commons_arena.enums import ALLOCATOR
from experiments.evaluation.evaluate import BASELINES, normalised_score, play_many
from policies.checkpoint_format import PolicyNetwork, network_from_rl_module
from policies.focal import FocalEnv
from policies.learned import CODECS, LearnedPolicy, observation_scale, save_policy
from policies.population import Population, run_episode

CURRICULUM = ("standard", "elevated", "crisis")


@dataclass
class TrainArgs:
    experiment: Literal["allocator_ppo", "allocator_curriculum"] = "allocator_ppo"
    """allocator_ppo: one scenario; allocator_curriculum: standard -> elevated -> crisis"""
    scenario: str = "standard"
    """scenario for allocator_ppo (ignored by the curriculum)"""
    minutes: float = 10.0
    """wall-clock budget of the whole run: references, Ray start-up, training, evaluations"""
    iterations: int | None = None
    """stop after this many training iterations instead (whichever comes first)"""
    algo: Literal["PPO", "APPO"] = "PPO"
    """RLlib algorithm; the config is algorithm-agnostic"""
    seed: int = 0
    """seeds RLlib, the scripted policies and the observation-scale sampling"""
    num_env_runners: int = 0
    """remote env runners (0 = sample in the driver); cut to the CPUs Ray reports"""
    num_envs_per_env_runner: int = 32
    """vectorised envs per runner: the cheap speed-up on few cores (RLlib's per-step cost is
    per vector step, so more envs amortise it)"""
    train_batch_size: int = 2048
    """env steps per iteration"""
    minibatch_size: int = 256
    """SGD minibatch size"""
    num_epochs: int = 6
    """SGD passes over each batch"""
    lr: float = 5e-4
    """learning rate"""
    gamma: float = 0.99
    """discount (episodes are 10-20 ticks)"""
    entropy_coeff: float = 0.005
    """entropy bonus"""
    action_codec: Literal["relative", "none"] = "relative"
    """how the module's action becomes an env action: 'relative' grants shares of each team's
    demand (policies.learned.RelativeAllocatorCodec); 'none' outputs the env action itself"""
    scripted_in_env: bool = True
    """play the scripted population inside the env wrapper (faster sampling; a curriculum
    stage brings its own population); --no-scripted-in-env runs each scripted agent as an
    untrained RLlib module instead (allocator_ppo only)"""
    hidden: tuple[int, ...] = (256, 256)
    """hidden layer sizes of the allocator's policy and value networks"""
    eval_every: int = 5
    """iterations between held-out evaluations (and checkpoints)"""
    eval_seeds: int = 20
    """held-out episodes per evaluation"""
    eval_first_seed: int = 900_000
    """held-out seeds are eval_first_seed .. + eval_seeds - 1"""
    promote_at: float = 0.6
    """curriculum: training episodes' normalised score (smoothed) that promotes to the next stage"""
    promote_after: int = 5
    """curriculum: at least this many iterations on a stage before promotion"""
    out: Path = Path("runs")
    """parent folder of the run folder"""
    run_name: str | None = None
    """run folder name (default: experiment-scenario-s<seed>)"""
    resume: Path | None = None
    """continue the run in this folder from its last checkpoint (its args.json wins)"""
    address: str | None = None
    """Ray cluster address (default: $RAY_ADDRESS, else a local Ray)"""
    torch_threads: int = 1
    """torch threads in the driver (1 is fastest on 2 cores for these small networks)"""
    quiet: bool = False
    """no per-iteration lines"""

    @property
    def stages(self) -> tuple[str, ...]:
        return CURRICULUM if self.experiment == "allocator_curriculum" else (self.scenario,)

    @property
    def name(self) -> str:
        return self.run_name or f"{self.experiment}-{self.stages[0] if len(self.stages) == 1 else 'curriculum'}-s{self.seed}"


@dataclass
class RunState:
    """What survives a crash: written after every evaluation."""

    stage: int = 0
    iterations: int = 0
    env_steps: int = 0
    seconds: float = 0.0
    best_score: float = float("-inf")  # best held-out score of the last stage reached
    history: list[dict[str, Any]] = field(default_factory=list)


def scripted_factories(scenario: str) -> dict[str, Any]:
    """Picklable policy factories for every agent but the allocator (the scenario's population)."""
    from experiments.training.rllib_adapter import registered_policy

    config = commons_arena.load_scenario(scenario)
    entries = Population.default(config).resolve(config)
    return {agent: registered_policy(e.policy, scenario, **e.params) for agent, e in entries.items() if agent != ALLOCATOR}


def sample_allocator_observations(scenarios: tuple[str, ...], seed: int, episodes: int = 8) -> np.ndarray:
    """Allocator observations from random and proportional allocators (for the scale)."""
    rows = []
    for scenario in scenarios:
        config = commons_arena.load_scenario(scenario)
        for allocator in ("random", "proportional"):
            episode = FocalEnv.from_scenario(config, (), Population.default(config).with_agent(ALLOCATOR, allocator))
            for k in range(episodes):
                episode.reset(seed=seed * 7919 + k)
                while not episode.episode_over:
                    rows.append(episode.seat_observations[ALLOCATOR])
                    episode.step({})
    return np.stack(rows)


def reference_returns(scenario: str, seeds: list[int]) -> dict[str, float]:
    """Mean allocator return of random, oracle and each baseline on the held-out seeds."""
    return {
        name: float(np.mean([e[ALLOCATOR]["return"] for e in play_many(scenario, name, seeds)]))
        for name in ("random", "oracle", *BASELINES)
    }


def allocator_network(algo: Any) -> PolicyNetwork:
    """The allocator module's greedy actor as the data-only network a checkpoint stores."""
    module = algo.get_module(ALLOCATOR)
    return network_from_rl_module(module, [int(n) for n in module.action_space.nvec])


def held_out_return(module: Any, scale: np.ndarray, codec: str, scenario: str, seeds: list[int]) -> float:
    """Mean return of the network (greedy, as a LearnedPolicy) against the scenario's population."""
    env = commons_arena.parallel_env(scenario=scenario)
    policies = Population.default(env.config).build(env.config, env=env)
    policies[ALLOCATOR] = LearnedPolicy(module, scale, CODECS[codec](env.config) if codec != "none" else None)
    return float(np.mean([run_episode(env, policies, seed)[ALLOCATOR]["return"] for seed in seeds]))


def build_algorithm(args: TrainArgs, scale: np.ndarray, anchors: dict[str, dict[str, float]], stage: int = 0):
    from ray.rllib.algorithms.appo import APPOConfig
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    from experiments.training.rllib_adapter import CurriculumCallback, RewardTermsCallback, build_ppo_config

    algo_config = PPOConfig() if args.algo == "PPO" else APPOConfig()
    scenario = args.stages[0]
    population_in_env = args.scripted_in_env or args.experiment == "allocator_curriculum"
    config = build_ppo_config(
        scenario,
        {} if population_in_env else scripted_factories(scenario),
        num_envs_per_env_runner=args.num_envs_per_env_runner,
        num_env_runners=args.num_env_runners,
        train_batch_size=args.train_batch_size,
        minibatch_size=args.minibatch_size,
        num_epochs=args.num_epochs,
        model_config=DefaultModelConfig(fcnet_hiddens=list(args.hidden), fcnet_activation="tanh", vf_share_layers=False),
        env_config={
            "observation_scale": {ALLOCATOR: scale.tolist()},
            **({"action_codec": {ALLOCATOR: args.action_codec}} if args.action_codec != "none" else {}),
            # by scenario hash: lets the metrics callback report a normalised score per episode
            "score_anchors": {commons_arena.load_scenario(s).content_hash: a for s, a in anchors.items()},
            **({"curriculum": {"stages": list(args.stages), "promote_at": args.promote_at,
                               "min_iterations": args.promote_after, "stage": stage}}
               if args.experiment == "allocator_curriculum" else {}),
        },
        algo_config=algo_config,
        seed=args.seed,
        callbacks=CurriculumCallback if args.experiment == "allocator_curriculum" else RewardTermsCallback,
        play_population=population_in_env,
    )
    config = config.training(lr=args.lr, gamma=args.gamma, entropy_coeff=args.entropy_coeff)
    return config.build_algo()


def _scalars(result: dict[str, Any]) -> dict[str, float]:
    runners = result.get("env_runners", {})
    out = {"return_mean": float(runners.get("agent_episode_returns_mean", {}).get(ALLOCATOR, np.nan))}
    for key in ("allocator_reward_terms", "allocator_episode"):
        for name, value in runners.get(key, {}).items():
            out[f"{key}/{name}"] = float(value)
    return out


def train(args: TrainArgs) -> Path:
    import ray
    import torch
    from tensorboardX import SummaryWriter

    from experiments.training.rllib_adapter import set_scenario_everywhere
    from experiments.viewing.plots import learning_curve

    launched = time.perf_counter()  # the budget counts everything: references, Ray, building
    # ---- run folder, args, resume
    run = (args.resume or args.out / args.name).resolve()
    state = RunState()
    if args.resume is not None:
        args = _resumed_args(json.loads((run / "args.json").read_text()), args)
        state = RunState(**json.loads((run / "state.json").read_text()))
    run.mkdir(parents=True, exist_ok=True)
    (run / "args.json").write_text(json.dumps(asdict(args), default=str, indent=1))

    # ---- seeding and references (held-out seeds never train)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.torch_threads)
    eval_seeds = list(range(args.eval_first_seed, args.eval_first_seed + args.eval_seeds))
    anchors_path = run / "references.json"
    if anchors_path.is_file():
        anchors = json.loads(anchors_path.read_text())
    else:
        anchors = {s: reference_returns(s, eval_seeds) for s in args.stages}
        anchors_path.write_text(json.dumps(anchors, indent=1))
    scale_path = run / "observation_scale.json"
    if scale_path.is_file():
        scale = np.asarray(json.loads(scale_path.read_text()), dtype=np.float32)
    else:
        scale = observation_scale(sample_allocator_observations(args.stages, args.seed))
        scale_path.write_text(json.dumps(scale.tolist()))

    # ---- Ray: a cluster if asked for, else local with what this machine has
    address = args.address or os.environ.get("RAY_ADDRESS")
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level="ERROR",
                 **({} if address else {"num_cpus": os.cpu_count()}))
    algo = build_algorithm(args, scale, anchors, stage=state.stage)
    checkpoint = run / "checkpoint"
    if args.resume is not None and checkpoint.is_dir():
        algo.restore_from_path(str(checkpoint))
    set_scenario_everywhere(algo, args.stages[state.stage])
    writer = SummaryWriter(str(run / "tb"))
    print(f"run {run}: {args.experiment} on {args.stages[state.stage]}, {args.algo}, "
          f"{args.num_envs_per_env_runner} envs/runner, batch {args.train_batch_size}")

    # ---- train, evaluate, checkpoint
    start = launched - state.seconds
    session_iterations = 0
    while True:
        elapsed = time.perf_counter() - start
        if elapsed >= args.minutes * 60 or (args.iterations is not None and session_iterations >= args.iterations):
            break
        result = algo.train()
        state.iterations += 1
        session_iterations += 1
        state.env_steps = int(result.get("num_env_steps_sampled_lifetime", state.env_steps))
        scalars = _scalars(result)
        if result.get("curriculum_stage", state.stage) != state.stage:
            state.stage = result["curriculum_stage"]
            print(f"  promoted to {args.stages[state.stage]}")
        for key, value in scalars.items():
            writer.add_scalar(f"train/{key}", value, state.env_steps)
        if not args.quiet:
            print(f"iter {state.iterations:4d}  steps {state.env_steps:8d}  {elapsed / 60:5.1f} min  "
                  f"return {scalars['return_mean']:8.2f}  score(train) {scalars.get('allocator_episode/normalised_score', np.nan):.3f}")
        due = state.iterations % args.eval_every == 0
        out_of_time = time.perf_counter() - start >= args.minutes * 60
        last = args.iterations is not None and session_iterations >= args.iterations
        if not (due or out_of_time or last):
            continue
        scenario = args.stages[state.stage]
        ref = anchors[scenario]
        network = allocator_network(algo)  # what the checkpoint stores is what is evaluated
        mean_return = held_out_return(network, scale, args.action_codec, scenario, eval_seeds)
        score = normalised_score(mean_return, ref["random"], ref["oracle"])
        state.seconds = time.perf_counter() - start
        row = {"iteration": state.iterations, "env_steps": state.env_steps, "minutes": state.seconds / 60,
               "scenario": scenario, "eval_return": mean_return, "score": score,
               "train_return": scalars["return_mean"]}
        state.history.append(row)
        writer.add_scalar("eval/normalised_score", score, state.env_steps)
        writer.add_scalar("eval/return", mean_return, state.env_steps)
        print(f"  eval on {len(eval_seeds)} held-out seeds of {scenario}: return {mean_return:.2f}, "
              f"normalised score {score:.3f} (best baseline {max(ref[b] for b in BASELINES):.2f}, oracle {ref['oracle']:.2f})")
        algo.save_to_path(str(checkpoint))  # RLlib's full state (pickles): only --resume reads it
        save_policy(checkpoint, network, commons_arena.load_scenario(scenario), ALLOCATOR, scale,
                    codec=None if args.action_codec == "none" else args.action_codec)
        # `checkpoint` is the latest (resume continues from it); `best` the best held-out
        # score on the current stage (a report should then use seeds other than these).
        new_stage = len(state.history) > 1 and state.history[-2]["scenario"] != scenario
        if score > state.best_score or new_stage:
            state.best_score = score
            shutil.rmtree(run / "best", ignore_errors=True)
            shutil.copytree(checkpoint, run / "best")
        (run / "state.json").write_text(json.dumps(asdict(state), indent=1))
        (run / "history.json").write_text(json.dumps(state.history, indent=1))
        _plot(learning_curve, state.history, anchors, run / "learning_curve.png")
    if len(args.stages) > 1 or args.iterations is None:
        final = {}
        for scenario in args.stages:
            mean_return = held_out_return(allocator_network(algo), scale, args.action_codec, scenario, eval_seeds)
            ref = anchors[scenario]
            final[scenario] = {"return": mean_return, "score": normalised_score(mean_return, ref["random"], ref["oracle"]),
                               "best_baseline": max(BASELINES, key=lambda b: ref[b]),
                               "best_baseline_return": max(ref[b] for b in BASELINES), "oracle_return": ref["oracle"]}
            print(f"final on {scenario}: return {mean_return:.2f}, normalised score {final[scenario]['score']:.3f}, "
                  f"best baseline {final[scenario]['best_baseline']} {final[scenario]['best_baseline_return']:.2f}")
        (run / "final_scores.json").write_text(json.dumps(final, indent=1))
    writer.close()
    algo.stop()
    print(f"checkpoints: {checkpoint} (latest), {run / 'best'} (best held-out score {state.best_score:.3f})")
    print(f"use one as: learned:{run / 'best'}")
    return checkpoint


# On resume the saved run's arguments win, except these, which belong to this session.
SESSION_ARGS = ("minutes", "iterations", "quiet", "address", "resume")


def _resumed_args(saved: dict[str, Any], current: TrainArgs) -> TrainArgs:
    values: dict[str, Any] = {}
    for f in fields(TrainArgs):
        if f.name in SESSION_ARGS or f.name not in saved:
            values[f.name] = getattr(current, f.name)
        elif f.name == "out":
            values[f.name] = Path(saved[f.name])
        elif f.name == "hidden":
            values[f.name] = tuple(saved[f.name])
        else:
            values[f.name] = saved[f.name]
    return TrainArgs(**values)


def _plot(learning_curve: Any, history: list[dict[str, Any]], anchors: dict[str, dict[str, float]], path: Path) -> None:
    scenario = history[-1]["scenario"]
    ref = anchors[scenario]
    baselines = {b: normalised_score(ref[b], ref["random"], ref["oracle"]) for b in BASELINES}
    learning_curve({"learned allocator": [{"env_steps": r["env_steps"], "score": r["score"]} for r in history]},
                   baselines, path, title=f"{scenario}: normalised score on held-out seeds (random 0, oracle 1)")
