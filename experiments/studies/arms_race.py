"""The arms race, two rounds: does an allocator trained against a frozen bluffer learn to discount it?

    commons-arena arms-race --allocator planner|learned:<dir> --scenario crisis --seat search \\
        --round1-iterations 40 --round2-iterations 120 --round2-history 4 --share 0.5 --seeds 300

* **Round 1**: a best response B1 learns the seat against the allocator A1 (the exploit
  cell's training, :func:`experiments.studies.exploit.train_best_response`: its
  ``background.toml`` names A1; ``round1/<seat>/best``).
* **Round 2**: the allocator A2 is A1 continued: an allocator run (``--round2-experiment``,
  default ``allocator_mixed``, the main job's) in which B1 (``learned:``) plays the seat in a
  ``--share`` of the training episodes (``--mix-background``, ``round2/mix_background.toml``)
  and ``--seat-otherwise`` in the rest (``round2/background.toml``; every other seat is each
  scenario's own population throughout). The default, ``truthful``, is the policy B1's gain is
  measured against: an allocator that never meets a truthful team in the seat has no reason to
  serve one well, and B1's gain over ``truthful`` is as much about how a truth-teller fares as
  about the bluffer (docs/negotiation.md measures both). ``population`` puts each scenario's own
  seat policy there instead. A learned A1 is continued from its weights
  (``--init-from``, its codec, history and layer sizes taken over); a scripted A1 (``planner``)
  means a fresh run of the codec at its zero code, which is ``planner`` for ``need``. A2 is the
  run's last checkpoint (``round2/allocator/checkpoint``).
* **Report**, every figure paired on the same held-out seeds (95% Student-t CI), played through
  the tournament engine (:mod:`experiments.evaluation.tournament`):

  - B1's gain over ``truthful`` in its seat against A1 and against A2 (on the scenario), the
    cut (gain against A1 minus gain against A2, seed by seed), the cut share (cut / gain
    against A1, a ratio of means) and the half-cut margin ``gain_A1 / 2 - gain_A2`` (above 0
    with its CI: the round-2 allocator cut the gain by at least half);
  - A2 minus ``planner`` and A2 minus A1 per tier, on each tier's own population.

Written to ``--out``: ``arms_race.md``, ``arms_race.csv``, ``arms_race.png``, ``arms_race.json``
(per-seed series), and ``round1/``, ``round2/``, ``play/`` (the tournaments' stores and tables).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from commons_arena.enums import ALLOCATOR
from commons_arena.files import make_folder, toml_text, write_file
from experiments.evaluation.results import QUIET, planned_keys
from experiments.evaluation.roster import roster_from_dict
from experiments.evaluation.store import ResultStore, by_seed
from experiments.evaluation.tables import markdown_table, write_table
from experiments.evaluation.tournament import run_tournament
from experiments.statistics import mean_ci95
from experiments.studies.exploit import TEAM_BASE, Cell, train_best_response
from experiments.training.args import TrainArgs
from experiments.training.warm_start import LEARNED_PREFIX, checkpoint_dir

BLUFFER, A1, A2, PLANNER = "B1", "A1", "A2", "planner"
MIX_FILE = "mix_background.toml"
BACKGROUND_FILE = "background.toml"  # round 2: who plays the seat in the episodes without B1

Series = dict[tuple[str, str, str], list[float]]  # (scenario, background, player) -> the seat's return per seed


def warm_start_settings(sidecar: Mapping[str, Any]) -> dict[str, Any]:
    """The round-2 flags that make a learned A1's checkpoint fit the run (``--init-from`` refuses
    any other): its codec, history and hidden layer sizes."""
    linears = [layer for layer in sidecar["network"]["layers"] if layer["type"] == "linear"]
    codec = sidecar["action_codec"]
    return {"action_codec": codec["name"] if codec else "none", "history": int(sidecar["history"]),
            "hidden": tuple(int(layer["out"]) for layer in linears[:-1])}


def round2_args(base: TrainArgs, allocator: str, scenario: str, mix: Path, share: float, iterations: int,
                minutes: float, out: Path, background: Path | None = None) -> TrainArgs:
    """Round 2's training run: ``base`` with the mix background (and ``background``, who plays
    the seat otherwise, when given), the budget and, for a learned A1, its weights and the
    settings they need."""
    return continuation(replace(base, scenario=scenario, mix_background=mix, mix_share=share, iterations=iterations,
                                minutes=minutes, out=out, run_name=ALLOCATOR, background=background or base.background),
                        allocator)


def continuation(args: TrainArgs, allocator: str) -> TrainArgs:
    """``args`` continuing ``allocator``: a learned one from its weights (``--init-from``, with the settings
    they need); a scripted one means a fresh run of the codec at its zero code (``planner`` for ``need``)."""
    if not allocator.startswith(LEARNED_PREFIX):
        return args
    from policies.learned import read_sidecar

    return replace(args, init_from=allocator, **warm_start_settings(read_sidecar(checkpoint_dir(allocator))))


def seat_roster(name: str, seat: str, policy: str) -> str:
    """A roster naming ``policy`` in ``seat``; every other seat its scenario's own population."""
    return toml_text({"name": name, "agents": {seat: policy}})


def mix_roster(seat: str, bluffer: Path) -> str:
    """The round-2 mix background: B1 in the seat, every other seat its scenario's own population."""
    return seat_roster(f"round-1 bluffer in {seat}", seat, f"{LEARNED_PREFIX}{bluffer}")


def tournament_series(name: str, seat: str, scenarios: Sequence[str], entrants: Mapping[str, str],
         backgrounds: Mapping[str, Mapping[str, Any]], seeds: Sequence[int], folder: Path,
         anchors: Mapping[str, str] | None = None) -> Series:
    """One tournament (its store and tables in ``folder``); the seat's return per seed of every
    (scenario, background, player)."""
    roster = roster_from_dict({"name": name, "seat": seat, "scenarios": list(scenarios), "seeds": list(seeds),
                               "entrants": dict(entrants), "backgrounds": {k: dict(v) for k, v in backgrounds.items()},
                               "anchors": dict(anchors or {})}, source=f"arms race: {name}")
    result = run_tournament(roster, folder, options=replace(QUIET, workers=1))
    with ResultStore(result.store) as store:
        rows = store.rows(planned_keys(roster))
    series = by_seed(rows, lambda row: float(row["episode"][seat]["return"]))
    return {key: [returns[s] for s in seeds] for key, returns in series.items()}


def difference_row(measure: str, scenario: str, values: Sequence[float] | np.ndarray) -> dict[str, Any]:
    """One row: the mean of per-seed differences and its 95% CI."""
    mean, ci95 = mean_ci95([float(v) for v in values])
    return {"measure": measure, "scenario": scenario, "mean": mean, "ci95": ci95, "low": mean - ci95,
            "high": mean + ci95, "seeds": len(values)}


def report_rows(bluffer: Series, allocators: Series, scenario: str, tiers: Sequence[str]) -> list[dict[str, Any]]:
    """The table (see the module docstring) from the tournaments' per-seed returns."""
    def gain(against: str) -> np.ndarray:
        return np.subtract(bluffer[(scenario, against, BLUFFER)], bluffer[(scenario, against, TEAM_BASE)])

    gain1, gain2 = gain(A1), gain(A2)
    rows = [difference_row(f"B1 gain over {TEAM_BASE} vs A1", scenario, gain1),
            difference_row(f"B1 gain over {TEAM_BASE} vs A2", scenario, gain2),
            difference_row("gain cut (vs A1 - vs A2)", scenario, gain1 - gain2),
            difference_row("half-cut margin (gain vs A1 / 2 - gain vs A2)", scenario, gain1 / 2 - gain2)]
    share = float(np.mean(gain1 - gain2) / np.mean(gain1)) if np.mean(gain1) != 0 else float("nan")
    rows.append({"measure": "cut share (cut / gain vs A1)", "scenario": scenario, "mean": share, "ci95": "",
                 "low": "", "high": "", "seeds": len(gain1)})
    for tier in tiers:
        a2 = allocators[(tier, "default", A2)]
        for other in (PLANNER, A1):
            rows.append(difference_row(f"A2 - {other} (own population)", tier,
                                       np.subtract(a2, allocators[(tier, "default", other)])))
    return rows


def verdict(rows: Sequence[Mapping[str, Any]], tiers: Sequence[str]) -> list[str]:
    """The issue's targets, read off the table: each holds when its CI lies above 0."""
    def row(measure: str, scenario: str | None = None) -> Mapping[str, Any]:
        return next(r for r in rows if r["measure"] == measure and scenario in (None, r["scenario"]))

    margin = row("half-cut margin (gain vs A1 / 2 - gain vs A2)")
    lines = [f"- round-2 allocator cuts B1's gain by at least half: **{'yes' if margin['low'] > 0 else 'no'}** "
             f"(margin {margin['mean']:+.2f} ± {margin['ci95']:.2f}; cut share "
             f"{row('cut share (cut / gain vs A1)')['mean']:.0%})"]
    for tier in tiers:
        ahead = row("A2 - planner (own population)", tier)
        lines.append(f"- A2 ahead of `planner` on {tier}: **{'yes' if ahead['low'] > 0 else 'no'}** "
                     f"({ahead['mean']:+.2f} ± {ahead['ci95']:.2f})")
    return lines


def write_arms_race_report(rows: list[dict[str, Any]], series: Mapping[str, Series], meta: Mapping[str, Any], tiers: Sequence[str],
                 out: Path) -> list[Path]:
    """``arms_race.{csv,md,png,json}`` in ``out``."""
    from experiments.viewing.plots import score_bars

    written = write_table(rows, out, "arms_race")
    write_file(
        out / "arms_race.md",
        "# The arms race, two rounds\n\n"
        f"A1 = `{meta['allocator']}`; B1 = `learned:{meta['bluffer']}` (best response in `{meta['seat']}` on "
        f"`{meta['scenario']}`, {meta['round1_iterations']} iterations); A2 = `learned:{meta['round2']}` (A1 "
        f"continued {meta['round2_iterations']} iterations, B1 in `{meta['seat']}` in {meta['share']:.0%} of the "
        f"training episodes, {otherwise_words(meta['otherwise'])} in the rest). Every figure is a paired difference on the same held-out seeds "
        f"({meta['seeds'][0]} .. {meta['seeds'][-1]}), ± 95% CI.\n\n"
        + "\n".join(verdict(rows, tiers)) + "\n\n" + markdown_table(rows) + "\n")
    written.append(score_bars([r for r in rows if r["ci95"] != ""], out / "arms_race.png", value="paired difference",
                              category="measure", group="scenario", reference_lines={},
                              title="Arms race: B1's gain against A1 and A2; A2 against planner and A1"))
    per_seed = {name: {" / ".join(key): values for key, values in s.items()} for name, s in series.items()}
    write_file(out / "arms_race.json", json.dumps({**meta, "bluffer": str(meta["bluffer"]),
                                                  "round2": str(meta["round2"]), "per_seed": per_seed}, indent=1))
    return [*written, out / "arms_race.json"]


def otherwise_words(otherwise: str | None) -> str:
    return "each scenario's own population" if otherwise is None else f"`{otherwise}`"


def arms_race(allocator: str, scenario: str, seat: str, seeds: Sequence[int], round1: TrainArgs, round2: TrainArgs,
              share: float, out: Path, otherwise: str | None = TEAM_BASE) -> list[dict[str, Any]]:
    """Both rounds and the report (see the module docstring); returns the table's rows.

    ``round1`` / ``round2`` carry each round's training settings and budget (``iterations``, ``minutes``);
    ``otherwise`` plays the seat in round 2's episodes without B1 (None: each scenario's own population)."""
    make_folder(out)
    print(f"== round 1: best response of {seat} against {allocator} on {scenario}")
    bluffer = train_best_response(Cell(scenario, allocator, seat), out / "round1", round1)
    mix = out / "round2" / MIX_FILE
    make_folder(mix.parent)
    write_file(mix, mix_roster(seat, bluffer))
    background = None
    if otherwise is not None:
        background = out / "round2" / BACKGROUND_FILE
        write_file(background, seat_roster(f"{otherwise} in {seat}", seat, otherwise))
    args = round2_args(round2, allocator, scenario, mix, share, round2.iterations or 1, round2.minutes,
                       out / "round2", background)
    print(f"== round 2: {allocator} continued ({args.experiment}), B1 in {seat} in {share:.0%} of the episodes, "
          f"{otherwise_words(otherwise)} in the rest")
    from experiments.training.train import train

    defender = train(args)  # the run's last checkpoint
    print("== report: B1 against A1 and A2; A2 against planner and A1 on every tier")
    a2 = f"{LEARNED_PREFIX}{defender}"
    bluffing = tournament_series("B1 against A1 and A2", seat, [scenario], {TEAM_BASE: TEAM_BASE, BLUFFER: f"{LEARNED_PREFIX}{bluffer}"},
                    {A1: {"agents": {ALLOCATOR: allocator}}, A2: {"agents": {ALLOCATOR: a2}}}, seeds,
                    out / "play" / "bluffer")
    tiers = list(dict.fromkeys([*args.stages, scenario]))  # every tier the defender trained on
    entrants = {PLANNER: PLANNER, A1: allocator, A2: a2} if allocator != PLANNER else {PLANNER: PLANNER, A2: a2}
    allocating = tournament_series("A2 against planner and A1", ALLOCATOR, tiers, entrants, {"default": {}}, seeds,
                      out / "play" / "allocators", anchors={"high": PLANNER})  # planner, not the oracle's MILP
    if allocator == PLANNER:  # A1 is planner: the same episodes
        allocating.update({(t, b, A1): v for (t, b, p), v in list(allocating.items()) if p == PLANNER})
    rows = report_rows(bluffing, allocating, scenario, tiers)
    meta = {"allocator": allocator, "scenario": scenario, "seat": seat, "bluffer": bluffer, "round2": defender,
            "share": share, "otherwise": otherwise, "round1_iterations": round1.iterations,
            "round2_iterations": args.iterations, "seeds": list(seeds)}
    write_arms_race_report(rows, {"bluffer": bluffing, "allocators": allocating}, meta, tiers, out)
    print("\n".join(verdict(rows, tiers)))
    print(markdown_table(rows))
    return rows


__all__ = ["arms_race", "continuation", "mix_roster", "report_rows", "round2_args", "seat_roster", "verdict", "warm_start_settings"]
