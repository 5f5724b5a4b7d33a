"""The ``commons-arena`` command line.

Each subcommand is a dataclass of arguments (one docstring per field, shown by ``--help``)
parsed by tyro; heavy imports (Ray, torch, matplotlib) happen inside the subcommand that
needs them, so ``commons-arena scenarios`` stays instant.

One error path for every subcommand (:func:`main`): a subcommand may define ``validate()``,
run before ``run()`` so bad input is refused before any work starts; any domain error
either raises (``ValueError`` and its subclasses: ``ScenarioError``, ``CheckpointError``,
``PopulationError``, :class:`UsageError`; ``OSError``) becomes one line on stderr and exit
code 2, no traceback. ``--debug`` (anywhere on the line) shows the traceback instead. A new
subcommand gets all of this by being added to :data:`Subcommand`; files it writes go through
:func:`refuse_overwrite` so an existing file is only replaced with ``--force``.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import sqlite3
import sys
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import tyro

import commons_arena
from experiments.evaluation.evaluate import BASELINE_ALLOCATORS, validate_lineup
from experiments.seeds import MAX_SEED, SEED_RANGES, validate_seeds
from experiments.training.args import TrainArgs
from experiments.training.hash_seed import pin_hash_seed

PROG = "commons-arena"
DEBUG_FLAG = "--debug"
EXIT_DOMAIN_ERROR = 2  # like argparse's usage errors; `verify`: the recording cannot be checked
EXIT_BUG = 3  # an error the command did not foresee (a traceback): never 1, which `verify` uses for "differs"
MAX_SEEDS = 100_000  # episodes per scenario and policy in one command (evaluate, tournament flags, analyze)


class UsageError(ValueError):
    """A command-line input that cannot work; the message names what to fix."""


def _same_file(a: Path, b: Path) -> bool:
    """Whether two paths are one file: by identity (device and inode: a hard link, a symlink, another
    spelling), or by resolved name when the output does not exist yet."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return a.resolve() == Path(b).resolve()


def refuse_overwrite(path: Path, force: bool, inputs: Iterable[Path] = (), what: str = "file") -> None:
    """The one rule for every output path (see docs/limits.md).

    Never one of the command's ``inputs`` (by file identity, with or without ``--force``); an
    existing file, or a folder that holds anything, only with ``--force``; an output file's
    folder must exist (nothing creates it silently); a folder output is a folder."""
    for source in inputs:
        if _same_file(path, Path(source)):
            raise UsageError(f"{path} is also the input {source}: writing there would destroy it; choose another "
                             "output")
    if what == "file":
        if path.is_dir():
            raise UsageError(f"{path} is a folder; give a file name")
        if not path.parent.is_dir():
            raise UsageError(f"the folder {path.parent} does not exist; create it first or choose another output")
    elif path.exists() and not path.is_dir():
        raise UsageError(f"{path} is a file; give a folder for the output")
    exists = path.is_file() or (path.is_dir() and any(path.iterdir()))
    if exists and not force:
        kind = "holds files" if path.is_dir() else "exists"
        raise UsageError(f"{path} already {kind}; pass --force to overwrite, or choose another output")


def check_number(flag: str, value: float, low: float, high: float) -> None:
    """A flag's number: finite and in [low, high] (the bounds docs/limits.md lists), before any work."""
    if isinstance(value, float) and not math.isfinite(value) or not low <= value <= high:
        raise UsageError(f"{flag} must be a finite number in [{_num(low)}, {_num(high)}], got {value}")


def _num(value: float) -> str:
    return str(value) if isinstance(value, int) else f"{value:g}"


def _scenarios(names: tuple[str, ...]) -> list[str]:
    return commons_arena.list_scenarios() if names == ("all",) else list(names)


def _seeds(first: int, count: int) -> list[int]:
    check_number("--seeds", count, 1, MAX_SEEDS)  # before the list is built
    check_number("--first-seed", first, 0, MAX_SEED - count + 1)
    seeds = list(range(first, first + count))
    validate_seeds(seeds)
    return seeds


# The values of `train --config FILE` (read before parsing): the defaults its flags override.
_train_defaults: TrainArgs | None = None


def _train_args() -> TrainArgs:
    return _train_defaults if _train_defaults is not None else TrainArgs()


def _config_path(args: list[str]) -> Path | None:
    """The experiment file of a ``train --config FILE`` command line (None for any other)."""
    if not args or args[0] != "train":
        return None
    for i, token in enumerate(args):
        if token.startswith("--config="):
            return Path(token.split("=", 1)[1])
        if token == "--config":
            if i + 1 >= len(args):
                raise UsageError("--config needs an experiment file (TOML)")
            return Path(args[i + 1])
    return None


@dataclass
class Scenarios:
    """List the shipped scenarios with their content hashes and descriptions."""

    json: bool = False
    """print JSON instead of a table"""

    def run(self) -> None:
        rows = []
        for name in commons_arena.list_scenarios():
            cfg = commons_arena.load_scenario(name)
            rows.append(
                {
                    "name": name,
                    "hash": cfg.content_hash,
                    "difficulty": cfg.difficulty or "-",
                    "teams": len(cfg.teams),
                    "ticks": cfg.max_ticks,
                    "description": " ".join(cfg.description.split()),
                }
            )
        if self.json:
            print(json.dumps(rows, indent=2))
            return
        for row in rows:
            print(f"{row['name']:<18} {row['hash']}  {row['difficulty']:<9} {row['teams']} teams, {row['ticks']} ticks")
            print(f"    {row['description']}")


@dataclass
class Play:
    """Play one episode and print each tick (ansi) and the final totals.

    Every agent acts uniformly at random unless ``--population`` names policies (a roster
    TOML file, where any entry may be ``learned:<checkpoint dir>``, or ``default`` for the
    scenario's own background population). Every seat plays as background of the
    focal/background substrate (policies.focal), so ``--seed N`` is the same episode as
    ``run_episode(env, population, seed=N)``.
    """

    scenario: str = "standard"
    """scenario name or path to a TOML file"""
    seed: int = 0
    """episode seed (all randomness flows from it)"""
    population: str | None = None
    """roster TOML, or 'default' for the scenario's population; omit for random actions"""
    quiet: bool = False
    """print only the final totals"""
    record: Path | None = None
    """write the episode as JSON lines here (view it with `commons-arena replay`)"""
    force: bool = False
    """overwrite an existing --record file"""

    def validate(self) -> None:
        check_number("--seed", self.seed, 0, MAX_SEED)
        config = commons_arena.load_scenario(self.scenario)
        if self.population not in (None, "default"):
            from policies.population import Population

            Population.from_toml(self.population, config).build(config, env=commons_arena.parallel_env(config))
        if self.record is not None:
            inputs = [Path(p) for p in (self.scenario, self.population) if p and Path(p).is_file()]
            refuse_overwrite(self.record, self.force, inputs=inputs)

    def run(self) -> dict[str, dict[str, float]]:
        from policies.focal import FocalEnv

        base = commons_arena.parallel_env(scenario=self.scenario, render_mode=None if self.quiet else "human")
        print(f"scenario {base.config.name} (hash {base.config.content_hash}), seed {self.seed}")
        env = base
        if self.record is not None:
            from commons_arena.recording import RecordEpisode

            env = RecordEpisode(base, self.record)
        # every seat is background: the same seed plays the same episode as run_episode
        episode = FocalEnv(env, (), self._background(base))
        episode.reset(seed=self.seed)
        summary = {agent: info["episode"] for agent, info in episode.play_out().items()}
        print("\nfinal totals")
        for agent, totals in summary.items():
            terms = ", ".join(f"{k.removeprefix('term/')} {v:+.1f}" for k, v in totals.items() if k.startswith("term/"))
            print(f"  {agent:<10} return {totals['return']:+8.2f}   ({terms})")
        if self.record is not None:
            env.close()
            print(f"recorded to {self.record}")
        stats = summary[base.possible_agents[0]]
        print(
            f"  jobs completed {stats['completed']:.0f}, missed {stats['missed']:.0f}; spend {stats['spend']:.1f}; "
            f"idle GPU-ticks {stats['idle_gpu_ticks']:.0f}; carbon {stats['carbon_kg']:.1f} kg; "
            f"fairness {stats['fairness']:.3f}"
        )
        return summary

    def _background(self, env):
        from policies.base import uniform_random_policies
        from policies.population import Population

        if self.population is None:
            return uniform_random_policies(env, env.possible_agents)
        if self.population == "default":
            return Population.default(env.config)
        return Population.from_toml(self.population, env.config)


@dataclass
class Evaluate:
    """Table per scenario x allocator (mean ± 95% CI, normalised score, statistics) and the
    misreport-gain table; written as CSV + markdown with a score plot."""

    scenarios: tuple[str, ...] = ("standard",)
    """scenario names or TOML paths; 'all' for every shipped scenario"""
    allocators: tuple[str, ...] = BASELINE_ALLOCATORS
    """allocator policies (random and oracle always run: they anchor the score); a learned
    allocator is 'learned:<checkpoint dir>'"""
    seeds: int = 20
    """number of seeds"""
    first_seed: int = SEED_RANGES["evaluate"].first
    """seeds are first_seed .. first_seed + seeds - 1 (default: the evaluate range, experiments/seeds.py)"""
    misreport: bool = True
    """also compute each team's misreport gain (greedy_bluffer minus truthful)"""
    out: Path = Path("results/evaluation")
    """output folder"""
    record: bool = False
    """also record every episode: <out>/recordings/<scenario>__<allocator>.jsonl"""
    force: bool = False
    """write into --out even if it already holds results (they are overwritten)"""

    def validate(self) -> None:
        validate_lineup(_scenarios(self.scenarios), list(self.allocators), _seeds(self.first_seed, self.seeds))
        refuse_overwrite(self.out, self.force, what="folder")

    def run(self):
        from experiments.evaluation.evaluate import evaluate, write_tables
        from experiments.evaluation.tables import markdown_table

        scenarios, seeds = _scenarios(self.scenarios), _seeds(self.first_seed, self.seeds)
        for name in scenarios:
            cfg = commons_arena.load_scenario(name)
            print(f"scenario {cfg.name}: hash {cfg.content_hash}")
        result = evaluate(scenarios, list(self.allocators), seeds, misreport=self.misreport,
                          record_dir=self.out / "recordings" if self.record else None)
        print(markdown_table(result.rows))
        if result.misreport:
            print("\nmisreport gain (team return as greedy_bluffer minus as truthful)")
            print(markdown_table(result.misreport))
        for path in write_tables(result, self.out):
            print(f"wrote {path}")
        return result


@dataclass
class Tournament:
    """Every entrant in the focal seat on every (scenario, background, seed) cell: scores with 95% CIs,
    win matrix, openskill ratings, meta-game (Nash) rankings and the cross-play heatmap.

    Give a roster file (``commons-arena tournament ROSTER.toml``, format in
    experiments/evaluation/roster.py) or the flags (allocator seat, each scenario's own
    background). Episodes are stored in a SQLite file as they finish; rerunning the same
    command plays only the missing ones.
    """

    roster: tyro.conf.Positional[Path | None] = None
    """roster TOML (seat, entrants, backgrounds, scenarios, seeds); omit to use the flags below"""
    scenarios: tuple[str, ...] | None = None
    """without a roster: scenario names or TOML paths, 'all' for every shipped one (default standard elevated crisis)"""
    allocators: tuple[str, ...] | None = None
    """without a roster: allocators besides random and oracle (always in); 'learned:<checkpoint dir>' for a trained
    one (default: the scripted baselines)"""
    seeds: int | None = None
    """without a roster: matches per scenario (default 20)"""
    first_seed: int | None = None
    """without a roster: held-out seeds first_seed .. first_seed + seeds - 1 (default 5000, the tournament range of
    experiments/seeds.py; training never uses them)"""
    out: Path | None = None
    """output folder (default results/tournament, or results/tournament/<roster name> with a roster)"""
    db: Path | None = None
    """results database (default <out>/results.sqlite)"""
    workers: int | None = None
    """parallel workers (default: every CPU); 1 runs in-process without Ray"""
    address: str | None = None
    """join this Ray cluster (RAY_ADDRESS does the same); default: start Ray locally"""
    allow_changed: bool = False
    """play a changed scenario / checkpoint / background beside its old stored rows instead of refusing"""
    ray_min_seconds: float = 15.0
    """below this much estimated single-core work, play in-process: Ray's start-up would cost more"""
    progress: bool = True
    """show the progress bar"""
    force: bool = False
    """write into an --out folder that holds other files but no tournament results (they may be overwritten)"""

    def build_roster(self):
        from experiments.evaluation.roster import load_roster
        from experiments.evaluation.tournament import flag_roster

        flags = {"--scenarios": self.scenarios, "--allocators": self.allocators, "--seeds": self.seeds,
                 "--first-seed": self.first_seed}
        if self.roster is not None:
            given = [name for name, value in flags.items() if value is not None]
            if given:
                raise UsageError(f"give a roster file or {', '.join(given)}, not both (the roster names its own)")
            return load_roster(self.roster)
        first = SEED_RANGES["tournament"].first if self.first_seed is None else self.first_seed
        seeds = _seeds(first, 20 if self.seeds is None else self.seeds)
        return flag_roster(_scenarios(self.scenarios or ("standard", "elevated", "crisis")),
                           list(self.allocators if self.allocators is not None else BASELINE_ALLOCATORS), seeds)

    def output(self) -> Path:
        if self.out is not None:
            return self.out
        return Path("results/tournament") / self.roster.stem if self.roster else Path("results/tournament")

    def validate(self) -> None:
        """The roster (every policy, background, scenario and checkpoint against every scenario), the
        workers, and the output: a folder of earlier tournament results is resumed, any other is refused."""
        if self.workers is not None:
            check_number("--workers", self.workers, 1, MAX_WORKERS)
        check_number("--ray-min-seconds", self.ray_min_seconds, 0, 86_400)
        self._roster = self.build_roster()
        out = self.output()
        db = self.db if self.db is not None else out / "results.sqlite"
        inputs = [self.roster] if self.roster is not None else []
        for source in inputs:  # the roster is neither the database nor inside the folder rewritten
            if _same_file(db, source):
                raise UsageError(f"--db {db} is the roster file; choose another database")
        if db.exists():  # resumed: it must be a results database, not any file
            check_database(db)
        elif self.db is not None:
            refuse_overwrite(db, force=False)  # a --db file's folder must exist (--out is created)
        # the folder's tables are rewritten: only the default database's own folder is resumed without --force
        if not (db.is_file() and _same_file(db, out / "results.sqlite")):
            refuse_overwrite(out, self.force, inputs=inputs, what="folder")

    def run(self):
        from experiments.evaluation.engine import PlayOptions
        from experiments.evaluation.tables import markdown_table
        from experiments.evaluation.tournament import run_tournament

        roster = getattr(self, "_roster", None) or self.build_roster()  # main() validated it already
        out = self.output()
        for cfg in roster.scenarios:
            print(f"scenario {cfg.name}: hash {cfg.content_hash}")
        print(f"{roster.seat} seat: {len(roster.players)} players x {len(roster.scenarios)} scenarios x "
              f"{len(roster.backgrounds)} backgrounds x {len(roster.seeds)} seeds = {roster.episodes} episodes")
        options = PlayOptions(workers=self.workers, address=self.address, allow_changed=self.allow_changed,
                              progress=self.progress, ray_min_seconds=self.ray_min_seconds)
        result = run_tournament(roster, out, db=self.db, options=options)
        if result.play.played:
            print(f"played {result.play.played} episodes in {result.play.seconds:.1f} s "
                  f"({result.play.episodes_per_second:.0f} episodes/s, {result.play.mode}) into {result.store}")
        print(markdown_table(result.aggregates.scores))
        print("\nstandings")
        print(markdown_table(result.aggregates.standings))
        for path in result.written:
            print(f"wrote {path}")
        return result


MAX_WORKERS = 1024


def check_database(path: Path) -> None:
    """An existing ``--db`` must be a SQLite file (the first 16 bytes say so), never another kind of file."""
    if not path.is_file():
        raise UsageError(f"--db {path} is not a file")
    with open(path, "rb") as fh:
        header = fh.read(16)
    if header and header != b"SQLite format 3\x00":
        raise UsageError(f"--db {path} is not a results database (not SQLite); choose another file")


@dataclass
class Train:
    """Train seats with RLlib (allocator, any --learners, selfplay, league; see experiments/training/train.py)."""

    args: Annotated[TrainArgs, tyro.conf.arg(name="")] = field(default_factory=lambda: _train_args())
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
        if len(set(self.train_seeds)) != len(self.train_seeds) or any(s < 0 for s in self.train_seeds):
            raise UsageError(f"--train-seeds must be distinct non-negative seeds, got {list(self.train_seeds)}")
        if self.train_seeds and self.args.resume is not None:
            raise UsageError("--train-seeds starts new runs; --resume continues one (resume each seed's folder)")

    def run(self):
        if self.train_seeds:
            from experiments.training.seeds import train_seeds

            return train_seeds(self.args, self.train_seeds, self.compare_seeds)
        from experiments.training.train import train

        return train(self.args)


@dataclass
class Exploit:
    """How exploitable each allocator is: train a best-response team (and broker) against it and
    print what it takes, paired with 95% CIs, beside the best scripted policy (experiments/evaluation/exploit.py)."""

    allocators: tuple[str, ...] = ("proportional", "planner", "best_fit")
    """allocators to exploit (any scripted one, or 'learned:<checkpoint dir>')"""
    scenarios: tuple[str, ...] = ("standard", "crisis")
    """scenarios (names or TOML paths)"""
    seat: str = "search"
    """the team seat that learns to bluff"""
    broker: bool = False
    """also train a best-response broker against each allocator"""
    iterations: int = 20
    """training iterations per best response (reproducible budget)"""
    minutes: float = 10.0
    """wall-clock cap per best response (whichever of --iterations and --minutes comes first)"""
    seeds: int = 100
    """held-out seeds of every paired evaluation"""
    first_seed: int = SEED_RANGES["exploit"].first
    """held-out seeds first_seed .. first_seed + seeds - 1 (the exploit range of experiments/seeds.py)"""
    out: Path = Path("results/exploit")
    """output folder: exploit.md / .csv / .png and one folder per cell (its checkpoint plays as learned:)"""
    force: bool = False
    """write into an --out folder that already holds files"""
    train: Annotated[TrainArgs, tyro.conf.arg(name="train")] = field(default_factory=lambda: _train_args())
    """training settings of every best response (--train.lr, --train.seat-codec, ...; experiment, learners,
    scenario, background, iterations, minutes, out and the report seeds are set per cell)"""

    def validate(self) -> None:
        if not self.allocators or not self.scenarios:
            raise UsageError("--allocators and --scenarios need at least one name each")
        if self.seeds < 2:
            raise UsageError(f"--seeds must be at least 2 (a paired CI), got {self.seeds}")
        if self.first_seed < 0:
            raise UsageError(f"--first-seed must be non-negative, got {self.first_seed}")
        self.train_args().validate()
        for scenario in self.scenarios:
            config = commons_arena.load_scenario(scenario)
            if self.seat == "allocator" or self.seat not in config.agents:
                raise UsageError(f"--seat must be a team or broker seat of {config.name!r} "
                                 f"({[a for a in config.agents if a != 'allocator']}), got {self.seat!r}")
        refuse_overwrite(self.out, self.force, what="folder")

    def train_args(self) -> TrainArgs:
        from dataclasses import replace

        return replace(self.train, iterations=self.iterations, minutes=self.minutes, report_seeds=self.seeds,
                       report_first_seed=self.first_seed)

    def run(self):
        from experiments.evaluation.exploit import exploit

        seats = [self.seat, *(["broker"] if self.broker and self.seat != "broker" else [])]
        return exploit(self.scenarios, self.allocators, seats, _seeds(self.first_seed, self.seeds),
                       self.train_args(), self.out)


@dataclass
class ArmsRace:
    """The arms race, two rounds: a best-response bluffer against an allocator, then the allocator
    continued against that bluffer (in a share of episodes); paired report (experiments/evaluation/arms_race.py)."""

    allocator: str = "planner"
    """round 1's allocator A1: a scripted one, or 'learned:<checkpoint dir>' (round 2 continues its weights)"""
    scenario: str = "crisis"
    """where the bluffer learns and its gain is measured"""
    seat: str = "search"
    """the team seat of the bluffer"""
    round1_iterations: int = 40
    """training iterations of the bluffer B1 (reproducible budget)"""
    round2_iterations: int = 60
    """training iterations of the allocator A2"""
    minutes: float = 15.0
    """wall-clock cap of each round's training (whichever of the iterations and this comes first)"""
    share: float = 0.5
    """share of round 2's training episodes in which B1 plays the seat (the rest: each scenario's own population)"""
    seeds: int = 100
    """held-out seeds of every paired comparison"""
    first_seed: int = SEED_RANGES["arms_race"].first
    """held-out seeds first_seed .. first_seed + seeds - 1 (experiments/seeds.py)"""
    out: Path = Path("results/arms_race")
    """output folder: arms_race.md / .csv / .png / .json, round1/, round2/, play/"""
    force: bool = False
    """write into an --out folder that already holds files"""
    round1_lr: float = 1e-3
    """the bluffer's learning rate (a best response from a uniform start: docs/negotiation.md)"""
    round2_experiment: Literal["allocator_ppo", "allocator_mixed", "allocator_curriculum"] = "allocator_mixed"
    """how the allocator continues: on --scenario alone, or on every tier (the main job's experiment)"""
    train: Annotated[TrainArgs, tyro.conf.arg(name="train")] = field(default_factory=lambda: _train_args())
    """training settings of both rounds (--train.seat-codec, --train.num-envs-per-env-runner, ...; experiment,
    learners, scenario, backgrounds, budgets and out are set per round; a learned A1's codec, history and
    hidden sizes are taken from its checkpoint)"""

    def validate(self) -> None:
        if self.round1_iterations < 1 or self.round2_iterations < 1:
            raise UsageError("--round1-iterations and --round2-iterations must be at least 1")
        if not 0 < self.share < 1:
            raise UsageError(f"--share must be strictly between 0 and 1, got {self.share}")
        if self.seeds < 2:
            raise UsageError(f"--seeds must be at least 2 (a paired CI), got {self.seeds}")
        validate_lineup([self.scenario], [self.allocator], _seeds(self.first_seed, self.seeds))
        config = commons_arena.load_scenario(self.scenario)
        if self.seat not in config.team_names:
            raise UsageError(f"--seat must be a team seat of {config.name!r} ({list(config.team_names)}), got {self.seat!r}")
        for args in self.rounds():
            args.validate()
        refuse_overwrite(self.out, self.force, what="folder")

    def rounds(self) -> tuple[TrainArgs, TrainArgs]:
        return (replace(self.train, lr=self.round1_lr, iterations=self.round1_iterations, minutes=self.minutes,
                        report_seeds=self.seeds, report_first_seed=self.first_seed),
                replace(self.train, experiment=self.round2_experiment, iterations=self.round2_iterations,
                        minutes=self.minutes))

    def run(self):
        from experiments.evaluation.arms_race import arms_race

        round1, round2 = self.rounds()
        return arms_race(self.allocator, self.scenario, self.seat, _seeds(self.first_seed, self.seeds), round1, round2,
                         self.share, self.out)


@dataclass
class Replay:
    """Turn a recording (JSON lines from RecordEpisode) into one self-contained HTML page."""

    recording: tyro.conf.Positional[Path]
    """the .jsonl recording"""
    output: Annotated[Path | None, tyro.conf.arg(aliases=("-o",))] = None
    """HTML file to write (default: the recording's name with .html)"""
    episode: int | None = None
    """only this episode of the recording (index in the file; default: all, with a selector)"""
    force: bool = False
    """overwrite an existing output file"""

    @property
    def target(self) -> Path:
        return self.output if self.output is not None else self.recording.with_suffix(".html")

    def validate(self) -> None:
        if not self.recording.is_file():
            raise UsageError(f"recording not found: {self.recording}")
        if self.episode is not None:
            check_number("--episode", self.episode, 0, 1_000_000)
        refuse_overwrite(self.target, self.force, inputs=[self.recording])

    def run(self) -> Path:
        from experiments.viewing.replay import write_replay

        path = write_replay(self.recording, self.target, episode=self.episode)
        print(f"wrote {path}")
        return path


@dataclass
class Serve:
    """Serve the arena over HTTP/WebSocket (openenv's /reset, /step, /state, /ws), MCP tools at /mcp, a page at /play.

    Clients play the chosen seats; every other seat is played by the population. Needs the
    ``serve`` extra (pip install 'commons-arena[serve]')."""

    scenario: str = "standard"
    """default scenario (name or TOML path); clients may pick any shipped scenario by name"""
    seats: tuple[str, ...] = ("allocator",)
    """seats a client plays unless its reset names others"""
    population: str | None = None
    """roster TOML for the other seats (may name learned checkpoints); default: each scenario's own"""
    host: str = "127.0.0.1"
    """address to listen on (0.0.0.0 exposes the server to the network)"""
    port: int = 8000
    """port (0: any free port, printed at start)"""
    max_sessions: int = 64
    """sessions open at once"""
    idle_seconds: float = 300.0
    """close a session after this long without a request"""
    max_body_bytes: int = 65536
    """largest request body or WebSocket message"""
    log_level: str = "info"
    """uvicorn's log level ('warning' drops the access log)"""

    def validate(self) -> None:
        if not 0 <= self.port <= 65535:
            raise UsageError(f"--port must be in [0, 65535], got {self.port}")
        check_number("--max-sessions", self.max_sessions, 1, 10_000)
        check_number("--idle-seconds", self.idle_seconds, 0.1, 7 * 86_400)
        check_number("--max-body-bytes", self.max_body_bytes, 1024, 16 * 2**20)
        if self.log_level not in ("critical", "error", "warning", "info", "debug", "trace"):
            raise UsageError(f"--log-level must be one of critical, error, warning, info, debug, trace; got {self.log_level}")
        config = commons_arena.load_scenario(self.scenario)
        unknown = [s for s in self.seats if s not in config.agents]
        if unknown or not self.seats:
            raise UsageError(f"--seats must name seats of scenario {config.name!r}: {list(config.agents)}; got {list(self.seats)}")
        if self.population is not None:
            from policies.population import Population

            Population.from_toml(self.population, config)

    def run(self) -> None:
        from policies.population import Population
        from serving.app import bind, make_server
        from serving.session import Limits, ServeSettings

        population = Population.from_toml(self.population, self.scenario) if self.population else None
        settings = ServeSettings(scenario=self.scenario, seats=self.seats, population=population,
                                 limits=Limits(self.max_sessions, self.idle_seconds, self.max_body_bytes))
        sock = bind(self.host, self.port)
        print(f"commons-arena serve: http://{self.host}:{sock.getsockname()[1]} (play page: /play, MCP: /mcp)", flush=True)
        make_server(settings, host=self.host, port=self.port, log_level=self.log_level).run(sockets=[sock])


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


@dataclass
class Analyze:
    """Bluffing and pricing analysis of a training run: a PNG figure and a markdown summary
    (experiments/evaluation/analysis.py)."""

    run_folder: tyro.conf.Positional[Path]
    """the run folder `commons-arena train` wrote"""
    checkpoint: Literal["checkpoint", "best", "iteration_0"] = "checkpoint"
    """which of the run's checkpoints: 'checkpoint' (latest), 'best' or 'iteration_0' (untrained)"""
    seeds: int = 10
    """held-out episodes per comparison"""
    first_seed: int = SEED_RANGES["exploit"].first
    """held-out seeds first_seed .. first_seed + seeds - 1 (the exploit range of experiments/seeds.py)"""
    out: Path | None = None
    """output folder (default: <run>/analysis)"""
    force: bool = False
    """overwrite an earlier analysis in the output folder"""

    def validate(self) -> None:
        from experiments.evaluation.analysis import read_run

        _seeds(self.first_seed, self.seeds)
        read_run(self.run_folder, self.checkpoint)  # a run folder with that checkpoint, or says what is missing
        refuse_overwrite(self.out or self.run_folder / "analysis", self.force, what="folder")

    def run(self) -> list[Path]:
        from experiments.evaluation.analysis import analyze, summary_markdown, write_analysis

        report = analyze(self.run_folder, _seeds(self.first_seed, self.seeds), checkpoint=self.checkpoint)
        print(summary_markdown(report))
        paths = write_analysis(report, self.out or self.run_folder / "analysis")
        for path in paths:
            print(f"wrote {path}")
        return paths


@dataclass
class Verify:
    """Re-play a recording from its seeds and recorded actions. Exit 0: the same; 1: differs (the
    first tick that does is printed); 2: cannot be checked (a recording whose scenario content or
    env version changed since, or that is malformed)."""

    recording: tyro.conf.Positional[Path]
    """the .jsonl recording (e.g. tests/golden/standard.jsonl)"""
    scenario: str | None = None
    """scenario name or TOML path to play (default: the recorded scenario, by name)"""

    def run(self) -> None:
        from commons_arena.verify import verify_recording

        # a refused recording (RecordingRefused, a ValueError) exits 2 through main(); so does one whose
        # lines cannot be played at all: exit 1 means only "re-played, and it differs"
        try:
            result = verify_recording(self.recording, self.scenario)
        except (KeyError, IndexError, TypeError, AttributeError, ArithmeticError, RecursionError) as err:
            raise UsageError(f"{self.recording}: cannot be checked: malformed recording ({type(err).__name__}: "
                             f"{one_line(err)})") from None
        if not result.ok:
            print(f"DIFFERS: {self.recording}: {result.difference}")
            raise SystemExit(1)
        print(f"ok: {self.recording}: {result.episodes} episode(s), {result.ticks} ticks re-played identically")


Subcommand = (
    Annotated[Scenarios, tyro.conf.subcommand("scenarios")]
    | Annotated[Play, tyro.conf.subcommand("play")]
    | Annotated[Evaluate, tyro.conf.subcommand("evaluate")]
    | Annotated[Tournament, tyro.conf.subcommand("tournament")]
    | Annotated[Train, tyro.conf.subcommand("train")]
    | Annotated[Exploit, tyro.conf.subcommand("exploit")]
    | Annotated[ArmsRace, tyro.conf.subcommand("arms-race")]
    | Annotated[Replay, tyro.conf.subcommand("replay")]
    | Annotated[Analyze, tyro.conf.subcommand("analyze")]
    | Annotated[Serve, tyro.conf.subcommand("serve")]
    | Annotated[Verify, tyro.conf.subcommand("verify")]
    | Annotated[ConvertCheckpoint, tyro.conf.subcommand("convert-checkpoint")]
)


def _parse(args: list[str], debug: bool) -> Subcommand:
    """tyro's parse, with its boxed usage errors cut to their first line (the full box with --debug)."""
    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured):
            return tyro.cli(
                Subcommand,  # type: ignore[arg-type]
                args=args,
                prog=PROG,
                description="Play, evaluate, train and view the commons_arena game. Errors are one line; "
                f"add {DEBUG_FLAG} anywhere for the details.",
            )
    except SystemExit as exc:
        text = captured.getvalue()
        if exc.code in (0, None) or debug or not text.strip():
            sys.stderr.write(text)
            raise
        print(f"{PROG}: error: {_usage_message(text)} (see {PROG} --help)", file=sys.stderr)
        raise SystemExit(EXIT_DOMAIN_ERROR) from None


def _usage_message(boxed: str) -> str:
    """The first sentence of tyro's error report (a heading ending in ':' takes the next line).

    On a terminal tyro draws a box with the title in its top border; elsewhere it prints the
    title as a first line underlined with dashes. Both lose the frame and the title here."""
    lines: list[str] = []
    separators = 0
    for raw in boxed.splitlines():
        line = raw.strip()
        if line.startswith(("╭", "╰")):
            continue
        line = line.strip("│").strip()
        if not line:
            continue
        if set(line) <= set("-─ "):
            separators += 1
            if separators == 1 and len(lines) == 1 and not boxed.lstrip().startswith("╭"):
                lines.clear()  # the unboxed title
            continue
        lines.append(line)
    if not lines:
        return " ".join(boxed.split())
    return f"{lines[0]} {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else lines[0]


# What a user can cause and fix: reported as one line. Anything else is a bug: traceback, exit 3.
DOMAIN_ERRORS: tuple[type[BaseException], ...] = (ValueError, OSError, sqlite3.DatabaseError)


def one_line(exc: BaseException) -> str:
    """The message of ``exc`` on one line (multi-line reports joined with "; ")."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    head, rest = lines[0], lines[1:]
    return head + (" " if head.endswith(":") else "; ") + "; ".join(rest) if rest else head


def main(argv: list[str] | None = None) -> None:
    """Parse, validate, run; domain errors exit 2 with one line on stderr (see the module docstring)."""
    if argv is None:  # the whole process is this command: training pins the string-hash seed first
        pin_hash_seed(next((a for a in sys.argv[1:] if not a.startswith("-")), None))
    args = list(sys.argv[1:] if argv is None else argv)
    debug = DEBUG_FLAG in args or os.environ.get("COMMONS_ARENA_DEBUG") == "1"
    args = [a for a in args if a != DEBUG_FLAG]
    np.set_printoptions(precision=3, suppress=True)
    global _train_defaults
    try:
        config = _config_path(args)
        if config is not None:
            from experiments.training.config_file import load_experiment

            _train_defaults = load_experiment(config)
    except DOMAIN_ERRORS as exc:
        print(f"{PROG}: error: {one_line(exc)}", file=sys.stderr)
        raise SystemExit(EXIT_DOMAIN_ERROR) from None
    command = _parse(args, debug)
    try:
        validate = getattr(command, "validate", None)
        if validate is not None:
            validate()
        command.run()
    except DOMAIN_ERRORS as exc:
        if debug:
            traceback.print_exc()
        print(f"{PROG}: error: {one_line(exc)}", file=sys.stderr)
        raise SystemExit(EXIT_DOMAIN_ERROR) from None
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    except Exception:  # a bug: the traceback, and an exit code no command gives a meaning to
        traceback.print_exc()
        print(f"{PROG}: internal error (a bug; please report it with the traceback above)", file=sys.stderr)
        raise SystemExit(EXIT_BUG) from None


if __name__ == "__main__":
    main()


__all__ = ["DOMAIN_ERRORS", "MAX_SEEDS", "Path", "UsageError", "check_number", "main", "one_line", "refuse_overwrite"]
