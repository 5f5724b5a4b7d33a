"""Several training seeds, one command (``commons-arena train --train-seeds``), one report."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from experiments import statistics
from experiments.statistics import bootstrap_ci, iqm, iqm_of, mean_ci
from experiments.studies.seed_report import curve_rows, final_scores, pooled_comparison, seed_runs, write_seed_report
from experiments.training.args import TrainArgs
from experiments.training.runs import has_record, saved_args
from tests.figures import assert_drawn

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(autouse=True)
def fewer_resamples(monkeypatch):
    """A budget: the reports' 10,000 bootstrap resamples cost seconds of CPU per interval (the
    statistic runs once per resample); 1,000 give the same bounds these tests assert (a few
    values, so the percentiles fall on the values themselves or well inside their range)."""
    monkeypatch.setattr(statistics, "BOOTSTRAP_RESAMPLES", 1_000)


def test_iqm_and_bootstrap():
    assert iqm([1, 2, 3, 4, 100, -100, 2.5, 3.5]) == pytest.approx(np.mean([2, 2.5, 3, 3.5]))
    assert iqm([1.0, 2.0, 9.0]) == pytest.approx(4.0)  # fewer than four values: nothing trimmed
    point, low, high = bootstrap_ci([1.0, 2.0, 3.0, 4.0, 5.0])
    # the percentile interval of the resampled means: about 3 ± 1.96 x sqrt(2 / 5) = 3 ± 1.24 (a
    # bound true for any input, such as [min, max], would not pass)
    assert point == 3.0 and low == pytest.approx(1.76, abs=0.15) and high == pytest.approx(4.24, abs=0.15)
    assert bootstrap_ci([1.0, 2.0, 3.0, 4.0, 5.0]) == (point, low, high)  # seeded
    assert bootstrap_ci([2.0, 2.0]) == (2.0, 2.0, 2.0) and bootstrap_ci([7.0]) == (7.0, 7.0, 7.0)
    assert math.isnan(bootstrap_ci([])[0]) and math.isnan(iqm([]))
    middle, low, high = bootstrap_ci([0.0, 1.0, 2.0, 3.0, 50.0], iqm_of)
    assert middle == pytest.approx(2.0) and high <= 50.0
    assert mean_ci([1.0, 2.0, 3.0])[0] == 2.0


def _fake_run(parent: Path, seed: int, scores: list[float], final: dict[str, float] | None) -> None:
    folder = parent / f"s{seed}"
    folder.mkdir(parents=True)
    (folder / "args.json").write_text(json.dumps({"seed": seed, "experiment": "allocator_mixed", "learners": ["allocator"]}))
    history = [{"iteration": 5 * (i + 1), "scenario": "mixed", "minutes": float(i), "score": float(np.mean(s)),
                **{f"score/{t}": v for t, v in zip(("standard", "crisis"), s, strict=True)}}
               for i, s in enumerate(scores)]
    (folder / "history.json").write_text(json.dumps(history))
    if final is not None:
        (folder / "final_scores.json").write_text(json.dumps({t: {"score": v} for t, v in final.items()}))


@pytest.mark.parametrize("statistic", [np.mean, iqm_of])
def test_the_vectorised_bootstrap_gives_the_per_resample_interval(statistic, monkeypatch):
    values = [0.1, 0.5, 0.3, 0.9, 0.2, 0.75]
    fast = bootstrap_ci(values, statistic, seed=3)
    monkeypatch.setattr(statistics, "_along_axis", lambda _: None)  # one call per resample
    assert fast == bootstrap_ci(values, statistic, seed=3)
    assert fast[1] < fast[0] < fast[2]


def test_report_across_seeds_from_the_run_folders(tmp_path):
    _fake_run(tmp_path, 0, [[0.1, 0.2], [0.5, 0.3]], {"standard": 0.6, "crisis": 0.2})
    _fake_run(tmp_path, 2, [[0.3, 0.0], [0.7, 0.1], [0.9, 0.9]], None)  # no final_scores.json: the last evaluation
    (tmp_path / ".references").mkdir()  # not a run
    runs = seed_runs(tmp_path)
    assert [r.seed for r in runs] == [0, 2]
    assert final_scores(runs[0]) == {"standard": 0.6, "crisis": 0.2, "mean": pytest.approx(0.4)}
    assert final_scores(runs[1]) == {"standard": 0.9, "crisis": 0.9, "mean": pytest.approx(0.9)}
    curves = curve_rows(runs)  # iterations both seeds evaluated: 5 and 10
    standard = next(rows for label, rows in curves.items() if label.startswith("standard"))
    assert [r["iteration"] for r in standard] == [5, 10]
    assert standard[1] == {"iteration": 10, "score": pytest.approx(0.6), "score_low": 0.5, "score_high": 0.7}
    report = write_seed_report(tmp_path, compare_seeds=0)
    text = report.read_text()
    assert "| standard | 0.600 | 0.900 | 0.750 [0.600, 0.900] | 0.750 |" in text
    assert_drawn(tmp_path / "learning_curves.png")
    saved = json.loads((tmp_path / "aggregate.json").read_text())
    assert saved["final_scores"]["mean"]["values"] == pytest.approx([0.4, 0.9])


def test_pooled_comparison_keeps_every_seed():
    rows = [{"checkpoint": f"s{s}", "scenario": "standard", "versus": "planner", "diff": d, "diff_ci95": 1.0,
             "beats": d - 1.0 > 0} for s, d in ((0, 4.0), (1, -2.0), (2, 0.5))]
    (pooled,) = pooled_comparison(rows, [0, 1, 2])
    assert pooled["per_seed"] == [4.0, -2.0, 0.5] and pooled["mean"] == pytest.approx(2.5 / 3)
    assert (pooled["min"], pooled["max"], pooled["seeds_above"]) == (-2.0, 4.0, 1)
    low, high = pooled["mean_ci"]
    assert -2.0 <= low < pooled["mean"] < high <= 4.0


@pytest.mark.slow
@pytest.mark.rllib
@pytest.mark.ray
def test_train_seeds_runs_each_seed_in_its_folder_and_reports(ray_session, tmp_path):
    from experiments.studies.train_seeds import train_seeds

    tiny = TrainArgs(experiment="allocator_ppo", iterations=1, eval_every=1, eval_seeds=2, train_batch_size=128,
                     minibatch_size=64, num_epochs=1, num_envs_per_env_runner=2, hidden=(16, 16), quiet=True,
                     out=tmp_path)
    parent = train_seeds(tiny, (0, 1), compare_seeds=2)
    assert parent.name == "allocator_ppo-standard-seeds0-1"
    assert {p.name for p in parent.iterdir() if has_record(p) and not p.is_symlink()} == {"s0", "s1"}
    assert saved_args(parent / "s1")["seed"] == 1
    saved = json.loads((parent / "aggregate.json").read_text())
    assert saved["seeds"] == [0, 1] and len(saved["final_scores"]["standard"]["values"]) == 2
    versus = {row["versus"] for row in saved["vs_scripted"]}
    assert "planner" in versus and all(len(row["per_seed"]) == 2 for row in saved["vs_scripted"])
    assert "Paired difference to every scripted allocator" in (parent / "aggregate.md").read_text()
