"""The statistics every report uses: intervals of a mean, and aggregates across training seeds.

* :func:`mean_ci` — the mean and its Student-t interval (episodes of one evaluation: many,
  roughly normal per-seed returns).
* :func:`mean_ci95` — its mean and 95 % half-width, the ``± ci95`` of every table;
  :func:`paired_difference` — the same of per-seed differences (two policies on the same seeds).
* :func:`iqm` — the interquartile mean (Agarwal et al. 2021, "Deep RL at the edge of the
  statistical precipice"): the mean of the middle 50 %, robust to one runaway seed.
* :func:`bootstrap_ci` — a percentile bootstrap interval of any statistic across a few
  values (training seeds: too few, and not normal, for a t interval).

Across a benchmark suite (rliable's statistics, Agarwal et al. 2021, over *tasks* = evaluation
scenarios, each with its *runs* = per-seed normalised scores):

* :func:`stratified_bootstrap_ci` — a statistic of all scores (the IQM or the mean of the
  flattened tasks x runs, as rliable's ``aggregate_iqm`` / ``aggregate_mean``) with a percentile
  interval from the *stratified* bootstrap: each resample draws runs with replacement within
  every task, so every task keeps its weight;
* :func:`probability_of_improvement` — P(X > Y): per task, the Mann-Whitney probability that a
  run of X beats a run of Y (ties count one half), averaged over tasks; its interval resamples
  X's and Y's runs independently within each task (rliable's
  ``StratifiedIndependentBootstrap``).

The bootstrap is ``scipy.stats.bootstrap`` (scipy is already a dependency); the stratified one
is a few lines of numpy (scipy's bootstrap has no strata). ``rliable``, the
library of that paper, installs cleanly beside the pinned numpy 2 / scipy here, but pulls in
arch, statsmodels, seaborn, formulaic, patsy and narwhals for the same percentile bootstrap
over a handful of numbers, so it is not used (checked again for the benchmark: rliable 1.2.0
resolves with numpy 2.4 unchanged, and would add arch 7.2, statsmodels 0.15, seaborn 0.13,
formulaic, patsy, narwhals and interface_meta for three functions written here in ~60 lines). scipy is imported inside the functions: the CLI
imports this module (through the evaluation engine) at start-up.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import numpy as np

BOOTSTRAP_RESAMPLES = 10_000


def _finite(values: Iterable[float | None]) -> np.ndarray:
    return np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)


def mean_ci(values: Iterable[float | None], confidence: float = 0.95) -> tuple[float, float, float]:
    """``(mean, low, high)``: Student-t interval of the mean; ``low == high == mean`` for
    fewer than two finite values."""
    x = _finite(values)
    if x.size == 0:
        return math.nan, math.nan, math.nan
    mean = float(x.mean())
    if x.size < 2:
        return mean, mean, mean
    from scipy import stats

    half = float(stats.t.ppf(0.5 + confidence / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    return mean, mean - half, mean + half


def mean_ci95(values: Iterable[float | None]) -> tuple[float, float]:
    """Mean and the half-width of its 95% Student-t confidence interval (0 for one value)."""
    mean, _, high = mean_ci(values, 0.95)
    return mean, high - mean


def paired_difference(returns: Sequence[float] | np.ndarray, other: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """Mean and 95% CI half-width of ``returns - other``, seed by seed (same seeds, same order)."""
    if len(returns) != len(other):
        raise ValueError(f"paired difference needs the same seeds: {len(returns)} vs {len(other)} episodes")
    return mean_ci95(np.subtract(returns, other).tolist())


def iqm(values: Iterable[float | None]) -> float:
    """Interquartile mean: the mean of the middle 50 % of the values (25 % trimmed from each end;
    with fewer than four values nothing is trimmed, as ``scipy.stats.trim_mean`` does)."""
    x = _finite(values)
    if x.size == 0:
        return math.nan
    from scipy import stats

    return float(stats.trim_mean(x, 0.25))


def bootstrap_ci(values: Iterable[float | None], statistic: Callable[[np.ndarray], float] = np.mean,
                 confidence: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
    """``(statistic, low, high)``: percentile bootstrap interval over the values (resampled
    with replacement, :data:`BOOTSTRAP_RESAMPLES` times, from ``seed``); ``low == high`` for
    fewer than two values. With three training seeds the interval can be no wider than
    their range: it says how the statistic moves among these seeds, not a population's spread."""
    x = _finite(values)
    if x.size == 0:
        return math.nan, math.nan, math.nan
    point = float(statistic(x))
    if x.size < 2 or np.all(x == x[0]):
        return point, point, point
    from scipy import stats

    vectorised = _along_axis(statistic) or (lambda s, axis: np.apply_along_axis(statistic, axis, s))
    result = stats.bootstrap((x,), vectorised, vectorized=True,
                             confidence_level=confidence, n_resamples=BOOTSTRAP_RESAMPLES, method="percentile",
                             rng=np.random.default_rng(seed))
    return point, float(result.confidence_interval.low), float(result.confidence_interval.high)


def iqm_of(sample: np.ndarray) -> float:
    """:func:`iqm` of an array (a statistic for :func:`bootstrap_ci`)."""
    return iqm(sample.tolist())


def _along_axis(statistic: Callable[[np.ndarray], float]) -> Callable[[np.ndarray, int], np.ndarray] | None:
    """The statistic over every resample at once, for the ones the reports use: calling it once
    per resample cost 1.5 s (mean) and 5.8 s (IQM) of CPU per interval at 10,000 resamples."""
    from scipy import stats

    if statistic is np.mean:
        return lambda s, axis: np.mean(s, axis=axis)
    if statistic is iqm_of:
        return lambda s, axis: stats.trim_mean(s, 0.25, axis=axis)
    return None


# --------------------------------------------------------------------------- across tasks (rliable)

SUITE_RESAMPLES = 2_000  # stratified bootstrap resamples of a benchmark suite (rliable's examples use 2,000)
_CHUNK = 500  # resamples drawn at once (bounds memory: chunk x every run of every task)


def _tasks(scores: Sequence[Sequence[float]]) -> list[np.ndarray]:
    """Each task's finite runs; a task with none is left out (it has no score: its anchors tie)."""
    tasks = [_finite(task) for task in scores]
    return [t for t in tasks if t.size]


def _resample(task: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` bootstrap resamples of one task's runs: shape ``(count, runs)``."""
    return task[rng.integers(0, task.size, size=(count, task.size))]


def aggregate_iqm(scores: Sequence[Sequence[float]] | np.ndarray, axis: int = -1) -> np.ndarray | float:
    """rliable's ``aggregate_iqm``: the IQM of every run of every task together (flattened)."""
    from scipy import stats

    return stats.trim_mean(scores, 0.25, axis=axis)


def aggregate_mean(scores: Sequence[Sequence[float]] | np.ndarray, axis: int = -1) -> np.ndarray | float:
    return np.mean(scores, axis=axis)


AGGREGATES: dict[str, Callable[..., np.ndarray | float]] = {"iqm": aggregate_iqm, "mean": aggregate_mean}


def stratified_bootstrap_ci(scores: Sequence[Sequence[float]], statistic: str = "iqm", confidence: float = 0.95,
                            resamples: int = SUITE_RESAMPLES, seed: int = 0) -> tuple[float, float, float]:
    """``(point, low, high)`` of ``statistic`` (``"iqm"`` or ``"mean"``) over every run of every task,
    with a percentile interval from the stratified bootstrap (runs resampled within each task)."""
    aggregate = AGGREGATES[statistic]
    tasks = _tasks(scores)
    if not tasks:
        return math.nan, math.nan, math.nan
    point = float(aggregate(np.concatenate(tasks)))
    rng = np.random.default_rng(seed)
    values = []
    for start in range(0, resamples, _CHUNK):
        count = min(_CHUNK, resamples - start)
        values.append(aggregate(np.concatenate([_resample(t, count, rng) for t in tasks], axis=1), axis=1))
    low, high = np.percentile(np.concatenate(values), [50 * (1 - confidence), 50 * (1 + confidence)])
    return point, float(low), float(high)


def _improvement(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """P(a run of x beats a run of y), ties one half, along the last two axes: ``x (..., n)``, ``y (..., m)``."""
    greater = (x[..., :, None] > y[..., None, :]).mean(axis=(-2, -1))
    equal = (x[..., :, None] == y[..., None, :]).mean(axis=(-2, -1))
    return greater + 0.5 * equal


def probability_of_improvement(x: Sequence[Sequence[float]], y: Sequence[Sequence[float]], confidence: float = 0.95,
                               resamples: int = SUITE_RESAMPLES, seed: int = 0) -> tuple[float, float, float]:
    """``(P(X > Y), low, high)``: per task the probability that a run of X beats a run of Y (the
    Mann-Whitney U statistic over ``n x m``, ties one half), averaged over the tasks (rliable's
    ``probability_of_improvement``); the interval resamples X's and Y's runs independently within
    each task. ``x[i]`` and ``y[i]`` are the same task; a task where either has no finite run is left out."""
    if len(x) != len(y):
        raise ValueError(f"probability of improvement needs the same tasks: {len(x)} vs {len(y)}")
    pairs = [(a, b) for a, b in ((_finite(a), _finite(b)) for a, b in zip(x, y, strict=True)) if a.size and b.size]
    if not pairs:
        return math.nan, math.nan, math.nan
    point = float(np.mean([_improvement(a, b) for a, b in pairs]))
    rng = np.random.default_rng(seed)
    values = []
    for start in range(0, resamples, _CHUNK):
        count = min(_CHUNK, resamples - start)
        per_task = [_improvement(_resample(a, count, rng), _resample(b, count, rng)) for a, b in pairs]
        values.append(np.mean(per_task, axis=0))
    low, high = np.percentile(np.concatenate(values), [50 * (1 - confidence), 50 * (1 + confidence)])
    return point, float(low), float(high)


__all__ = ["AGGREGATES", "BOOTSTRAP_RESAMPLES", "SUITE_RESAMPLES", "aggregate_iqm", "aggregate_mean", "bootstrap_ci",
           "iqm", "iqm_of", "mean_ci", "mean_ci95", "paired_difference", "probability_of_improvement",
           "stratified_bootstrap_ci"]
