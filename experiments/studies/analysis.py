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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import commons_arena
from commons_arena.enums import ALLOCATOR, BROKER, TIERS
from commons_arena.errors import one_line
from commons_arena.inputs import load_json_object
from commons_arena.scenario import ScenarioConfig
from experiments.evaluation.engine import arena_for, play, returns_of
from experiments.evaluation.evaluate import BASELINE_ALLOCATORS, play_many
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
    kept only its evaluation there."""
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
                                       for r in [*start, *info.history] if r.get("returns")]
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


__all__ = ["analyze", "code_usage", "credit", "learning_rows", "together_rows"]
