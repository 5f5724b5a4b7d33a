"""The welfare-exploitability frontier (issue 42; experiments/studies/frontier.py): mixtures from stored rows,
the frontier, the verdict against it, the seat table, resumable seat cells and the command."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from commands.cli import main
from experiments.evaluation.best_code import CHOICE_FILE
from experiments.evaluation.best_response import FINAL, RETURNS_FILE
from experiments.studies.exploit import Cell
from experiments.studies.frontier import BEST, NOTHING, TRUTHFUL, exploit_response, exploit_run, seat_cell, seat_table
from experiments.studies.pareto import Point, beyond, mixtures, pareto, resample_indices

SEEDS = [700_000, 700_001, 700_002, 700_003]
RESAMPLES = resample_indices(len(SEEDS), resamples=200)


def point(label: str, welfare: list[float], gains: dict[str, list[float]]) -> Point:
    return Point.of(label, welfare, gains, RESAMPLES)


A = point("a", [10.0, 12.0, 8.0, 10.0], {"search": [5.0, 6.0, 4.0, 5.0], "robotics": [1.0, 1.0, 1.0, 1.0]})
B = point("b", [0.0, 2.0, -2.0, 0.0], {"search": [0.0, 0.0, 0.0, 0.0], "robotics": [2.0, 3.0, 1.0, 2.0]})


def test_exploitability_is_the_max_over_seats() -> None:
    assert A.exploitability == 5.0 and A.exploiting_seat == "search"
    assert B.exploitability == 2.0 and B.exploiting_seat == "robotics"


def test_a_mixture_is_the_weighted_per_seed_rows_and_their_bootstrap() -> None:
    m = A.mix(B, 0.25)
    np.testing.assert_allclose(m.welfare, 0.25 * A.welfare + 0.75 * B.welfare)
    np.testing.assert_allclose(m.gains["robotics"], 0.25 * A.gains["robotics"] + 0.75 * B.gains["robotics"])
    direct = Point.of("m", m.welfare.tolist(), {s: v.tolist() for s, v in m.gains.items()}, RESAMPLES)
    np.testing.assert_allclose(m.boot_welfare, direct.boot_welfare)
    np.testing.assert_allclose(m.boot_gains, direct.boot_gains)
    # the max over seats of a mixture is at most the mixture of the maxes (a blind seat gains less)
    assert m.exploitability <= 0.25 * A.exploitability + 0.75 * B.exploitability + 1e-12
    assert m.exploitability == pytest.approx(max(0.25 * 5 + 0.75 * 0, 0.25 * 1 + 0.75 * 2))
    assert m.members == (("a", 0.25), ("b", 0.75))


def test_mixtures_cover_every_pair_and_weight() -> None:
    c = point("c", [1.0] * 4, {"search": [0.0] * 4, "robotics": [0.0] * 4})
    points = mixtures([A, B, c], 0.25)
    assert len(points) == 3 + 3 * 3  # the points, then 3 pairs x weights 0.25 / 0.5 / 0.75
    with pytest.raises(ValueError, match="step"):
        mixtures([A, B], 1.5)
    other = point("d", [1.0] * 4, {"safety": [0.0] * 4})
    with pytest.raises(ValueError, match="other seats"):
        A.mix(other, 0.5)


def test_pareto_keeps_what_nothing_beats_on_both_axes() -> None:
    worse = point("worse", [5.0] * 4, {"search": [6.0] * 4, "robotics": [0.0] * 4})  # below a on both
    front = pareto([A, B, worse])
    assert [p.label for p in front] == ["b", "a"]  # by welfare: b (less welfare, less exploitable), then a


def test_beyond_the_frontier_and_inside_it() -> None:
    members = mixtures([A, B], 0.5)
    best = point("x", [30.0, 31.0, 29.0, 30.0], {"search": [0.0, 0.1, -0.1, 0.0], "robotics": [2.0] * 4})
    verdict = beyond(best, members)
    assert verdict["verdict"] == "beyond (95% CI)"
    # at most x's exploitability (2.0) only b is (the mixture's is max(2.5, 1.5)): x has 30 more welfare
    assert verdict["frontier_at_exploitability"] == "b"
    assert verdict["welfare_margin"] == pytest.approx(30.0) and verdict["welfare_margin_low"] > 0
    assert "exploitability_margin" not in verdict  # nothing has x's welfare
    worst = point("y", [-5.0] * 4, {"search": [9.0] * 4, "robotics": [0.0] * 4})
    inside = beyond(worst, members)
    assert inside["verdict"].startswith("inside: ")
    assert inside["exploitability_margin"] < 0 and inside["welfare_margin"] < 0
    between = point("z", [5.0, 5.5, 4.5, 5.0], {"search": [2.0, 3.0, 1.0, 2.0], "robotics": [0.0] * 4})
    assert beyond(between, members)["verdict"] in ("beyond (means)", "beyond (95% CI)")
    assert beyond(A, [])["verdict"].startswith("no frontier")


def test_seat_rows_say_where_doing_nothing_is_as_good() -> None:
    cell = {"scenario": "standard", "allocator": "planner", "seat": "search", "seeds": SEEDS,
            TRUTHFUL: {"seat": [10.0, 10.0, 10.0, 10.0]}, NOTHING: {"seat": [10.0, 12.0, 4.0, 10.0]},
            BEST: {"seat": [11.0, 11.0, 11.0, 11.0]}, "best_name": "x1.5, accept", "source": "search"}
    (row,) = seat_table([cell])
    assert row["nothing_at_least_truthful"] == "3/4"
    assert row["truthful_minus_do_nothing"] == pytest.approx(1.0)  # 10 - 9
    assert row["best_minus_truthful"] == pytest.approx(1.0) and row["source"] == "search"


def test_a_seat_cell_is_played_stored_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "cell.json"
    cell = seat_cell("crisis", "drf", "search", SEEDS[:2], path, [1000], [])
    assert cell["source"] == "search" and len(cell[BEST]["seat"]) == 2
    # the do-nothing team's episodes are not truthful's
    assert cell[NOTHING]["seat"] != cell[TRUTHFUL]["seat"]
    stored = json.loads(path.read_text())
    stored["cell"][BEST]["seat"] = [123.0, 456.0]  # read back, not replayed
    path.write_text(json.dumps(stored))
    assert seat_cell("crisis", "drf", "search", SEEDS[:2], path, [1000], [])[BEST]["seat"] == [123.0, 456.0]
    again = seat_cell("crisis", "drf", "search", SEEDS[:2], path, [1001], [])  # another key: played again
    assert again[BEST]["seat"] != [123.0, 456.0]


def test_an_exploit_cells_best_response_is_used_when_it_played_the_seeds(tmp_path: Path) -> None:
    run = tmp_path / Cell("crisis", "drf", "search").folder / "search"
    run.mkdir(parents=True)
    seeds = SEEDS[:2]
    (run / RETURNS_FILE).write_text(json.dumps({
        FINAL: {"seeds": seeds, "seat": [7.0, 8.0], "allocator": [1.0, 2.0]},
        "truthful": {"seeds": seeds, "seat": [3.0, 4.0], "allocator": [1.0, 1.0]}}))
    (run / CHOICE_FILE).write_text(json.dumps({"source": "learning"}))
    assert exploit_run(tmp_path, "crisis", "drf", "search", seeds) == run
    assert exploit_run(tmp_path, "crisis", "drf", "search", [1, 2]) is None  # other seeds
    assert exploit_run(tmp_path, "crisis", "planner", "search", seeds) is None  # no such cell
    assert exploit_run(None, "crisis", "drf", "search", seeds) is None
    got = exploit_response(run, seeds, [3.0, 4.0])
    assert got is not None and got[BEST]["seat"] == [7.0, 8.0] and got["source"] == "learning"
    with pytest.raises(RuntimeError, match="truthful returns differ"):
        exploit_response(run, seeds, [3.0, 5.0])


def test_the_command_refuses_bad_input_before_any_work(tmp_path: Path, capsys) -> None:
    for args, says in ((["--step", "0.9"], "--step"), (["--exploit", str(tmp_path / "nope")], "--exploit"),
                       (["--allocators", "nobody"], "nobody"), (["--seeds", "1"], "--seeds")):
        with pytest.raises(SystemExit):
            main(["frontier", "--out", str(tmp_path / "out"), *args])
        assert says in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit):
        main(["frontier", "--out", str(tmp_path / "other")])
    assert "--force" in capsys.readouterr().err


@pytest.mark.slow  # a search of 48 codes per seat: ~10 s
def test_the_command_writes_the_frontier_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "frontier"
    args = ["frontier", "--allocators", "drf", "uniform_rule", "credit", "--scenarios", "crisis", "--seeds", "3",
            "--selection-seeds", "1", "--selection-refine", "0", "--out", str(out)]
    main(args)
    for name in ("frontier.md", "frontier.csv", "frontier.png", "seats.md", "seats.csv"):
        assert (out / name).is_file(), name
    text = (out / "frontier.md").read_text()
    assert "| crisis | uniform_rule |" in text and "verdict" in text
    assert len((out / "seats.csv").read_text().splitlines()) == 1 + 3 * 3
    before = {p: p.stat().st_mtime_ns for p in (out / "cells").iterdir()}
    main(args)  # resumed: every cell read back
    assert {p: p.stat().st_mtime_ns for p in (out / "cells").iterdir()} == before


@pytest.mark.parametrize(("content", "match"), [
    ("[]", "Input should be a valid dictionary"),
    ('"a string"', "Input should be a valid dictionary"),
    ('{"key": {}}', "cell: Field required"),
    ('{"key": {}, "cell": 5}', "cell: Input should be a valid dictionary"),
    ("CELL_NAN", "NaN is not a JSON number"),
    ("CELL_HUGE", "cell.best.seat.0"),
    ("CELL_SHORT", "one return per seed"),
])
def test_a_tampered_seat_cell_is_one_line_and_no_nan_reaches_a_verdict(tmp_path: Path, content: str, match: str) -> None:
    """Issue 52: a cell file is read by the one reader (5 tracebacks), every return finite and bounded (a forged
    NaN flipped a verdict)."""
    returns = {"seat": [1.0, 2.0], "allocator": [3.0, 4.0]}
    cell = {"scenario": "crisis", "allocator": "drf", "seat": "search", "seeds": SEEDS[:2], TRUTHFUL: returns,
            NOTHING: returns, BEST: {**returns, "seat": [float("nan"), 2.0]}, "best_name": "x", "source": "search"}
    if content == "CELL_NAN":
        content = json.dumps({"key": {}, "cell": cell})
    elif content == "CELL_HUGE":
        content = json.dumps({"key": {}, "cell": {**cell, BEST: {**returns, "seat": [1e300, 2.0]}}})
    elif content == "CELL_SHORT":
        content = json.dumps({"key": {}, "cell": {**cell, BEST: {**returns, "seat": [1.0]}}})
    path = tmp_path / "cell.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=match) as err:
        seat_cell("crisis", "drf", "search", SEEDS[:2], path, [1000], [])
    assert "\n" not in str(err.value) and "cell.json" in str(err.value)
