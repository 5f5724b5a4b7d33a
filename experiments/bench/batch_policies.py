"""Batched vs looped: ``planner`` and the ``need`` codec acting in N arenas at once (issue 40).

Reference-env episodes of the allocator seat are played first (the ``need`` codec's random
corrections in the allocator seat, the scenario's background elsewhere) and their
observations kept; arena *i* of a batch replays episode ``i mod --episodes`` from its start,
so every arena's planner carries an episode's beliefs. Per N of ``--sizes`` each form steps
every arena through ``--ticks`` ticks on one core (no env in the timing):

* ``planner``: :class:`~policies.planner.BatchPlanner` vs N :class:`~policies.planner.PlannerAllocator`
  (:class:`~policies.batch.LoopBatchPolicy`), ``act`` per tick;
* ``need``: :class:`~policies.batch_codecs.BatchNeedCodec` vs N per-arena codecs
  (:class:`~policies.batch_codecs.LoopBatchCodec`), ``features`` then ``decode`` of random
  module outputs per tick, as a training step asks.

It prints actions per second (arenas x ticks / seconds) of each and the speed-up, and checks
the two forms agree on every action (a benchmark of a wrong answer is no benchmark).

    python -m experiments.bench.batch_policies --scenario standard --sizes 256 1024
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import tyro

import commons_arena
from commons_arena.enums import ALLOCATOR
from policies import Population
from policies.batch import LoopBatchPolicy
from policies.batch_codecs import BatchNeedCodec, LoopBatchCodec
from policies.codecs import NeedResidualCodec
from policies.focal import FocalEnv
from policies.planner import BatchPlanner, PlannerAllocator


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


def played_observations(config, episodes: int, seed: int) -> list[np.ndarray]:
    """Per episode, the allocator's observations tick by tick ``(ticks, obs_dim)``."""
    env = FocalEnv.from_scenario(config, [ALLOCATOR], Population.default(config))
    codec, rng = NeedResidualCodec(config), np.random.default_rng(seed)
    played = []
    for e in range(episodes):
        obs, _ = env.reset(seed=seed + e)
        codec.reset()
        seen = []
        while not env.episode_over:
            seen.append(obs[ALLOCATOR])
            obs, *_ = env.step({ALLOCATOR: codec.decode(obs[ALLOCATOR], rng.integers(0, codec.nvec))})
        played.append(np.stack(seen))
    return played


def timed(step, ticks: int) -> tuple[float, list[np.ndarray]]:
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
        stream = np.stack([played[i % len(played)][:ticks] for i in range(n)], axis=1)  # ticks x arenas x obs
        nvec = NeedResidualCodec(config).nvec
        codes = np.random.default_rng(args.seed).integers(0, nvec, (ticks, n, len(nvec)))
        seeds = list(range(n))

        loop, batch = LoopBatchPolicy(lambda: PlannerAllocator(config), n), BatchPlanner(config, n)
        loop.reset(seeds)
        batch.reset(seeds)
        t_loop, a_loop = timed(lambda t: loop.act(stream[t]), ticks)
        t_batch, a_batch = timed(lambda t: batch.act(stream[t]), ticks)
        same = all(np.array_equal(a, b) for a, b in zip(a_loop, a_batch, strict=True))
        report("planner", n, ticks, t_loop, t_batch, same, figures)

        loop_codec = LoopBatchCodec(lambda: NeedResidualCodec(config), n)
        batch_codec = BatchNeedCodec(config, n)
        loop_codec.reset()
        batch_codec.reset()

        def codec_step(codec, t):
            return codec.features(stream[t]), codec.decode(stream[t], codes[t])

        t_loop, a_loop = timed(lambda t: codec_step(loop_codec, t), ticks)
        t_batch, a_batch = timed(lambda t: codec_step(batch_codec, t), ticks)
        same = all(np.array_equal(fa, fb) and np.array_equal(da, db) for (fa, da), (fb, db) in zip(a_loop, a_batch, strict=True))
        report("need codec", n, ticks, t_loop, t_batch, same, figures)
    return figures


def report(what: str, n: int, ticks: int, t_loop: float, t_batch: float, same: bool, figures: dict[str, float]) -> None:
    loop_rate, batch_rate = n * ticks / t_loop, n * ticks / t_batch
    print(f"  {what:<10} N={n:<5} loop {loop_rate:10,.0f} actions/s   batched {batch_rate:10,.0f} actions/s   "
          f"x{batch_rate / loop_rate:5.1f}   identical: {'yes' if same else 'NO'}")
    if not same:
        raise AssertionError(f"{what} at N={n}: the batched form's actions differ from the loop's")
    key = what.replace(" ", "_")
    figures[f"{key}_loop_{n}"], figures[f"{key}_batched_{n}"] = loop_rate, batch_rate


if __name__ == "__main__":
    main(tyro.cli(Args))
