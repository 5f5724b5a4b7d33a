"""A reset's random draws for many arenas at once: the reference's numbers, from the same streams.

At reset the reference draws, from ``np.random.default_rng(seed)``: each team's jobs
(:meth:`commons_arena.mechanics.jobs.TeamJobSource.draw`: a noisy value per listed job, then
per generator tick one ``random()`` and, for a job, ``integers`` / ``uniform`` draws), and
during the episode one ``random()`` per random shock per tick. Every one of those numbers is a
function of the generator's raw 64-bit outputs (PCG64): ``random()`` is ``(raw >> 11) * 2**-53``,
``uniform(lo, hi)`` is ``lo + (hi - lo) * random()``, and ``integers(lo, hi)`` is numpy's Lemire
method over 32-bit halves of raw outputs (the high half kept for the next 32-bit draw). Here
each arena's raw outputs are taken at once (``random_raw``) and those formulas run over all
arenas as arrays. A Lemire rejection (odds about range / 2**32 per draw) marks the arena
``redo``; the caller draws it with the reference's own code. ``tests/commons_arena/test_batched.py``
holds both ways to the same state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from commons_arena.rules import Rules

TWO_POW_53 = 1.0 / 9007199254740992.0
LOW32 = np.uint64(0xFFFFFFFF)


class _Streams:
    """The raw outputs of one PCG64 per arena and each one's read position and 32-bit buffer."""

    def __init__(self, raw: np.ndarray) -> None:
        self.raw = raw
        self.rows = np.arange(raw.shape[0])
        self.at = np.zeros(raw.shape[0], dtype=np.int64)
        self.has_half = np.zeros(raw.shape[0], dtype=bool)
        self.half = np.zeros(raw.shape[0], dtype=np.uint64)
        self.redo = np.zeros(raw.shape[0], dtype=bool)

    def random(self, on: np.ndarray) -> np.ndarray:
        """``Generator.random()`` in the arenas ``on`` (the others' streams do not move)."""
        x = self.raw[self.rows, self.at]
        self.at += on
        return (x >> np.uint64(11)).astype(np.float64) * TWO_POW_53

    def uniform(self, low: float, high: float, on: np.ndarray) -> np.ndarray:
        return low + (high - low) * self.random(on)

    def _uint32(self, on: np.ndarray) -> np.ndarray:
        x = self.raw[self.rows, self.at]
        value = np.where(self.has_half, self.half, x & LOW32)
        fresh = on & ~self.has_half
        self.half = np.where(fresh, x >> np.uint64(32), self.half)
        self.at += fresh
        self.has_half = np.where(on, ~self.has_half, self.has_half)
        return value

    def integers(self, low: int, high: int, on: np.ndarray) -> np.ndarray:
        """``Generator.integers(low, high)`` (int64, ``high`` excluded) in the arenas ``on``."""
        span = high - 1 - low
        if span == 0:  # numpy draws nothing
            return np.full(self.rows.shape[0], low, dtype=np.int64)
        m = self._uint32(on) * np.uint64(span + 1)
        threshold = (0xFFFFFFFF - span) % (span + 1)
        self.redo |= on & ((m & LOW32) < np.uint64(threshold))
        return low + (m >> np.uint64(32)).astype(np.int64)


def round_2(x: np.ndarray) -> np.ndarray:
    """Python's ``round(v, 2)`` of each entry (the reference's rounding; numpy's can differ).

    ``round(v, 2)`` is the float nearest to ``k / 100``, k the integer nearest to the exact
    ``100 v`` (ties to even), and ``k / 100.0`` is that float (one correctly rounded division).
    ``100 v`` rounded to a float is within an ulp of the exact product, so ``rint`` finds k
    unless the product lies near a half: those few entries go through Python's ``round``."""
    scaled = x * 100.0
    out = np.rint(scaled) / 100.0
    near_half = np.abs(scaled - np.floor(scaled) - 0.5) < 1e-6
    if near_half.any():
        out[near_half] = [round(v, 2) for v in x[near_half].tolist()]
    return out


class TeamDraws(NamedTuple):
    """One team's drawn numbers in R arenas."""

    fixed_value: np.ndarray  # (R, listed jobs)
    arrived: np.ndarray  # (R, generator ticks) bool: a job arrived that tick
    memory: np.ndarray  # (R, G) index into the generator's memory choices
    work: np.ndarray  # (R, G) rounded as the reference rounds
    gpus: np.ndarray  # (R, G)
    slack: np.ndarray  # (R, G)
    value: np.ndarray  # (R, G) rounded
    priority: np.ndarray  # (R, G)


class ResetDraws(NamedTuple):
    teams: list[TeamDraws]
    uniforms: np.ndarray  # (R, max_ticks, random shocks)
    redo: np.ndarray  # (R,) bool: draw this arena with the reference's code
    seeds: tuple[int, ...]  # (R,) the seeds drawn

    def take(self, rows: np.ndarray) -> ResetDraws:
        """The draws of arenas ``rows`` (positions in this batch of draws)."""
        teams = [TeamDraws(*(field[rows] for field in team)) for team in self.teams]
        return ResetDraws(teams, self.uniforms[rows], self.redo[rows], tuple(self.seeds[i] for i in rows.tolist()))


class DrawCache:
    """Draws made ahead: each arena's next episode drawn together with every other arena whose
    draws were used up, so a batch whose arenas end at different ticks still draws in few calls."""

    def __init__(self, rules: Rules, n_random: int, num_envs: int) -> None:
        self.rules, self.n_random = rules, n_random
        self.seeds: list[int | None] = [None] * num_envs  # the seed each arena's cached draws are for
        self.row = np.zeros(num_envs, dtype=np.int64)  # its row in ``self.draws``
        self.draws: ResetDraws | None = None

    def clear(self) -> None:
        self.seeds = [None] * len(self.seeds)

    def take(self, index: np.ndarray, seeds: Sequence[int], upcoming: Sequence[int]) -> ResetDraws:
        """The draws of arenas ``index`` seeded ``seeds``; ``upcoming[i]``: the seed arena i's next
        reset will have, for drawing ahead in arenas whose cached draws are used up."""
        wanted = index.tolist()
        if any(self.seeds[i] != seed for i, seed in zip(wanted, seeds, strict=True)):
            arenas = [i for i in range(len(self.seeds)) if self.seeds[i] is None]
            for i, seed in zip(wanted, seeds, strict=True):
                if self.seeds[i] != seed and i not in arenas:
                    arenas.append(i)
            planned = [seeds[wanted.index(i)] if i in wanted else upcoming[i] for i in arenas]
            fresh = draw_resets(self.rules, planned, self.n_random)
            if self.draws is not None:  # keep the rows still unused
                kept = [i for i in range(len(self.seeds)) if self.seeds[i] is not None and i not in arenas]
                old = self.draws.take(self.row[kept])
                fresh = _concat(old, fresh)
                arenas = kept + arenas
                planned = [self.seeds[i] for i in kept] + planned  # type: ignore[misc]
            self.draws = fresh
            self.row[arenas] = np.arange(len(arenas))
            for i, seed in zip(arenas, planned, strict=True):
                self.seeds[i] = seed
        assert self.draws is not None
        taken = self.draws.take(self.row[index])
        for i in wanted:
            self.seeds[i] = None
        return taken


def _concat(a: ResetDraws, b: ResetDraws) -> ResetDraws:
    teams = [TeamDraws(*(np.concatenate([x, y]) for x, y in zip(ta, tb, strict=True)))
             for ta, tb in zip(a.teams, b.teams, strict=True)]
    return ResetDraws(teams, np.concatenate([a.uniforms, b.uniforms]), np.concatenate([a.redo, b.redo]),
                      a.seeds + b.seeds)


def raw_outputs(rules: Rules, n_random: int) -> int:
    """Raw outputs one arena's reset can read, at most (no rejection)."""
    total = n_random * rules.config.max_ticks
    for source in rules.job_sources:
        total += sum(1 for job in source.fixed if job.value_noise > 0)
        gen = source.generator
        if gen is not None:
            total += (gen.last_tick - gen.first_tick + 1) * 7  # random, 2 uniforms, 4 integers
    return total + 1


def draw_resets(rules: Rules, seeds: Sequence[int], n_random: int) -> ResetDraws:
    """Every draw of a reset (jobs, then the episode's shock uniforms) for arenas seeded ``seeds``."""
    size = raw_outputs(rules, n_random)
    raw = np.stack([np.random.PCG64(seed).random_raw(size) for seed in seeds]) if seeds else np.zeros(
        (0, size), dtype=np.uint64)
    s = _Streams(raw)
    R = raw.shape[0]
    every = np.ones(R, dtype=bool)
    teams = []
    for source in rules.job_sources:
        values = [np.full(R, job.value) if job.value_noise <= 0
                  else s.uniform(job.value - job.value_noise, job.value + job.value_noise, every)
                  for job in source.fixed]
        fixed_value = np.stack(values, axis=1) if values else np.zeros((R, 0))
        gen = source.generator
        G = 0 if gen is None else gen.last_tick - gen.first_tick + 1
        columns: list[list[np.ndarray]] = [[] for _ in range(7)]
        if gen is not None:
            for _ in range(G):
                arrived = s.random(every) < gen.rate
                columns[0].append(arrived)
                columns[1].append(s.integers(0, len(gen.min_memory_gb), arrived))
                columns[2].append(s.uniform(gen.work[0], gen.work[1], arrived))
                columns[3].append(s.integers(gen.gpus[0], gen.gpus[1] + 1, arrived))
                columns[4].append(s.integers(gen.slack[0], gen.slack[1] + 1, arrived))
                columns[5].append(s.uniform(gen.value[0], gen.value[1], arrived))
                columns[6].append(s.integers(gen.priority[0], gen.priority[1] + 1, arrived))
        came, memory, work, gpus, slack, value, priority = (
            np.stack(c, axis=1) if c else np.zeros((R, 0)) for c in columns)
        arrived = came.astype(bool)
        for drawn in (work, value):
            drawn[arrived] = round_2(drawn[arrived])
        teams.append(TeamDraws(fixed_value, arrived, memory.astype(np.int64), work, gpus.astype(np.int64),
                               slack.astype(np.int64), value, priority.astype(np.int64)))
    ticks = rules.config.max_ticks
    # the rest of the stream is the shocks' random() draws, tick by tick
    following = s.raw[s.rows[:, None], s.at[:, None] + np.arange(ticks * n_random)[None, :]]
    uniforms = (following >> np.uint64(11)).astype(np.float64) * TWO_POW_53
    return ResetDraws(teams, uniforms.reshape(R, ticks, n_random), s.redo.copy(), tuple(seeds))


class TeamJobs(NamedTuple):
    """The seed-independent numbers of one team's jobs, as arrays (from its ``TeamJobSource``)."""

    gpus: np.ndarray  # (listed jobs,)
    memory: np.ndarray
    work: np.ndarray
    arrival: np.ndarray
    deadline: np.ndarray
    priority: np.ndarray
    fits: np.ndarray  # (listed, T) padded -1
    deps: np.ndarray  # (listed, D) padded -1
    first_tick: int  # the generator's (0 when none)
    memories: np.ndarray  # (choices,) the generator's memory choices
    memory_fits: np.ndarray  # (choices, T) padded -1

    @classmethod
    def of(cls, rules: Rules, team: int, n_deps: int) -> TeamJobs:
        source, T = rules.job_sources[team], rules.n_tiers
        fixed = source.fixed
        fits = np.full((len(fixed), T), -1, dtype=np.int64)
        deps = np.full((len(fixed), n_deps), -1, dtype=np.int64)
        for j, job in enumerate(fixed):
            fits[j, : len(job.fits)] = job.fits
            deps[j, : len(job.deps)] = job.deps
        gen = source.generator
        memories = tuple(float(m) for m in gen.min_memory_gb) if gen is not None else ()
        memory_fits = np.full((len(memories), T), -1, dtype=np.int64)
        for k, m in enumerate(memories):
            tiers = source.fits_by_memory[m]
            memory_fits[k, : len(tiers)] = tiers
        return cls(
            gpus=np.array([j.gpus for j in fixed], dtype=np.int64),
            memory=np.array([j.min_memory_gb for j in fixed], dtype=np.float64),
            work=np.array([j.work for j in fixed], dtype=np.float64),
            arrival=np.array([j.arrival for j in fixed], dtype=np.int64),
            deadline=np.array([j.deadline for j in fixed], dtype=np.int64),
            priority=np.array([j.priority for j in fixed], dtype=np.int64),
            fits=fits,
            deps=deps,
            first_tick=gen.first_tick if gen is not None else 0,
            memories=np.array(memories, dtype=np.float64),
            memory_fits=memory_fits,
        )
