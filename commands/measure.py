"""The commands that measure one thing in depth (docs/codecs.md, docs/training.md, docs/negotiation.md):
``compare-checkpoint`` (a learned allocator against every scripted one), ``fixed-codes`` (what
the team and broker codecs express unlearned), ``need-gap`` (what the planner cannot see),
``corrections`` (what a need / residual allocator learned on top of the planner),
``broker-pricing`` (how a broker prices by demand), ``frontier`` (welfare against exploitability per
allocator, and the frontier of the scripted ones and their mixtures) and ``seed-report`` (the report across
training seeds, redone).

Each plays through the engine (:mod:`experiments.evaluation.engine`); the work is in the
module each names, the flags and checks are here, so they share the command line's error
path and its ``--force`` rule."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import tyro

import commons_arena
from commands.common import MAX_SEEDS, UsageError, check_number, paired_seed_list, refuse_overwrite, seed_list
from commons_arena.enums import TIERS
from commons_arena.files import check_tree
from experiments.evaluation.evaluate import BASELINE_ALLOCATORS, validate_lineup
from experiments.seeds import SEED_RANGES

Part = Literal["reproduction", "team", "broker"]
FIXED_CODE_PARTS: tuple[Part, ...] = ("reproduction", "team", "broker")


def check_scenarios(scenarios: tuple[str, ...]) -> None:
    if not scenarios:
        raise UsageError("--scenarios needs at least one name")
    for scenario in scenarios:
        commons_arena.load_scenario(scenario)


@dataclass
class CompareCheckpoint:
    """Does a learned allocator beat every scripted one? Paired on held-out seeds, per scenario;
    writes <out>/checkpoint_vs_scripted.{csv,md} (experiments/evaluation/checkpoint.py)."""

    checkpoint: tyro.conf.Positional[Path]
    """checkpoint folder (with arena_policy.json)"""
    scenarios: tuple[str, ...] = TIERS
    """scenarios to play"""
    seeds: int = 100
    """seeds per scenario (at least 30 for a useful interval)"""
    first_seed: int = SEED_RANGES["compare"].first
    """seeds are first_seed .. first_seed + seeds - 1 (keep them out of training's ranges, experiments/seeds.py)"""
    scripted: tuple[str, ...] = BASELINE_ALLOCATORS
    """scripted allocators to compare with"""
    out: Path = Path("results/checkpoint")
    """output folder"""
    force: bool = False
    """write into --out even if it already holds files (they are overwritten)"""

    def validate(self) -> None:
        validate_lineup(list(self.scenarios), [*self.scripted, f"learned:{self.checkpoint}"],
                        paired_seed_list(self.first_seed, self.seeds))
        refuse_overwrite(self.out, self.force, what="folder")

    def run(self):
        from experiments.evaluation.checkpoint import checkpoint_report

        return checkpoint_report(self.checkpoint, self.scenarios, paired_seed_list(self.first_seed, self.seeds), self.scripted,
                      self.out)


@dataclass
class FixedCodes:
    """What the team and broker codecs express before anything is learned: fixed codes beside the
    scripted policies, paired on the same seeds (experiments/evaluation/fixed_codes.py)."""

    scenario: str = "crisis"
    """scenario of the team and broker searches (reproduction also plays standard)"""
    allocator: str = "proportional"
    """the allocator the codes play against"""
    seat: str = "search"
    """the team seat of the team search"""
    seeds: int = 30
    """report seeds 0 .. N-1 (codes are chosen on as many seeds of the evaluate range)"""
    reproduction_seeds: int = 10
    """seeds 0 .. N-1 of the reproduction part"""
    parts: tuple[Part, ...] = FIXED_CODE_PARTS
    """which measurements to run"""

    def validate(self) -> None:
        from experiments.evaluation.fixed_codes import REPORT_SEEDS, SELECTION_SEEDS

        config = commons_arena.load_scenario(self.scenario)
        if self.seat not in config.team_names:
            raise UsageError(f"--seat must be a team seat of {config.name!r} ({list(config.team_names)}), got {self.seat!r}")
        validate_lineup([self.scenario], [self.allocator], [0])
        paired_seed_list(REPORT_SEEDS.start, self.seeds)
        paired_seed_list(SELECTION_SEEDS.start, self.seeds)
        seed_list(0, self.reproduction_seeds)

    def run(self) -> None:
        from experiments.evaluation.fixed_codes import fixed_codes_report

        fixed_codes_report(self.scenario, self.allocator, self.seat, self.seeds, self.reproduction_seeds, self.parts)


def frontier_allocators() -> tuple[str, ...]:
    """Every registered allocator but the oracle (it reads hidden state): the scripted baselines, ``planner``
    and the reference mechanisms."""
    from policies.registry import available_policies

    return tuple(name for name in available_policies("allocator") if name != "oracle")


@dataclass
class Frontier:
    """The welfare-exploitability frontier as the report: per tier and allocator its welfare and its
    exploitability (max over team seats of the best response's gain over truthful; the best fixed code by
    search, or an exploit run's best responses), the frontier of the scripted allocators and their pairwise
    per-episode mixtures (from the stored rows, not re-run), whether each allocator is beyond it (paired
    bootstrap), and per seat do-nothing / truthful / best-response returns (experiments/studies/frontier.py).
    Stored cells are read back: rerun the same command to resume."""

    allocators: tuple[str, ...] = field(default_factory=frontier_allocators)
    """allocators (any registered one, or 'learned:<checkpoint dir>'); the scripted ones make the frontier"""
    scenarios: tuple[str, ...] = ("standard", "crisis")
    """scenarios (names or TOML paths)"""
    seeds: int = 100
    """held-out seeds of every paired figure"""
    first_seed: int = SEED_RANGES["exploit"].first
    """seeds first_seed .. first_seed + seeds - 1 (the exploit range of experiments/seeds.py: an exploit run's
    cells pair with these)"""
    selection_seeds: int = 30
    """seeds (the evaluate range) on which the best fixed code of a seat is chosen"""
    selection_refine: int = 120
    """more seeds on which the 5 best codes are looked at again (0: one look)"""
    step: float = 0.1
    """weight step of the pairwise mixtures"""
    exploit: Path | None = None
    """an 'exploit --out' folder: a cell's final best response (learned or searched) is used where it played the
    same seeds, else the best fixed code is searched here"""
    out: Path = Path("results/frontier")
    """output folder: frontier.md / .csv / .png, seats.md / .csv, welfare/, cells/ (an earlier frontier run's
    folder is resumed)"""
    force: bool = False
    """write into an --out folder that holds other files"""

    def validate(self) -> None:
        if not self.allocators or not self.scenarios:
            raise UsageError("--allocators and --scenarios need at least one name each")
        check_number("--step", self.step, 0.01, 0.5)
        check_number("--selection-seeds", self.selection_seeds, 1, MAX_SEEDS)
        check_number("--selection-refine", self.selection_refine, 0, MAX_SEEDS)
        validate_lineup(list(self.scenarios), list(self.allocators), paired_seed_list(self.first_seed, self.seeds))
        if self.exploit is not None and not self.exploit.is_dir():
            raise UsageError(f"--exploit {self.exploit} is not a folder (an 'exploit --out' folder)")
        from experiments.studies.frontier import CELLS_DIR

        if not (self.out / CELLS_DIR).is_dir():  # an earlier (or interrupted) frontier run's folder is resumed
            refuse_overwrite(self.out, self.force, what="folder")
        else:  # resumed: still no link inside to meet after the episodes
            check_tree(self.out)

    def run(self):
        from experiments.studies.frontier import frontier

        return frontier(self.scenarios, self.allocators, paired_seed_list(self.first_seed, self.seeds), self.out,
                        self.step, self.selection_seeds, self.selection_refine, self.exploit)


@dataclass
class NeedGap:
    """What the planner cannot see, and what knowing it would be worth: one markdown table
    (experiments/evaluation/need_gap.py)."""

    scenarios: tuple[str, ...] = TIERS
    """scenarios to measure"""
    train: int = 200
    """episodes (the ``measure`` seed range) that measure the average gap"""
    test: int = 30
    """held-out episodes (the ``compare`` seed range) that compare the variants with the planner"""
    out: Path | None = None
    """write the table as CSV here too"""
    force: bool = False
    """overwrite an existing --out file"""

    def validate(self) -> None:
        check_scenarios(self.scenarios)
        seed_list(SEED_RANGES["measure"].first, self.train)
        paired_seed_list(SEED_RANGES["compare"].first, self.test)
        if self.out is not None:
            refuse_overwrite(self.out, self.force)

    def run(self):
        from experiments.evaluation.need_gap import need_gap_report

        return need_gap_report(self.scenarios, self.train, self.test, self.out)


@dataclass
class Corrections:
    """What a learned need / residual allocator learned on top of planner: its mean correction per
    tick and (team, tier), printed (experiments/evaluation/corrections.py)."""

    checkpoint: tyro.conf.Positional[Path]
    """checkpoint folder (with arena_policy.json) of a need or residual allocator"""
    scenarios: tuple[str, ...] = TIERS
    """scenarios to play"""
    seeds: int = 30
    """episodes per scenario"""
    first_seed: int = SEED_RANGES["compare"].first
    """seeds are first_seed .. first_seed + seeds - 1"""

    def validate(self) -> None:
        check_scenarios(self.scenarios)
        validate_lineup(list(self.scenarios), [f"learned:{self.checkpoint}"], seed_list(self.first_seed, self.seeds))

    def run(self) -> None:
        from experiments.evaluation.corrections import corrections_report

        seeds = seed_list(self.first_seed, self.seeds)
        corrections_report(self.checkpoint, self.scenarios, range(seeds[0], seeds[-1] + 1))


@dataclass
class BrokerPricing:
    """How a broker prices by demand and what its offers sell: it beside demand_priced and fixed
    markup codes, against one allocator, on the same seeds (experiments/evaluation/broker_pricing.py)."""

    broker: tyro.conf.Positional[str]
    """the broker to read: 'learned:<checkpoint>' or a scripted broker"""
    allocator: str = "planner"
    """the allocator it sells to (the rest: the scenario's own population)"""
    scenario: str = "crisis"
    """scenario name or TOML path"""
    codes: tuple[str, ...] = ()
    """fixed markup codes to set beside it, each 'margin,slope,crisis_levels' (e.g. 3,0,2)"""
    seeds: int = 100
    """episodes per broker"""
    first_seed: int = SEED_RANGES["best_response_report"].first
    """seeds first_seed .. first_seed + seeds - 1 (default: the best-response report's)"""

    def validate(self) -> None:
        from experiments.evaluation.broker_pricing import parse_codes

        validate_lineup([self.scenario], [self.allocator], seed_list(self.first_seed, self.seeds))
        parse_codes(self.codes, self.scenario)
        from policies.registry import make_policy

        make_policy(self.broker, commons_arena.load_scenario(self.scenario), "broker")

    def run(self):
        from experiments.evaluation.broker_pricing import broker_pricing_report, parse_codes

        return broker_pricing_report(self.broker, self.allocator, self.scenario, parse_codes(self.codes, self.scenario),
                      seed_list(self.first_seed, self.seeds))


@dataclass
class SeedReport:
    """Redo the report across the training seeds' runs under PARENT (``train --train-seeds`` writes
    it): aggregate.{md,json}, vs_scripted.csv, learning_curves.png (experiments/studies/seed_report.py)."""

    parent: tyro.conf.Positional[Path]
    """the folder holding the seeds' runs (s0, s1, ...)"""
    compare_seeds: int = 100
    """held-out seeds of the comparison with every scripted allocator (0: skip it)"""
    force: bool = False
    """replace the report already in PARENT"""

    def validate(self) -> None:
        from commons_arena.files import check_outputs
        from experiments.studies.seed_report import OUTPUTS, seed_runs

        if not self.parent.is_dir():
            raise UsageError(f"{self.parent} is not a folder; give the parent folder of the training seeds' runs")
        check_number("--compare-seeds", self.compare_seeds, 0, MAX_SEEDS)
        seed_runs(self.parent)  # every run folder read and checked before any work
        check_outputs(self.parent, OUTPUTS, self.force)  # never through a symlink, nor over a report without --force

    def run(self) -> Path:
        from experiments.studies.seed_report import write_seed_report

        return write_seed_report(self.parent, self.compare_seeds, progress=True, force=self.force)
