"""How long ``commons-arena benchmark`` takes: one policy over a suite, cold and warm.

*Cold* is a fresh results store: the references (random and oracle anchors, the ``planner``
reference) are played beside the policy, the oracle's MILP per tick dominating. *Warm* is a
second policy on the same store: only its own episodes are played (the references are cached).
The target (issue 28): ``planner`` on 50 held-out evaluation scenarios x 20 seeds within 5
minutes on 2 cores with nothing else running; that is the cold figure, since ``planner`` is
the reference and plays with the anchors.

The machine's load average (``os.getloadavg()``) is printed before and after: on a shared
machine the wall-clock figure moves with it, so a figure taken under load is reported as such.

    python -m experiments.bench.suite_speed --suite heldout-allocator --seeds 20 --workers 2
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import tyro

from experiments.evaluation.benchmark import benchmark_seeds, run_benchmark
from experiments.evaluation.engine import PlayOptions
from experiments.evaluation.suite import load_suite


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
                  f"{result.play.already_stored} already stored, {result.play.mode}); IQM {summary['iqm']:.3f} "
                  f"[{summary['iqm_low']:.3f}, {summary['iqm_high']:.3f}]; {load_average()}")
    return figures


if __name__ == "__main__":
    main(tyro.cli(Args))
