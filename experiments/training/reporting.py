"""What a run reports: per-iteration lines and TensorBoard scalars, the league's log, the
held-out evaluations' lines and the learning curve (``learning_curve.png``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from tensorboardX import SummaryWriter

from commons_arena.enums import ALLOCATOR
from commons_arena.files import append_line, write_figure
from experiments.evaluation.evaluate import BASELINE_ALLOCATORS, normalised_score
from experiments.training.heldout import describe
from experiments.training.runs import RunState
from experiments.viewing.plots import learning_curve

# RLlib's PPO learner results worth watching: the KL (and its coefficient) and the entropy say
# whether the policy moves at all, the value function's explained variance whether its
# advantages carry signal (a per-cell critic's Q too: --critic cells or privileged).
LEARNER_STATS = ("policy_loss", "vf_loss", "vf_explained_var", "entropy", "mean_kl_loss", "curr_kl_coeff", "q_loss",
                 "q_explained_var")


def scalars(result: Mapping[str, Any]) -> dict[str, float]:
    """The training scalars of one RLlib result: mean returns per seat, the allocator's reward
    terms and episode totals (RLlib's means over its smoothing window of finished episodes), and
    ``episodes`` and ``steps``, the episodes finished and env steps sampled in this iteration.

    Only finite values: until an episode has finished (episodes longer than one iteration's
    samples per env) RLlib's means are NaN or absent, and a NaN scalar is not a measurement
    (TensorBoard's writer printed "NaN or Inf found in input tensor" for each). Such an
    iteration has no ``return_mean``; :class:`Reporter` says so.
    """
    runners = result.get("env_runners", {})
    returns = runners.get("agent_episode_returns_mean", {})
    candidates: dict[str, Any] = {}
    if returns:
        candidates["return_mean"] = returns.get(ALLOCATOR, np.mean(list(returns.values())))
    candidates.update({f"return_mean/{seat}": value for seat, value in returns.items()})
    for key in ("allocator_reward_terms", "allocator_episode"):
        for name, value in runners.get(key, {}).items():
            candidates[f"{key}/{name}"] = value
    for module, stats in result.get("learners", {}).items():  # the update's own numbers, per learning module
        if isinstance(stats, Mapping) and module != "__all_modules__":
            for name in LEARNER_STATS:
                if name in stats:
                    candidates[f"learner/{module}/{name}"] = stats[name]
    candidates["episodes"] = runners.get("num_episodes", 0)
    candidates["steps"] = runners.get("num_env_steps_sampled", 0)  # this iteration's
    out: dict[str, float] = {}
    for name, value in candidates.items():
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        if np.isfinite(number):
            out[name] = number
    return out


class Reporter:
    """Prints and logs a run's progress (``<run>/tb`` for TensorBoard, ``league.json``)."""

    def __init__(self, run: Path, quiet: bool) -> None:
        self.run, self.quiet = run, quiet
        self.writer = SummaryWriter(str(run / "tb"))

    def iteration(self, state: RunState, result: Mapping[str, Any], values: Mapping[str, float], minutes: float) -> None:
        league = result.get("league")
        if league:
            append_line(self.run / "league.json", json.dumps({"iteration": state.iterations, **league}))  # one per iteration
            if league.get("snapshot"):
                print(f"  snapshot {league['snapshot']} joins the mix: learner {league['learner_return']:.2f}"
                      f" vs mix {league['mix_return']:.2f}")
        for key, value in values.items():
            self.writer.add_scalar(f"train/{key}", value, state.env_steps)
        if not self.quiet:
            head = f"iter {state.iterations:4d}  steps {state.env_steps:8d}  {minutes:5.1f} min  "
            if not values.get("steps"):  # e.g. remote runners past RLlib's sample_timeout_s on a loaded machine
                print(head + "sampled nothing this iteration (no env steps came back from the env runners)")
                return
            if "return_mean" not in values:
                print(head + "no episode finished yet (an episode is longer than one iteration's samples per env)")
                return
            score = values.get("allocator_episode/normalised_score")
            kl, entropy = values.get(f"learner/{ALLOCATOR}/mean_kl_loss"), values.get(f"learner/{ALLOCATOR}/entropy")
            print(head + f"return {values['return_mean']:8.2f}  episodes {int(values.get('episodes', 0)):4d}  "
                  + (f"score(train) {score:.3f}" if score is not None else "score(train) n/a")
                  + (f"  kl {kl:.4f}  entropy {entropy:.3f}" if kl is not None and entropy is not None else ""))

    def seats(self, scenario: str, seeds: int, returns: Mapping[str, float], env_steps: int) -> None:
        for seat, value in returns.items():
            self.writer.add_scalar(f"eval/return/{seat}", value, env_steps)
        print(f"  eval on {seeds} held-out seeds of {scenario}, learners together: "
              + ", ".join(f"{seat} {value:.2f}" for seat, value in returns.items()))

    def allocator(self, reports: Mapping[str, Mapping[str, Any]], seeds: int) -> None:
        for scenario, report in reports.items():
            print(f"  eval on {seeds} held-out seeds of {scenario}: {describe(report)}")

    def evaluation(self, row: Mapping[str, Any]) -> None:
        for name, key in (("eval/normalised_score", "score"), ("eval/return", "eval_return")):
            if np.isfinite(row[key]):  # a score is undefined where random and the oracle tie
                self.writer.add_scalar(name, row[key], row["env_steps"])

    def close(self) -> None:
        self.writer.close()


def plot(history: list[dict[str, Any]], anchors: Mapping[str, Mapping[str, float]], path: Path,
         allocator: bool = True, untrained: Mapping[str, Any] | None = None) -> None:
    """The learning curve: the allocator's held-out normalised score beside the baselines', or
    (several learning seats) each seat's held-out return and each learning team's declared /
    true need, every curve starting at its iteration-0 (untrained) value when the run kept it."""
    scenario = history[-1]["scenario"]
    start = [dict(untrained)] if untrained else []
    if not allocator or history[-1].get("returns"):
        seats_figure([*start, *history], path, f"{scenario}: learning seats on held-out seeds (playing together)")
        return
    tiers = [scenario] if scenario in anchors else list(anchors)  # a mix: baselines' mean score over its tiers
    baselines = {b: float(np.mean([normalised_score(anchors[t][b], anchors[t]["random"], anchors[t]["oracle"])
                                   for t in tiers])) for b in BASELINE_ALLOCATORS}
    title = f"{scenario if scenario in anchors else 'mean of ' + ', '.join(tiers)}: held-out normalised score"
    learning_curve({"learned allocator": [{"env_steps": r["env_steps"], "score": r["score"]} for r in [*start, *history]]},
                   baselines, path, title=title)


def seats_figure(rows: list[dict[str, Any]], path: Path, title: str) -> Path:
    """Two panels over env steps: every learning seat's held-out return, and every learning
    team's declared / true need; the iteration-0 point (env steps 0) is drawn hollow."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows = [r for r in rows if r.get("returns")]
    ratios = [r for r in rows if r.get("declared_to_need")]
    fig = Figure(figsize=(12 if ratios else 7, 4.5), dpi=100)
    FigureCanvasAgg(fig)
    panels = [("returns", "mean return (held-out)"), *([("declared_to_need", "declared / true need")] if ratios else [])]
    for k, (key, label) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), k + 1)
        for seat in rows[-1].get(key, {}):
            points = [(r["env_steps"], r[key][seat]) for r in rows if seat in r.get(key, {})]
            xs, ys = zip(*points, strict=True)
            line = ax.plot(xs, ys, marker="o", markersize=3, label=seat)[0]
            if points[0][0] == 0:  # the untrained checkpoint
                ax.plot([0], [ys[0]], marker="o", markersize=8, markerfacecolor="none", color=line.get_color())
        if key == "declared_to_need":
            ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        ax.set_xlabel("env steps (hollow: iteration 0, untrained)")
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    write_figure(path, fig)
    return path


__all__ = ["Reporter", "plot", "scalars", "seats_figure"]
