"""Env steps a training run makes in a fixed wall time: two source trees (or two settings) in turns, or
every learning kind under the stock, batched and lean samplers (``--kinds``).

Each turn is a fresh process with ``PYTHONPATH=<tree>`` that builds the run's algorithm
(the same call as ``commons-arena train``, unit observation scales), trains one iteration
untimed (build, first compile), then trains for ``--seconds`` and reports the env steps
sampled. Turns alternate A, B, B, A, A, B, ... so a change in the machine's load hits both
about equally; the report gives each side's env steps/s per turn, their medians, and what
that is per 10 minutes. ``--a-args``/``--b-args`` are extra ``TrainArgs`` flags per side
(e.g. ``--b-args "--num-env-runners 2 --num-envs-per-env-runner 16"``); both sides get ``--args``.

    python -m experiments.bench.training_ab --kinds main best_response --seconds 60 --rounds 2   # stock, batched, lean

    git worktree add /work/wt/before <commit>
    python -m experiments.bench.training_ab --a /work/wt/before --b . --seconds 90 --rounds 2 \\
        --args "--experiment allocator_mixed --action-codec need"
"""

from __future__ import annotations

import json
import os
import shlex
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import tyro

WORKER = r"""
import json, os, shlex, sys, time
import ray, torch, tyro
from experiments.training.algorithm import build_algorithm
from experiments.training.args import TrainArgs
from experiments.training.setup import resolve, with_unit_scales

from experiments.training.config_file import load_experiment
seconds, flags = float(sys.argv[1]), shlex.split(sys.argv[2])
default = None
if "--config" in flags:  # an experiment file's values, the flags after it overriding them (as `train --config`)
    at = flags.index("--config")
    default, flags = load_experiment(flags[at + 1]), flags[:at] + flags[at + 2:]
args = tyro.cli(TrainArgs, args=flags, default=default)
torch.set_num_threads(args.torch_threads)
ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False, logging_level="ERROR")
algo = build_algorithm(with_unit_scales(resolve(args)))
steps = lambda result: int(result.get("num_env_steps_sampled_lifetime", 0))
before = steps(algo.train())  # untimed: the first iteration
start, iterations = time.perf_counter(), 0
while time.perf_counter() - start < seconds:
    after = steps(algo.train())
    iterations += 1
wall = time.perf_counter() - start
print(json.dumps({"env_steps": after - before, "seconds": wall, "iterations": iterations,
                  "load": os.getloadavg()[0]}))
algo.stop()
ray.shutdown()
"""


# Every learning kind as the samplers play it (``--kinds``): its flags. The lean and batched samplers play
# 768 and 256 arenas in the driver; stock samples with RLlib's own runners as the kind's file does.
KINDS = {
    "main": "--config experiments/configs/main.toml",
    # the main job with an LSTM (stock and lean: the batched sampler carries no state)
    "main_lstm": "--config experiments/configs/main.toml --use-lstm",
    "allocator_ppo": "--experiment allocator_ppo --scenario crisis --action-codec need",
    "universal": "--config experiments/configs/universal.toml",
    "best_response": "--config experiments/configs/best_response.toml",
    "selfplay": "--config experiments/configs/selfplay.toml --scenario crisis",
    "league": "--experiment league --scenario standard",
    "curriculum": "--experiment allocator_curriculum --action-codec need",
}
SAMPLERS = {
    "stock": "--sampler stock --num-env-runners 0 --num-envs-per-env-runner 32 --train-batch-size 8192 "
             "--minibatch-size 1024 --num-epochs 3",
    "batched": "--sampler batched --num-env-runners 0 --num-envs-per-env-runner 256 --train-batch-size 8192 "
               "--minibatch-size 1024 --num-epochs 3",
    "lean": "--sampler lean --num-env-runners 0 --num-envs-per-env-runner 768 --train-batch-size 8192 "
            "--minibatch-size 1024 --num-epochs 3",
}


@dataclass
class Args:
    a: Path | None = None
    """tree A (e.g. a worktree of the commit before a change); None: the --kinds table instead"""
    b: Path = Path(".")
    """tree B (with --kinds: the one tree every turn runs)"""
    args: str = "--experiment allocator_mixed --action-codec need"
    """TrainArgs flags for both sides"""
    a_args: str = ""
    """extra TrainArgs flags for A"""
    b_args: str = ""
    """extra TrainArgs flags for B"""
    kinds: tuple[str, ...] = ()
    """learning kinds of KINDS to time, each under every sampler of --samplers in alternating turns"""
    samplers: tuple[str, ...] = ("stock", "batched", "lean")
    """the samplers --kinds compares (SAMPLERS: the same batch, minibatch and epochs for each)"""
    seconds: float = 90.0
    """timed training per turn (after one untimed iteration)"""
    rounds: int = 2
    """turns per side"""


def turn(tree: Path, seconds: float, flags: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree.resolve()), "RAY_ADDRESS": ""}
    run = subprocess.run([sys.executable, "-c", WORKER, str(seconds), flags], capture_output=True, text=True, env=env,
                         cwd=tree, timeout=seconds * 10 + 600)
    if run.returncode != 0:
        raise SystemExit(f"turn in {tree} failed:\n{run.stderr[-2000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def main(args: Args) -> dict[str, list[float]]:
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    if args.a is None:
        for kind in args.kinds:
            sides = {sampler: (args.b, f"{KINDS[kind]} {SAMPLERS[sampler]}") for sampler in args.samplers}
            print(f"== {kind}")
            compare_sides(sides, args)
        return {}
    return compare_sides({"A": (args.a, f"{args.args} {args.a_args}"), "B": (args.b, f"{args.args} {args.b_args}")}, args)


def compare_sides(sides: dict[str, tuple[Path, str]], args: Args) -> dict[str, list[float]]:
    """Each side's env steps/s over ``args.rounds`` turns, the order of the sides reversed every other round."""
    rates: dict[str, list[float]] = {side: [] for side in sides}
    names = list(sides)
    for r in range(args.rounds):
        for side in names if r % 2 == 0 else names[::-1]:
            tree, flags = sides[side]
            out = turn(tree, args.seconds, flags)
            rate = out["env_steps"] / out["seconds"]
            rates[side].append(rate)
            print(f"round {r + 1} {side}: {out['env_steps']:,} env steps in {out['seconds']:.0f} s = {rate:,.0f}/s "
                  f"({out['iterations']} iterations; load average {out['load']:.1f})", flush=True)
    for side, (tree, flags) in sides.items():
        median = statistics.median(rates[side])
        print(f"{side} ({tree}; {shlex.join(shlex.split(flags))}): median {median:,.0f} env steps/s "
              f"= {600 * median:,.0f} per 10 min")
    first = statistics.median(rates[names[0]])
    for side in names[1:]:
        print(f"{side}/{names[0]}: {statistics.median(rates[side]) / first:.2f}x")
    return rates


if __name__ == "__main__":
    main(tyro.cli(Args))
