"""The commands that play and show single episodes: ``scenarios``, ``play``, ``replay`` (a recording
to an HTML page) and ``verify`` (a recording re-played from its seeds and actions)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import tyro

import commons_arena
from commands.common import UsageError, check_number, refuse_overwrite
from commons_arena.errors import one_line
from commons_arena.inputs import MAX_RECORDING_BYTES, check_regular
from commons_arena.spaces import MAX_SEED


@dataclass
class GenerateScenarios:
    """Write COUNT scenarios of a family (a name under scenarios/families/, or a TOML path) as TOML
    files named <index>_<hash>.toml, plus index.json (index, name, hash, file), in --out.

    Scenario i depends only on (family, seed, i), so a bigger --count extends a smaller one.
    Every argument is checked before anything is written; a folder that holds files is only
    written into with --force (which first removes the scenario files a previous run's index.json
    lists, and that index, and nothing else)."""

    family: tyro.conf.Positional[str]
    """family name (e.g. broad) or path to a family TOML file"""
    count: int
    """how many scenarios, 1 to 100000"""
    seed: int
    """generation seed: the same family and seed give the same scenarios"""
    out: Path
    """folder to write into (created if missing)"""
    force: bool = False
    """write into a folder that already holds files"""

    def validate(self) -> None:
        from commons_arena.family import MAX_GENERATE, load_family, scenario_name

        check_number("--count", self.count, 1, MAX_GENERATE)
        check_number("--seed", self.seed, 0, MAX_SEED)
        family = load_family(self.family)
        scenario_name(family.name, self.seed, self.count - 1)  # every name fits
        inputs = [Path(self.family)] if Path(self.family).is_file() else []
        refuse_overwrite(self.out, self.force, inputs=inputs, what="folder")

    def run(self) -> list[Path]:
        import policies.registry  # noqa: F401  (registers the check that [population] names known policies)
        from commons_arena.family import generate_scenarios, write_scenarios

        configs = generate_scenarios(self.family, self.count, self.seed)
        paths = write_scenarios(configs, self.out, replace=self.force)
        print(f"wrote {len(paths)} scenarios of family {self.family} (seed {self.seed}) to {self.out}; "
              f"index.json lists their names and hashes")
        return paths


@dataclass
class ScenariosCheck:
    """Check a scenario file: validity (the scenario error if invalid), then on a few seeds the oracle's,
    random's and every scripted allocator's score (raw and normalised), each team's misreport gain
    against proportional and planner (where bluffing pays), and milliseconds per episode (scripted,
    oracle). experiments/evaluation/scenario_check.py; docs/bring_your_own_cluster.md."""

    file: tyro.conf.Positional[Annotated[str, tyro.conf.arg(metavar="FILE")]]
    """a scenario TOML file (or a shipped scenario's name)"""
    seeds: int = 10
    """seeds per allocator (from the evaluate range of experiments/seeds.py)"""
    out: Path | None = None
    """also write scores, misreport and timing as CSV + markdown into this folder"""
    force: bool = False
    """write into an --out folder that already holds files"""

    def validate(self) -> None:
        from commands.common import seed_list
        from experiments.seeds import SEED_RANGES

        seed_list(SEED_RANGES["evaluate"].first, self.seeds)
        commons_arena.load_scenario(self.file)  # the scenario error, one line, before anything is played
        if self.out is not None:
            refuse_overwrite(self.out, self.force, inputs=[Path(self.file)], what="folder")

    def run(self, as_json: bool = False) -> None:
        from commands.common import seed_list
        from experiments.evaluation.scenario_check import check_scenario, write_check
        from experiments.evaluation.tables import markdown_table
        from experiments.seeds import SEED_RANGES

        seeds = seed_list(SEED_RANGES["evaluate"].first, self.seeds)
        result = check_scenario(self.file, seeds)
        summary = result.summary()
        print(f"valid: {summary['scenario']} (hash {summary['hash']}): teams {summary['teams']}; tiers "
              f"{summary['tiers']}; {summary['ticks']} ticks, budget {summary['budget']:g}, {summary['carbon']}")
        print(f"\nallocators on seeds {seeds[0]}..{seeds[-1]} (score: random 0, oracle 1)")
        print(markdown_table(result.scores))
        print("\nmisreport gain (team return as greedy_bluffer minus as truthful; pays: 95% CI above 0)")
        print(markdown_table(result.misreport))
        print("\ncost per episode (this machine, as measured while checking)")
        print(markdown_table(result.timing))
        if result.readings:
            print("\nwhat the table says")
            print("\n".join(f"- {line}" for line in result.readings))
        if self.out is not None:
            for path in write_check(result, self.out):
                print(f"wrote {path}")


@dataclass
class ScenariosReference:
    """Print every scenario key (type, range, default, meaning) as markdown, generated from the scenario models:
    docs/scenario_reference.md is this output."""

    def run(self) -> str:
        from commons_arena.scenario_reference import scenario_reference

        text = scenario_reference()
        print(text, end="")
        return text


@dataclass
class Scenarios:
    """List the shipped scenarios with their content hashes and descriptions, or (a subcommand)
    generate scenarios from a family, check a scenario file, or print every scenario key (reference)."""

    json: bool = False
    """print JSON instead of a table"""
    action: tyro.conf.OmitArgPrefixes[tyro.conf.OmitSubcommandPrefixes[
        Annotated[None, tyro.conf.subcommand("list")]
        | Annotated[GenerateScenarios, tyro.conf.subcommand("generate")]
        | Annotated[ScenariosCheck, tyro.conf.subcommand("check")]
        | Annotated[ScenariosReference, tyro.conf.subcommand("reference")]
    ]] = None

    def validate(self) -> None:
        validate = getattr(self.action, "validate", None)
        if validate is not None:
            validate()

    def run(self) -> object:
        if self.action is not None:
            return self.action.run()
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
            return rows
        for row in rows:
            print(f"{row['name']:<18} {row['hash']}  {row['difficulty']:<9} {row['teams']} teams, {row['ticks']} ticks")
            print(f"    {row['description']}")
        return rows


@dataclass
class Play:
    """Play one episode and print each tick (ansi) and the final totals.

    Every agent acts uniformly at random unless ``--population`` names policies (a population
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
    """population file (TOML: [roles] / [agents]), or 'default' for the scenario's population; omit for random actions"""
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
        from experiments.evaluation.engine import play

        base = commons_arena.parallel_env(scenario=self.scenario, render_mode=None if self.quiet else "human")
        print(f"scenario {base.config.name} (hash {base.config.content_hash}), seed {self.seed}")
        # every seat is background: the same seed plays the same episode as any other command
        [episode] = list(play(base, self._background(base), [self.seed], record=self.record))
        summary = episode.summaries
        print("\nfinal totals")
        for agent, totals in summary.items():
            terms = ", ".join(f"{k.removeprefix('term/')} {v:+.1f}" for k, v in totals.items() if k.startswith("term/"))
            print(f"  {agent:<10} return {totals['return']:+8.2f}   ({terms})")
        if self.record is not None:
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
        if not self.recording.exists():
            raise UsageError(f"recording not found: {self.recording}")
        check_regular(self.recording, "recording", MAX_RECORDING_BYTES)  # a FIFO or /dev/zero: refused unread
        if self.episode is not None:
            check_number("--episode", self.episode, 0, 1_000_000)
        refuse_overwrite(self.target, self.force, inputs=[self.recording])

    def run(self) -> Path:
        from experiments.viewing.replay import write_replay

        path = write_replay(self.recording, self.target, episode=self.episode)
        print(f"wrote {path}")
        return path


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
