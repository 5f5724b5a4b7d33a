"""How long ``commons-arena benchmark`` takes: one policy over a suite, cold and warm.

*Cold* is a fresh results store: the ``planner`` reference is played beside the policy and the
anchors (random, oracle) of a shipped suite are copied from the shipped reference returns
(``experiments/evaluation/shipped_references.py``; a suite of one's own plays them, the oracle's
MILP per tick then dominating). *Warm* is a
second policy on the same store: only its own episodes are played (the references are cached).
The target (issue 28): ``planner`` on 50 held-out evaluation scenarios x 20 seeds within 5
minutes on 2 cores with nothing else running; that is the cold figure, since ``planner`` is
the reference and plays with the anchors.

The machine's load average (``os.getloadavg()``) is printed before and after: on a shared
machine the wall-clock figure moves with it, so a figure taken under load is reported as such.

    python -m experiments.bench.suite_speed --suite heldout-allocator --seeds 20 --workers 2 [--oracle-spread]
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tyro

from experiments.evaluation.benchmark import benchmark_seeds, run_benchmark
from experiments.evaluation.results import PlayOptions
from experiments.evaluation.suite import Suite, load_suite


@dataclass
class Args:
    suite: str = "heldout-allocator"
    """suite name or TOML"""
    policy: str = "planner"
    """the policy timed cold (its store starts empty)"""
    warm_policy: str = "edf"
    """a second policy timed on the same store (references cached); '' to skip"""
    seeds: int = 20
    """seeds per evaluation scenario"""
    workers: int = 2
    """parallel workers (1: in-process)"""
    limit: int = 0
    """benchmark only the suite's first N evaluation scenarios (0: all)"""
    oracle_spread: bool = False
    """then time one oracle episode per game scenario of the suite, in-process (first seed only)"""


def oracle_spread(suite: Suite, seed: int) -> dict[str, float]:
    """Seconds of one oracle (allocator) episode per distinct game scenario of ``suite``, its own
    background around it: how unevenly the references' cost is spread (a MILP per tick)."""
    from commons_arena.enums import ALLOCATOR
    from experiments.evaluation.engine import play, returns_of

    seconds: dict[str, float] = {}
    for evaluation in suite.evaluations:
        if evaluation.config.name in seconds:
            continue
        start = time.perf_counter()
        returns_of(play(evaluation.config, evaluation.background.with_agent(ALLOCATOR, "oracle"), [seed]), ALLOCATOR)
        seconds[evaluation.config.name] = time.perf_counter() - start
    return seconds


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} / {five:.2f} / {fifteen:.2f} (1 / 5 / 15 min) on {os.cpu_count()} CPUs"


def main(args: Args) -> dict[str, float]:
    suite = load_suite(args.suite)
    if args.limit:
        from dataclasses import replace

        suite = replace(suite, evaluations=suite.evaluations[: args.limit])
    seeds = benchmark_seeds(args.seeds)
    options = PlayOptions(workers=args.workers, progress=False)
    figures: dict[str, float] = {}
    print(f"suite {suite.name}: {len(suite.evaluations)} evaluation scenarios x {len(seeds)} seeds, "
          f"{args.workers} workers; before: {load_average()}")
    with tempfile.TemporaryDirectory() as tmp:
        for label, policy in (("cold", args.policy), ("warm", args.warm_policy)):
            if not policy:
                continue
            start = time.perf_counter()
            result = run_benchmark(suite, policy, seeds, Path(tmp), options=options)
            seconds = time.perf_counter() - start
            figures[label] = seconds
            summary = result.summary[0]
            print(f"{label}: {policy}: {seconds:.1f} s wall ({result.play.played} episodes played, "
                  f"{result.shipped} anchors shipped, {result.play.already_stored} already stored, {result.play.mode}); IQM {summary['iqm']:.3f} "
                  f"[{summary['iqm_low']:.3f}, {summary['iqm_high']:.3f}]; {load_average()}")
    if args.oracle_spread:
        spread = oracle_spread(suite, seeds[0])
        times = sorted(spread.values())
        slowest = max(spread, key=lambda name: spread[name])
        print(f"oracle, one episode per game scenario ({len(times)}): min {times[0]:.2f} s, median "
              f"{float(np.median(times)):.2f} s, max {times[-1]:.2f} s ({slowest}); {load_average()}")
        figures.update(oracle_min=times[0], oracle_max=times[-1])
    return figures


if __name__ == "__main__":
    main(tyro.cli(Args))
