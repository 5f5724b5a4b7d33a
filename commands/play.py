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
from commons_arena.spaces import MAX_SEED


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
        from experiments.evaluation.engine import play_all

        base = commons_arena.parallel_env(scenario=self.scenario, render_mode=None if self.quiet else "human")
        print(f"scenario {base.config.name} (hash {base.config.content_hash}), seed {self.seed}")
        # every seat is background: the same seed plays the same episode as any other command
        [episode] = play_all(base, self._background(base), [self.seed], record=self.record)
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
