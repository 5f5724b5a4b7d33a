"""Smoke tests: each plot helper writes a non-empty PNG; the CI helper is right."""

from __future__ import annotations

import math

import numpy as np
import pytest

from experiments.statistics import mean_ci
from experiments.viewing.plots import bar_intervals, learning_curve, score_bars
from tests.figures import assert_drawn

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _is_png(path):
    data = path.read_bytes()
    return data[:8] == PNG_MAGIC and len(data) > 2000


def test_score_bars_writes_png(tmp_path):
    rng = np.random.default_rng(0)
    rows = [
        {"scenario": s, "policy": p, "seed": k, "score": float(rng.normal(m, 0.1))}
        for s in ("standard", "elevated", "crisis")
        for p, m in (("random", 0.0), ("edf", 0.6), ("oracle", 1.0))
        for k in range(5)
    ]
    rows.append({"scenario": "crisis", "policy": "ppo", "mean": 0.7, "ci_low": 0.6, "ci_high": 0.8, "n": 5})
    out = score_bars(rows, tmp_path / "sub" / "scores.png")
    assert _is_png(out)


def test_learning_curve_writes_png(tmp_path):
    history = [{"iteration": i, "timesteps": 1000 * i, "score": 1 - math.exp(-i / 5)} for i in range(20)]
    baselines = {"random": 0.0, "edf": (0.6, 0.05), "oracle": {"mean": 1.0}}
    assert _is_png(learning_curve(history, baselines, tmp_path / "curve.png"))
    runs = {"ppo": history, "self-play": [{"iteration": i, "return_mean": float(i)} for i in range(5)]}
    assert _is_png(learning_curve(runs, None, tmp_path / "runs.png", y="return_mean", x="iteration"))


def test_mean_ci_and_bar_intervals():
    mean, low, high = mean_ci([1.0, 2.0, 3.0])
    assert mean == 2.0 and low == pytest.approx(2.0 - 4.302653 / math.sqrt(3)) and high > mean
    assert mean_ci([5.0]) == (5.0, 5.0, 5.0)
    assert all(math.isnan(v) for v in mean_ci([]))
    table = bar_intervals([{"scenario": "a", "policy": "x", "score": v} for v in (1.0, 3.0)]
                      + [{"scenario": "a", "policy": "y", "mean": 0.5, "ci95": 0.1}])
    assert [(r["policy"], r["n"]) for r in table] == [("x", 2), ("y", 0)]
    assert table[1]["low"] == pytest.approx(0.4)


def test_empty_inputs_are_errors(tmp_path):
    with pytest.raises(ValueError):
        score_bars([], tmp_path / "x.png")
    with pytest.raises(ValueError):
        learning_curve([], {}, tmp_path / "y.png")


def test_heatmap_writes_a_png_and_checks_its_shape(tmp_path):
    from experiments.viewing.plots import heatmap

    path = heatmap([[0.5, 1.0], [0.0, float("nan")]], ["a", "b"], ["x", "y"], tmp_path / "h.png", limits=(0.0, 1.0))
    assert_drawn(path)
    with pytest.raises(ValueError, match="2 x 3 matrix"):
        heatmap([[1.0, 2.0], [3.0, 4.0]], ["a", "b"], ["x", "y", "z"], tmp_path / "bad.png")
