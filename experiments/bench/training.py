"""Where training time goes: seconds per iteration, env time as a share of sampling time.

Builds the same algorithm as ``commons-arena train`` (same arguments), runs a few
iterations and prints, per iteration, the wall time, RLlib's sampling time and the time
spent inside the arena's ``reset``/``step`` (summed over every env of every runner).

    python -m experiments.bench.training --iterations 5 --num-envs-per-env-runner 8
    python -m experiments.bench.training --iterations 5 --experiment selfplay   # four learning modules
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import numpy as np
import tyro

from experiments.training.algorithm import build_algorithm
from experiments.training.args import TrainArgs
from experiments.training.callbacks import foreach_sampling_runner
from experiments.training.setup import resolve, with_unit_scales


@dataclass
class Args:
    train: TrainArgs
    """the training configuration to measure"""
    warmup: int = 1
    """iterations not counted (build, first compile)"""


def env_seconds(algo) -> float:
    def seconds(runner) -> float:  # a batched runner's env times its one batch; the stock one, each sub-env
        batch = getattr(runner.env, "env_seconds", None)
        return batch if batch is not None else sum(env.unwrapped.env_seconds for env in runner.env.envs)

    per_runner = foreach_sampling_runner(algo, seconds)
    return float(sum(per_runner))


def main(args: Args) -> None:
    import ray
    import torch

    torch.set_num_threads(args.train.torch_threads)
    # ray.init's annotation says int, but it takes a level name (its own default is "info")
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False,
             logging_level="ERROR")  # type: ignore[arg-type]
    # Unit scales: the learning signal does not matter here, only where the time goes.
    setup = with_unit_scales(resolve(args.train))
    print(f"learning: {setup.plan.describe()}")
    algo = build_algorithm(setup)
    rows = []
    iterations = args.train.iterations or 5
    sampled = 0
    for i in range(args.warmup + iterations):
        env_before = env_seconds(algo)
        start = time.perf_counter()
        result = algo.train()
        wall = time.perf_counter() - start
        env = env_seconds(algo) - env_before
        sample = float(result.get("timers", {}).get("env_runner_sampling_timer", np.nan))
        steps = int(result.get("num_env_steps_sampled_lifetime", 0)) - sampled  # what the runners really sampled
        sampled += steps
        if i >= args.warmup:
            rows.append((wall, sample, env, steps))
            print(f"iter {i - args.warmup + 1}: {wall:5.2f} s wall, {steps} env steps, sampling {sample:5.2f} s, "
                  f"inside the env {env:5.2f} s")
    wall, sample, env, per_iteration = (float(np.mean(c)) for c in zip(*rows, strict=True))
    rate = per_iteration / wall
    print(f"mean: {wall:.2f} s/iteration, {rate:,.0f} env steps/s = {600 * rate:,.0f} per 10 min; "
          f"sampling {sample:.2f} s, env {env:.2f} s = {env / sample:.0%} of sampling, {env / wall:.0%} of the iteration "
          f"(load average {os.getloadavg()[0]:.1f}: the machine's other work slows every figure)")
    algo.stop()
    ray.shutdown()


if __name__ == "__main__":
    main(tyro.cli(Args))
