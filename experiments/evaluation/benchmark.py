"""``commons-arena benchmark``: one policy in the focal seat of every evaluation scenario of a suite.

    commons-arena benchmark planner --suite heldout-allocator --seeds 20
    commons-arena benchmark learned:runs/x/best --suite tiers

A suite (:mod:`experiments.evaluation.suite`) is a list of evaluation scenarios (game
scenario + focal seat + background). Each is a :class:`~experiments.evaluation.roster.Roster`
of one scenario x one background, and every roster goes through the tournaments' engine
(:func:`experiments.evaluation.results.fill_store`) into one SQLite store, so a rerun plays
only the missing rows and the references are played once per store, whichever policy is
benchmarked next. The shipped allocator suites' anchors (``random``, ``oracle``) are not played at
all: their returns ship as data, keyed by scenario content hash and seed
(:mod:`experiments.evaluation.shipped_references`); a suite of one's own plays them.

**Players per evaluation scenario**, all on the same benchmark seeds (experiments/seeds.py):

* the focal policy;
* the score's anchors (SPEC §14): for the allocator seat ``random`` (0) and ``oracle`` (1),
  the normalised score of §11; for a team or broker seat uniformly random actions (0) and
  the **best fixed code** of the seat's default codec (1: ``bluff``'s 48 codes, ``markup``'s
  300, :func:`experiments.evaluation.fixed_codes.uniform_codes`), chosen by its mean return
  on the suite's ``selection_seeds`` seeds of the ``evaluate`` range (those episodes are stored
  too, so the choice is made once per store);
* the suite's reference policy (``planner`` for the allocator), for the probability of improvement.

**Scores**: per seed, ``(R - mean R_low) / (mean R_high - mean R_low)``; per evaluation
scenario their mean (= the normalised score of the mean returns) with a 95% t interval over
seeds. Across the suite (rliable's statistics, :mod:`experiments.statistics`): the
IQM and the mean of every per-seed score, each with a stratified-bootstrap 95% interval, and
the probability that the policy improves on the reference. An evaluation scenario whose
anchors tie (``|span| < 1e-9``) has no score and is left out of the aggregates (the table says nan).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from commons_arena.enums import ALLOCATOR
from commons_arena.files import make_folder, safe_join
from experiments.evaluation.results import DEFAULT_OPTIONS, PlayOptions, PlayReport, fill_store, planned_keys
from experiments.evaluation.roster import UNIFORM_RANDOM, Player, Roster, check_roster
from experiments.evaluation.shipped_references import PATH as SHIPPED_PATH
from experiments.evaluation.shipped_references import SEEDS as SHIPPED_SEEDS
from experiments.evaluation.shipped_references import copy_shipped_anchors
from experiments.evaluation.shipped_references import file_content as shipped_content
from experiments.evaluation.shipped_references import load_returns as load_shipped
from experiments.evaluation.shipped_references import write_returns as write_shipped
from experiments.evaluation.store import ResultStore
from experiments.evaluation.suite import EvaluationScenario, Suite
from experiments.evaluation.tables import write_table
from experiments.seeds import SEED_RANGES
from experiments.statistics import mean_ci95, probability_of_improvement, stratified_bootstrap_ci
from policies.population import Entry

SPAN_EPS = 1e-9
SELECTION_RANGE = "evaluate"  # where a team or broker seat's best fixed code is chosen (experiments/seeds.py)


def benchmark_seeds(count: int, first: int | None = None) -> list[int]:
    return SEED_RANGES["benchmark"].seeds(count, first)


def low_anchor(role: str) -> Player:
    """Score 0: the ``random`` allocator, or uniformly random actions in a team / broker seat."""
    return Player("random", Entry("random" if role == ALLOCATOR else UNIFORM_RANDOM), "low", entrant=False)


def evaluation_roster(suite: Suite, evaluation: EvaluationScenario, players: Sequence[Player],
                      seeds: Sequence[int]) -> Roster:
    """One evaluation scenario as a tournament roster: one scenario, one background, these players."""
    unique: dict[str, Player] = {}
    for player in players:  # the focal policy may be a reference or an anchor too: played once
        same = next((p for p in unique.values() if p.entry == player.entry), None)
        if same is None:
            unique[player.name] = player
        elif player.anchor and not same.anchor:
            unique[same.name] = Player(same.name, same.entry, player.anchor, same.entrant)
    return Roster(f"{suite.name}: {evaluation.name}", evaluation.seat, (evaluation.config,), (evaluation.config.name,),
                  tuple(seeds), tuple(unique.values()), {evaluation.background_name: evaluation.background},
                  suite.source)


def player_of(policy: str | Entry) -> Player:
    entry = Entry.parse(policy, "policy")
    return Player(entry.policy if not entry.params else str(entry.to_toml_value()), entry)


# --------------------------------------------------------------------------- the best fixed code


def code_players(suite: Suite, evaluation: EvaluationScenario) -> list[Player]:
    """Every fixed code the selection tries in ``evaluation``'s seat (team: ``bluff``, broker: ``markup``)."""
    from experiments.evaluation.fixed_codes import uniform_codes
    from policies.codecs import DEFAULT_CODECS, make_codec
    from policies.registry import fixed_code_name

    agent = evaluation.seat.removeprefix("team:")
    codec = make_codec(DEFAULT_CODECS[suite.role], evaluation.config, agent)
    names = [fixed_code_name(codec.name, code) for code in uniform_codes(codec)]
    return [Player(name, Entry(name)) for name in names]


def best_codes(suite: Suite, store: ResultStore, options: PlayOptions) -> tuple[dict[str, Player], PlayReport | None]:
    """The high anchor of each evaluation scenario of a team / broker suite: the fixed code with the
    highest mean return on the selection seeds (the first on a tie), played and stored once."""
    if suite.role == ALLOCATOR:
        return {}, None
    seeds = SEED_RANGES[SELECTION_RANGE].seeds(suite.selection_seeds)
    rosters = {e.name: evaluation_roster(suite, e, code_players(suite, e), seeds) for e in suite.evaluations}
    report = fill_store(list(rosters.values()), store, options, desc="fixed codes")
    best = {}
    for name, roster in rosters.items():
        means: dict[str, list[float]] = {}
        for row in store.rows(planned_keys(roster)):
            means.setdefault(row["player"], []).append(row["focal_return"])
        winner = max((p for p in roster.players), key=lambda p: float(np.mean(means[p.name])))  # max keeps the first
        best[name] = Player(winner.name, winner.entry, "high", entrant=False)
    return best, report


# --------------------------------------------------------------------------- the benchmark


@dataclass
class BenchmarkResult:
    suite: Suite
    policy: str
    seeds: list[int]
    play: PlayReport
    selection: PlayReport | None
    scores: list[dict[str, Any]] = field(default_factory=list)  # one row per evaluation scenario
    summary: list[dict[str, Any]] = field(default_factory=list)  # the policy and the reference across the suite
    written: list[Path] = field(default_factory=list)
    shipped: int = 0  # anchor episodes copied from the shipped reference returns (experiments/evaluation/shipped_references.py)


def plan(suite: Suite, policy: str, seeds: Sequence[int], high: dict[str, Player] | None = None) -> list[Roster]:
    """A roster per evaluation scenario: the policy, the reference, the anchors (``high``: per evaluation
    scenario, the team / broker seat's best fixed code; the oracle for the allocator)."""
    focal, reference, low = player_of(policy), player_of(suite.reference), low_anchor(suite.role)
    rosters = []
    for evaluation in suite.evaluations:
        top = Player("oracle", Entry("oracle"), "high", entrant=False) if suite.role == ALLOCATOR else None
        if top is None and high is not None:
            top = high[evaluation.name]
        players = [focal, Player(reference.name, reference.entry, entrant=False), low] + ([top] if top else [])
        rosters.append(evaluation_roster(suite, evaluation, players, seeds))
    return rosters


def anchor_rosters(suite: Suite, seeds: Sequence[int]) -> list[Roster]:
    """Per evaluation scenario of an allocator suite, a roster of its anchors alone (the players :func:`plan` names
    ``random`` and ``oracle``: the same store keys)."""
    top = Player("oracle", Entry("oracle"), "high", entrant=False)
    return [evaluation_roster(suite, e, [low_anchor(suite.role), top], seeds) for e in suite.evaluations]


def remake_references(workers: int = 2, out: Path = SHIPPED_PATH) -> Path:
    """Play the shipped allocator suites' anchors on the default benchmark seeds and write the shipped file."""
    import tempfile

    from experiments.evaluation.suite import list_suites, load_suite

    suites = [s for s in map(load_suite, list_suites()) if s.role == ALLOCATOR]
    seeds = benchmark_seeds(SHIPPED_SEEDS)
    rosters = [r for suite in suites for r in anchor_rosters(suite, seeds)]
    with tempfile.TemporaryDirectory() as tmp, ResultStore(Path(tmp) / "refs.sqlite") as store:
        fill_store(rosters, store, PlayOptions(workers=workers), desc="references")
        rows = store.rows([k for r in rosters for k in planned_keys(r)])
    return write_shipped(shipped_content(rows, seeds), out)


def check_plan(suite: Suite, policy: str, seeds: Sequence[int]) -> None:
    """Everything that could fail once playing started, checked first: the policy plays the suite's
    role and (a checkpoint) fits every evaluation scenario's seat."""
    from policies.registry import policy_spec

    spec = policy_spec(player_of(policy).entry.policy)
    if not spec.plays(suite.role):
        raise ValueError(f"policy {policy!r} plays the {'/'.join(spec.roles)} role; suite {suite.name!r} benchmarks "
                         f"the {suite.role} seat")
    for roster in plan(suite, policy, seeds):
        check_roster(roster)


def _returns(rows: Sequence[dict[str, Any]]) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = {}
    for row in rows:
        out.setdefault(row["player"], {})[row["seed"]] = row["focal_return"]
    return out


def per_seed_scores(returns: Sequence[float], low: Sequence[float], high: Sequence[float]) -> list[float]:
    """Each seed's ``(R - mean R_low) / (mean R_high - mean R_low)``; nan where the anchors tie."""
    span = float(np.mean(high)) - float(np.mean(low))
    if abs(span) < SPAN_EPS:
        return [float("nan")] * len(returns)
    return [(r - float(np.mean(low))) / span for r in returns]


def score_tables(suite: Suite, policy: str, rosters: Sequence[Roster], store: ResultStore,
                 seeds: Sequence[int]) -> tuple[list[dict[str, Any]], dict[str, list[list[float]]]]:
    """The per-evaluation-scenario rows, and every player's per-seed scores by evaluation scenario
    (keys: the focal policy and the reference) for the suite's aggregates."""
    focal, reference = player_of(policy).name, player_of(suite.reference).name
    rows: list[dict[str, Any]] = []
    by_player: dict[str, list[list[float]]] = {focal: [], reference: []}
    for evaluation, roster in zip(suite.evaluations, rosters, strict=True):
        returns = _returns(store.rows(planned_keys(roster)))
        low, high = roster.anchor("low"), roster.anchor("high")
        assert low is not None and high is not None

        def of(name: str, returns: dict[str, dict[int, float]] = returns, roster: Roster = roster) -> list[float]:
            played = next((p.name for p in roster.players if p.entry == player_of(name).entry), name)
            return [returns[played][s] for s in seeds]

        low_r, high_r = [returns[low.name][s] for s in seeds], [returns[high.name][s] for s in seeds]
        mine, theirs = per_seed_scores(of(policy), low_r, high_r), per_seed_scores(of(suite.reference), low_r, high_r)
        by_player[focal].append(mine)
        if reference != focal:
            by_player[reference].append(theirs)
        ret, ret_ci = mean_ci95(of(policy))
        score, score_ci = mean_ci95(mine)
        rows.append({"evaluation": evaluation.name, "scenario": evaluation.config.name,
                     "background": evaluation.background_name, "seat": evaluation.seat, "episodes": len(seeds),
                     "return": ret, "return_ci95": ret_ci, "low": low.name, "low_return": float(np.mean(low_r)),
                     "high": high.name, "high_return": float(np.mean(high_r)), "score": score, "score_ci95": score_ci,
                     "reference_score": float(np.mean(theirs))})
    return rows, by_player


def summary_rows(suite: Suite, policy: str, scores: dict[str, list[list[float]]]) -> list[dict[str, Any]]:
    """The policy (and the reference) across the suite: IQM and mean with stratified-bootstrap 95% CIs,
    and the probability of improving on the reference."""
    reference = player_of(suite.reference).name
    rows = []
    for name in dict.fromkeys([player_of(policy).name, reference]):
        iqm, iqm_low, iqm_high = stratified_bootstrap_ci(scores[name], "iqm")
        mean, mean_low, mean_high = stratified_bootstrap_ci(scores[name], "mean")
        p, p_low, p_high = probability_of_improvement(scores[name], scores[reference])
        interval: tuple[float | str, ...] = (p_low, p_high)
        if name == reference:  # a policy against itself: one half by definition, nothing to resample
            p, interval = 0.5, ("-", "-")
        scored = sum(1 for task in scores[name] if any(np.isfinite(task)))
        rows.append({"policy": name, "suite": suite.name, "evaluation_scenarios": scored, "iqm": iqm,
                     "iqm_low": iqm_low, "iqm_high": iqm_high, "mean": mean, "mean_low": mean_low,
                     "mean_high": mean_high, "vs": reference, "p_improve": p, "p_low": interval[0], "p_high": interval[1]})
    return rows


def label(policy: str) -> str:
    """A folder name for a policy (``learned:runs/x/best`` -> ``learned_runs_x_best``)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", policy).strip("_") or "policy"


def report_folder(out: Path, suite: Suite, policy: str) -> Path:
    """``<out>/<suite>/<policy>``: each name checked (a suite named ``..`` never writes outside ``out``)."""
    return safe_join(out, label(suite.name), label(policy))


def run_benchmark(suite: Suite, policy: str, seeds: Sequence[int], out: Path, db: Path | None = None,
                  options: PlayOptions = DEFAULT_OPTIONS) -> BenchmarkResult:
    """Play what the store lacks (fixed-code selection first for a team / broker suite), then score
    and write ``scores`` and ``summary`` (CSV + markdown) to ``<out>/<suite>/<policy>/``."""
    path = db if db is not None else out / "results.sqlite"
    with ResultStore(path) as store:
        high, selection = best_codes(suite, store, options)
        rosters = plan(suite, policy, seeds, high)
        shipped = copy_shipped_anchors(rosters, store, load_shipped())  # the shipped suites' anchors: never replayed
        report = fill_store(rosters, store, options, desc="benchmark")
        rows, scores = score_tables(suite, policy, rosters, store, seeds)
    result = BenchmarkResult(suite, policy, list(seeds), report, selection, rows, summary_rows(suite, policy, scores),
                             shipped=shipped)
    folder = report_folder(out, suite, policy)
    make_folder(folder, root=out)  # no level under out a symlink
    anchors = ("random 0, oracle 1" if suite.role == ALLOCATOR
               else "uniformly random actions 0, the best fixed code 1")
    preamble = (f"Suite `{suite.name}` ({suite.role} seat), policy `{policy}`, seeds {seeds[0]}..{seeds[-1]} "
                f"({len(seeds)}); focal score: {anchors}.\n\n")
    result.written = (write_table(rows, folder, "scores", preamble)
                      + write_table(result.summary, folder, "summary",
                                    preamble + "IQM and mean of every per-seed score with stratified-bootstrap 95% CIs; "
                                    f"p_improve: probability of improving on `{suite.reference}`.\n\n"))
    return result


__all__ = ["BenchmarkResult", "anchor_rosters", "remake_references", "benchmark_seeds", "check_plan", "per_seed_scores", "plan", "report_folder",
           "run_benchmark", "summary_rows"]


if __name__ == "__main__":
    import tyro

    print(f"wrote {tyro.cli(remake_references)}")
