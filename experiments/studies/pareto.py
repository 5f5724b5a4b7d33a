"""The welfare-exploitability frontier's geometry: allocators and their mixtures as points, which are
on the frontier, and whether an allocator is beyond it (``commons-arena frontier``: :mod:`experiments.studies.frontier`).

**Mixtures** (not re-run: computed from the stored per-seed rows). A mixture of allocators A and B
with weight ``w`` plays A in a share ``w`` of the episodes: its welfare on a seed is
``w x welfare_A + (1 - w) x welfare_B`` and each seat's gain ``w x gain_A + (1 - w) x gain_B``, where
each gain is the best response *to that allocator*. That is what a team gains that knows which
allocator plays (it can tell within an episode); a team blind to it gains at most that, so the
mixture's exploitability here is an upper bound of its best responses' (each itself a lower bound of
the true best response). The **frontier** of a tier is the set of scripted allocators and their
pairwise mixtures (weights ``step, 2 step, ...``) that no other of them beats on both axes.

**Beyond the frontier**, per allocator X against the frontier of the *other* scripted allocators and
their mixtures, by a paired bootstrap over the seeds (the same resampled seeds for every allocator,
:data:`RESAMPLES` resamples, seeded): ``exploitability_margin`` = the least exploitability of a member
with welfare at least X's, minus X's (> 0: X is less exploitable than the frontier at its welfare),
``welfare_margin`` = X's welfare minus the most welfare of a member at most as exploitable (> 0: X has
more welfare than the frontier at its exploitability), each with its 95% interval; ``verdict``:
``beyond (95% CI)`` when every member is beaten on one axis with the interval above 0, ``beyond
(means)`` when none beats X on both axes by the means, else ``inside`` naming a member that does. The
intervals are not corrected for the many members compared.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

RESAMPLES = 2000  # bootstrap resamples of the seeds


@dataclass
class Point:
    """An allocator, or a mixture of two, on one tier: per-seed welfare and per-seat gains, and the
    same means over every bootstrap resample of the seeds (``boot_*``; linear in the per-seed rows, so a
    mixture's are the mixture of its members')."""

    label: str
    welfare: np.ndarray  # (seeds,)
    gains: dict[str, np.ndarray]  # seat -> (seeds,) the best response's gain over truthful
    boot_welfare: np.ndarray  # (resamples,)
    boot_gains: np.ndarray  # (seats, resamples), seats in the order of `gains`
    members: tuple[tuple[str, float], ...] = field(default=())

    @classmethod
    def of(cls, label: str, welfare: Sequence[float], gains: Mapping[str, Sequence[float]],
           resamples: np.ndarray) -> Point:
        w = np.asarray(welfare, dtype=np.float64)
        g = {seat: np.asarray(v, dtype=np.float64) for seat, v in gains.items()}
        return cls(label, w, g, w[resamples].mean(axis=1), np.stack([v[resamples].mean(axis=1) for v in g.values()]),
                   ((label, 1.0),))

    def mix(self, other: Point, w: float) -> Point:
        """Plays ``self`` in a share ``w`` of the episodes, ``other`` in the rest."""
        if list(self.gains) != list(other.gains):
            raise ValueError(f"{self.label} and {other.label} were measured on other seats")
        return Point(f"{w:g} {self.label} + {1 - w:g} {other.label}", w * self.welfare + (1 - w) * other.welfare,
                     {s: w * self.gains[s] + (1 - w) * other.gains[s] for s in self.gains},
                     w * self.boot_welfare + (1 - w) * other.boot_welfare,
                     w * self.boot_gains + (1 - w) * other.boot_gains,
                     ((self.label, w), (other.label, 1 - w)))

    @property
    def mean_welfare(self) -> float:
        return float(self.welfare.mean())

    @property
    def seat_means(self) -> dict[str, float]:
        return {s: float(v.mean()) for s, v in self.gains.items()}

    @property
    def exploiting_seat(self) -> str:
        means = self.seat_means
        return max(means, key=lambda s: means[s])

    @property
    def exploitability(self) -> float:
        return max(self.seat_means.values())

    @property
    def boot_exploitability(self) -> np.ndarray:
        return self.boot_gains.max(axis=0)


def resample_indices(seeds: int, resamples: int = RESAMPLES, seed: int = 0) -> np.ndarray:
    """(resamples, seeds) indices drawn with replacement: one bootstrap shared by every allocator (paired)."""
    return np.random.default_rng(seed).integers(0, seeds, size=(resamples, seeds))


def mixtures(points: Sequence[Point], step: float) -> list[Point]:
    """Every point, and every pairwise mixture at weights ``step, 2 step, ... < 1``."""
    if not 0 < step < 1:
        raise ValueError(f"the mixture step must be in (0, 1), got {step}")
    weights = [round(k * step, 10) for k in range(1, int(round(1 / step))) if k * step < 1 - 1e-9]
    return [*points, *(a.mix(b, w) for a, b in itertools.combinations(points, 2) for w in weights)]


def pareto(points: Sequence[Point]) -> list[Point]:
    """The points no other beats on both axes (welfare at least, exploitability at most, one strictly),
    by increasing welfare."""
    def beaten(p: Point) -> bool:
        return any(q.mean_welfare >= p.mean_welfare and q.exploitability <= p.exploitability
                   and (q.mean_welfare > p.mean_welfare or q.exploitability < p.exploitability) for q in points)
    return sorted((p for p in points if not beaten(p)), key=lambda p: (p.mean_welfare, -p.exploitability))


def interval(samples: np.ndarray) -> tuple[float, float]:
    low, high = np.percentile(samples, [2.5, 97.5])
    return float(low), float(high)


def beyond(x: Point, members: Sequence[Point]) -> dict[str, Any]:
    """Where ``x`` sits against ``members`` (a frontier's points; module docstring)."""
    if not members:
        return {"verdict": "no frontier (no other scripted allocator)"}
    xw, xe = x.mean_welfare, x.exploitability
    out: dict[str, Any] = {}
    richer = [m for m in members if m.mean_welfare >= xw]
    if richer:
        m = min(richer, key=lambda m: m.exploitability)
        low, high = interval(m.boot_exploitability - x.boot_exploitability)
        out.update({"exploitability_margin": m.exploitability - xe, "exploitability_margin_low": low,
                    "exploitability_margin_high": high, "frontier_at_welfare": m.label})
    safer = [m for m in members if m.exploitability <= xe]
    if safer:
        m = max(safer, key=lambda m: m.mean_welfare)
        low, high = interval(x.boot_welfare - m.boot_welfare)
        out.update({"welfare_margin": xw - m.mean_welfare, "welfare_margin_low": low, "welfare_margin_high": high,
                    "frontier_at_exploitability": m.label})
    dominating = [m for m in members if m.mean_welfare >= xw and m.exploitability <= xe]
    if dominating:
        worst = max(dominating, key=lambda m: (m.mean_welfare - xw) + (xe - m.exploitability))
        out["verdict"] = f"inside: {worst.label} has at least its welfare at most its exploitability"
    elif all(interval(x.boot_welfare - m.boot_welfare)[0] > 0
             or interval(m.boot_exploitability - x.boot_exploitability)[0] > 0 for m in members):
        out["verdict"] = "beyond (95% CI)"
    else:
        out["verdict"] = "beyond (means)"
    return out


__all__ = ["RESAMPLES", "Point", "beyond", "interval", "mixtures", "pareto", "resample_indices"]
