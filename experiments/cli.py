"""The ``commons-arena`` command line.

Each subcommand is a dataclass of arguments (one docstring per field, shown by ``--help``)
parsed by tyro; heavy imports (Ray, torch, matplotlib) happen inside the subcommand that
needs them, so ``commons-arena scenarios`` stays instant.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import numpy as np
import tyro

import commons_arena
from experiments.evaluation.evaluate import BASELINES
from experiments.training.train import TrainArgs


def _scenarios(names: tuple[str, ...]) -> list[str]:
    return commons_arena.list_scenarios() if names == ("all",) else list(names)


def _seeds(first: int, count: int) -> list[int]:
    return list(range(first, first + count))


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
    allocators: tuple[str, ...] = BASELINES
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
    """Every allocator on every scenario and seed, ranked per match and rated (openskill)."""

    scenarios: tuple[str, ...] = ("standard", "elevated", "crisis")
    """scenario names or TOML paths; 'all' for every shipped scenario"""
    allocators: tuple[str, ...] = BASELINES
    """allocators besides random and oracle (always in); 'learned:<checkpoint dir>' for a trained one"""
    seeds: int = 20
    """matches per scenario"""
    first_seed: int = 5000
    """held-out seeds first_seed .. first_seed + seeds - 1 (training never uses them)"""
    out: Path = Path("results/tournament")
    """output folder"""

    def run(self):
        from experiments.evaluation.evaluate import markdown_table
        from experiments.evaluation.tournament import tournament, write_standings

        scenarios, seeds = _scenarios(self.scenarios), _seeds(self.first_seed, self.seeds)
        result = tournament(scenarios, list(self.allocators), seeds)
        print(markdown_table(result.evaluation.rows))
        print("\nstandings")
        print(markdown_table(result.standings))
        for path in write_standings(result, self.out):
            print(f"wrote {path}")
        return result


@dataclass
class Train:
    """Train seats with RLlib (allocator, any --learners, selfplay, league; see experiments/training/train.py)."""

    args: Annotated[TrainArgs, tyro.conf.arg(name="")] = field(default_factory=lambda: _train_args())

    def run(self):
        from experiments.training.train import train

        return train(self.args)


@dataclass
class Replay:
    """Turn a recording (JSON lines from RecordEpisode) into one self-contained HTML page."""

    recording: tyro.conf.Positional[Path]
    """the .jsonl recording"""
    output: Annotated[Path, tyro.conf.arg(aliases=("-o",))] = Path("replay.html")
    """HTML file to write"""
    episode: int | None = None
    """only this episode of the recording (default: all, with a selector)"""

    def run(self) -> Path:
        from experiments.viewing.replay import write_replay

        path = write_replay(self.recording, self.output, episode=self.episode)
        print(f"wrote {path}")
        return path


@dataclass
class ConvertCheckpoint:
    """Give an old pickled checkpoint the data-only files `learned:` loads (arena_policy.safetensors
    and a format_version 2 arena_policy.json). This UNPICKLES the checkpoint, which can run any
    code it holds: convert only checkpoints you trust, e.g. ones you trained yourself."""

    checkpoint: tyro.conf.Positional[Path]
    """the checkpoint folder (the one holding arena_policy.json)"""
    i_trust_this_checkpoint: bool = False
    """required: confirms the checkpoint comes from a source you trust"""

    def run(self) -> Path:
        if not self.i_trust_this_checkpoint:
            raise SystemExit(
                f"convert-checkpoint unpickles {self.checkpoint}, which runs any code it contains; "
                "add --i-trust-this-checkpoint if you trained it yourself or otherwise trust its source"
            )
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
    checkpoint: str = "checkpoint"
    """which of the run's checkpoints: 'checkpoint' (latest) or 'best'"""
    seeds: int = 10
    """held-out episodes per comparison"""
    first_seed: int = 700_000
    """held-out seeds first_seed .. first_seed + seeds - 1 (training never uses them)"""
    out: Path | None = None
    """output folder (default: <run>/analysis)"""

    def run(self) -> list[Path]:
        from experiments.evaluation.analysis import analyze, summary_markdown, write_analysis

        report = analyze(self.run_folder, _seeds(self.first_seed, self.seeds), checkpoint=self.checkpoint)
        print(summary_markdown(report))
        paths = write_analysis(report, self.out or self.run_folder / "analysis")
        for path in paths:
            print(f"wrote {path}")
        return paths


Subcommand = (
    Annotated[Scenarios, tyro.conf.subcommand("scenarios")]
    | Annotated[Play, tyro.conf.subcommand("play")]
    | Annotated[Evaluate, tyro.conf.subcommand("evaluate")]
    | Annotated[Tournament, tyro.conf.subcommand("tournament")]
    | Annotated[Train, tyro.conf.subcommand("train")]
    | Annotated[Replay, tyro.conf.subcommand("replay")]
    | Annotated[Analyze, tyro.conf.subcommand("analyze")]
    | Annotated[ConvertCheckpoint, tyro.conf.subcommand("convert-checkpoint")]
)


def main(argv: list[str] | None = None) -> None:
    np.set_printoptions(precision=3, suppress=True)
    command = tyro.cli(Subcommand, args=argv, prog="commons-arena")  # type: ignore[arg-type]
    command.run()


if __name__ == "__main__":
    main()


__all__ = ["Path", "main"]
