"""The commands that train: ``train`` (one run, or one per ``--train-seeds``), ``exploit`` (best
responses against each allocator), ``arms-race`` (a bluffer, then the allocator against it), ``psro`` (rounds
of best responses and the allocator against their meta-game mixture), and
``convert-checkpoint`` (old pickled checkpoints to the data-only format ``learned:`` loads).

RLlib, Ray and torch are imported inside ``run()``: ``TrainArgs`` is light, so ``--help`` is fast."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import tyro

import commons_arena
from commands.common import MAX_SEEDS, UsageError, check_number, paired_seed_list, refuse_overwrite
from commons_arena.files import check_tree
from experiments.evaluation.evaluate import validate_lineup
from experiments.seeds import SEED_RANGES
from experiments.training.args import MAX_TRAIN_SEED, TrainArgs
from experiments.training.distil import DistilArgs
from experiments.training.kinds import ALLOCATOR_KINDS

if TYPE_CHECKING:
    AllocatorExperiment = str
else:  # the kinds that continue a learned allocator (experiments/training/kinds.py)
    AllocatorExperiment = Literal[ALLOCATOR_KINDS]

POPULATION = "population"  # arms-race --seat-otherwise: each scenario's own seat policy
MAX_DISCOUNT_SEEDS = 100_000


@dataclass
class Train:
    """Train seats with RLlib (allocator, any --learners, selfplay, league; see experiments/training/train.py)."""

    args: Annotated[TrainArgs, tyro.conf.arg(name="")] = field(default_factory=TrainArgs)
    config: Path | None = None
    """experiment file (TOML; experiments/configs/, or a run's experiment.toml): its values, then the flags
    given beside it"""
    train_seeds: tuple[int, ...] = ()
    """train once per seed, in turn, each in its own run folder under one parent, then an aggregate
    report across them (docs/training.md)"""
    compare_seeds: int = 100
    """with --train-seeds: held-out episodes per tier of the seeds' paired comparison with every scripted allocator
    (0: none)"""

    def validate(self) -> None:
        self.args.validate()
        if (len(set(self.train_seeds)) != len(self.train_seeds)
                or any(not 0 <= s <= MAX_TRAIN_SEED for s in self.train_seeds)):
            raise UsageError(f"--train-seeds must be distinct seeds in [0, {MAX_TRAIN_SEED}], got "
                             f"{list(self.train_seeds)[:10]}")
        check_number("--compare-seeds", self.compare_seeds, 0, MAX_SEEDS)
        if self.train_seeds and self.args.resume is not None:
            raise UsageError("--train-seeds starts new runs; --resume continues one (resume each seed's folder)")

    def run(self):
        if self.train_seeds:
            from experiments.studies.train_seeds import train_seeds

            return train_seeds(self.args, self.train_seeds, self.compare_seeds)
        from experiments.training.runs import run_args
        from experiments.training.setup import resolve

        setup = resolve(run_args(self.args))  # bad arguments (or a bad run folder) are refused before RLlib loads
        from experiments.training.train import train

        return train(self.args, setup)


def config_defaults(args: list[str]) -> Train | None:
    """``train``'s defaults on a ``train --config FILE`` command line: the file's values, which the
    flags beside it override (None on any other command line: the dataclasses' own defaults)."""
    path = _config_path(args)
    if path is None:
        return None
    from experiments.training.config_file import load_experiment

    return Train(args=load_experiment(path))


def _config_path(args: list[str]) -> Path | None:
    """The experiment file of a ``train --config FILE`` command line (None for any other)."""
    if not args or args[0] != "train":
        return None
    paths: list[Path] = []
    for i, token in enumerate(args):
        if token.startswith("--config="):
            paths.append(Path(token.split("=", 1)[1]))
        elif token == "--config":
            if i + 1 >= len(args):
                raise UsageError("--config needs an experiment file (TOML)")
            paths.append(Path(args[i + 1]))
    if len(paths) > 1:  # one would silently win: an experiment is one file (flags beside it override it)
        raise UsageError(f"--config is given {len(paths)} times ({', '.join(map(str, paths[:3]))}); give one "
                         "experiment file, and flags beside it for what differs")
    return paths[0] if paths else None


@dataclass
class Exploit:
    """How exploitable each allocator is: train a best response in every seat (every team and the broker)
    against it on every tier and print what it takes, paired with 95% CIs, beside the best scripted policy and
    the best fixed code; per allocator and tier its exploitability (max over team seats) beside its welfare
    (experiments/studies/exploit.py). A stored cell is skipped: rerun the same command to resume."""

    allocators: tuple[str, ...] = ("proportional", "planner", "best_fit", "drf", "max_min_fair")
    """allocators to exploit (any scripted one, or 'learned:<checkpoint dir>')"""
    scenarios: tuple[str, ...] = ("standard", "elevated", "crisis")
    """scenarios (names or TOML paths): every tier by default"""
    seats: Annotated[tuple[str, ...], tyro.conf.arg(aliases=("--seat",))] = ("all",)
    """the seats that learn: team seats and/or 'broker', or 'all' (every team seat and the broker)"""
    broker: bool = False
    """also the broker (when --seats does not name it)"""
    iterations: int = 20
    """training iterations per best response (reproducible budget)"""
    minutes: float = 10.0
    """wall-clock cap per best response (whichever of --iterations and --minutes comes first)"""
    seeds: int = 100
    """held-out seeds of every paired evaluation"""
    first_seed: int = SEED_RANGES["exploit"].first
    """held-out seeds first_seed .. first_seed + seeds - 1 (the exploit range of experiments/seeds.py)"""
    discount_seeds: int = 30
    """seeds (the first of the held-out ones, at most --seeds) of the discounting analysis per (tier, allocator,
    team seat): does the allocator discount a bluffer or serve everyone more (experiments/evaluation/discounting.py);
    0: none"""
    out: Path = Path("results/exploit")
    """output folder: exploit.md / .csv / .png, exploitability.md / .csv / .png, discounting.md / .csv and one
    folder per cell (its checkpoint plays as learned:); a folder of an earlier exploit run is resumed"""
    force: bool = False
    """write into an --out folder that holds other files"""
    train: Annotated[TrainArgs, tyro.conf.arg(name="train")] = field(default_factory=TrainArgs)
    """training settings of every best response (--train.lr, --train.seat-codec, --train.best-code-bias, ...;
    experiment, learners, scenario, background, iterations, minutes, out and the report seeds are set per cell)"""

    def validate(self) -> None:
        from experiments.studies.exploit import seats_of
        from experiments.studies.exploitability import is_exploit_folder

        if not self.allocators or not self.scenarios or not self.seats:
            raise UsageError("--allocators, --scenarios and --seats need at least one name each")
        paired_seed_list(self.first_seed, self.seeds)
        check_number("--discount-seeds", self.discount_seeds, 0, MAX_DISCOUNT_SEEDS)
        self.train_args().validate()
        validate_lineup(list(self.scenarios), list(self.allocators), paired_seed_list(self.first_seed, self.seeds))
        for scenario in self.scenarios:
            try:
                seats_of(scenario, self.learning_seats())
            except ValueError as err:
                raise UsageError(f"--seats: {err}") from None
        if not is_exploit_folder(self.out):  # an earlier exploit run's folder is resumed
            refuse_overwrite(self.out, self.force, what="folder")
        else:  # resumed: still no link inside to meet after the training
            check_tree(self.out)

    def learning_seats(self) -> list[str]:
        return [*self.seats, *(["broker"] if self.broker and "broker" not in self.seats else [])]

    def train_args(self) -> TrainArgs:
        return replace(self.train, iterations=self.iterations, minutes=self.minutes, report_seeds=self.seeds,
                       report_first_seed=self.first_seed)

    def run(self):
        from experiments.studies.exploit import exploit

        return exploit(self.scenarios, self.allocators, self.learning_seats(),
                       paired_seed_list(self.first_seed, self.seeds), self.train_args(), self.out,
                       discount_seeds=min(self.discount_seeds, self.seeds))


@dataclass
class ArmsRace:
    """The arms race, two rounds: a best-response bluffer against an allocator, then the allocator
    continued against that bluffer (in a share of episodes); paired report (experiments/studies/arms_race.py)."""

    allocator: str = "planner"
    """round 1's allocator A1: a scripted one, or 'learned:<checkpoint dir>' (round 2 continues its weights)"""
    scenario: str = "crisis"
    """where the bluffer learns and its gain is measured"""
    seat: str = "search"
    """the team seat of the bluffer"""
    round1_iterations: int = 40
    """training iterations of the bluffer B1 (reproducible budget)"""
    round2_iterations: int = 120
    """training iterations of the allocator A2"""
    round2_history: int = 4
    """ticks of observation A2 sees (a scripted A1; a learned A1 keeps its checkpoint's): a team's declarations
    over time are its evidence of bluffing"""
    minutes: float = 45.0
    """wall-clock cap of each round's training (whichever of the iterations and this comes first; the iterations
    are the budget, this only stops a machine far slower than 2 cores)"""
    share: float = 0.5
    """share of round 2's training episodes in which B1 plays the seat (the rest: --seat-otherwise)"""
    seat_otherwise: str = "truthful"
    """who plays the seat in round 2's other episodes: a team policy (scripted or 'learned:<dir>'; default the
    one B1's gain is measured against), or 'population' (each scenario's own)"""
    seeds: int = 300
    """held-out seeds of every paired comparison (B1's gain over truthful varies by ~47 per seed: 100 seeds
    give a CI of ±9, too wide to tell a half cut of a gain of ~35)"""
    first_seed: int = SEED_RANGES["arms_race"].first
    """held-out seeds first_seed .. first_seed + seeds - 1 (experiments/seeds.py)"""
    out: Path = Path("results/arms_race")
    """output folder: arms_race.md / .csv / .png / .json, round1/, round2/, play/"""
    force: bool = False
    """write into an --out folder that already holds files"""
    round1_lr: float = 1e-3
    """the bluffer's learning rate (a best response from a uniform start: docs/negotiation.md)"""
    round2_experiment: AllocatorExperiment = "allocator_mixed"
    """how the allocator continues: on --scenario alone, or on every tier (the main job's experiment)"""
    train: Annotated[TrainArgs, tyro.conf.arg(name="train")] = field(default_factory=TrainArgs)
    """training settings of both rounds (--train.seat-codec, --train.num-envs-per-env-runner, ...; experiment,
    learners, scenario, backgrounds, budgets and out are set per round; a learned A1's codec, history and
    hidden sizes are taken from its checkpoint)"""

    def validate(self) -> None:
        if self.round1_iterations < 1 or self.round2_iterations < 1:
            raise UsageError("--round1-iterations and --round2-iterations must be at least 1")
        if not 0 < self.share < 1:
            raise UsageError(f"--share must be strictly between 0 and 1, got {self.share}")
        validate_lineup([self.scenario], [self.allocator], paired_seed_list(self.first_seed, self.seeds))
        config = commons_arena.load_scenario(self.scenario)
        if self.seat not in config.team_names:
            raise UsageError(f"--seat must be a team seat of {config.name!r} ({list(config.team_names)}), got {self.seat!r}")
        if self.seat_otherwise != POPULATION:
            from policies.registry import make_policy  # not at import: --help stays fast

            try:
                make_policy(self.seat_otherwise, config, self.seat)
            except (ValueError, OSError) as err:
                raise UsageError(f"--seat-otherwise: {err} (or 'population': each scenario's own)") from None
            if self.train.background is not None:
                raise UsageError("--seat-otherwise and --train.background both choose round 2's background: "
                                 "drop --train.background, or pass --seat-otherwise population")
        for args in self.rounds():
            args.validate()
        refuse_overwrite(self.out, self.force, what="folder")

    def rounds(self) -> tuple[TrainArgs, TrainArgs]:
        return (replace(self.train, lr=self.round1_lr, iterations=self.round1_iterations, minutes=self.minutes,
                        report_seeds=self.seeds, report_first_seed=self.first_seed),
                replace(self.train, experiment=self.round2_experiment, iterations=self.round2_iterations,
                        minutes=self.minutes, history=self.round2_history))

    def run(self):
        from experiments.studies.arms_race import arms_race

        round1, round2 = self.rounds()
        otherwise = None if self.seat_otherwise == POPULATION else self.seat_otherwise
        return arms_race(self.allocator, self.scenario, self.seat, paired_seed_list(self.first_seed, self.seeds), round1, round2,
                         self.share, self.out, otherwise)


@dataclass
class Psro:
    """Rounds of training toward an allocator that is hard to exploit (PSRO-style): each round best responses in
    every team seat against the current allocator join a population, the meta-game's Nash mixture over it is
    solved, and the allocator is continued against that mixture and the scenario's own population; per round its
    exploitability, welfare on every tier and the payoff matrix (experiments/studies/psro.py). Every step is stored
    and skipped when the command reruns."""

    config: Path = Path("experiments/configs/psro.toml")
    """the experiment file (TOML: [psro], [best_response], [allocator]; experiments/configs/psro.toml)"""
    out: Path = Path("results/psro")
    """output folder: psro.md / .csv / .json / .png, A<k>/ (each allocator's exploit cells), round-<k>/ (payoff
    matrices, meta-game, mixture, the continued allocator), welfare/; a folder of an earlier psro run is resumed"""
    force: bool = False
    """write into an --out folder that holds other files"""

    def validate(self) -> None:
        from experiments.studies.psro import is_psro_folder
        from experiments.studies.psro_file import load_psro

        load_psro(self.config)
        if not is_psro_folder(self.out):  # an earlier psro run's folder is resumed
            refuse_overwrite(self.out, self.force, what="folder")
        else:  # resumed: still no link inside to meet after the training
            check_tree(self.out)

    def run(self):
        from experiments.studies.psro import psro
        from experiments.studies.psro_file import load_psro

        return psro(load_psro(self.config), self.out)


@dataclass
class Distil:
    """Teach a universal allocator with a privileged need teacher: DAgger on the cell policy
    (experiments/training/distil.py). The teacher reads each team's true need from the env's hidden
    state; the student sees the allocator's observation only and is written as learned:<out>."""

    args: Annotated[DistilArgs, tyro.conf.arg(name="")] = field(default_factory=DistilArgs)
    force: bool = False
    """write into an --out folder that holds other files (its checkpoint, distil.json and rows.npz are replaced)"""

    def validate(self) -> None:
        from experiments.training.distil import distil_scenarios

        self.args.validate()
        distil_scenarios(self.args)  # the scenarios and the hold-out rule first: before the output is looked at
        refuse_overwrite(self.args.out, self.force, what="folder")

    def run(self):
        from experiments.training.distil import distil

        return distil(self.args)


@dataclass
class ConvertCheckpoint:
    """Give an old pickled checkpoint the data-only files `learned:` loads (arena_policy.safetensors
    and a format_version 2 arena_policy.json). This UNPICKLES the checkpoint, which can run any
    code it holds: convert only checkpoints you trust, e.g. ones you trained yourself."""

    checkpoint: tyro.conf.Positional[Path]
    """the checkpoint folder (the one holding arena_policy.json)"""
    i_trust_this_checkpoint: bool = False
    """required: confirms the checkpoint comes from a source you trust"""

    def validate(self) -> None:
        if not self.i_trust_this_checkpoint:
            raise UsageError(
                f"convert-checkpoint unpickles {self.checkpoint}, which runs any code it contains; "
                "add --i-trust-this-checkpoint if you trained it yourself or otherwise trust its source"
            )

    def run(self) -> Path:
        from experiments.training.rl_modules import convert_pickled_checkpoint

        path = convert_pickled_checkpoint(self.checkpoint)
        print(f"wrote {path} and {path.with_suffix('.safetensors')}; use it as learned:{self.checkpoint}")
        return path
