"""Bluffing and pricing analysis of a training run: ``commons-arena analyze RUN``.

Reads the run folder (its ``experiment.toml``, ``history.json``, the checkpoint's data-only policies)
and plays held-out seeds (never used in training) through the focal/background substrate:

* **learned teams**: the ratio of declared to true need (summed GPUs over the episode,
  tick 0 excluded: nothing is declared for it) over training (recorded at each held-out
  evaluation) and against each allocator (every scripted baseline, and the learned one if
  the run has it), with the teams' returns;
* **a learned allocator**: how its grants follow declarations (teams whose need is not
  revealed) and revealed needs (teams starved long enough to be revealed): the
  least-squares slope of grant on each, per (team, tier) cell, beside ``proportional``'s;
  and each team's misreport gain against it (return as ``greedy_bluffer`` minus as
  ``truthful``, every other seat the scenario's population) beside ``proportional``'s;
* **a learned broker**: its price level against the demand it sees (correlation, and the
  mean price level per demand bin), beside the scripted ``demand_priced`` broker.

**Learning or design** (every run): each learning seat's held-out return in its own seat
(the other learning seats as the checkpoint plays them) beside reference rows on the same
seeds: the **untrained network** (``<run>/iteration_0``, written before the first update),
and the role's scripted references (allocator ``planner``, ``proportional``; team
``truthful``, ``greedy_bluffer``; broker ``demand_priced``), each as a paired difference with
its 95% CI; for a learned team the row against ``truthful`` is its **misreport gain**. The
codes its module chooses on those episodes are counted: an allocator choosing its codec's
zero code on ≥ ``PLAYS_BASE`` of ticks *plays planner*, a seat whose code never changes plays
one fixed code of its codec (a scripted strategy by design). The summary's **credit** line
says, per seat, whether learning shows (trained beats untrained, CI above 0) and which of
its behaviour is the codec's or a scripted part's. Curves: every learning seat's held-out
return over training, from iteration 0.

Writes ``<run>/analysis/analysis.png`` (one panel per part), ``analysis.md`` and
``analysis.json``.

    commons-arena analyze runs/selfplay-standard-s0 --seeds 20
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import commons_arena
from commons_arena.enums import ALLOCATOR, BROKER, TIERS
from commons_arena.errors import one_line
from commons_arena.files import check_outputs, make_folder, write_figure, write_file
from commons_arena.inputs import load_json_object
from commons_arena.scenario import ScenarioConfig
from experiments.evaluation.engine import arena_for, play, returns_of
from experiments.evaluation.evaluate import BASELINE_ALLOCATORS, play_many
from experiments.evaluation.tables import markdown_table
from experiments.evaluation.traces import (
    SeatCodes,
    Trace,
    declared_to_need,
    price_response,
    reference_ratios,
    slope,
    traced,
)
from experiments.statistics import mean_ci95, paired_difference
from experiments.training.runs import RECORD, HistoryRow, has_record, saved_args, saved_history
from policies.population import Population

# ----------------------------------------------------------------------------- the run


@dataclass
class RunInfo:
    run: Path
    checkpoint: Path
    scenario: str
    learned: list[str]  # learning seats
    history: list[dict[str, Any]]
    background: Population
    untrained: dict[str, Any] | None = None  # iteration_0's held-out evaluation row

    @property
    def policy(self) -> str:
        return f"learned:{self.checkpoint}"


def read_run(run: Path, checkpoint: str = "checkpoint") -> RunInfo:
    from policies.learned import read_sidecar
    from policies.policy_set import is_policy_set, members

    run = Path(run)
    if not has_record(run):
        raise ValueError(f"{run} is not a training run folder (no {RECORD}); pass the folder `commons-arena train` wrote")
    args = saved_args(run)  # each file of the run folder checked: one line naming it, never a traceback
    history = saved_history(run, required=False)
    folder = run / checkpoint
    if not folder.is_dir():
        raise ValueError(f"{run} has no {checkpoint}/ folder; choose --checkpoint checkpoint or best")
    learned = list(members(folder)) if is_policy_set(folder) else [read_sidecar(folder)["agent"]]
    scenario = history[-1]["scenario"] if history else args.get("scenario", "standard")
    if scenario == "mixed":  # a mix of tiers (allocator_mixed): analysed on its hardest tier
        scenario = TIERS[-1]
    config = commons_arena.load_scenario(scenario)
    background = Population.from_toml(args["background"], config) if args.get("background") else Population.default(config)
    untrained_path = run / UNTRAINED / "heldout.json"
    untrained = None
    if untrained_path.exists():
        untrained = load_json_object(untrained_path, "untrained evaluation", allow_nan=True)
        try:
            HistoryRow.model_validate(untrained)
        except ValueError as err:
            raise ValueError(f"{untrained_path}: {one_line(err)}") from None
    return RunInfo(run, folder.resolve(), scenario, learned, history, background, untrained)


def joint_population(info: RunInfo, **replace: str) -> Population:
    """The run's background with every learning seat played by the checkpoint (then ``replace``)."""
    population = info.background
    for seat in info.learned:
        population = population.with_agent(seat, info.policy)
    for seat, policy in replace.items():
        population = population.with_agent(seat, policy)
    return population


UNTRAINED = "iteration_0"  # the run's checkpoint before the first update (experiments.training.train)
PLAYS_BASE = 0.95  # share of ticks on the zero code from which a seat "plays" its codec's base policy
REFERENCES = {"allocator": ("planner", "proportional"), "team": ("truthful", "greedy_bluffer"),
              "broker": ("demand_priced",)}


def untrained_policy(info: RunInfo) -> str | None:
    """The run's untrained network (``<run>/iteration_0``) as a policy name; None when the run
    kept only its evaluation there (an LSTM run: no data-only export yet)."""
    untrained = info.run / UNTRAINED
    if (untrained / "arena_policy.json").is_file() or (untrained / "policies").is_dir():
        return f"learned:{untrained.resolve()}"
    return None


def code_usage(config: ScenarioConfig, population: Population, seat: str, seeds: Sequence[int]) -> dict[str, Any]:
    """The codes the seat's learned policy chooses on ``seeds``: the share of ticks on its
    codec's zero code and on its most frequent code (described by the codec when it can)."""
    env = arena_for(config)
    policies = population.build(config, env=env, strict=False)
    codec = getattr(policies[seat], "codec", None)
    chosen = SeatCodes(seat)
    list(play(env, policies, seeds, chosen))
    codes = [tuple(int(x) for x in code.ravel()) for code in chosen.codes]
    counts: dict[tuple[int, ...], int] = {}
    for code in codes:
        counts[code] = counts.get(code, 0) + 1
    top, top_n = max(counts.items(), key=lambda kv: kv[1])
    zero = None if codec is None or codec.zero_code is None else tuple(int(x) for x in codec.zero_code)
    describe = getattr(codec, "describe", None)
    return {"seat": seat, "codec": getattr(codec, "name", "") or "raw", "ticks": len(codes),
            "distinct_codes": len(counts),
            "zero_code_share": float("nan") if zero is None else counts.get(zero, 0) / len(codes),
            "top_code": describe(np.asarray(top)) if describe else str(list(top)),
            "top_code_is_zero": top == zero, "top_code_share": top_n / len(codes)}


def learning_rows(config: ScenarioConfig, info: RunInfo, seat: str, role: str, seeds: Sequence[int],
                  trained: Sequence[float]) -> list[dict[str, Any]]:
    """The trained seat's return (``trained``: on ``seeds``, every learning seat the checkpoint)
    minus each reference's in the same seat and seeds (paired CI)."""
    references: dict[str, str] = {}
    untrained = untrained_policy(info)
    if untrained is not None:
        references["untrained network"] = untrained
    references.update({name: name for name in REFERENCES[role]})
    rows = [{"seat": seat, "policy": "trained", "return": float(np.mean(trained)), "trained_minus": 0.0, "ci95": 0.0}]
    for name, policy in references.items():
        values = returns_of(play(config, joint_population(info, **{seat: policy}), seeds), seat)
        diff, ci = paired_difference(trained, values)
        rows.append({"seat": seat, "policy": name, "return": float(np.mean(values)), "trained_minus": diff, "ci95": ci})
    return rows


def together_rows(config: ScenarioConfig, info: RunInfo, seeds: Sequence[int],
                  trained: Sequence[Trace]) -> list[dict[str, Any]]:
    """Every learning seat's return with all of them trained (``trained``: the episodes of
    ``seeds``) against all of them untrained (iteration 0), the rest the background: the
    training curve's measure, paired with a 95% CI per seat. Empty without an untrained checkpoint."""
    untrained = untrained_policy(info)
    if untrained is None:
        return []
    before = traced(config, joint_population(info, **dict.fromkeys(info.learned, untrained)), seeds)
    rows = []
    for seat in info.learned:
        after_returns, before_returns = [t.returns[seat] for t in trained], [t.returns[seat] for t in before]
        diff, ci = paired_difference(after_returns, before_returns)
        rows.append({"seat": seat, "iteration_0": float(np.mean(before_returns)),
                     "trained": float(np.mean(after_returns)), "trained_minus_iteration_0": diff, "ci95": ci,
                     "above": diff - ci > 0})
    return rows


def credit(seat: str, rows: Sequence[Mapping[str, Any]], usage: Mapping[str, Any]) -> str:
    """One line: does learning show for ``seat``, and what comes from the codec or a scripted part."""
    untrained = next((r for r in rows if r["policy"] == "untrained network"), None)
    if untrained is None:
        learned = "no untrained checkpoint to compare with (a run from before iteration_0 was kept)"
    elif untrained["trained_minus"] - untrained["ci95"] > 0:
        learned = (f"learning shows: {untrained['trained_minus']:+.2f} ± {untrained['ci95']:.2f} over the untrained "
                   f"network")
    else:
        learned = (f"no learning shows: {untrained['trained_minus']:+.2f} ± {untrained['ci95']:.2f} against the "
                   f"untrained network")
    if usage["zero_code_share"] == usage["zero_code_share"] and usage["zero_code_share"] >= PLAYS_BASE:
        design = (f"its codec's zero code on {usage['zero_code_share']:.0%} of ticks: it plays the codec's base policy "
                  f"({'planner' if seat == ALLOCATOR else usage['top_code']}), by design, not by learning")
    elif usage["distinct_codes"] == 1:
        design = f"one fixed code ({usage['top_code']}) on every tick: a fixed strategy of the `{usage['codec']}` codec"
    else:
        design = (f"{usage['distinct_codes']} distinct codes, the most frequent ({usage['top_code']}) on "
                  f"{usage['top_code_share']:.0%} of ticks")
    return f"**{seat}**: {learned}; {design}."


def analyze(run: Path, seeds: Sequence[int], checkpoint: str = "checkpoint") -> dict[str, Any]:
    info = read_run(run, checkpoint)
    config = commons_arena.load_scenario(info.scenario)
    teams = [t for t in config.team_names if t in info.learned]
    report: dict[str, Any] = {"run": str(info.run), "checkpoint": str(info.checkpoint), "scenario": info.scenario,
                              "learned": info.learned, "seeds": [seeds[0], seeds[-1]]}
    report["learning"] = []
    report["codes"] = []
    report["credit"] = []
    trained = traced(config, joint_population(info), seeds)  # every learning seat the checkpoint: once
    for seat in info.learned:
        role = "team" if seat in config.team_names else seat
        rows = learning_rows(config, info, seat, role, seeds, [t.returns[seat] for t in trained])
        usage = code_usage(config, joint_population(info), seat, seeds)
        report["learning"] += rows
        report["codes"].append(usage)
        report["credit"].append(credit(seat, rows, usage))
    report["together"] = together_rows(config, info, seeds, trained)
    start = [info.untrained] if info.untrained else []
    report["returns_over_training"] = [{"env_steps": r["env_steps"], **r["returns"]}
                                       for r in [*start, *info.history] if "returns" in r]
    if teams:
        report["teams_over_training"] = [
            {"env_steps": row["env_steps"], **{t: row["declared_to_need"].get(t, float("nan")) for t in teams}}
            for row in [*start, *info.history] if "declared_to_need" in row
        ]
        allocators = [*BASELINE_ALLOCATORS, *(["learned"] if ALLOCATOR in info.learned else [])]
        rows = []
        for allocator in allocators:
            policy = info.policy if allocator == "learned" else allocator
            traces = traced(config, joint_population(info, allocator=policy), seeds)
            for team in teams:
                rows.append({"allocator": allocator, "team": team, "declared_to_need": declared_to_need(traces, team),
                             "team_return": float(np.mean([t.returns[team] for t in traces]))})
        report["teams_vs_allocators"] = rows
        report["teams_reference"] = reference_ratios(config, info.background, seeds)
    if ALLOCATOR in info.learned:
        grants = []
        for name, policy in (("learned", info.policy), ("planner", "planner"), ("proportional", "proportional")):
            traces = traced(config, info.background.with_agent(ALLOCATOR, policy), seeds)
            grants.append({"allocator": name,
                           "slope_on_declared": slope([p for t in traces for p in t.on_declared]),
                           "slope_on_revealed_need": slope([p for t in traces for p in t.on_revealed]),
                           "allocator_return": float(np.mean([t.returns[ALLOCATOR] for t in traces]))})
        report["allocator_grants"] = grants
        gains = []
        for name, policy in (("learned", info.policy), ("planner", "planner"), ("proportional", "proportional")):
            for team in config.team_names:
                bluff = [e[team]["return"] for e in play_many(info.scenario, policy, seeds, {team: "greedy_bluffer"})]
                truth = [e[team]["return"] for e in play_many(info.scenario, policy, seeds, {team: "truthful"})]
                gain, ci = mean_ci95(np.subtract(bluff, truth))
                gains.append({"allocator": name, "team": team, "misreport_gain": gain, "gain_ci95": ci})
        report["misreport_gain"] = gains
        report["discounting"], report["what_it_learned"] = discounting_part(info, config, seeds)
    if BROKER in info.learned:
        pricing = []
        for name, population in (("learned", joint_population(info)),
                                 ("demand_priced", joint_population(info, broker="demand_priced"))):
            response = price_response(traced(config, population, seeds))
            pricing.append({"broker": name, **response})
        report["broker_pricing"] = pricing
    return report


def discounting_part(info: RunInfo, config: ScenarioConfig, seeds: Sequence[int]
                     ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Per team seat: the learned allocator's discount of a x3 bluffer and its generosity to a truthful
    team beside ``planner``'s and ``proportional``'s, and what it learned against ``planner``
    (experiments/evaluation/discounting.py)."""
    from experiments.evaluation.discounting import discounting_row, what_it_learned

    rows, verdicts = [], []
    for team in config.team_names:
        measured = {name: discounting_row(info.scenario, policy, team, seeds, background=info.background)
                    for name, policy in (("learned", info.policy), ("planner", "planner"),
                                         ("proportional", "proportional"))}
        for name, row in measured.items():
            rows.append({**{k: v for k, v in row.items() if k != "per_seed"}, "allocator": name})
        verdicts.append(what_it_learned({**measured["learned"], "allocator": "learned"}, measured["planner"]))
    return rows, verdicts


# ----------------------------------------------------------------------------- output


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


__all__ = ["analyze", "code_usage", "credit", "learning_rows", "together_rows", "write_analysis"]
