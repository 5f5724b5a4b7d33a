"""`analyze` separates learning from design: checkpoints whose behaviour is known by
construction (the untrained network; an allocator that plays its codec's zero code, i.e.
planner) are not credited with learning, and every run keeps its iteration-0 checkpoint."""

from __future__ import annotations

import json

import pytest

from experiments.studies.analysis import analyze, credit
from experiments.studies.analysis_report import summary_markdown

pytestmark = pytest.mark.timeout(600)

TINY = dict(eval_every=1, eval_seeds=2, train_batch_size=200, minibatch_size=50, num_epochs=1,
            num_envs_per_env_runner=2, hidden=(16, 16), quiet=True)
SEEDS = [700000, 700001, 700002]


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.rllib
def test_untrained_and_planner_only_allocators_are_not_credited(ray_session, tmp_path):
    from experiments.training.train import TrainArgs, train  # imports RLlib: only the test that trains

    # one update of 200 steps from a zero code 3 logits ahead: greedy, it still plays planner
    checkpoint = train(TrainArgs(out=tmp_path, run_name="alloc", iterations=1, zero_bias=3.0, **TINY))
    run = checkpoint.parent
    untrained = json.loads((run / "iteration_0" / "heldout.json").read_text())
    assert untrained["env_steps"] == 0 and (run / "iteration_0" / "arena_policy.json").is_file()

    for which in ("checkpoint", "iteration_0"):  # a planner-only allocator; the untrained network itself
        report = analyze(run, SEEDS, checkpoint=which)
        rows = {r["policy"]: r for r in report["learning"]}
        assert rows["untrained network"]["trained_minus"] == 0.0 and rows["untrained network"]["ci95"] == 0.0
        assert rows["planner"]["trained_minus"] == 0.0  # the same episodes as planner's, seed by seed
        assert report["codes"][0]["zero_code_share"] == 1.0
        [together] = report["together"]  # every learning seat trained vs untrained, together: the same play here
        assert together["trained_minus_iteration_0"] == 0.0 and together["ci95"] == 0.0 and not together["above"]
        [line] = report["credit"]
        assert "no learning shows" in line and "plays the codec's base policy (planner)" in line
        assert line in summary_markdown(report)
        assert {"planner", "proportional"} <= {g["allocator"] for g in report["misreport_gain"]}


def test_credit_says_learning_shows_only_above_the_untrained_network():
    usage = {"zero_code_share": 0.4, "distinct_codes": 7, "top_code": "x2, accept", "top_code_share": 0.5,
             "codec": "bluff"}
    learned = [{"policy": "untrained network", "trained_minus": 5.0, "ci95": 2.0}]
    noise = [{"policy": "untrained network", "trained_minus": 5.0, "ci95": 6.0}]
    assert "learning shows: +5.00 ± 2.00" in credit("search", learned, usage)
    assert "no learning shows" in credit("search", noise, usage)
    fixed = {**usage, "zero_code_share": 0.0, "distinct_codes": 1, "top_code": "x1.5, escalate"}
    assert "one fixed code (x1.5, escalate)" in credit("search", learned, fixed)
