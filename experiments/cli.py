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
import os
import sys
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import tyro

import commons_arena
from experiments.evaluation.evaluate import BASELINE_ALLOCATORS, validate_lineup, validate_seeds
from experiments.training.args import TrainArgs

PROG = "commons-arena"
DEBUG_FLAG = "--debug"
EXIT_DOMAIN_ERROR = 2  # like argparse's usage errors


class UsageError(ValueError):
    """A command-line input that cannot work; the message names what to fix."""


def refuse_overwrite(path: Path, force: bool, inputs: Iterable[Path] = (), what: str = "file") -> None:
    """Refuse to write ``path`` over an existing file (or a non-empty folder) unless ``force``,
    and always refuse to write over one of the command's ``inputs``."""
    for source in inputs:
        if path.resolve() == Path(source).resolve():
            raise UsageError(f"{path} is also the input: writing there would destroy it; choose another output")
    if path.is_dir() and what == "file":
        raise UsageError(f"{path} is a folder; give a file name")
    exists = path.is_file() or (path.is_dir() and any(path.iterdir()))
    if exists and not force:
        kind = "holds files" if path.is_dir() else "exists"
        raise UsageError(f"{path} already {kind}; pass --force to overwrite, or choose another output")


def _scenarios(names: tuple[str, ...]) -> list[str]:
    return commons_arena.list_scenarios() if names == ("all",) else list(names)


def _seeds(first: int, count: int) -> list[int]:
    if count < 1:
        raise UsageError(f"--seeds must be at least 1, got {count}")
    if first < 0:
        raise UsageError(f"--first-seed must be non-negative, got {first}")
    seeds = list(range(first, first + count))
    validate_seeds(seeds)
    return seeds


def _train_args() -> TrainArgs:
    return TrainArgs()


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
        if self.seed < 0:
            raise UsageError(f"--seed must be non-negative, got {self.seed}")
        config = commons_arena.load_scenario(self.scenario)
        if self.population not in (None, "default"):
            from policies.population import Population

            Population.from_toml(self.population, config).build(config, env=commons_arena.parallel_env(config))
        if self.record is not None:
            refuse_overwrite(self.record, self.force)

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
        from policies.base import UniformRandomPolicy
        from policies.population import Population

        if self.population is None:
            return {agent: UniformRandomPolicy(env.action_space(agent).nvec) for agent in env.possible_agents}
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
    first_seed: int = 1000
    """seeds are first_seed .. first_seed + seeds - 1"""
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
        from experiments.evaluation.evaluate import evaluate, markdown_table, write_tables

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
    """without a roster: held-out seeds first_seed .. first_seed + seeds - 1 (default 5000; training never uses them)"""
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
        seeds = _seeds(5000 if self.first_seed is None else self.first_seed, 20 if self.seeds is None else self.seeds)
        return flag_roster(_scenarios(self.scenarios or ("standard", "elevated", "crisis")),
                           list(self.allocators if self.allocators is not None else BASELINE_ALLOCATORS), seeds)

    def output(self) -> Path:
        if self.out is not None:
            return self.out
        return Path("results/tournament") / self.roster.stem if self.roster else Path("results/tournament")

    def validate(self) -> None:
        """The roster (every policy, background, scenario and checkpoint against every scenario), the
        workers, and the output: a folder of earlier tournament results is resumed, any other is refused."""
        if self.workers is not None and self.workers < 1:
            raise UsageError(f"--workers must be at least 1, got {self.workers}")
        self._roster = self.build_roster()
        db = self.db if self.db is not None else self.output() / "results.sqlite"
        if not db.is_file():
            refuse_overwrite(self.output(), self.force, what="folder")

    def run(self):
        from experiments.evaluation.evaluate import markdown_table
        from experiments.evaluation.tournament import run_tournament

        roster = getattr(self, "_roster", None) or self.build_roster()  # main() validated it already
        out = self.output()
        for cfg in roster.scenarios:
            print(f"scenario {cfg.name}: hash {cfg.content_hash}")
        print(f"{roster.seat} seat: {len(roster.players)} players x {len(roster.scenarios)} scenarios x "
              f"{len(roster.backgrounds)} backgrounds x {len(roster.seeds)} seeds = {roster.episodes} episodes")
        result = run_tournament(roster, out, db=self.db, workers=self.workers, address=self.address,
                                allow_changed=self.allow_changed, progress=self.progress,
                                ray_min_seconds=self.ray_min_seconds)
        if result.play.played:
            print(f"played {result.play.played} episodes in {result.play.seconds:.1f} s "
                  f"({result.play.episodes_per_second:.0f} episodes/s, {result.play.mode}) into {result.store}")
        print(markdown_table(result.aggregates.scores))
        print("\nstandings")
        print(markdown_table(result.aggregates.standings))
        for path in result.written:
            print(f"wrote {path}")
        return result


@dataclass
class Train:
    """Train seats with RLlib (allocator, any --learners, selfplay, league; see experiments/training/train.py)."""

    args: Annotated[TrainArgs, tyro.conf.arg(name="")] = field(default_factory=lambda: _train_args())

    def validate(self) -> None:
        self.args.validate()

    def run(self):
        from experiments.training.train import train

        return train(self.args)


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
        refuse_overwrite(self.target, self.force, inputs=[self.recording])

    def run(self) -> Path:
        from experiments.viewing.replay import write_replay

        path = write_replay(self.recording, self.target, episode=self.episode)
        print(f"wrote {path}")
        return path


@dataclass
class Serve:
    """Serve the arena over HTTP/WebSocket (openenv-style /reset, /step, /state, /ws) and a play page at /play.

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
        for name in ("max_sessions", "idle_seconds", "max_body_bytes"):
            if getattr(self, name) <= 0:
                raise UsageError(f"--{name.replace('_', '-')} must be positive, got {getattr(self, name)}")
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
        from experiments.serving.app import bind, make_server
        from experiments.serving.session import Limits, ServeSettings
        from policies.population import Population

        population = Population.from_toml(self.population, self.scenario) if self.population else None
        settings = ServeSettings(scenario=self.scenario, seats=self.seats, population=population,
                                 limits=Limits(self.max_sessions, self.idle_seconds, self.max_body_bytes))
        sock = bind(self.host, self.port)
        print(f"commons-arena serve: http://{self.host}:{sock.getsockname()[1]} (play page: /play)", flush=True)
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
        from policies.learned import convert_pickled_checkpoint

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
    first_seed: int = 700_000
    """held-out seeds first_seed .. first_seed + seeds - 1 (training never uses them)"""
    out: Path | None = None
    """output folder (default: <run>/analysis)"""
    force: bool = False
    """overwrite an earlier analysis in the output folder"""

    def validate(self) -> None:
        from experiments.evaluation.analysis import read_run

        if self.seeds < 1 or self.first_seed < 0:
            raise UsageError(f"--seeds must be at least 1 and --first-seed non-negative, got {self.seeds}, {self.first_seed}")
        read_run(self.run_folder, self.checkpoint)  # a run folder with that checkpoint, or says what is missing
        refuse_overwrite((self.out or self.run_folder / "analysis") / "analysis.md", self.force)

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
    """Re-play a recording from its seeds and recorded actions; exit 1 at the first tick that differs.

    Refuses (exit 2) a recording whose scenario content or env version changed since."""

    recording: tyro.conf.Positional[Path]
    """the .jsonl recording (e.g. tests/golden/standard.jsonl)"""
    scenario: str | None = None
    """scenario name or TOML path to play (default: the recorded scenario, by name)"""

    def run(self) -> None:
        from commons_arena.verify import verify_recording

        # a refused recording (RecordingRefused, a ValueError) exits 2 through main()
        result = verify_recording(self.recording, self.scenario)
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


# What a user can cause and fix: reported as one line. Anything else is a bug: traceback.
DOMAIN_ERRORS: tuple[type[BaseException], ...] = (ValueError, OSError)


def one_line(exc: BaseException) -> str:
    """The message of ``exc`` on one line (multi-line reports joined with "; ")."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    head, rest = lines[0], lines[1:]
    return head + (" " if head.endswith(":") else "; ") + "; ".join(rest) if rest else head


def main(argv: list[str] | None = None) -> None:
    """Parse, validate, run; domain errors exit 2 with one line on stderr (see the module docstring)."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = DEBUG_FLAG in args or os.environ.get("COMMONS_ARENA_DEBUG") == "1"
    args = [a for a in args if a != DEBUG_FLAG]
    np.set_printoptions(precision=3, suppress=True)
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


if __name__ == "__main__":
    main()


__all__ = ["DOMAIN_ERRORS", "Path", "UsageError", "main", "one_line", "refuse_overwrite"]
