"""The one table of seed ranges (experiments/seeds.py): its blocks never overlap, training's
lies above every other, and every command takes its default seeds from it (no seed constant
elsewhere)."""

from __future__ import annotations

import ast
from itertools import pairwise
from pathlib import Path

import pytest

from commons_arena.spaces import MAX_SEED
from experiments.seeds import SEED_RANGES, first_seed, validate_seeds
from tests.test_layout import tree_of

ROOT = Path(__file__).resolve().parents[2]


def test_ranges_tile_without_overlap_and_training_is_above_every_other():
    ranges = sorted(SEED_RANGES.values(), key=lambda r: r.first)
    assert ranges[0].first == 0
    for low, high in pairwise(ranges):
        assert low.first < low.stop == high.first, f"{low} and {high} overlap or leave a gap"
    assert max(SEED_RANGES.values(), key=lambda r: r.first) is SEED_RANGES["training"]
    assert SEED_RANGES["training"].stop <= MAX_SEED


def test_default_counts_fit_their_range():
    """The defaults a command plays stay inside its block (a larger --seeds may reach the next)."""
    from commands.evaluate import Analyze, Benchmark, Evaluate
    from commands.measure import CompareCheckpoint as CheckpointArgs
    from commands.train import Exploit
    from experiments.training.args import TrainArgs

    train = TrainArgs()
    for purpose, count in [("evaluate", Evaluate.seeds), ("exploit", Exploit.seeds), ("exploit", Analyze.seeds),
                           ("compare", CheckpointArgs.seeds), ("training_eval", train.eval_seeds),
                           ("best_response_report", train.report_seeds), ("evaluate", train.selection_seeds),
                           ("benchmark", Benchmark.seeds)]:
        block = SEED_RANGES[purpose]
        assert block.first + count <= block.stop, purpose


def test_every_command_reads_the_table():
    from commands.evaluate import Analyze, Benchmark, Evaluate, Tournament
    from commands.measure import CompareCheckpoint as CheckpointArgs
    from commands.measure import Corrections as CorrectionsArgs
    from commands.train import Exploit
    from experiments.evaluation.best_response import selection_seeds
    from experiments.evaluation.fixed_codes import REPORT_SEEDS, SELECTION_SEEDS
    from experiments.studies.seed_report import COMPARE_FIRST_SEED
    from experiments.training.args import TrainArgs

    assert Evaluate.first_seed == first_seed("evaluate")
    assert Benchmark.first_seed == first_seed("benchmark")
    assert Tournament().build_roster().seeds[0] == first_seed("tournament")
    assert Exploit.first_seed == Analyze.first_seed == first_seed("exploit")
    assert CheckpointArgs.first_seed == CorrectionsArgs.first_seed == COMPARE_FIRST_SEED == first_seed("compare")
    assert TrainArgs().eval_first_seed == first_seed("training_eval")
    assert TrainArgs().report_first_seed == first_seed("best_response_report")
    assert SELECTION_SEEDS.start == selection_seeds(3)[0] == first_seed("evaluate")
    assert REPORT_SEEDS.start == first_seed("codes_report")


def _seed_constants(path: Path) -> list[str]:
    """Integer literals >= 100 given to a name that says it is a first seed, or to a seed range or
    tuple (an assignment, a field or a default); counts of seeds (``seeds: int = 20``) are not seeds."""
    found = []
    for node in ast.walk(tree_of(path)):
        pairs: list[tuple[str, ast.AST | None]] = []
        if isinstance(node, ast.Assign):
            pairs = [(t.id, node.value) for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            pairs = [(node.target.id, node.value)]
        elif isinstance(node, ast.FunctionDef):
            args = node.args.args[len(node.args.args) - len(node.args.defaults):]
            pairs = [(a.arg, d) for a, d in zip(args, node.args.defaults, strict=True)]
        for name, value in pairs:
            lower = name.lower()
            ranged = isinstance(value, ast.Tuple) or (isinstance(value, ast.Call) and getattr(value.func, "id", "") == "range")
            if "seed" in lower and ("first" in lower or ranged) and value is not None:
                ints = [c.value for c in ast.walk(value) if isinstance(c, ast.Constant) and type(c.value) is int]
                if any(v >= 100 for v in ints):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
    return found


def test_no_seed_constant_outside_the_table():
    offenders = [hit for package in ("experiments", "commands", "serving")
                 for path in sorted((ROOT / package).rglob("*.py")) if path.name != "seeds.py"
                 for hit in _seed_constants(path)]
    assert offenders == [], f"seed constants outside experiments/seeds.py: {offenders}"


@pytest.mark.parametrize("seeds", [[], [-1], [1.5], [True], [2**63], [None]])
def test_validate_seeds_refuses_what_reset_cannot_take(seeds):
    with pytest.raises(ValueError, match="seed"):
        validate_seeds(seeds)


def test_validate_seeds_accepts_the_whole_range():
    assert validate_seeds([0, 7, MAX_SEED]) is None  # raises on a refused seed
    with pytest.raises(ValueError, match="seed"):
        validate_seeds([MAX_SEED + 1])  # the range ends exactly at MAX_SEED
