"""The report of ``commons-arena psro`` (:mod:`experiments.studies.psro`): one row per allocator (exploitability,
the broker's gain, welfare per tier), each round's payoff matrix, what round 1's and the last round's allocator
learned, as ``psro.{md,csv,json,png}``."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from commons_arena.files import write_figure, write_file
from experiments.evaluation.tables import markdown_table, write_table
from experiments.studies.psro_file import PsroConfig


def slug_of(name: str) -> str:
    return Path(name).stem if name.endswith(".toml") else name


def learned_markdown(learned: Mapping[str, Any]) -> str:
    from experiments.evaluation.discounting import COLUMNS

    verdicts = [{"allocator": v["allocator"], "seat": v["seat"], "vs": v["vs"],
                 "discount": f"{v['discount_minus']:+.3f} ± {v['discount_minus_ci95']:.3f}",
                 "generosity": f"{v['generosity_minus']:+.3f} ± {v['generosity_minus_ci95']:.3f}",
                 "verdict": v["verdict"]} for v in learned["verdicts"]]
    return ("## What round 1's and the last round's allocator learned (paired against A0, ± 95% CI)\n\n"
            "`discount` = 1 - (granted/declared of a x3 bluffer) / (granted/declared of a truthful team with the "
            "same need); `generosity` = granted / true need of the truthful team "
            "(experiments/evaluation/discounting.py). A change in discount with its CI above 0: it *discounts a "
            "bluffer*; in generosity alone: it is only *more generous to everyone*.\n\n"
            + markdown_table(verdicts) + "\n\n"
            + markdown_table([{c: r.get(c, "") for c in COLUMNS} for r in learned["rows"]]) + "\n")



def psro_rows(measured: Sequence[Mapping[str, Any]], cfg: PsroConfig) -> list[dict[str, Any]]:
    """One row per allocator: its exploitability (max over team seats, CI, seat), the broker's gain, its welfare
    on every tier."""
    rows = []
    for m in measured:
        s = m["summary"]
        row: dict[str, Any] = {"allocator": f"A{m['index']}", "policy": m["allocator"], "scenario": cfg.scenario,
                               "exploitability": s["exploitability"], "exploitability_ci95": s["exploitability_ci95"],
                               "exploiting_seat": s["exploiting_seat"], "from_search": s.get("from_search", ""),
                               "from_learning": s.get("from_learning", ""), "broker_gain": s.get("broker_gain", ""),
                               "broker_gain_ci95": s.get("broker_gain_ci95", "")}
        for tier, w in m["welfare"].items():
            row[f"welfare_{slug_of(tier)}"], row[f"welfare_{slug_of(tier)}_ci95"] = w["welfare"], w["welfare_ci95"]
        row["seeds"] = len(cfg.seeds)
        rows.append(row)
    return rows


def payoff_markdown(k: int, game: Mapping[str, Any]) -> str:
    members = [m["name"] for m in game["members"]]
    table = [{"allocator": name, **{m: f"{g:+.2f} ± {c:.2f}" for m, g, c in zip(members, gains, cis, strict=True)},
              "allocator weight": f"{game['allocator_mixture'][name]:.2f}"}
             for (name, gains, cis) in zip(game["allocators"], game["gain"], game["gain_ci95"], strict=True)]
    table.append({"allocator": "member weight (the next allocator's mixture)",
                  **{m: f"{game['member_mixture'][m]:.2f}" for m in members}, "allocator weight": ""})
    return (f"### Round {k}: payoff matrix (member's gain over its seat's base policy, ± 95% CI; equilibrium gain "
            f"{game['equilibrium_gain']:+.2f})\n\n" + markdown_table(table) + "\n")


def write_psro_report(measured: Sequence[Mapping[str, Any]], games: Sequence[Mapping[str, Any]], cfg: PsroConfig,
                      out: Path, learned: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """``psro.{md,csv,json,png}`` in ``out`` from what is measured so far (``learned``: what round 1's and the
    last round's allocator learned, :func:`what_rounds_learned`)."""
    rows = psro_rows(measured, cfg)
    preamble = ("# PSRO rounds: exploitability and welfare per allocator\n\n"
                f"`A0` = `{cfg.allocator}`; `A<k>` is `A<k-1>` continued against round k's mixture of the scenario's "
                f"own population ({cfg.own_share:.0%}) and the population of best responses, weighted by the "
                f"meta-game's Nash mixture (experiments/studies/psro.py). **exploitability**: the maximum over the "
                f"team seats of the best response's gain over `truthful` on `{cfg.scenario}` (the exploiting seat's "
                f"95% CI); **welfare**: the allocator's return against each tier's default population; held-out "
                f"seeds {cfg.seeds[0]} .. {cfg.seeds[-1]}; payoff matrices on seeds {cfg.payoff_seeds[0]} .. "
                f"{cfg.payoff_seeds[-1]}.\n\n")
    write_table(rows, out, "psro", preamble)
    md = out / "psro.md"
    write_file(md, md.read_text() + "\n" + "\n".join(payoff_markdown(k, g) for k, g in enumerate(games, 1))
               + ("\n" + learned_markdown(learned) if learned else ""))
    write_file(out / "psro.json", json.dumps({"rows": rows, "rounds": [dict(g) for g in games],
                                            **({"learned": dict(learned)} if learned else {})}, indent=1))
    if rows:
        psro_figure(rows, cfg, out / "psro.png")
    return rows


def psro_figure(rows: Sequence[Mapping[str, Any]], cfg: PsroConfig, path: Path) -> Path:
    """Exploitability (left) and welfare per tier (right) of every allocator, with 95% CIs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = np.arange(len(rows))
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))

    def value(row: Mapping[str, Any], key: str) -> float:
        return float(row[key]) if row.get(key, "") != "" else float("nan")

    left.errorbar(x, [value(r, "exploitability") for r in rows], yerr=[value(r, "exploitability_ci95") for r in rows],
                  marker="o", capsize=4)
    left.axhline(0, color="black", linewidth=0.8)
    left.set_title(f"exploitability on {cfg.scenario} (max over team seats)")
    left.set_ylabel("best response's gain over truthful")
    for tier in cfg.tiers:
        key = f"welfare_{slug_of(tier)}"
        right.errorbar(x, [value(r, key) for r in rows], yerr=[value(r, f"{key}_ci95") for r in rows], marker="o",
                       capsize=4, label=slug_of(tier))
    right.set_title("welfare against the default population")
    right.set_ylabel("allocator's return")
    right.legend(fontsize=8)
    for ax in (left, right):
        ax.set_xticks(x, [str(r["allocator"]) for r in rows])
        ax.set_xlabel("allocator (round)")
    fig.tight_layout()
    write_figure(path, fig, dpi=120)
    plt.close(fig)
    return path


__all__ = ["psro_rows", "slug_of", "write_psro_report"]
