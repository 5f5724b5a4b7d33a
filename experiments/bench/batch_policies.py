"""Batched vs looped: ``planner`` and the ``need`` codec acting in N arenas at once (issue 40).

Reference-env episodes are played first through the evaluation engine (the ``need`` codec's
random corrections in the allocator seat, the scenario's background elsewhere) and the
allocator's observations kept; arena *i* of a batch replays episode ``i mod --episodes`` from its start,
so every arena's planner carries an episode's beliefs. Per N of ``--sizes`` each form steps
every arena through ``--ticks`` ticks on one core (no env in the timing):

* ``planner``: :class:`~policies.planner.BatchPlanner` vs N per-arena planners (batches of one,
  :class:`~policies.batch.LoopBatchPolicy`), ``act`` per tick;
* ``need``: :class:`~policies.codecs.NeedResidualCodec` in N arenas vs N of it in one arena each
  (batches of one, called one by one), ``features`` then ``decode`` of random
  module outputs per tick, as a training step asks.

It prints actions per second (arenas x ticks / seconds) of each and the speed-up, and checks
the two forms agree on every action (a benchmark of a wrong answer is no benchmark).

    python -m experiments.bench.batch_policies --scenario standard --sizes 256 1024
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tyro

import commons_arena
from commons_arena.enums import ALLOCATOR
from experiments.evaluation.engine import Observer, Tick, play
from policies import Population
from policies.batch import LoopBatchPolicy
from policies.codecs import NeedResidualCodec
from policies.planner import BatchPlanner
from policies.registry import make_policy


@dataclass
class Args:
    scenario: str = "standard"
    """scenario whose allocator observations are replayed"""
    sizes: list[int] = field(default_factory=lambda: [256, 1024])
    """batch sizes N (arenas) to time"""
    episodes: int = 16
    """reference episodes played for observations (arena i replays episode i mod this)"""
    ticks: int = 0
    """ticks each arena steps (0: the shortest episode's length)"""
    seed: int = 0
    """first episode seed (episode e uses seed + e); also seeds the random module outputs"""


class RandomCorrections:
    """The allocator seat playing the ``need`` codec's uniform random corrections (a Policy)."""

    def __init__(self, config, seed: int) -> None:
        self.codec, self.rng = NeedResidualCodec(config), np.random.default_rng(seed)

    def reset(self, seed: int | None = None) -> None:
        self.codec.reset()

    def act(self, observation: np.ndarray) -> np.ndarray:
        return self.codec.decode(observation, self.rng.integers(0, self.codec.nvec))


class AllocatorObservations(Observer):
    """Keeps the allocator's observations, episode by episode."""

    def __init__(self) -> None:
        self.episodes: list[list[np.ndarray]] = []

    def begin(self, seed: int) -> None:
        self.episodes.append([])

    def tick(self, tick: Tick) -> None:
        self.episodes[-1].append(np.array(tick.observations[ALLOCATOR], copy=True))


def played_observations(config, episodes: int, seed: int) -> list[np.ndarray]:
    """Per episode, the allocator's observations tick by tick ``(ticks, obs_dim)``."""
    background = Population.default(config)

    def lineup(env):
        return {**background.build(config, env=env, strict=False), ALLOCATOR: RandomCorrections(config, seed)}

    seen = AllocatorObservations()
    for _ in play(config, lineup, range(seed, seed + episodes), seen):
        pass
    return [np.stack(e) for e in seen.episodes]


def time_ticks(step: Callable[[int], Any], ticks: int) -> tuple[float, list[Any]]:
    """Seconds for ``step(t)`` over ``ticks`` ticks, and what each returned."""
    out = []
    start = time.perf_counter()
    for t in range(ticks):
        out.append(step(t))
    return time.perf_counter() - start, out


def main(args: Args) -> dict[str, float]:
    config = commons_arena.load_scenario(args.scenario)
    played = played_observations(config, args.episodes, args.seed)
    ticks = args.ticks or min(len(p) for p in played)
    if ticks > min(len(p) for p in played):
        raise ValueError(f"--ticks {ticks} is longer than the shortest episode ({min(len(p) for p in played)} ticks)")
    print(f"scenario {config.name} ({config.content_hash}); {ticks} ticks per arena, one process")
    figures: dict[str, float] = {}
    for n in args.sizes:
        one_size(config, played, ticks, n, args.seed, figures)
    return figures


def one_size(config, played: list[np.ndarray], ticks: int, n: int, seed: int, figures: dict[str, float]) -> None:
    """Both comparisons at ``n`` arenas (figures added to ``figures``)."""
    stream = np.stack([played[i % len(played)][:ticks] for i in range(n)], axis=1)  # ticks x arenas x obs
    nvec = NeedResidualCodec(config).nvec
    codes = np.random.default_rng(seed).integers(0, nvec, (ticks, n, len(nvec)))
    seeds = list(range(n))

    loop, batch = LoopBatchPolicy(lambda: make_policy("planner", config, ALLOCATOR), n), BatchPlanner(config, ALLOCATOR, n)
    loop.reset(seeds)
    batch.reset(seeds)
    t_loop, a_loop = time_ticks(lambda t: loop.act(stream[t]), ticks)
    t_batch, a_batch = time_ticks(lambda t: batch.act(stream[t]), ticks)
    same = all(np.array_equal(a, b) for a, b in zip(a_loop, a_batch, strict=True))
    print_figures("planner", n, ticks, t_loop, t_batch, same, figures)

    ones, batch_codec = [NeedResidualCodec(config) for _ in range(n)], NeedResidualCodec(config, num_envs=n)
    batch_codec.reset()

    def one_by_one(t: int) -> tuple[np.ndarray, np.ndarray]:
        return (np.stack([c.features(o) for c, o in zip(ones, stream[t], strict=True)]),
                np.stack([c.decode(o, k) for c, o, k in zip(ones, stream[t], codes[t], strict=True)]))

    t_loop, c_loop = time_ticks(one_by_one, ticks)
    t_batch, c_batch = time_ticks(lambda t: (batch_codec.features(stream[t]), batch_codec.decode(stream[t], codes[t])), ticks)
    same = all(np.array_equal(fa, fb) and np.array_equal(da, db) for (fa, da), (fb, db) in zip(c_loop, c_batch, strict=True))
    print_figures("need codec", n, ticks, t_loop, t_batch, same, figures)


def print_figures(what: str, n: int, ticks: int, t_loop: float, t_batch: float, same: bool, figures: dict[str, float]) -> None:
    loop_rate, batch_rate = n * ticks / t_loop, n * ticks / t_batch
    print(f"  {what:<10} N={n:<5} loop {loop_rate:10,.0f} actions/s   batched {batch_rate:10,.0f} actions/s   "
          f"x{batch_rate / loop_rate:5.1f}   identical: {'yes' if same else 'NO'}")
    if not same:
        raise AssertionError(f"{what} at N={n}: the batched form's actions differ from the loop's")
    key = what.replace(" ", "_")
    figures[f"{key}_loop_{n}"], figures[f"{key}_batched_{n}"] = loop_rate, batch_rate


if __name__ == "__main__":
    main(tyro.cli(Args))
