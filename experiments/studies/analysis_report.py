"""The report of ``commons-arena analyze`` (:mod:`experiments.studies.analysis`): ``analysis.md`` (the tables),
``analysis.png`` (the figure) and ``analysis.json`` (the report as data), written into one folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from commons_arena.files import check_outputs, make_folder, write_figure, write_file
from experiments.evaluation.tables import markdown_table

OUTPUTS = ("analysis.png", "analysis.md", "analysis.json")


def write_analysis(report: dict[str, Any], out: Path, force: bool = False) -> list[Path]:
    """The three files in ``out``: never through a symlink (the folder or a file), never over earlier
    ones without ``force`` (checked again here: the command checks before any work)."""
    check_outputs(out, OUTPUTS, force)
    make_folder(out)
    write_file(out / "analysis.json", json.dumps(report, indent=1))
    write_file(out / "analysis.md", summary_markdown(report))
    analysis_figure(report, out / "analysis.png")
    return [out / "analysis.png", out / "analysis.md", out / "analysis.json"]


def summary_markdown(report: dict[str, Any]) -> str:
    lines = [f"# Analysis of {report['run']}", "",
             f"Checkpoint `{report['checkpoint']}` on `{report['scenario']}`; learning seats: "
             f"{', '.join(report['learned'])}; held-out seeds {report['seeds'][0]}–{report['seeds'][1]}.", ""]
    if report.get("credit"):
        lines += ["## Learning or design?", "", *[f"- {line}" for line in report["credit"]], "",
                  "Each learning seat in its own seat (the other learning seats as the checkpoint plays them), "
                  "against the untrained network (iteration 0) and the role's scripted references on the same seeds: "
                  "trained minus reference, paired, 95% CI (for a team, the row against `truthful` is its misreport "
                  "gain):", "", markdown_table(report["learning"]), "",
                  "The codes each learned module chooses on those episodes:", "", markdown_table(report["codes"]), ""]
    if report.get("together"):
        above = [r["seat"] for r in report["together"] if r["above"]]
        lines += ["## Every learning seat, trained together against untrained together", "",
                  "Each learning seat's return with every learning seat played by the checkpoint, minus the same "
                  "with every learning seat played by the untrained network (iteration 0), the rest the background; "
                  "paired on the same seeds, 95% CI:", "", markdown_table(report["together"]), "",
                  f"Above its iteration-0 value (CI above 0): **{len(above)} of {len(report['together'])}** seats"
                  + (f" ({', '.join(above)})." if above else "."), ""]
    if "teams_vs_allocators" in report:
        lines += ["## Do learned teams over-declare?", "",
                  "Declared ÷ true need (GPUs summed over each episode, tick 0 excluded); above 1 is over-declaring.", ""]
        if report["teams_over_training"]:
            lines += ["Over training (held-out evaluations, learners playing together):", "",
                      markdown_table(report["teams_over_training"]), ""]
        else:
            lines += ["Over training: not recorded by this run (its history has no `declared_to_need`).", ""]
        lines += ["Against each allocator (the other seats as in training):", "",
                  markdown_table(report["teams_vs_allocators"]), "",
                  "For scale, the same ratio when every team is scripted or acts uniformly at random "
                  "(proportional allocator):", "", markdown_table(report["teams_reference"]), ""]
        ratios = [r["declared_to_need"] for r in report["teams_vs_allocators"] if np.isfinite(r["declared_to_need"])]
        if ratios:
            lines += [f"Mean ratio over all rows: **{np.mean(ratios):.2f}** "
                      f"({'over' if np.mean(ratios) > 1 else 'not over'}-declaring on average).", ""]
    if "allocator_grants" in report:
        lines += ["## The learned allocator's grants", "",
                  "Least-squares slope of the grant on the declaration (unrevealed teams) and on the revealed need "
                  "(revealed teams), per (team, tier) cell, against the scenario's population:", "",
                  markdown_table(report["allocator_grants"]), "",
                  "Misreport gain (team return as greedy_bluffer minus as truthful, others fixed):", "",
                  markdown_table(report["misreport_gain"]), ""]
        gain = {name: float(np.mean([g["misreport_gain"] for g in report["misreport_gain"] if g["allocator"] == name]))
                for name in ("learned", "planner", "proportional")}
        lines += [f"Mean misreport gain: learned **{gain['learned']:.2f}**, planner **{gain['planner']:.2f}**, "
                  f"proportional **{gain['proportional']:.2f}** (a learned allocator that plays planner has planner's).",
                  ""]
    if report.get("what_it_learned"):
        from experiments.evaluation.discounting import COLUMNS

        lines += ["## What the allocator learned: discounting a bluffer, or generosity to everyone", "",
                  "Per seat, a truthful team and a bluffer (`truthful` declaring x3, same stance) on the same seeds. "
                  "`discount` = 1 - (granted/declared of the bluffer) / (granted/declared of the truthful team); "
                  "`generosity` = granted / true need of the truthful team (experiments/evaluation/discounting.py):",
                  "", markdown_table([{c: r.get(c, "") for c in COLUMNS} for r in report["discounting"]]), "",
                  "The learned allocator minus `planner`, per seat, paired by seed (95% CI):", "",
                  markdown_table(report["what_it_learned"]), ""]
    if "broker_pricing" in report:
        lines += ["## The learned broker's prices", "",
                  "Correlation of the price level it posts with the demand it sees, and the mean level per demand bin:", ""]
        for row in report["broker_pricing"]:
            lines += [f"- **{row['broker']}**: correlation {row['correlation']:.2f}; "
                      + "; ".join(f"demand {b['demand_from']:.0f}–{b['demand_to']:.0f}: level {b['mean_price_level']:.2f}"
                                  for b in row["by_demand"])]
        lines.append("")
    return "\n".join(lines)


def analysis_figure(report: dict[str, Any], path: Path) -> Path:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    panels = [k for k in ("returns_over_training", "together", "teams_vs_allocators", "teams_over_training", "allocator_grants",
                          "broker_pricing") if report.get(k)]
    columns = min(2, max(1, len(panels)))
    rows_of_panels = max(1, -(-len(panels) // columns))
    fig = Figure(figsize=(7 * columns, 4.8 * rows_of_panels), dpi=100)
    FigureCanvasAgg(fig)
    for i, key in enumerate(panels):
        ax = fig.add_subplot(rows_of_panels, columns, i + 1)
        if key == "teams_vs_allocators":
            rows = report[key]
            allocators = list(dict.fromkeys(r["allocator"] for r in rows))
            teams = list(dict.fromkeys(r["team"] for r in rows))
            width = 0.8 / len(teams)
            for k, team in enumerate(teams):
                values = [next(r["declared_to_need"] for r in rows if r["allocator"] == a and r["team"] == team)
                          for a in allocators]
                ax.bar(np.arange(len(allocators)) + k * width, values, width, label=team)
            ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
            for ref, style in zip(report.get("teams_reference", []), (":", "-.", "--"), strict=False):
                mean = float(np.nanmean([v for k, v in ref.items() if k != "teams"]))
                ax.axhline(mean, color="grey", linewidth=1.0, linestyle=style, label=f"{ref['teams']} teams ({mean:.2f})")
            ax.set_xticks(np.arange(len(allocators)) + 0.4 - width / 2, allocators, rotation=30, ha="right")
            ax.set_title("learned teams: declared / true need, per allocator")
            ax.legend(fontsize=8)
        elif key == "returns_over_training":
            rows = report[key]
            for seat in [k for k in rows[-1] if k != "env_steps"]:
                ax.plot([r["env_steps"] for r in rows if seat in r], [r[seat] for r in rows if seat in r], marker="o",
                        markersize=3, label=seat)
            ax.set_xlabel("env steps (0: the untrained network)")
            ax.set_title("every learning seat: held-out return over training")
            ax.legend(fontsize=8)
        elif key == "together":
            rows = report[key]
            x = np.arange(len(rows))
            ax.bar(x, [r["trained_minus_iteration_0"] for r in rows], 0.6, yerr=[r["ci95"] for r in rows], capsize=4,
                   color=["tab:green" if r["above"] else "tab:grey" for r in rows])
            ax.axhline(0.0, color="black", linewidth=0.8)
            ax.set_xticks(x, [r["seat"] for r in rows])
            ax.set_ylabel("return: trained − iteration 0")
            ax.set_title("every learning seat together: trained − untrained (paired 95% CI)")
        elif key == "teams_over_training":
            rows = report[key]
            for team in [k for k in rows[0] if k != "env_steps"]:
                ax.plot([r["env_steps"] for r in rows], [r[team] for r in rows], marker="o", label=team)
            ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
            ax.set_xlabel("env steps")
            ax.set_title("declared / true need over training")
            ax.legend(fontsize=8)
        elif key == "allocator_grants":
            names = [g["allocator"] for g in report[key]]
            x = np.arange(len(names))
            ax.bar(x - 0.3, [g["slope_on_declared"] for g in report[key]], 0.3, label="grant per declared GPU")
            ax.bar(x, [g["slope_on_revealed_need"] for g in report[key]], 0.3, label="grant per revealed-need GPU")
            gains = {n: np.mean([r["misreport_gain"] for r in report["misreport_gain"] if r["allocator"] == n])
                     for n in names}
            ax.bar(x + 0.3, [gains[n] / 100 for n in names], 0.3, label="misreport gain / 100")
            ax.set_xticks(x, names)
            ax.set_title("allocator: grants vs declarations / revealed needs")
            ax.legend(fontsize=8)
        else:
            for row in report[key]:
                ax.scatter(row["demand"], row["level"], s=6, alpha=0.3, label=f"{row['broker']} (r={row['correlation']:.2f})")
            ax.set_xlabel("demand seen (GPUs declared)")
            ax.set_ylabel("mean price level posted")
            ax.set_title("broker: price vs demand")
            ax.legend(fontsize=8)
    fig.tight_layout()
    return write_figure(path, fig)


__all__ = ["OUTPUTS", "analysis_figure", "summary_markdown", "write_analysis"]
