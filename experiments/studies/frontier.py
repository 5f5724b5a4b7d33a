"""The welfare-exploitability frontier as the report (issue 42, items 2 and 5).

    commons-arena frontier --scenarios standard crisis --seeds 100 [--exploit results/exploit_all]

Per tier and allocator, on the same held-out seeds (``exploit`` range of experiments/seeds.py):

* **welfare**: the allocator's return against the tier's own population (mean, 95% CI;
  :func:`experiments.studies.exploitability.welfare`, stored in ``<out>/welfare/``);
* per **team seat** (a *seat cell*, ``<out>/cells/<tier>-<allocator>-<seat>.json``, resumable): the
  seat's return per seed with ``truthful`` in it, with a team that **does nothing** (declares 0 and
  accepts every tick: ``truthful`` at bluff 0, never escalating) and with its **best response**:
  the best fixed ``bluff`` code (factor x stance rule, 48 codes) chosen on selection seeds (30 of the
  ``evaluate`` range, the 5 best looked at again on 120 more: :func:`experiments.evaluation.best_code.search`)
  and played on the report seeds (``source`` = ``search``); or, with ``--exploit DIR``, the final best
  response of that folder's exploit cell when it played the same seeds (``source`` = ``learning`` or
  ``search``, as the cell says). A searched code is a *lower bound* on what a learner could take;
* **exploitability**: the maximum over team seats of the best response's mean gain over ``truthful``
  (paired per seed), with the exploiting seat's 95% CI.

**Mixtures** and **beyond the frontier**: :mod:`experiments.studies.pareto` (the per-seed points, their
pairwise mixtures, the frontier and the paired-bootstrap verdict).

Written to ``--out``: ``frontier.{md,csv,png}`` (per tier and allocator), ``seats.{md,csv}`` (item 5:
do-nothing / truthful / best response per seat, the differences paired), ``welfare/`` and ``cells/``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import Field, Strict, TypeAdapter
from typing_extensions import TypedDict  # pydantic reads TypedDicts of typing_extensions on Python 3.11

import commons_arena
from commons_arena.enums import ALLOCATOR
from commons_arena.files import make_folder, write_file
from commons_arena.inputs import load_record
from experiments.evaluation.fixed_codes import SELECTION_SEEDS, Arena
from experiments.evaluation.store import StoredNumber
from experiments.evaluation.tables import markdown_table, write_table
from experiments.statistics import mean_ci95, paired_difference
from experiments.studies.exploit import slug
from experiments.studies.exploitability import WELFARE_DIR, allocator_identity, welfare
from experiments.studies.pareto import Point, beyond, mixtures, pareto, resample_indices

CELLS_DIR = "cells"
REFINE = 120  # seeds of the search's second look (experiments/evaluation/best_code.py)
SELECTION = 30  # seeds of its first look
DO_NOTHING: dict[str, Any] = {"bluff": 0.0, "escalate_after": 1_000_000}  # truthful's: declares 0, never escalates
TRUTHFUL, NOTHING, BEST = "truthful", "do_nothing", "best"


class _Returns(TypedDict):
    seat: list[StoredNumber]
    allocator: list[StoredNumber]


# a seat cell as the one reader (commons_arena.inputs.load_record) takes it back: every return finite and bounded
class _SeatCell(TypedDict):
    scenario: str
    allocator: str
    seat: str
    seeds: list[Annotated[int, Strict(), Field(ge=0)]]
    truthful: _Returns
    do_nothing: _Returns
    best: _Returns
    best_name: str
    source: str
class _StoredCell(TypedDict):
    key: dict[str, Any]
    cell: _SeatCell
CELL_RECORD = TypeAdapter(_StoredCell)


def is_scripted(allocator: str) -> bool:
    """A frontier member: a registered scripted allocator (not a checkpoint or a fixed code)."""
    return ":" not in allocator


def search_seeds(count: int = SELECTION, refine: int = REFINE) -> tuple[list[int], list[int]]:
    """The search's seeds: the first look's and the second's (the ``evaluate`` range, never a report seed)."""
    first = SELECTION_SEEDS.start
    return list(range(first, first + count)), list(range(first + count, first + count + refine))


# ---------------------------------------------------------------------------- seat cells
def cell_path(out: Path, scenario: str, allocator: str, seat: str) -> Path:
    return out / CELLS_DIR / f"{slug(scenario)}-{slug(allocator)}-{seat}.json"


def seat_cell(scenario: str, allocator: str, seat: str, seeds: Sequence[int], path: Path,
              selection: Sequence[int], refine: Sequence[int], exploit_dir: Path | None = None) -> dict[str, Any]:
    """One (tier, allocator, team seat): per seed, the seat's and the allocator's returns with ``truthful``,
    a do-nothing team and the best response in the seat (module docstring); read back from ``path`` when
    stored with the same key, else played and stored there."""
    from experiments.evaluation.best_code import search
    from policies.codecs import BluffTeamCodec, CodedPolicy
    from policies.registry import make_policy

    config = commons_arena.load_scenario(scenario)
    run = exploit_run(exploit_dir, scenario, allocator, seat, seeds)
    key = {"scenario_hash": config.content_hash, "allocator_identity": allocator_identity(allocator), "seat": seat,
           "seeds": [int(s) for s in seeds], "selection": [int(s) for s in selection],
           "refine": [int(s) for s in refine], "exploit": None if run is None else str(run)}
    if path.is_file() or path.is_symlink():
        stored = load_record(path, CELL_RECORD, "frontier cell", own=True)
        lengths = {len(stored["cell"][part][who]) for part in (TRUTHFUL, NOTHING, BEST) for who in ("seat", "allocator")}
        if lengths != {len(stored["cell"]["seeds"])}:
            raise ValueError(f"frontier cell {path}: not the record this program writes: one return per seed")
        if stored["key"] == key:
            return dict(stored["cell"])
    arena = Arena(config, allocator, seat)

    def returns(policy: Any) -> dict[str, list[float]]:
        episodes = arena.episodes(policy, seeds)
        return {"seat": [e[seat]["return"] for e in episodes], "allocator": [e[ALLOCATOR]["return"] for e in episodes]}

    cell: dict[str, Any] = {"scenario": scenario, "allocator": allocator, "seat": seat, "seeds": [int(s) for s in seeds],
                            TRUTHFUL: returns(make_policy("truthful", config, seat)),
                            NOTHING: returns(make_policy("truthful", config, seat, **DO_NOTHING))}
    learned = None if run is None else exploit_response(run, seeds, cell[TRUTHFUL]["seat"])
    if learned is not None:
        cell.update(learned)
    else:
        codec = BluffTeamCodec(config, seat)
        found = search(arena, codec, selection, refine)
        cell.update({BEST: returns(CodedPolicy(codec, np.asarray(found.code))), "best_name": found.description,
                     "source": "search"})
    store_cell(path, key, cell)
    return cell


def store_cell(path: Path, key: Mapping[str, Any], cell: Mapping[str, Any]) -> Path:
    """The one writer of a seat cell (JSON: its key and its per-seed rows)."""
    make_folder(path.parent)
    return write_file(path, json.dumps({"key": key, "cell": cell}))


def exploit_run(exploit_dir: Path | None, scenario: str, allocator: str, seat: str, seeds: Sequence[int]) -> Path | None:
    """The run folder of ``exploit_dir``'s cell (``commons-arena exploit --out``) when its final best response
    played ``seeds``; None otherwise (no folder given, no such cell, other seeds)."""
    if exploit_dir is None:
        return None
    from experiments.studies.exploit import Cell, final_response

    run = exploit_dir / Cell(scenario, allocator, seat).folder / seat
    return run if final_response(run, seeds) is not None else None


def exploit_response(run: Path, seeds: Sequence[int], truthful: Sequence[float]) -> dict[str, Any] | None:
    """The final best response of an exploit cell's run folder (:func:`exploit_run`): its per-seed returns
    and source; None if it did not play ``seeds``. Its ``truthful`` returns must be ours (the same
    episodes), else the cell is refused."""
    from experiments.studies.exploit import final_response

    final = final_response(run, seeds)
    if final is None:
        return None
    base = final.get("base")
    if base is not None:
        by_seed = dict(zip(base["seeds"], base["seat"], strict=True))
        if not np.allclose([by_seed[s] for s in seeds], truthful):
            raise RuntimeError(f"{run}: its truthful returns differ from this run's on the same seeds (another "
                               "scenario or population): rerun without --exploit or with a matching one")
    returns = final["returns"]
    seat_by, allocator_by = (dict(zip(returns["seeds"], returns[k], strict=True)) for k in ("seat", "allocator"))
    return {BEST: {"seat": [seat_by[s] for s in seeds], "allocator": [allocator_by[s] for s in seeds]},
            "best_name": f"exploit cell {run.parent.name}", "source": str(final["source"])}


# ---------------------------------------------------------------------------- points and mixtures
# ---------------------------------------------------------------------------- the report
def point_of(allocator: str, welfare_returns: Sequence[float], cells: Sequence[Mapping[str, Any]],
             resamples: np.ndarray) -> Point:
    gains = {c["seat"]: np.subtract(c[BEST]["seat"], c[TRUTHFUL]["seat"]) for c in cells}
    return Point.of(allocator, welfare_returns, gains, resamples)


def allocator_row(scenario: str, point: Point, welfare_ci: float, cells: Sequence[Mapping[str, Any]],
                  members: Sequence[Point]) -> dict[str, Any]:
    seat = point.exploiting_seat
    _, ci = mean_ci95(point.gains[seat].tolist())
    sources = [str(c["source"]) for c in cells]
    row: dict[str, Any] = {"scenario": scenario, "allocator": point.label, "welfare": point.mean_welfare,
                           "welfare_ci95": welfare_ci, "exploitability": point.exploitability,
                           "exploitability_ci95": ci, "exploiting_seat": seat,
                           "from_search": sources.count("search"), "from_learning": sources.count("learning"),
                           "seeds": len(point.welfare)}
    row.update(beyond(point, members))
    return row


def seat_table(cells: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Item 5: per (tier, allocator, seat) the do-nothing, truthful and best-response returns, and the
    paired differences that say whether the seat's choice changes its return."""
    rows = []
    for c in cells:
        truthful, nothing, best = (np.asarray(c[k]["seat"]) for k in (TRUTHFUL, NOTHING, BEST))
        row: dict[str, Any] = {"scenario": c["scenario"], "allocator": c["allocator"], "seat": c["seat"]}
        for name, values in ((NOTHING, nothing), (TRUTHFUL, truthful), (BEST, best)):
            row[name], row[f"{name}_ci95"] = mean_ci95(values.tolist())
        row["truthful_minus_do_nothing"], row["truthful_minus_do_nothing_ci95"] = paired_difference(truthful, nothing)
        row["best_minus_truthful"], row["best_minus_truthful_ci95"] = paired_difference(best, truthful)
        row["nothing_at_least_truthful"] = f"{int(np.sum(nothing >= truthful - 1e-9))}/{len(truthful)}"
        row.update({"best_response": c["best_name"], "source": c["source"]})
        rows.append(row)
    return rows


FRONTIER_COLUMNS = ("scenario", "allocator", "welfare", "welfare_ci95", "exploitability", "exploitability_ci95",
                    "exploiting_seat", "from_search", "from_learning", "verdict", "exploitability_margin",
                    "exploitability_margin_low", "exploitability_margin_high", "frontier_at_welfare", "welfare_margin",
                    "welfare_margin_low", "welfare_margin_high", "frontier_at_exploitability", "seeds")
PRINTED_COLUMNS = ("scenario", "allocator", "welfare", "exploitability", "exploiting_seat", "verdict")
FRONTIER_PREAMBLE = (
    "# The welfare-exploitability frontier\n\n"
    "**welfare**: the allocator's return against the tier's own population (mean ± 95% CI). **exploitability**: the "
    "maximum over team seats of the best response's mean gain over `truthful`, paired per seed (± the exploiting "
    "seat's 95% CI); a best response from `search` is the best fixed `bluff` code chosen on other seeds, a lower "
    "bound on what a learner takes (`from_search` / `from_learning`: how many seats' best responses came from "
    "each). **verdict** and the margins: the allocator against the frontier of the *other* scripted allocators and "
    "their pairwise per-episode mixtures (step {step:g}), paired bootstrap over the seeds (95% interval "
    "`_low`..`_high`); `exploitability_margin` > 0: less exploitable than the frontier at its welfare; "
    "`welfare_margin` > 0: more welfare than the frontier at its exploitability "
    "(experiments/studies/frontier.py).\n\n")
SEAT_COLUMNS = ("scenario", "allocator", "seat", "do_nothing", "do_nothing_ci95", "truthful", "truthful_ci95", "best",
                "best_ci95", "truthful_minus_do_nothing", "truthful_minus_do_nothing_ci95", "nothing_at_least_truthful",
                "best_minus_truthful", "best_minus_truthful_ci95", "best_response", "source")
SEAT_PREAMBLE = (
    "# Team seats that matter: do nothing, truthful, best response\n\n"
    "Per tier, allocator and team seat, the seat's episode return (mean ± 95% CI) with a team that does nothing "
    "(declares 0, accepts), with `truthful` and with the best response (`source`: the best fixed code found by "
    "search, or an exploit cell's final best response); `truthful_minus_do_nothing` and `best_minus_truthful` "
    "paired per seed; `nothing_at_least_truthful`: the seeds where doing nothing scored at least as much as "
    "`truthful` (experiments/studies/frontier.py).\n\n")


def frontier(scenarios: Sequence[str], allocators: Sequence[str], seeds: Sequence[int], out: Path,
             step: float = 0.1, selection: int = SELECTION, refine: int = REFINE,
             exploit_dir: Path | None = None) -> list[dict[str, Any]]:
    """Every seat cell and welfare (stored ones read back), then the frontier and seat tables and the
    figure in ``out``; returns the frontier rows."""
    from experiments.viewing.plots import welfare_exploitability

    first, second = search_seeds(selection, refine)
    resamples = resample_indices(len(seeds))
    rows, seats, lines = [], [], {}
    for scenario in scenarios:
        config = commons_arena.load_scenario(scenario)
        points, cis, cells_of = {}, {}, {}
        for allocator in allocators:
            cells = [seat_cell(scenario, allocator, seat, seeds, cell_path(out, scenario, allocator, seat), first,
                               second, exploit_dir) for seat in config.team_names]
            measured = welfare(scenario, allocator, seeds, out / WELFARE_DIR / f"{slug(scenario)}-{slug(allocator)}.json")
            points[allocator] = point_of(allocator, measured["returns"], cells, resamples)
            cis[allocator], cells_of[allocator] = measured["welfare_ci95"], cells
            seats += seat_table(cells)
            print(f"  {scenario} {allocator}: welfare {points[allocator].mean_welfare:.1f}, "
                  f"{exploitability_words(points[allocator].exploitability, points[allocator].exploiting_seat)}",
                  flush=True)
        scripted = [a for a in allocators if is_scripted(a)]
        everything = mixtures([points[a] for a in scripted], step) if len(scripted) > 1 else [points[a] for a in scripted]
        lines[scenario] = [(p.mean_welfare, p.exploitability) for p in pareto(everything)]
        for allocator in allocators:
            others = [points[a] for a in scripted if a != allocator]
            members = mixtures(others, step) if len(others) > 1 else others
            rows.append(allocator_row(scenario, points[allocator], cis[allocator], cells_of[allocator], members))
    table = [{c: r.get(c, "") for c in FRONTIER_COLUMNS} for r in rows]
    written = write_table(table, out, "frontier", FRONTIER_PREAMBLE.format(step=step))
    written += write_table([{c: r.get(c, "") for c in SEAT_COLUMNS} for r in seats], out, "seats", SEAT_PREAMBLE)
    written.append(welfare_exploitability(rows, out / "frontier.png", frontiers=lines,
                                          title="Welfare and exploitability; line: the scripted frontier "
                                                "(allocators and pairwise mixtures)"))
    for path in written:
        print(f"wrote {path}")
    print(markdown_table([{c: r[c] for c in PRINTED_COLUMNS} for r in table]))
    print(f"(the first {len(PRINTED_COLUMNS)} of its {len(FRONTIER_COLUMNS)} columns: every one is in frontier.md)")
    return rows


def exploitability_words(value: float, seat: str) -> str:
    """The exploitability as what it is: the best gain over truthful that the search found, a lower bound."""
    if value <= 0:
        return "exploitability at least 0: no searched code beat truthful in any seat (a lower bound)"
    return f"exploitability at least {value:.1f} ({seat}: the best code the search found, a lower bound)"


__all__ = ["CELLS_DIR", "frontier", "is_scripted", "seat_cell", "seat_table"]
