"""CPU time per ``step()`` of two source trees of the arena, side by side (A/B).

Each tree is imported in its own worker process (``PYTHONPATH=<tree>``); both replay the
same action sequences and take turns in chunks, so a change in machine load hits both
about equally. The figure is CPU time (``time.process_time``) per step, not wall time:
the machine may be shared. Each pair of turns gives one ratio ``b/a``; the report is the
median and range of those ratios (``> 1``: tree B is slower).

Two action sources: ``random`` (uniform draws per agent, as ``bench.env``) and
``scripted`` (the scenario's scripted population, recorded once with tree A's policies
and replayed verbatim by both trees, so only the env is timed). Both workers also
return a digest of every reward they produced; the run fails if the trees disagree.

    git worktree add /work/wt/before 2c6de87
    python -m experiments.bench.step_ab --before /work/wt/before --after . --scenario crisis --actions scripted
"""

from __future__ import annotations

import os
import pickle
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tyro

from commons_arena.files import write_file


@dataclass
class Args:
    before: Path
    """tree A (e.g. a worktree of the commit before a change)"""
    after: Path = Path(".")
    """tree B"""
    scenario: str = "standard"
    """scenario to step"""
    actions: str = "random"
    """``random`` or ``scripted`` (the scenario's background population, recorded once)"""
    rounds: int = 20
    """turns per tree"""
    chunk: int = 2_000
    """steps per turn"""
    seed: int = 0
    """seed of the action draws and of the first reset"""


def random_episodes(env, seed: int, steps: int) -> list[tuple[int, list[dict]]]:
    """Uniform actions; a new episode (seed + e) whenever the last one ends."""
    rng = np.random.default_rng(seed)
    agents = list(env.possible_agents)
    episodes, e, left = [], 0, steps
    while left > 0:
        env.reset(seed=seed + e)
        actions = []
        while env.agents and left > 0:
            act = {a: rng.integers(0, env.action_space(a).nvec) for a in agents}
            env.step(act)
            actions.append(act)
            left -= 1
        episodes.append((seed + e, actions))
        e += 1
    return episodes


def scripted_episodes(env, seed: int, steps: int) -> list[tuple[int, list[dict]]]:
    """The scenario's scripted population, each step's actions recorded as played."""
    from policies import Population
    from policies.focal import FocalEnv

    policies = Population().build(env.config, env=env)
    played: list[dict] = []
    step = env.step

    def recording_step(actions):
        played.append({a: np.array(v) for a, v in actions.items()})
        return step(actions)

    env.step = recording_step
    episodes, e, left = [], 0, steps
    while left > 0:
        played = []
        episode = FocalEnv(env, [], policies)
        episode.reset(seed=seed + e)
        while not episode.episode_over:
            episode.step({})
        episodes.append((seed + e, played))
        left -= len(played)
        e += 1
    del env.step
    return episodes


WORKER = r"""
import hashlib, pickle, sys, time
import commons_arena
scenario, path = sys.argv[1], sys.argv[2]
episodes = pickle.load(open(path, "rb"))
env = commons_arena.parallel_env(scenario=scenario)
digest = hashlib.sha256()
flat = [(seed, i == 0, act) for seed, acts in episodes for i, act in enumerate(acts)]
pos = 0
for line in sys.stdin:
    n = int(line)
    if n == 0:
        print(digest.hexdigest(), flush=True)
        continue
    rewards = []
    start = time.process_time()
    for _ in range(n):
        seed, first, act = flat[pos % len(flat)]
        pos += 1
        if first:
            env.reset(seed=seed)
        rewards.append(env.step(act)[1])
    cpu = time.process_time() - start
    for r in rewards:
        digest.update(repr(sorted(r.items())).encode())
    print(cpu, flush=True)
"""


def worker(tree: Path, scenario: str, path: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(tree.resolve()))
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, scenario, path], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def ask(proc: subprocess.Popen, n: int) -> str:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(f"{n}\n")
    proc.stdin.flush()
    return proc.stdout.readline().strip()


def main(args: Args) -> dict[str, float]:
    if args.actions not in ("random", "scripted"):
        raise SystemExit(f"--actions must be random or scripted, got {args.actions!r}")
    import commons_arena

    env = commons_arena.parallel_env(scenario=args.scenario)
    record = random_episodes if args.actions == "random" else scripted_episodes
    episodes = record(env, args.seed, args.rounds * args.chunk)
    scratch = tempfile.TemporaryDirectory(prefix="step_ab-")
    episodes_file = write_file(Path(scratch.name) / "episodes.pkl", pickle.dumps(episodes))
    try:
        a, b = worker(args.before, args.scenario, str(episodes_file)), worker(args.after, args.scenario, str(episodes_file))
        ask(a, 200), ask(b, 200)  # warm-up (imports, first episode), not timed
        ratios, cpu_a, cpu_b = [], 0.0, 0.0
        for r in range(args.rounds):
            first, second = (a, b) if r % 2 == 0 else (b, a)  # alternate who goes first
            t1, t2 = float(ask(first, args.chunk)), float(ask(second, args.chunk))
            ta, tb = (t1, t2) if first is a else (t2, t1)
            cpu_a, cpu_b = cpu_a + ta, cpu_b + tb
            ratios.append(tb / ta)
        digests = ask(a, 0), ask(b, 0)
        for proc in (a, b):
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait()
    finally:
        scratch.cleanup()
    if digests[0] != digests[1]:
        raise SystemExit(f"the trees' rewards differ ({digests[0][:12]} vs {digests[1][:12]}): not the same game")
    steps = args.rounds * args.chunk
    qs = statistics.quantiles(ratios, n=4)
    result = {
        "a_us_per_step": 1e6 * cpu_a / steps,
        "b_us_per_step": 1e6 * cpu_b / steps,
        "ratio_total": cpu_b / cpu_a,
        "ratio_median": statistics.median(ratios),
        "ratio_q1": qs[0],
        "ratio_q3": qs[2],
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
    }
    print(
        f"{args.scenario}/{args.actions}: A {result['a_us_per_step']:.1f} µs/step, B {result['b_us_per_step']:.1f} µs/step "
        f"(CPU); B/A total {result['ratio_total']:.3f}, per turn median {result['ratio_median']:.3f} "
        f"[IQR {qs[0]:.3f}–{qs[2]:.3f}, range {min(ratios):.3f}–{max(ratios):.3f}] over {args.rounds} turns of {args.chunk}"
    )
    return result


if __name__ == "__main__":
    main(tyro.cli(Args))
