"""PNG figures for evaluation tables and training runs (matplotlib Agg, no display).

* :func:`score_bars` — one bar per (scenario, policy) with a 95 % confidence interval,
  grouped by scenario; from a plain table (a list of dicts, no pandas).
* :func:`learning_curve` — a training metric against iterations or timesteps, with the
  baselines (random, heuristics, oracle) as labelled horizontal lines.
* :func:`heatmap` — a labelled matrix (the tournament's cross-play and win matrices).
* :func:`welfare_exploitability` — every allocator as a point (welfare, exploitability) with
  both CIs, one panel per tier (``commons-arena exploit``).
* ``mean_ci`` (from :mod:`experiments.statistics`) — the interval used by both.

Each function writes one PNG and returns its path; the figure is closed afterwards.
"""

from __future__ import annotations

import math
import os
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from commons_arena.files import make_folder, write_figure
from experiments.statistics import mean_ci

PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
           "#bab0ac")
Y_CANDIDATES = ("score", "normalised_score", "return_mean", "episode_return_mean", "return", "reward")
X_CANDIDATES = ("timesteps", "env_steps", "iteration", "step")


def bar_intervals(rows: Sequence[Mapping[str, Any]], value: str = "score", category: str = "scenario",
              group: str = "policy", confidence: float = 0.95) -> list[dict[str, Any]]:
    """Per (category, group): ``mean``, ``low``, ``high``, ``n``, in first-seen order.

    A row is either one episode/seed (``row[value]``) or already aggregated: ``mean`` with
    ``ci_low``/``ci_high`` or with ``ci95`` (half-width). Aggregated rows are used as is."""
    raw: dict[tuple[str, str], list[float]] = {}
    done: dict[tuple[str, str], dict[str, Any]] = {}
    for row in rows:
        key = (str(row[category]), str(row[group]))
        if "mean" in row and ("ci_low" in row or "ci95" in row):
            mean = float(row["mean"])
            low = float(row["ci_low"]) if "ci_low" in row else mean - float(row["ci95"])
            high = float(row["ci_high"]) if "ci_high" in row else mean + float(row["ci95"])
            done[key] = {category: key[0], group: key[1], "mean": mean, "low": low, "high": high,
                         "n": int(row.get("n", 0))}
        else:
            raw.setdefault(key, []).append(float(row[value]))
    for key, values in raw.items():
        mean, low, high = mean_ci(values, confidence)
        done.setdefault(key, {category: key[0], group: key[1], "mean": mean, "low": low, "high": high,
                              "n": len(values)})
    order = list(dict.fromkeys([*raw.keys(), *done.keys()]))
    return [done[k] for k in order]


def score_bars(rows: Sequence[Mapping[str, Any]], path: str | os.PathLike[str], value: str = "score",
               category: str = "scenario", group: str = "policy", title: str | None = None,
               confidence: float = 0.95, reference_lines: Mapping[str, float] | None = None) -> Path:
    """Grouped bars: one group per ``category`` (scenario), one bar per ``group`` (policy),
    height = mean of ``value`` with its ``confidence`` interval as an error bar.

    ``reference_lines`` (label → y) are drawn dashed; for the normalised ``score`` they
    default to ``random = 0`` and ``oracle = 1``."""
    if not rows:
        raise ValueError("score_bars: no rows to plot")
    table = bar_intervals(rows, value, category, group, confidence)
    categories = list(dict.fromkeys(r[category] for r in table))
    groups = list(dict.fromkeys(r[group] for r in table))
    cell = {(r[category], r[group]): r for r in table}
    if reference_lines is None:
        reference_lines = {"random": 0.0, "oracle": 1.0} if value == "score" else {}

    width_in = max(6.0, 1.0 + len(categories) * (0.35 * len(groups) + 0.5))
    fig = Figure(figsize=(min(width_in, 24.0), 4.8), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    x = np.arange(len(categories), dtype=float)
    bar = 0.8 / len(groups)
    for j, name in enumerate(groups):
        means = np.array([cell[(c, name)]["mean"] if (c, name) in cell else np.nan for c in categories])
        lows = np.array([cell[(c, name)]["low"] if (c, name) in cell else np.nan for c in categories])
        highs = np.array([cell[(c, name)]["high"] if (c, name) in cell else np.nan for c in categories])
        err = np.vstack([np.nan_to_num(means - lows), np.nan_to_num(highs - means)])
        ax.bar(x - 0.4 + bar * (j + 0.5), np.nan_to_num(means), bar * 0.92, yerr=err, capsize=2.5,
               color=PALETTE[j % len(PALETTE)], label=name, error_kw={"elinewidth": 1, "ecolor": "#333"})
    for label, y in reference_lines.items():
        ax.axhline(y, color="#555", linestyle="--", linewidth=0.9)
        ax.annotate(label, (1.0, y), xycoords=("axes fraction", "data"), xytext=(3, 0), textcoords="offset points",
                    va="center", fontsize=8, color="#555")
    ax.axhline(0.0, color="#999", linewidth=0.6)
    ax.set_xticks(x, categories, rotation=20 if len(categories) > 4 else 0, ha="right" if len(categories) > 4 else "center")
    ax.set_xlim(-0.6, len(categories) - 0.4)
    ax.set_ylabel(f"{value} (mean, {confidence:.0%} CI)")
    ax.set_title(title or f"{value} per {category}")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, ncol=min(len(groups), 5), loc="upper center", bbox_to_anchor=(0.5, -0.18 if len(categories) > 4
              else -0.1), frameon=False)
    fig.tight_layout()
    return _save(fig, path)


def learning_curve(history: Sequence[Mapping[str, Any]] | Mapping[str, Sequence[Mapping[str, Any]]],
                   baselines: Mapping[str, float | tuple[float, float] | Mapping[str, float]] | None,
                   path: str | os.PathLike[str], y: str | None = None, x: str | None = None,
                   title: str | None = None) -> Path:
    """A metric per training iteration, with baselines as horizontal lines.

    ``history``: rows (dicts) of one run, or run name → rows for several. ``y`` defaults to
    the first of :data:`Y_CANDIDATES` present; ``x`` to the first of :data:`X_CANDIDATES`
    (else the row index). Rows with ``{y}_low``/``{y}_high`` get a shaded band.
    ``baselines``: name → value, or → ``(mean, ci_half_width)``, or → a dict with ``mean``
    (and ``low``/``high``); drawn as labelled lines (bands for intervals)."""
    runs = dict(history) if isinstance(history, Mapping) else {"": list(history)}
    rows_all = [row for rows in runs.values() for row in rows]
    if not rows_all:
        raise ValueError("learning_curve: empty history")
    y = y or next((k for k in Y_CANDIDATES if any(k in r for r in rows_all)), None)
    if y is None:
        raise ValueError(f"learning_curve: no y given and none of {Y_CANDIDATES} in the history rows")
    x = x or next((k for k in X_CANDIDATES if all(k in r for r in rows_all)), None)

    fig = Figure(figsize=(7.5, 4.5), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for n, (name, rows) in enumerate(runs.items()):
        kept = [(i, r) for i, r in enumerate(rows) if r.get(y) is not None and math.isfinite(float(r[y]))]
        if not kept:
            continue
        xs = np.array([float(r[x]) if x else float(i) for i, r in kept])
        ys = np.array([float(r[y]) for _, r in kept])
        color = PALETTE[n % len(PALETTE)]
        ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=3, color=color,
                label=name or "trained", linewidth=1.8, zorder=3)
        if all(r.get(f"{y}_low") is not None and r.get(f"{y}_high") is not None for _, r in kept):
            ax.fill_between(xs, [float(r[f"{y}_low"]) for _, r in kept], [float(r[f"{y}_high"]) for _, r in kept],
                            color=color, alpha=0.2)
    for k, (name, spec) in enumerate((baselines or {}).items()):
        mean, low, high = _baseline(spec)
        color = PALETTE[(len(runs) + k) % len(PALETTE)]
        ax.axhline(mean, color=color, linestyle="--", linewidth=1.1, label=f"{name} ({mean:.3g})")
        if low is not None and high is not None:
            ax.axhspan(low, high, color=color, alpha=0.1, linewidth=0)
    ax.set_xlabel(x or "iteration")
    ax.set_ylabel(y)
    ax.set_title(title or f"{y} during training")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    fig.tight_layout()
    return _save(fig, path)


def _baseline(spec: float | tuple[float, float] | Mapping[str, float]) -> tuple[float, float | None, float | None]:
    if isinstance(spec, Mapping):
        mean = float(spec["mean"])
        if "low" in spec and "high" in spec:
            return mean, float(spec["low"]), float(spec["high"])
        if "ci95" in spec:
            return mean, mean - float(spec["ci95"]), mean + float(spec["ci95"])
        return mean, None, None
    if isinstance(spec, tuple | list):
        mean, half = float(spec[0]), float(spec[1])
        return mean, mean - half, mean + half
    return float(spec), None, None


def heatmap(matrix: Sequence[Sequence[float]], rows: Sequence[str], columns: Sequence[str],
            path: str | os.PathLike[str], title: str = "", xlabel: str = "", ylabel: str = "",
            colorbar: str = "", cmap: str = "viridis", limits: tuple[float, float] | None = None) -> Path:
    """A matrix as coloured cells with its values written in (NaN cells left blank); the colour
    scale spans ``limits`` (default: the finite values' range)."""
    values = np.asarray(matrix, dtype=float)
    if values.shape != (len(rows), len(columns)) or values.size == 0:
        raise ValueError(f"heatmap: a {len(rows)} x {len(columns)} matrix needs as many rows and columns, got {values.shape}")
    fig = Figure(figsize=(min(2.5 + 0.9 * len(columns), 24.0), min(1.6 + 0.45 * len(rows), 24.0)), dpi=110)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    finite = values[np.isfinite(values)]
    if limits is None:
        limits = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    image = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, aspect="auto", vmin=limits[0], vmax=limits[1])
    for i in range(len(rows)):
        for j in range(len(columns)):
            if math.isfinite(values[i, j]):
                red, green, blue, _ = image.cmap(image.norm(values[i, j]))
                dark = 0.299 * red + 0.587 * green + 0.114 * blue < 0.5  # perceived luminance of the cell
                ax.text(j, i, f"{values[i, j]:.2f}", ha="center", va="center", fontsize=8,
                        color="white" if dark else "black")
    ax.set_xticks(range(len(columns)), columns, rotation=30 if len(columns) > 3 else 0,
                  ha="right" if len(columns) > 3 else "center")
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    fig.colorbar(image, ax=ax, label=colorbar)
    fig.tight_layout()
    return _save(fig, path)


def welfare_exploitability(rows: Sequence[Mapping[str, Any]], path: str | os.PathLike[str],
                           title: str = "Welfare and exploitability of each allocator",
                           frontiers: Mapping[str, Sequence[tuple[float, float]]] | None = None) -> Path:
    """One panel per ``scenario``; each row a point at (``welfare``, ``exploitability``) with
    ``welfare_ci95`` / ``exploitability_ci95`` error bars, labelled with its ``allocator``
    (:func:`draw_welfare_exploitability`). Rows without a finite exploitability are left out.
    ``frontiers``: per scenario, the (welfare, exploitability) points of a frontier, drawn as a line
    (experiments/studies/frontier.py)."""
    scenarios = list(dict.fromkeys(str(r["scenario"]) for r in rows))
    if not scenarios:
        raise ValueError("welfare_exploitability: no rows to plot")
    fig = Figure(figsize=(4.6 * len(scenarios), 4.4), dpi=110)
    FigureCanvasAgg(fig)
    for i, scenario in enumerate(scenarios):
        ax = fig.add_subplot(1, len(scenarios), i + 1)
        draw_welfare_exploitability(ax, [r for r in rows if str(r["scenario"]) == scenario])
        line = (frontiers or {}).get(scenario)
        if line:
            ax.plot([x for x, _ in line], [y for _, y in line], "--", color="black", linewidth=1.4, zorder=5,
                    label="scripted frontier")
        ax.set_title(scenario)
    # wrapped to the figure's width (about 11 characters an inch at the title's size): never clipped at its ends
    fig.suptitle("\n".join(textwrap.wrap(title, width=int(11 * 4.6 * len(scenarios)))))
    fig.tight_layout()
    unstack_labels(fig)
    return _save(fig, path)


def draw_welfare_exploitability(ax: Any, rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, float, float]]:
    """The points of one panel on ``ax``: (allocator, welfare, exploitability) per drawn row, in order."""
    drawn = []
    for j, row in enumerate(rows):
        x, y = _number(row.get("welfare")), _number(row.get("exploitability"))
        if not (math.isfinite(x) and math.isfinite(y)):
            continue
        name = str(row["allocator"])
        ax.errorbar([x], [y], xerr=[_number(row.get("welfare_ci95"), 0.0)],
                    yerr=[_number(row.get("exploitability_ci95"), 0.0)], fmt="o", capsize=3,
                    color=PALETTE[j % len(PALETTE)], label=name)
        drawn.append((name, x, y))
    for name, x, y in drawn:  # after the points: welfare_exploitability stacks labels that would overlap
        ax.annotate(name if len(name) <= 28 else name[:12] + "..." + name[-13:], (x, y), xytext=(4, 4),
                    textcoords="offset points", fontsize=7)
    if drawn and max(abs(y) for _, _, y in drawn) < 1e-9:  # every point at 0: a readable axis, not +-1e-17 noise
        ax.set_ylim(-1.0, 1.0)
    ax.yaxis.get_major_formatter().set_useOffset(False)
    ax.axhline(0.0, color="#999", linewidth=0.6)
    ax.set_xlabel("welfare: allocator return, own population (95% CI)")
    ax.set_ylabel("exploitability: max over team seats of the\nbest response's gain over truthful (95% CI)")
    ax.grid(alpha=0.3)
    return drawn


def unstack_labels(fig: Figure, step: float = 9.0, tries: int = 40) -> None:
    """Raise each point label (an annotation) by ``step`` points until its box overlaps no earlier label of its
    panel: labels of points close together stack instead of overlapping. Reads the drawn sizes, so call it last."""
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]  # Agg's canvas (welfare_exploitability)
    for ax in fig.axes:
        placed: list[Any] = []
        for text in ax.texts:
            for _ in range(tries):
                box = text.get_window_extent(renderer)
                if not any(box.overlaps(other) for other in placed):
                    break
                text.xyann = (text.xyann[0], text.xyann[1] + step)  # type: ignore[attr-defined]  # an Annotation
            placed.append(text.get_window_extent(renderer))


def _number(value: Any, default: float = math.nan) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def _save(fig: Figure, path: str | os.PathLike[str]) -> Path:
    out = Path(path)
    make_folder(out.parent)
    write_figure(out, fig, format="png")
    fig.clear()
    return out
