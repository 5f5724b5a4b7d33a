"""The shipped suites' anchor returns (experiments/evaluation/shipped_references.py, issue 53 item 5): equal to a
fresh computation, copied into a benchmark's store instead of played, and never used for a suite of one's own."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from experiments.evaluation import shipped_references as shipped
from experiments.evaluation.benchmark import anchor_rosters, benchmark_seeds, plan
from experiments.evaluation.results import QUIET, fill_store, planned_keys
from experiments.evaluation.store import ResultStore
from experiments.evaluation.suite import list_suites, load_suite, suite_from_dict

OWN = Path(__file__).parents[3] / "docs/examples/own_cluster.toml"
SHIPPED = shipped.load_returns()
# until the file is made (python -m experiments.evaluation.benchmark): the wheel's test (tests/test_packaging.py)
# still fails without it
made = pytest.mark.skipif(not shipped.PATH.is_file(), reason="reference_returns.json not made yet")


def allocator_suites():
    return [s for s in map(load_suite, list_suites()) if s.role == "allocator"]


@made
def test_every_anchor_of_every_shipped_allocator_suite_is_shipped():
    """A cold benchmark of a shipped suite at the default --seeds plays no random and no oracle episode."""
    seeds = benchmark_seeds(shipped.SEEDS)
    for suite in allocator_suites():
        for roster in anchor_rosters(suite, seeds):
            missing = [k for k in planned_keys(roster) if k.as_tuple() not in SHIPPED]
            assert missing == [], f"{suite.name}: {len(missing)} anchor episodes not shipped, e.g. {missing[0]}"


@made
@pytest.mark.parametrize(("suite", "index"), [("tiers", 0), ("tiers", 5), ("heldout-allocator", 7)])
def test_the_shipped_returns_equal_a_fresh_computation_on_a_sample(tmp_path, suite, index):
    """One evaluation scenario, its first and last shipped seeds: random and the oracle played again here."""
    chosen = load_suite(suite)
    chosen = replace(chosen, evaluations=(chosen.evaluations[index],))
    seeds = benchmark_seeds(shipped.SEEDS)
    fresh = []
    with ResultStore(tmp_path / "fresh.sqlite") as store:
        for seed in (seeds[0], seeds[-1]):
            rosters = anchor_rosters(chosen, [seed])
            fill_store(rosters, store, QUIET)
            fresh += shipped.file_content(store.rows([k for r in rosters for k in planned_keys(r)]), [seed])["series"]
    assert len(fresh) == 4
    for series in fresh:
        key = (*series["key"], series["first_seed"])
        assert SHIPPED[key] == (series["policy"], pytest.approx(series["returns"][0], rel=1e-9, abs=1e-9))


@made
def test_a_benchmark_store_gets_the_shipped_anchors_and_an_own_suite_none(tmp_path):
    seeds = benchmark_seeds(shipped.SEEDS)
    tiers = load_suite("tiers")
    with ResultStore(tmp_path / "a.sqlite") as store:
        assert shipped.copy_shipped_anchors(plan(tiers, "edf", seeds), store, SHIPPED) == len(tiers.evaluations) * len(seeds) * 2
        assert shipped.copy_shipped_anchors(plan(tiers, "fifo", seeds), store, SHIPPED) == 0  # already there
        rows = store.rows()
        assert {r["player"] for r in rows} == {"random", "oracle"} and all(r["episode"] == {} for r in rows)
    own = suite_from_dict({"name": "own", "evaluation": [{"scenario": str(OWN)}]}, source="own")
    with ResultStore(tmp_path / "b.sqlite") as store:
        assert shipped.copy_shipped_anchors(plan(own, "edf", seeds), store, SHIPPED) == 0  # its own hash: played, not shipped
