"""The commands that compare policies over many episodes: ``evaluate`` (allocators on scenarios),
``tournament`` (a roster, stored and resumable), ``benchmark`` (one policy over a suite of evaluation
scenarios, stored and resumable) and ``analyze`` (a training run's bluffing and pricing)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import tyro

import commons_arena
from commands.common import UsageError, check_number, refuse_overwrite, same_file, scenario_names, seed_list
from commons_arena.enums import TIERS
from commons_arena.files import check_tree
from commons_arena.inputs import what_is
from experiments.evaluation.evaluate import BASELINE_ALLOCATORS, validate_lineup
from experiments.seeds import SEED_RANGES


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
        validate_lineup(scenario_names(self.scenarios), list(self.allocators), seed_list(self.first_seed, self.seeds))
        refuse_overwrite(self.out, self.force, what="folder")

    def run(self):
        from experiments.evaluation.evaluate import evaluate, write_tables
        from experiments.evaluation.tables import markdown_table

        scenarios, seeds = scenario_names(self.scenarios), seed_list(self.first_seed, self.seeds)
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
        seeds = seed_list(first, 20 if self.seeds is None else self.seeds)
        return flag_roster(scenario_names(self.scenarios or TIERS),
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
            if same_file(db, source):
                raise UsageError(f"--db {db} is the roster file; choose another database")
        if db.exists():  # resumed: it must be a results database, not any file
            check_database(db)
        elif self.db is not None:
            refuse_overwrite(db, force=False)  # a --db file's folder must exist (--out is created)
        # the folder's tables are rewritten: only the default database's own folder is resumed without --force
        if not (db.is_file() and same_file(db, out / "results.sqlite")):
            refuse_overwrite(out, self.force, inputs=inputs, what="folder")
        else:  # resumed: still no link inside to meet after the episodes
            check_tree(out)

    def run(self):
        from experiments.evaluation.results import PlayOptions
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
        raise UsageError(f"--db {path} is {what_is(path)}, not a results database file; choose another file")
    with open(path, "rb") as fh:
        header = fh.read(16)
    if header and header != b"SQLite format 3\x00":
        raise UsageError(f"--db {path} is not a results database (not SQLite); choose another file")


@dataclass
class Analyze:
    """Bluffing and pricing analysis of a training run: a PNG figure and a markdown summary
    (experiments/studies/analysis.py)."""

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
        from commons_arena.files import check_outputs
        from experiments.studies.analysis import read_run
        from experiments.studies.analysis_report import OUTPUTS

        seed_list(self.first_seed, self.seeds)
        out = self.out or self.run_folder / "analysis"
        check_outputs(out, OUTPUTS, self.force)  # never through a symlink (RUN/analysis or a file in it)
        read_run(self.run_folder, self.checkpoint)  # a run folder with that checkpoint, or says what is missing
        refuse_overwrite(out, self.force, what="folder")

    def run(self) -> list[Path]:
        from experiments.studies.analysis import analyze
        from experiments.studies.analysis_report import summary_markdown, write_analysis

        report = analyze(self.run_folder, seed_list(self.first_seed, self.seeds), checkpoint=self.checkpoint)
        print(summary_markdown(report))
        paths = write_analysis(report, self.out or self.run_folder / "analysis", self.force)
        for path in paths:
            print(f"wrote {path}")
        return paths


@dataclass
class Benchmark:
    """One policy in the focal seat of every evaluation scenario of a suite (game scenario + focal seat +
    background; experiments/suites/): per evaluation scenario its normalised focal score (allocator:
    random 0, oracle 1; team / broker: uniformly random 0, the best fixed code of the seat's codec 1),
    and across the suite the IQM and mean with stratified-bootstrap 95% CIs and the probability of
    improving on the suite's reference (planner for the allocator).

    Episodes go to one SQLite store (default <out>/results.sqlite) shared by every suite and policy:
    a rerun plays only the missing rows, and the references (anchors, reference policy, fixed-code
    selection) are played once per store, not once per benchmarked policy.
    """

    policy: tyro.conf.Positional[Annotated[str, tyro.conf.arg(metavar="POLICY")]]
    """the focal policy: a registered name (e.g. planner, edf, truthful, demand_priced) or learned:<checkpoint dir>, or with
    parameters an inline TOML table: '{policy = "learned:universal", gate = 0.6}'"""
    suite: str = "heldout-allocator"
    """a shipped suite's name (experiments/suites/: heldout-allocator, tiers, team-search, broker) or a suite TOML"""
    seeds: int = 20
    """seeds per evaluation scenario"""
    first_seed: int = SEED_RANGES["benchmark"].first
    """seeds are first_seed .. first_seed + seeds - 1 (default: the benchmark range of experiments/seeds.py)"""
    out: Path = Path("results/benchmark")
    """output folder: the store (results.sqlite) and <suite>/<policy>/scores|summary .csv/.md"""
    db: Path | None = None
    """results database (default <out>/results.sqlite)"""
    workers: int | None = None
    """parallel workers (default: every CPU); 1 runs in-process without Ray"""
    address: str | None = None
    """join this Ray cluster (RAY_ADDRESS does the same); default: start Ray locally"""
    allow_changed: bool = False
    """play a changed scenario / checkpoint / background beside its old stored rows instead of refusing"""
    progress: bool = True
    """show the progress bar"""
    force: bool = False
    """rewrite this suite and policy's tables if <out>/<suite>/<policy>/ already holds them"""

    def validate(self) -> None:
        """The suite (every entry), the policy against every evaluation scenario, seeds, workers, outputs."""
        from experiments.evaluation.benchmark import check_plan, report_folder
        from experiments.evaluation.suite import load_suite

        if self.workers is not None:
            check_number("--workers", self.workers, 1, MAX_WORKERS)
        seeds = seed_list(self.first_seed, self.seeds)
        self._suite = load_suite(self.suite)
        check_plan(self._suite, self.policy, seeds)
        db = self.db if self.db is not None else self.out / "results.sqlite"
        suite_file = Path(self.suite)
        if suite_file.is_file() and same_file(db, suite_file):
            raise UsageError(f"--db {db} is the suite file; choose another database")
        if db.exists():  # resumed: it must be a results database, not any file
            check_database(db)
        elif self.db is not None:
            refuse_overwrite(db, force=False)  # a --db file's folder must exist (--out is created)
        if self.out.exists() and not self.out.is_dir():
            raise UsageError(f"{self.out} is a file; give a folder for the output")
        refuse_overwrite(report_folder(self.out, self._suite, self.policy), self.force, what="folder")

    def run(self):
        from experiments.evaluation.benchmark import run_benchmark
        from experiments.evaluation.results import PlayOptions
        from experiments.evaluation.suite import load_suite
        from experiments.evaluation.tables import markdown_table

        suite = getattr(self, "_suite", None) or load_suite(self.suite)  # main() validated it already
        seeds = seed_list(self.first_seed, self.seeds)
        print(f"suite {suite.name}: {len(suite.evaluations)} evaluation scenarios, {suite.role} seat, "
              f"{len(seeds)} seeds ({seeds[0]}..{seeds[-1]}); reference {suite.reference}")
        options = PlayOptions(workers=self.workers, address=self.address, allow_changed=self.allow_changed,
                              progress=self.progress)
        result = run_benchmark(suite, self.policy, seeds, self.out, db=self.db, options=options)
        if result.shipped:
            print(f"references: {result.shipped} anchor episodes from the shipped reference returns (not played)")
        for what, report in (("fixed-code selection", result.selection), ("benchmark", result.play)):
            if report is not None and report.played:
                print(f"{what}: played {report.played} episodes in {report.seconds:.1f} s ({report.mode}); "
                      f"{report.already_stored} already stored")
            elif report is not None:
                print(f"{what}: all {report.planned} episodes already stored")
        print(markdown_table(result.scores))
        print()
        print(markdown_table(result.summary))
        for path in result.written:
            print(f"wrote {path}")
        return result
