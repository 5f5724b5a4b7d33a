"""Evaluation tables, misreport gains and recordings of evaluation runs (tournaments: test_tournament.py)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest

from commons_arena.recording import read_recording
from experiments.evaluation.evaluate import (
    evaluate,
    normalised_score,
    plain_ratio,
    versus_best,
    write_tables,
)
from experiments.statistics import mean_ci95, paired_difference

SEEDS = [11, 12, 13]


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    out = tmp_path_factory.mktemp("evaluation")
    res = evaluate(["standard"], ["proportional", "edf"], SEEDS, misreport=True, progress=False,
                   record_dir=out / "recordings")
    return res, out


def test_mean_ci95_matches_student_t():
    mean, half = mean_ci95([1.0, 2.0, 3.0, 4.0])
    assert mean == 2.5
    assert half == pytest.approx(3.182446 * np.std([1, 2, 3, 4], ddof=1) / 2, rel=1e-5)
    assert mean_ci95([5.0]) == (5.0, 0.0)


def test_normalised_score_anchors():
    assert normalised_score(-10.0, -10.0, 30.0) == 0.0
    assert normalised_score(30.0, -10.0, 30.0) == 1.0
    assert normalised_score(20.0, -10.0, 30.0) == 0.75
    assert math.isnan(normalised_score(1.0, 2.0, 2.0))


def test_plain_ratio_and_paired_difference():
    assert plain_ratio(90.0, 100.0) == 0.9
    assert math.isnan(plain_ratio(1.0, 0.0))
    # paired: the per-seed differences are all exactly 2, so the CI is a point
    assert paired_difference([3.0, 5.0, 9.0], [1.0, 3.0, 7.0]) == (2.0, 0.0)
    mean, ci = paired_difference([3.0, 5.0, 9.0], [1.0, 4.0, 7.0])
    assert mean == pytest.approx(5 / 3) and ci == pytest.approx(mean_ci95([2.0, 1.0, 2.0])[1])
    with pytest.raises(ValueError, match="same seeds"):
        paired_difference([1.0], [1.0, 2.0])


def test_versus_best_compares_with_the_best_other_candidate():
    returns = {"a": [1.0, 2.0], "b": [5.0, 6.0], "c": [4.0, 4.0], "learned": [6.0, 6.0]}
    row = versus_best("learned", returns, candidates=("a", "b", "c"))
    assert row == {"vs": "b", "diff_vs": 0.5, "diff_ci95": pytest.approx(mean_ci95([1.0, 0.0])[1])}
    assert versus_best("b", returns, candidates=("a", "b", "c"))["vs"] == "c"  # never itself


def test_each_allocator_is_one_row_even_when_named_twice_or_an_anchor():
    res = evaluate(["standard"], ["random", "edf", "edf", "oracle"], SEEDS[:1], misreport=False, progress=False)
    assert [row["allocator"] for row in res.rows] == ["random", "oracle", "edf"]


def test_table_has_anchors_and_every_allocator(result):
    res, _ = result
    by_allocator = {row["allocator"]: row for row in res.rows}
    assert list(by_allocator) == ["random", "oracle", "proportional", "edf"]
    assert by_allocator["random"]["score"] == 0.0 and by_allocator["oracle"]["score"] == 1.0
    for row in res.rows:
        assert row["episodes"] == len(SEEDS)
        assert row["reward_ci95"] >= 0 and 0.0 <= row["fairness"] <= 1.0
    # each allocator's score is its mean reward placed between random's and the oracle's
    r, o = by_allocator["random"]["reward_mean"], by_allocator["oracle"]["reward_mean"]
    assert by_allocator["edf"]["score"] == pytest.approx((by_allocator["edf"]["reward_mean"] - r) / (o - r))
    assert by_allocator["edf"]["ratio"] == pytest.approx(by_allocator["edf"]["reward_mean"] / o)
    # paired difference to the best scripted allocator other than itself, over the same seeds
    edf, proportional = res.episodes[("standard", "edf")], res.episodes[("standard", "proportional")]
    best = "edf" if by_allocator["edf"]["reward_mean"] >= by_allocator["proportional"]["reward_mean"] else "proportional"
    assert by_allocator["oracle"]["vs"] == best and by_allocator["edf"]["vs"] == "proportional"
    diffs = [e["allocator"]["return"] - p["allocator"]["return"] for e, p in zip(edf, proportional, strict=True)]
    assert by_allocator["edf"]["diff_vs"] == pytest.approx(np.mean(diffs))


def test_misreport_gain_is_bluffer_minus_truthful(result):
    res, _ = result
    assert {(row["allocator"], row["team"]) for row in res.misreport} == {
        (a, t) for a in ("proportional", "edf") for t in ("search", "robotics", "safety")
    }
    for row in res.misreport:
        assert row["misreport_gain"] == pytest.approx(row["bluff_return"] - row["truthful_return"])


def test_tables_and_plot_are_written(result):
    res, out = result
    written = {p.name for p in write_tables(res, out)}
    assert {"evaluation.csv", "evaluation.md", "misreport.csv", "misreport.md", "scores.png"} <= written
    with open(out / "evaluation.csv") as fh:
        assert len(list(csv.DictReader(fh))) == len(res.rows)


def test_evaluation_runs_are_recorded(result):
    res, out = result
    episodes = read_recording(out / "recordings" / "standard__edf.jsonl")
    assert [e["header"]["seed"] for e in episodes] == SEEDS
    recorded = [e["summary"]["episode_info"]["allocator"]["return"] for e in episodes]
    played = [e["allocator"]["return"] for e in res.episodes[("standard", "edf")]]
    assert recorded == pytest.approx(played)


def test_tables_have_one_writer():
    """Every CSV and markdown table of experiments/ is written by experiments/evaluation/tables.py
    (bench/serve.py prints its rows live, one per load level as it finishes: a progress printout)."""
    root = Path(__file__).resolve().parents[3] / "experiments"
    writers = {"tables.py"}
    live = {"serve.py"}
    for path in root.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if path.name not in writers:
            assert "csv." not in text, f"{path}: writes CSV itself; use experiments.evaluation.tables"
        if path.name not in writers | live:
            assert '"|---' not in text and "'|---" not in text, f"{path}: builds a markdown table; use markdown_table"


def test_markdown_table_formats_numbers_one_way(tmp_path):
    from experiments.evaluation.tables import markdown_table, write_table

    rows = [{"name": "a", "small": 1.23456, "large": 123.456, "missing": float("nan"), "count": 3, "text": "+1.0 ± 2"}]
    assert markdown_table(rows).splitlines() == [
        "| name | small | large | missing | count | text |", "|---|---|---|---|---|---|",
        "| a | 1.235 | 123.5 | nan | 3 | +1.0 ± 2 |"]
    assert write_table([], tmp_path, "empty") == []
    csv_path, md_path = write_table(rows, tmp_path, "t", preamble="# T\n\n")
    assert csv_path.read_text().splitlines()[0] == "name,small,large,missing,count,text"
    assert md_path.read_text().startswith("# T\n\n| name |")
