"""Plant one small mutant in each rule of docs/rules.md and say which the fast tests miss.

    python -m tests.mutants            # every mutant; exit 1 if any survives
    python -m tests.mutants -k hard    # those whose rule or file mentions "hard"

A mutant is one textual change of one source line (a comparison turned, an order reversed, an
off-by-one). The rules are written once, in the batched core (both envs step it), so each mutant
goes there. Each runs in a private copy of the tree (this checkout is never touched) against the
fast tests that guard the game: the golden recordings and the trajectory digests (the per-arena
env, a batch of one) and the equivalence tests (the batch beside the list-based reference of
tests/reference/). A mutant *survives* when those tests still pass: a rule the fast loop does not hold.

It lives in ``tests/`` (not ``experiments/bench/``) because it measures the tests, not the
speed of anything, and is not shipped: it needs the test tree and pytest.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
GAME = ("tests/commons_arena/test_golden.py", "tests/commons_arena/test_determinism.py",
        "tests/commons_arena/test_batched.py")


class Mutant(NamedTuple):
    rule: str  # docs/rules.md's words for the rule it breaks
    path: str  # the file, from the root of the checkout
    old: str  # text found exactly once in the file
    new: str
    tests: tuple[str, ...] = GAME  # the fast tests that guard it


MUTANTS = (
    # §5.1 the broker's offer
    Mutant("offer cut to the inventory", "commons_arena/batched/tick.py",
           "qty = np.minimum(quantity, spot_inventory(tables, active))", "qty = quantity"),
    Mutant("price level L of K costs max_price x L / (K - 1)", "commons_arena/mechanics/market.py",
           "(np.arange(levels) / (levels - 1))", "(np.arange(levels) / levels)"),
    Mutant("a crisis shrinks the inventory: floor(inventory x factor)", "commons_arena/batched/tick.py",
           "np.floor(tables.inventory[None, :] * effects.inventory[:, None])",
           "np.ceil(tables.inventory[None, :] * effects.inventory[:, None])"),
    # §5.2 declarations and stances
    Mutant("stances at tick 0 answer no grant", "commons_arena/batched/tick.py",
           "& (s.t[:, None] > 0)", "& (s.t[:, None] >= 0)"),
    # §5.3 purchases
    Mutant("budget cut: most expensive tier first", "commons_arena/batched/tick.py",
           "p), axis=-1)[:, ::-1]", "p), axis=-1)"),
    Mutant("budget cut: the bulk step, more than 64 units over budget", "commons_arena/batched/tick.py",
           "astype(np.int64) - 2", "astype(np.int64) - 1"),
    # §5.4 shocks
    Mutant("an effect lasts `duration` ticks from the tick it fires", "commons_arena/batched/state.py",
           "shock_until=column(lambda s: s.duration - 1, np.int64)", "shock_until=column(lambda s: s.duration, np.int64)"),
    Mutant("a random shock fires with probability `rate`", "commons_arena/batched/tick.py",
           "draws < tables.shock_rate[None, :]", "draws > tables.shock_rate[None, :]"),
    Mutant("incident GPUs go offline", "commons_arena/batched/tick.py",
           "(rows[hit], tier[hit]), tables.shock_offline[k][hit])", "(rows[hit], tier[hit]), 0)"),
    # §5.5 grants
    Mutant("grants over capacity: largest remainders, ties to the earlier team", "commons_arena/batched/tick.py",
           "(remainders[:, :, None] > remainders[:, None, :])", "(remainders[:, :, None] < remainders[:, None, :])"),
    Mutant("hard cap: from the last team holding a GPU there", "commons_arena/batched/tick.py",
           "for team in range(N - 1, -1, -1):", "for team in range(N):"),
    Mutant("a GPU emits at this tick's intensity: the profile x active spikes", "commons_arena/batched/tick.py",
           "intensity = profile[np.minimum(s.t, profile.shape[0] - 1)] * active.intensity",
           "intensity = profile[np.minimum(s.t, profile.shape[0] - 1)]"),
    # §4 / §5.6 jobs
    Mutant("a job advances by gpus x speed", "commons_arena/batched/tick.py",
           "work[r, j] -= n * tables.speed[k]", "work[r, j] -= tables.speed[k]"),
    Mutant("a deadline is the last tick a job may complete", "commons_arena/batched/tick.py",
           "(s.deadline[..., :J_used] <= s.t[:, None, None])", "(s.deadline[..., :J_used] < s.t[:, None, None])"),
    Mutant("EDF order: ties to the higher priority", "commons_arena/batched/state.py",
           "(MAX_PRIORITY - priority)", "priority"),
    # §5.7-9 audit, starvation, escalations
    Mutant("an exposed bluff: declared above need x (1 + tolerance)", "commons_arena/batched/tick.py",
           "need.sum(axis=2) * (1.0 + tolerance)", "need.sum(axis=2) * (1.0 - tolerance)"),
    Mutant("reveal after `reveal_after` starved ticks", "commons_arena/batched/tick.py",
           "(s.streak >= tables.rules.config.reveal_after)", "(s.streak > tables.rules.config.reveal_after)"),
    Mutant("an escalation is justified if the team was starved last tick", "commons_arena/batched/tick.py",
           "justified = escalating & s.starved_last", "justified = escalating"),
    # §8 rewards
    Mutant("fairness: Jain's index minus 1", "commons_arena/rewards.py",
           "return o.fairness - 1.0", "return o.fairness - 0.5"),
    Mutant("fairness: Jain's square is Python's ** (libm's pow)", "commons_arena/batched/tick.py",
           "index = squared / (n * squares)", "index = total**2 / (n * squares)"),
    Mutant("fairness: Jain's index over the teams with a need", "commons_arena/batched/tick.py",
           "index = squared / (n * squares)", "index = squared / squares"),
    Mutant("carbon: kg over a soft cap", "commons_arena/batched/tick.py",
           "over = py_max(0.0, s.carbon_used - cap) - py_max(0.0, run.carbon_before - cap)",
           "over = py_max(0.0, s.carbon_used - cap)"),
    # §5 the end
    Mutant("the episode ends when every job is resolved", "commons_arena/arena.py",
           "terminated = pending == 0 and t > self.rules.last_job_shock_tick",
           "terminated = pending == 0 and t >= self.rules.last_job_shock_tick"),
    Mutant("the episode ends when every job is resolved", "commons_arena/batched/env.py",
           "(s.t > self.rules.last_job_shock_tick)", "(s.t >= self.rules.last_job_shock_tick)"),
    # §10 the draws
    Mutant("every draw from the one seeded generator: numpy's rejections redrawn", "commons_arena/batched/draws.py",
           "self.redo |= on & ((m & LOW32) < np.uint64(threshold))", "pass"),
)


def copy_of_tree(target: Path) -> Path:
    """The checkout's files (as they are now, uncommitted changes included) under ``target``."""
    tree = target / "tree"
    shutil.copytree(ROOT, tree, ignore=shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.pyc", ".pytest_cache",
                                                               "checkpoints", "runs", "results"))
    return tree


def survives(tree: Path, mutant: Mutant) -> tuple[bool, float]:
    """Apply ``mutant`` in ``tree``, run its tests, restore the file: (whether the tests passed, seconds)."""
    path = tree / mutant.path
    original = path.read_text(encoding="utf-8")
    if original.count(mutant.old) != 1:
        raise SystemExit(f"{mutant.path}: {mutant.old!r} is not there exactly once; update tests/mutants.py")
    path.write_text(original.replace(mutant.old, mutant.new), encoding="utf-8")
    start = time.perf_counter()
    try:
        run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-m", "not slow",
                              *mutant.tests], cwd=tree, capture_output=True, text=True, check=False)
    finally:
        path.write_text(original, encoding="utf-8")
    return run.returncode == 0, time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", default="", help="only mutants whose rule or file contains this text")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTANTS if args.k.lower() in (m.rule + " " + m.path).lower()]
    survivors = []
    with tempfile.TemporaryDirectory(prefix="mutants-") as scratch:
        tree = copy_of_tree(Path(scratch))
        for mutant in chosen:
            alive, seconds = survives(tree, mutant)
            print(f"{'SURVIVES' if alive else 'caught  '}  {seconds:5.1f}s  {mutant.path}: {mutant.rule}", flush=True)
            survivors += [mutant] if alive else []
    print(f"{len(chosen) - len(survivors)} of {len(chosen)} mutants caught by the fast tests; {len(survivors)} survive")
    return 1 if survivors else 0


if __name__ == "__main__":
    raise SystemExit(main())
