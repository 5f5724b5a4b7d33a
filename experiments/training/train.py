"""Train seats of the arena with RLlib (new API stack) against a background population.

The experiments, read top to bottom:

* ``allocator_ppo``: the allocator learns on one scenario, fixed background population.
* ``allocator_curriculum``: ``standard → elevated → crisis``; an RLlib callback
  (``CurriculumCallback``) promotes every env to the next stage when the training
  episodes' normalised score reaches ``promote_at``.
* ``seats_ppo`` / ``selfplay``: the ``--learners`` seats, or every seat, learn at once
  (``experiments/training/selfplay.py``; module sharing in ``seats.py``).
* ``league``: the shared team module learns against scripted teams and frozen snapshots of
  itself (``experiments/training/league.py``).
* ``allocator_mixed``: every training episode plays one of ``standard``, ``elevated``,
  ``crisis`` at random (each with its own population); held-out evaluations play all
  three and the run keeps the checkpoint with the best mean score over them.

The allocator acts through an action codec (``policies.codecs``; default ``need``:
corrections to the ``planner``'s need estimates, starting from the zero correction, see
:func:`~experiments.training.rllib_adapter.favour_code`) and may see the last ``history``
ticks stacked (``policies.learned.ModuleInterface``) or carry an LSTM (``use_lstm``).

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

Every run gets its own folder: ``<out>/<run name>`` must be new (the default name is numbered
``-2``, ``-3``, ... when taken; a taken ``--run-name`` is refused) and ``<out>/latest`` points
at the newest one. Only ``--resume`` writes into an existing run folder.
    RAY_ADDRESS=ray://head:10001 commons-arena train ...            # on an existing cluster
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

import commons_arena
from commons_arena.enums import ALLOCATOR
from experiments.evaluation.evaluate import (
    BASELINE_ALLOCATORS,
    allocator_returns,
    best_other,
    normalised_score,
    paired_difference,
    plain_ratio,
    play_many,
)
from policies.checkpoint_format import PolicyNetwork
from policies.learned import LearnedPolicy, ModuleInterface, observation_scale, save_policy
from policies.population import Population, run_episode

CURRICULUM = ("standard", "elevated", "crisis")


@dataclass
class TrainArgs:
    experiment: Literal["allocator_ppo", "allocator_curriculum", "allocator_mixed", "seats_ppo", "selfplay",
                        "league"] = "allocator_ppo"
    """allocator_ppo: the allocator learns on one scenario; allocator_curriculum: standard ->
    elevated -> crisis; allocator_mixed: each episode one of standard / elevated / crisis;
    seats_ppo: the --learners seats learn; selfplay: allocator, teams and broker all learn
    (experiments/training/selfplay.py); league: a team learns against a mix of scripted teams
    and frozen snapshots of itself (experiments/training/league.py)"""
    learners: tuple[str, ...] = ("allocator",)
    """seats_ppo: the seats that learn: seat ids or roles (allocator, broker, team = every team)"""
    team_modules: Literal["shared", "per_team"] = "shared"
    """learning teams share one module (their identity appended to the observation) or get one each"""
    background: Path | None = None
    """roster TOML for the seats that do not learn (scripted or learned:<dir> frozen checkpoints);
    default: the scenario's own population"""
    league_scripted: tuple[str, ...] = ("truthful", "greedy_bluffer")
    """league: the scripted team policies in the mix (beside the learner and its snapshots)"""
    snapshot_margin: float = 0.1
    """league: snapshot the learner when its mean return beats the mix's by this share of |mix|"""
    snapshot_gap: int = 3
    """league: at least this many iterations between snapshots"""
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
    gae_lambda: float = 0.9
    """GAE lambda (1.0, RLlib's default, is the Monte-Carlo return minus the value baseline;
    lower leans on the value function: less variance, more bias)"""
    entropy_coeff: float = 0.005
    """entropy bonus"""
    vf_clip: float = math.inf
    """clip of the value function's squared error (RLlib's vf_clip_param). RLlib's default, 10,
    zeroes the value loss's gradient wherever the error exceeds about 3.2 -- nearly everywhere
    at this game's returns (hundreds) -- so the critic never learns and advantages are raw
    returns; off by default"""
    action_codec: Literal["need", "residual", "absolute", "relative", "none"] = "need"
    """how the module's action becomes an env action (policies.codecs): 'need' corrects the
    planner's need estimates (then the planner plans), 'residual' corrects the planner's
    grants, 'absolute' chooses every grant, 'relative' grants shares of each team's demand;
    'none' outputs the env action itself"""
    zero_bias: float = 3.0
    """initial logit advantage of the codec's zero code (residual: play the planner) over every
    other choice of each sub-action; 0 leaves RLlib's initialisation alone"""
    history: int = 1
    """ticks of observation the module sees, stacked newest first (1 = this tick only)"""
    use_lstm: bool = False
    """give the allocator's module an LSTM (RLlib's use_lstm) instead of stacking ticks"""
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
    """run folder name (default: experiment-scenario-s<seed>, numbered -2, -3, ... when taken);
    a taken --run-name is refused: runs never share a folder"""
    resume: Path | None = None
    """continue the run in this folder from its last checkpoint (its args.json wins); the only
    way to write into an existing run folder. It restores RLlib's full state, which is pickled:
    resume only runs you made (`learned:` never reads those files)"""
    address: str | None = None
    """Ray cluster address (default: $RAY_ADDRESS, else a local Ray)"""
    torch_threads: int = 1
    """torch threads in the driver (1 is fastest on 2 cores for these small networks)"""
    quiet: bool = False
    """no per-iteration lines"""

    def validate(self) -> None:
        """Refuse arguments that cannot work, before Ray starts or anything is written."""
        checks = [
            (math.isfinite(self.minutes) and self.minutes > 0, f"--minutes must be a positive number, got {self.minutes}"),
            (self.iterations is None or self.iterations >= 1, f"--iterations must be at least 1, got {self.iterations}"),
            (self.seed >= 0, f"--seed must be non-negative, got {self.seed}"),
            (self.num_env_runners >= 0, f"--num-env-runners must be 0 or more, got {self.num_env_runners}"),
            (self.num_envs_per_env_runner >= 1, f"--num-envs-per-env-runner must be at least 1, got {self.num_envs_per_env_runner}"),
            (self.train_batch_size >= 1, f"--train-batch-size must be at least 1, got {self.train_batch_size}"),
            (1 <= self.minibatch_size <= max(self.train_batch_size, 1),
             f"--minibatch-size must be between 1 and --train-batch-size ({self.train_batch_size}), got {self.minibatch_size}"),
            (self.num_epochs >= 1, f"--num-epochs must be at least 1, got {self.num_epochs}"),
            (math.isfinite(self.lr) and self.lr >= 0, f"--lr must be a number >= 0 (0 freezes the policy), got {self.lr}"),
            (math.isfinite(self.gamma) and 0 < self.gamma <= 1, f"--gamma must be in (0, 1], got {self.gamma}"),
            (math.isfinite(self.gae_lambda) and 0 <= self.gae_lambda <= 1,
             f"--gae-lambda must be in [0, 1], got {self.gae_lambda}"),
            (math.isfinite(self.entropy_coeff) and self.entropy_coeff >= 0, f"--entropy-coeff must be >= 0, got {self.entropy_coeff}"),
            (self.vf_clip > 0, f"--vf-clip must be > 0 (inf: no clip), got {self.vf_clip}"),
            (len(self.hidden) >= 1 and all(1 <= h <= 65_536 for h in self.hidden),
             f"--hidden needs one or more layer sizes in [1, 65536], got {list(self.hidden)}"),
            (self.eval_every >= 1, f"--eval-every must be at least 1, got {self.eval_every}"),
            (self.eval_seeds >= 1, f"--eval-seeds must be at least 1, got {self.eval_seeds}"),
            (self.eval_first_seed >= 0, f"--eval-first-seed must be non-negative, got {self.eval_first_seed}"),
            (math.isfinite(self.promote_at), f"--promote-at must be a finite number, got {self.promote_at}"),
            (self.promote_after >= 0, f"--promote-after must be 0 or more, got {self.promote_after}"),
            (self.torch_threads >= 1, f"--torch-threads must be at least 1, got {self.torch_threads}"),
            (math.isfinite(self.snapshot_margin), f"--snapshot-margin must be a finite number, got {self.snapshot_margin}"),
            (self.snapshot_gap >= 1, f"--snapshot-gap must be at least 1, got {self.snapshot_gap}"),
            (math.isfinite(self.zero_bias) and self.zero_bias >= 0, f"--zero-bias must be >= 0, got {self.zero_bias}"),
            (1 <= self.history <= 64, f"--history must be between 1 and 64 ticks, got {self.history}"),
            (self.run_name is None or (self.run_name not in ("", ".", "..", LATEST) and "/" not in self.run_name
                                       and "\\" not in self.run_name),
             f"--run-name must be a plain folder name (not {LATEST!r}), got {self.run_name!r}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        if self.resume is not None:  # the saved arguments pass the same checks before anything is written
            run = run_folder(self)
            try:
                replace(_resumed_args(saved_args(run), self), resume=None, run_name=None).validate()
            except (TypeError, ValueError) as err:
                raise ValueError(f"cannot resume {run}: {err}") from None
        if self.resume is None:
            for scenario in self.stages:
                commons_arena.load_scenario(scenario)
            from experiments.training.selfplay import background_population, plan_for

            config = commons_arena.load_scenario(self.stages[0])
            plan = plan_for(self.experiment, config, self.learners, self.team_modules)  # names the bad learner
            if self.use_lstm and plan.seats != [ALLOCATOR]:
                raise ValueError(f"--use-lstm is for the allocator learning alone; {self.experiment} trains {plan.seats}")
            background_population(self.background, config)  # a bad roster says what is wrong
        run_folder(self)

    @property
    def stages(self) -> tuple[str, ...]:
        """Curriculum stages, the mixed tiers, or the one scenario."""
        return CURRICULUM if self.experiment in ("allocator_curriculum", "allocator_mixed") else (self.scenario,)

    @property
    def mixed(self) -> bool:
        return self.experiment == "allocator_mixed"

    @property
    def codec(self) -> str | None:
        return None if self.action_codec == "none" else self.action_codec

    @property
    def name(self) -> str:
        if self.run_name:
            return self.run_name
        what = self.stages[0] if len(self.stages) == 1 else "mixed" if self.mixed else "curriculum"
        return f"{self.experiment}-{what}-s{self.seed}"


LATEST = "latest"  # <out>/latest: a symlink to the newest run folder


def _holds_files(folder: Path) -> bool:
    return folder.exists() and (not folder.is_dir() or any(folder.iterdir()))


def run_folder(args: TrainArgs) -> Path:
    """The folder this run writes to. Never another run's: ``--resume`` names the run to
    continue; otherwise the folder must be new. Without ``--run-name`` the default name gets
    a number (``-2``, ``-3``, ...) when taken; an explicit ``--run-name`` that is taken is refused."""
    if args.resume is not None:
        run = Path(args.resume)
        if not (run / "args.json").is_file():
            raise ValueError(f"nothing to resume in {run}: it has no args.json (not a run folder of `commons-arena train`)")
        return run.resolve()
    run = args.out / args.name
    if not _holds_files(run):
        return run.resolve()
    if args.run_name is not None:
        raise ValueError(
            f"run folder {run} already holds a run; continue it with --resume {run}, or choose another --run-name"
        )
    number = 2
    while _holds_files(args.out / f"{args.name}-{number}"):
        number += 1
    return (args.out / f"{args.name}-{number}").resolve()


def point_latest(run: Path) -> None:
    """Point ``<run's parent>/latest`` at ``run`` (replaced atomically; a real folder of that
    name is left alone)."""
    link = run.parent / LATEST
    if link.exists() and not link.is_symlink():
        return
    tmp = run.parent / f".{LATEST}.{os.getpid()}"
    tmp.unlink(missing_ok=True)
    os.symlink(run.name, tmp)
    os.replace(tmp, link)


@dataclass
class RunState:
    """What survives a crash: written after every evaluation."""

    stage: int = 0
    iterations: int = 0
    env_steps: int = 0
    seconds: float = 0.0
    best_score: float = float("-inf")  # best held-out score of the last stage reached
    history: list[dict[str, Any]] = field(default_factory=list)


def scripted_factories(scenario: str, learning: list[str], background: Population | None = None) -> dict[str, Any]:
    """Picklable policy factories for every seat that does not learn (the background)."""
    from experiments.training.rllib_adapter import registered_policy

    config = commons_arena.load_scenario(scenario)
    entries = (background or Population.default(config)).resolve(config, strict=False)
    return {agent: registered_policy(e.policy, scenario, **e.params) for agent, e in entries.items() if agent not in learning}


def reference_returns(scenario: str, seeds: list[int]) -> dict[str, list[float]]:
    """Per-seed allocator returns of random, oracle and each baseline on the held-out seeds."""
    return {name: allocator_returns(play_many(scenario, name, seeds)) for name in ("random", "oracle", *BASELINE_ALLOCATORS)}


def cached_reference_returns(out: Path, scenario: str, seeds: list[int]) -> dict[str, list[float]]:
    """:func:`reference_returns`, kept in ``<out>/.references`` by scenario content and seeds:
    every run in the same folder that evaluates on those seeds reuses them (they are a pure
    function of scenario, seeds and the reference allocators)."""
    key = f"{commons_arena.load_scenario(scenario).content_hash}-{seeds[0]}-{len(seeds)}-{'-'.join(BASELINE_ALLOCATORS)}"
    path = out / ".references" / f"{key}.json"
    if path.is_file() and len(seeds) == seeds[-1] - seeds[0] + 1:
        return json.loads(path.read_text())
    references = reference_returns(scenario, seeds)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(references))
    return references


def anchor_means(references: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Scenario -> allocator -> mean return (older runs stored the means themselves)."""
    return {s: {a: float(np.mean(v)) for a, v in refs.items()} for s, refs in references.items()}


def allocator_network(algo: Any) -> PolicyNetwork | Any:
    """The allocator module's greedy actor as the data-only network a checkpoint stores (a
    recurrent module, which that format cannot hold yet, is returned as itself)."""
    from experiments.training.seats import SeatPlan
    from experiments.training.selfplay import seat_networks

    return seat_networks(algo, SeatPlan.single(ALLOCATOR))[ALLOCATOR]


def seat_codecs(args: TrainArgs, plan: Any) -> dict[str, str]:
    """Learning seat -> action codec (only the allocator acts through one)."""
    return {ALLOCATOR: args.codec} if args.codec and ALLOCATOR in plan.seats else {}


def seat_histories(args: TrainArgs, plan: Any) -> dict[str, int]:
    """Learning seat -> ticks of observation its module sees (``--history`` is the allocator's)."""
    return {ALLOCATOR: args.history} if ALLOCATOR in plan.seats else {}


def held_out_returns(module: Any, args: TrainArgs, scale: np.ndarray, scenario: str, seeds: list[int]) -> list[float]:
    """Per-seed returns of the network (greedy, as a LearnedPolicy) against the scenario's population."""
    env = commons_arena.parallel_env(scenario=scenario)
    policies = Population.default(env.config).build(env.config, env=env)
    policies[ALLOCATOR] = LearnedPolicy(module, ModuleInterface(env.config, ALLOCATOR, scale, args.codec, args.history))
    return [run_episode(env, policies, seed)[ALLOCATOR]["return"] for seed in seeds]


def held_out_report(returns: list[float], references: dict[str, Any]) -> dict[str, Any]:
    """Score, plain ratio and paired difference to the best baseline of per-seed ``returns``."""
    means = {a: float(np.mean(v)) for a, v in references.items()}
    mean_return = float(np.mean(returns))
    report: dict[str, Any] = {
        "return": mean_return,
        "score": normalised_score(mean_return, means["random"], means["oracle"]),
        "ratio": plain_ratio(mean_return, means["oracle"]),
    }
    best = best_other(references, BASELINE_ALLOCATORS, besides="")
    if best is not None and isinstance(references[best], list):
        diff, ci = paired_difference(returns, references[best])
        report.update({"best_baseline": best, "best_baseline_return": means[best], "diff_vs_best": diff,
                       "diff_ci95": ci, "oracle_return": means["oracle"]})
    return report


def build_algorithm(args: TrainArgs, scales: dict[str, np.ndarray] | np.ndarray, anchors: dict[str, dict[str, float]],
                    stage: int = 0):
    """The RLlib algorithm of ``args``; ``scales``: learning seat -> observation scale (an array
    alone is the allocator's)."""
    from ray.rllib.algorithms.appo import APPOConfig
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    from experiments.training import league
    from experiments.training.rllib_adapter import CurriculumCallback, RewardTermsCallback, build_algorithm_config
    from experiments.training.selfplay import background_population, plan_for

    algo_config = PPOConfig() if args.algo == "PPO" else APPOConfig()
    scenario = args.stages[0]
    plan = plan_for(args.experiment, commons_arena.load_scenario(scenario), args.learners, args.team_modules)
    if not isinstance(scales, dict):
        scales = {ALLOCATOR: scales}
    background = background_population(args.background, commons_arena.load_scenario(scenario))
    # a curriculum, a mix or a league switches populations (or members): those play in the env
    population_in_env = args.scripted_in_env or args.experiment in ("allocator_curriculum", "allocator_mixed", "league")
    callbacks: Any = CurriculumCallback if args.experiment == "allocator_curriculum" else RewardTermsCallback
    league_options: dict[str, Any] = {}
    pool = [league.LEARNER, *(f"{league.SCRIPTED_PREFIX}{name}" for name in args.league_scripted)]
    if args.experiment == "league":
        teams = plan.seats
        league_options = {
            "extra_modules": league.scripted_member_specs(args.league_scripted, scenario, teams, scales[teams[0]]),
            "mapping_fn": league.mapping_for(pool, teams),
        }
        callbacks = league.LeagueCallback
    config = build_algorithm_config(
        scenario,
        {} if population_in_env else scripted_factories(scenario, plan.seats, background),
        num_envs_per_env_runner=args.num_envs_per_env_runner,
        num_env_runners=args.num_env_runners,
        train_batch_size=args.train_batch_size,
        minibatch_size=args.minibatch_size,
        num_epochs=args.num_epochs,
        model_config=DefaultModelConfig(fcnet_hiddens=list(args.hidden), fcnet_activation="tanh", vf_share_layers=False,
                                        use_lstm=args.use_lstm, lstm_cell_size=64, max_seq_len=16),
        env_config={
            "observation_scale": {seat: np.asarray(scales[seat]).tolist() for seat in plan.seats},
            "background": background.to_dict(),
            "action_codec": seat_codecs(args, plan),
            "history": seat_histories(args, plan),
            **({"scenarios": list(args.stages)} if args.mixed else {}),
            # by scenario hash: lets the metrics callback report a normalised score per episode
            "score_anchors": {commons_arena.load_scenario(s).content_hash: a for s, a in anchors.items()},
            **({"curriculum": {"stages": list(args.stages), "promote_at": args.promote_at,
                               "min_iterations": args.promote_after, "stage": stage}}
               if args.experiment == "allocator_curriculum" else {}),
            **({"league": {"pool": pool, "team_seats": plan.seats,
                           "margin": args.snapshot_margin, "gap": args.snapshot_gap}} if league_options else {}),
        },
        algo_config=algo_config,
        seed=args.seed,
        callbacks=callbacks,
        play_population=population_in_env,
        plan=plan,
        **league_options,
    )
    config = config.training(lr=args.lr, gamma=args.gamma, lambda_=args.gae_lambda, entropy_coeff=args.entropy_coeff,
                             **({"vf_clip_param": args.vf_clip} if args.algo == "PPO" else {}))  # APPO has none
    return config.build_algo()


def favour_zero_code(algo: Any, args: TrainArgs) -> None:
    """Start from the codec's base policy: its zero code gets ``zero_bias`` more logit."""
    from experiments.training.rllib_adapter import favour_code
    from experiments.training.selfplay import plan_for
    from policies.codecs import make_codec

    if not args.codec or args.zero_bias == 0:
        return
    if ALLOCATOR not in plan_for(args.experiment, commons_arena.load_scenario(args.stages[0]), args.learners,
                                 args.team_modules).seats:
        return
    codec = make_codec(args.codec, commons_arena.load_scenario(args.stages[0]))
    if codec.zero_code is not None:
        favour_code(algo, ALLOCATOR, codec.nvec, codec.zero_code, args.zero_bias)


def _scalars(result: dict[str, Any]) -> dict[str, float]:
    runners = result.get("env_runners", {})
    returns = runners.get("agent_episode_returns_mean", {})
    out = {"return_mean": float(returns.get(ALLOCATOR, np.mean(list(returns.values())) if returns else np.nan))}
    out.update({f"return_mean/{seat}": float(value) for seat, value in returns.items()})
    for key in ("allocator_reward_terms", "allocator_episode"):
        for name, value in runners.get(key, {}).items():
            out[f"{key}/{name}"] = float(value)
    return out


def train(args: TrainArgs) -> Path:
    import ray
    import torch
    from tensorboardX import SummaryWriter

    from experiments.training import selfplay
    from experiments.training.league import exact_scale
    from experiments.training.rllib_adapter import set_scenario_everywhere
    from experiments.training.seats import module_scales
    from experiments.viewing.plots import learning_curve

    launched = time.perf_counter()  # the budget counts everything: references, Ray, building
    args.validate()
    if args.resume is not None and saved_args(args.resume)["experiment"] == "league":
        raise ValueError("a league run cannot be resumed: its snapshots are added while it runs; start a new run")
    # ---- run folder (never another run's: a new one, or --resume), args, resume
    run = run_folder(args)
    state = RunState()
    if args.resume is not None:
        args = _resumed_args(saved_args(run), args)
        if (run / "state.json").is_file():  # absent if killed before the first evaluation
            state = RunState(**json.loads((run / "state.json").read_text()))
    else:
        if run.name != args.name:
            print(f"{args.out / args.name} holds an earlier run (kept); this run writes to {run}")
        args = replace(args, run_name=run.name)
        run.mkdir(parents=True, exist_ok=False)
    (run / "args.json").write_text(json.dumps(asdict(args), default=str, indent=1))
    point_latest(run)

    # ---- seeding and references (held-out seeds never train)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.torch_threads)
    eval_seeds = list(range(args.eval_first_seed, args.eval_first_seed + args.eval_seeds))
    references_path = run / "references.json"  # per-seed returns of every reference allocator
    if references_path.is_file():
        references = json.loads(references_path.read_text())
    else:
        references = {s: cached_reference_returns(args.out, s, eval_seeds) for s in args.stages}
        references_path.write_text(json.dumps(references, indent=1))
    anchors = anchor_means(references)
    config = commons_arena.load_scenario(args.stages[0])
    plan = selfplay.plan_for(args.experiment, config, args.learners, args.team_modules)
    background = selfplay.background_population(args.background, config)
    codecs, histories = seat_codecs(args, plan), seat_histories(args, plan)
    scale_path = run / "observation_scale.json"  # learning seat -> scale (a list alone: the allocator's)
    if scale_path.is_file():
        saved = json.loads(scale_path.read_text())
        scales = {s: np.asarray(v, dtype=np.float32) for s, v in (saved if isinstance(saved, dict) else {ALLOCATOR: saved}).items()}
    else:
        samples = selfplay.sample_observations(args.stages, args.seed)
        # a league shares team seats between learned and scripted members: exact (power-of-two) scales
        fit = (lambda x: exact_scale(observation_scale(x))) if args.experiment == "league" else observation_scale
        scales = module_scales(plan, samples, fit)
        scale_path.write_text(json.dumps({s: v.tolist() for s, v in scales.items()}))
    print(f"learning: {plan.describe()}")

    # ---- Ray: a cluster if asked for, else local with what this machine has
    address = args.address or os.environ.get("RAY_ADDRESS")
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level="ERROR",
                 **({} if address else {"num_cpus": os.cpu_count()}))
    algo = build_algorithm(args, scales, anchors, stage=state.stage)
    checkpoint = run / "checkpoint"
    if args.resume is not None and checkpoint.is_dir():
        algo.restore_from_path(str(checkpoint))
    else:
        favour_zero_code(algo, args)
    if not args.mixed:
        set_scenario_everywhere(algo, args.stages[state.stage])
    writer = SummaryWriter(str(run / "tb"))
    print(f"run {run}: {args.experiment} on {args.stages[state.stage]}, {args.algo}, "
          f"{args.num_envs_per_env_runner} envs/runner, batch {args.train_batch_size}")

    # ---- train, evaluate, checkpoint
    start = launched - state.seconds
    session_iterations = 0
    while True:
        elapsed = time.perf_counter() - start
        # at least one iteration per session, so a checkpoint is always written
        out_of_budget = elapsed >= args.minutes * 60 and session_iterations > 0
        if out_of_budget or (args.iterations is not None and session_iterations >= args.iterations):
            break
        result = algo.train()
        state.iterations += 1
        session_iterations += 1
        state.env_steps = int(result.get("num_env_steps_sampled_lifetime", state.env_steps))
        scalars = _scalars(result)
        if "league" in result:
            with (run / "league.json").open("a", encoding="utf-8") as log:  # one line per iteration
                log.write(json.dumps({"iteration": state.iterations, **result["league"]}) + "\n")
        if result.get("league", {}).get("snapshot"):
            print(f"  snapshot {result['league']['snapshot']} joins the mix: learner {result['league']['learner_return']:.2f}"
                  f" vs mix {result['league']['mix_return']:.2f}")
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
        # a mix is judged on every tier (its score: the mean), a stage on itself
        scenarios = args.stages if args.mixed else (args.stages[state.stage],)
        scenario = "mixed" if args.mixed else scenarios[0]
        networks = selfplay.seat_networks(algo, plan)  # what the checkpoint stores is what is evaluated
        row = {"iteration": state.iterations, "env_steps": state.env_steps, "scenario": scenario,
               "train_return": scalars["return_mean"]}
        if "league" in result:
            row["league"] = result["league"]  # the mix after this iteration; league.json has every one
        if plan.seats != [ALLOCATOR]:  # several learners: they play the held-out seeds together
            returns, ratios = selfplay.held_out_seat_returns(networks, scales, codecs, scenarios[0], eval_seeds,
                                                             background, histories)
            row["returns"] = returns
            if ratios:
                row["declared_to_need"] = ratios  # learned teams' bluffing (commons-arena analyze plots it)
            for seat, value in returns.items():
                writer.add_scalar(f"eval/return/{seat}", value, state.env_steps)
            print(f"  eval on {len(eval_seeds)} held-out seeds of {scenarios[0]}, learners together: "
                  + ", ".join(f"{seat} {value:.2f}" for seat, value in returns.items()))
        if ALLOCATOR in networks:  # the allocator alone against each scenario's own population
            reports = {sc: held_out_report(held_out_returns(networks[ALLOCATOR], args, scales[ALLOCATOR], sc, eval_seeds),
                                           references[sc]) for sc in scenarios}
            score = float(np.mean([r["score"] for r in reports.values()]))
            eval_return = float(np.mean([r["return"] for r in reports.values()]))
            if args.mixed:
                row.update({f"score/{sc}": r["score"] for sc, r in reports.items()})
            for sc, r in reports.items():
                print(f"  eval on {len(eval_seeds)} held-out seeds of {sc}: {_describe(r)}")
        else:  # no allocator learns: the learners' mean held-out return ranks checkpoints
            eval_return = score = float(np.mean(list(row["returns"].values())))
        state.seconds = time.perf_counter() - start
        row.update({"minutes": state.seconds / 60, "eval_return": eval_return, "score": score})
        state.history.append(row)
        writer.add_scalar("eval/normalised_score", score, state.env_steps)
        writer.add_scalar("eval/return", eval_return, state.env_steps)
        algo.save_to_path(str(checkpoint))  # RLlib's full state (pickles): only --resume reads it
        # the sidecar names a scenario whose spaces the networks fit (every tier shares them)
        saved_config = commons_arena.load_scenario(scenarios[0])
        if plan.seats != [ALLOCATOR]:
            selfplay.save_policy_set(checkpoint, networks, saved_config, scales, codecs, histories)
        elif isinstance(networks[ALLOCATOR], PolicyNetwork):
            save_policy(checkpoint, networks[ALLOCATOR], saved_config, ALLOCATOR, scales[ALLOCATOR],
                        codec=codecs.get(ALLOCATOR), history=histories.get(ALLOCATOR, 1))
        else:
            print("  (an LSTM module has no data-only export yet: no learned:<dir> files written)")
        # `checkpoint` is the latest (resume continues from it); `best` the best held-out
        # score on the current stage (a report should then use seeds other than these).
        new_stage = len(state.history) > 1 and state.history[-2]["scenario"] != scenario
        if score > state.best_score or new_stage:
            state.best_score = score
            shutil.rmtree(run / "best", ignore_errors=True)
            shutil.copytree(checkpoint, run / "best")
        (run / "state.json").write_text(json.dumps(asdict(state), indent=1))
        (run / "history.json").write_text(json.dumps(state.history, indent=1))
        _plot(learning_curve, state.history, anchors, run / "learning_curve.png", allocator=ALLOCATOR in plan.seats)
    if ALLOCATOR in plan.seats and (len(args.stages) > 1 or args.iterations is None):
        final = {}
        for scenario in args.stages:
            returns = held_out_returns(allocator_network(algo), args, scales[ALLOCATOR], scenario, eval_seeds)
            final[scenario] = held_out_report(returns, references[scenario])
            print(f"final on {scenario}: {_describe(final[scenario])}")
        (run / "final_scores.json").write_text(json.dumps(final, indent=1))
    writer.close()
    algo.stop()
    print(f"checkpoints: {checkpoint} (latest), {run / 'best'} (best held-out score {state.best_score:.3f})")
    print(f"use one as: learned:{run / 'best'}")
    return checkpoint


# On resume the saved run's arguments win, except these, which belong to this session.
SESSION_ARGS = ("minutes", "iterations", "quiet", "address", "resume")
# A run saved before one of these flags existed trained with this value (RLlib's default then):
# resuming it keeps that, not today's default.
VALUE_BEFORE_FLAG: dict[str, Any] = {"gae_lambda": 1.0, "vf_clip": 10.0}


def saved_args(run: Path) -> dict[str, Any]:
    """A run folder's ``args.json``, refused (ValueError) unless it is an object of TrainArgs' fields with
    values of their types: a hand-made or damaged file stops ``--resume`` before anything is written."""
    path = Path(run) / "args.json"
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is not JSON ({err}): not a run folder of `commons-arena train`") from None
    defaults = {f.name: getattr(TrainArgs(), f.name) for f in fields(TrainArgs)}
    unknown = sorted(set(saved) - set(defaults)) if isinstance(saved, dict) else []
    if not isinstance(saved, dict) or "experiment" not in saved or unknown:
        what = f"unknown key(s) {unknown[:5]}" if unknown else "no \"experiment\"" if isinstance(saved, dict) \
            else f"a JSON {type(saved).__name__}, not an object"
        raise ValueError(f"{path} is not the arguments of a `commons-arena train` run: {what}")
    for key, value in saved.items():
        default = defaults[key]
        kind = (int, float) if isinstance(default, float) else list if isinstance(default, tuple) else str \
            if isinstance(default, Path) else type(default)
        if default is not None and value is not None and (not isinstance(value, kind) or isinstance(value, bool) is not
                                                          isinstance(default, bool)):
            raise ValueError(f"{path}: {key} must be a {'list' if kind is list else type(default).__name__}, got {value!r:.60}")
    return saved


def _resumed_args(saved: dict[str, Any], current: TrainArgs) -> TrainArgs:
    values: dict[str, Any] = {}
    for f in fields(TrainArgs):
        if f.name in SESSION_ARGS:
            values[f.name] = getattr(current, f.name)
        elif f.name not in saved:
            values[f.name] = VALUE_BEFORE_FLAG.get(f.name, getattr(current, f.name))
        elif f.name == "out":
            values[f.name] = Path(saved[f.name])
        elif f.name == "hidden":
            values[f.name] = tuple(saved[f.name])
        else:
            values[f.name] = saved[f.name]
    return TrainArgs(**values)


def _describe(report: dict[str, Any]) -> str:
    text = f"return {report['return']:.2f}, normalised score {report['score']:.3f}, ratio {report['ratio']:.3f}"
    if "best_baseline" in report:
        text += (f"; vs best baseline {report['best_baseline']} ({report['best_baseline_return']:.2f}): "
                 f"{report['diff_vs_best']:+.2f} ± {report['diff_ci95']:.2f} (95% CI, paired)")
    return text


def _plot(learning_curve: Any, history: list[dict[str, Any]], anchors: dict[str, dict[str, float]], path: Path,
          allocator: bool = True) -> None:
    scenario = history[-1]["scenario"]
    if not allocator:  # each learning seat's held-out return
        runs = {seat: [{"env_steps": r["env_steps"], "return": r["returns"][seat]} for r in history]
                for seat in history[-1]["returns"]}
        learning_curve(runs, None, path, y="return",
                       title=f"{scenario}: learning seats' mean return on held-out seeds (playing together)")
        return
    tiers = [scenario] if scenario in anchors else list(anchors)  # a mix: baselines' mean score over its tiers
    baselines = {b: float(np.mean([normalised_score(anchors[t][b], anchors[t]["random"], anchors[t]["oracle"])
                                   for t in tiers])) for b in BASELINE_ALLOCATORS}
    learning_curve({"learned allocator": [{"env_steps": r["env_steps"], "score": r["score"]} for r in history]},
                   baselines, path, title=f"{scenario if scenario in anchors else 'mean of ' + ', '.join(tiers)}: held-out normalised score")
