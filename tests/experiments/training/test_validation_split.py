"""Held-out discipline for the universal allocator: ``--validation-scenarios`` carves a fixed validation set out of
the training split (never the held-out split) that training never plays and that chooses ``best``, and
``--patience`` stops a run whose held-out score stopped improving (issue 49, item 4)."""

from __future__ import annotations

import json
import math
import tomllib

import pytest

from commons_arena.family import FamilyError, heldout_game_hashes, hold_out, load_split, validation_places
from experiments.training.args import TrainArgs
from experiments.training.config_file import args_from_dict, experiment_text
from experiments.training.runs import evaluations_since_best, out_of_patience

FAMILY = dict(experiment="allocator_family", network="cells", action_codec="need")


# ------------------------------------------------------------------ the validation set


def test_the_validation_places_are_one_fixed_nested_draw() -> None:
    eight, sixteen = validation_places(200, 8), validation_places(200, 16)
    assert eight == (4, 15, 25, 70, 77, 80, 136, 166)  # pinned: docs/training.md names these scenarios
    assert set(eight) < set(sixteen) and list(sixteen) == sorted(set(sixteen))
    for count in (0, 200, -1, True):
        with pytest.raises(FamilyError, match="at least one is left to train on"):
            validation_places(200, count)


def test_the_validation_set_is_disjoint_from_training_and_from_the_heldout_split() -> None:
    split = load_split("broad-train")
    train, validation = hold_out(split, 16)
    assert len(validation) == 16 and len(train) == 184
    assert {c.name for c in train} | {c.name for c in validation} == {c.name for c in split}
    games = {c.canonical_game_hash for c in validation}
    assert not games & {c.canonical_game_hash for c in train}
    assert not games & heldout_game_hashes()  # what `benchmark --suite heldout-allocator` plays


def test_a_family_run_trains_on_the_split_less_its_validation_set_and_is_judged_on_it() -> None:
    from experiments.training.setup import resolve

    setup = resolve(TrainArgs(**FAMILY, validation_scenarios=8, family_scenarios=("standard",)))
    assert [c.name for c in setup.validation] == [f"broad_1_{i}" for i in validation_places(200, 8)]
    assert len(setup.stages) == 192 + 1 and setup.stages[-1].name == "standard"  # --family-scenarios still played
    assert not {c.name for c in setup.validation} & {c.name for c in setup.stages}
    assert setup.args.kind.judged(setup) == setup.validation  # not --eval-scenarios of the training scenarios
    # without the flag: as before, a fixed draw of --eval-scenarios training scenarios, nothing held out
    before = resolve(TrainArgs(**FAMILY, eval_scenarios=3))
    assert before.validation == () and len(before.stages) == 200
    judged = {c.name for c in before.args.kind.judged(before)}
    assert len(judged) == 3 and judged <= {c.name for c in before.stages}


@pytest.mark.parametrize("fields, message", [
    ({"patience": -1}, "--patience must be 0"),
    ({**FAMILY, "validation_scenarios": -2}, "--validation-scenarios must be 0"),
    ({"experiment": "allocator_mixed", "validation_scenarios": 4}, "--validation-scenarios .* is for --experiment "
                                                                    "allocator_family"),
    ({"validation_scenarios": 4}, r"allocator_ppo plays no split"),
])
def test_bad_settings_are_refused(fields, message) -> None:
    with pytest.raises(ValueError, match=message):
        TrainArgs(**fields).validate()


def test_a_validation_set_must_leave_scenarios_to_train_on() -> None:
    from experiments.training.setup import resolve

    with pytest.raises(ValueError, match="--validation-scenarios 200 must leave some of split 'broad-train'"):
        resolve(TrainArgs(**FAMILY, validation_scenarios=200))


def test_experiment_files_written_before_the_flags_load_at_todays_behaviour() -> None:
    data = tomllib.loads(experiment_text(TrainArgs(**FAMILY, patience=3, validation_scenarios=8)))
    assert args_from_dict(data).patience == 3 and args_from_dict(data).validation_scenarios == 8
    for key in ("patience", "validation_scenarios"):
        del data["train"][key]
    older = args_from_dict(data)
    assert (older.patience, older.validation_scenarios) == (0, 0)


# ------------------------------------------------------------------ the stop rule


def rows(*scores, scenario="mixed"):
    return [{"iteration": i + 1, "scenario": scenario, "score": s} for i, s in enumerate(scores)]


def test_evaluations_since_the_best_count_as_the_run_keeps_best() -> None:
    assert evaluations_since_best([]) == 0
    assert evaluations_since_best(rows(0.5)) == 0
    assert evaluations_since_best(rows(0.5, 0.6)) == 0
    assert evaluations_since_best(rows(0.5, 0.5)) == 1  # a tie is no new best
    assert evaluations_since_best(rows(0.6, 0.5, 0.55)) == 2
    assert evaluations_since_best(rows(math.nan, 0.1)) == 0 and evaluations_since_best(rows(0.1, math.nan)) == 1
    # a curriculum's new stage starts afresh (its best too: train.evaluate_and_save)
    assert evaluations_since_best(rows(0.9, 0.8, scenario="standard") + rows(0.2, scenario="elevated")) == 0


def test_patience_stops_after_that_many_evaluations_without_a_new_best() -> None:
    history = rows(0.5, 0.6, 0.6, 0.55)
    assert [out_of_patience(history[:n], 2) for n in range(5)] == [False, False, False, False, True]
    assert out_of_patience(history[:3], 1)
    assert not any(out_of_patience(history[:n], 0) for n in range(5))  # 0: never (the default)


@pytest.mark.slow
@pytest.mark.rllib
@pytest.mark.ray
@pytest.mark.timeout(900)
def test_a_tiny_run_is_judged_on_its_validation_set_and_stops_when_the_score_stalls(ray_session, tmp_path):
    """At lr 0 the policy never moves, so the second evaluation ties the first: with --patience 1 and an evaluation
    every iteration the run stops after 2 of its 4 iterations, judged on the validation scenarios alone."""
    from experiments.training.train import train

    tiny = dict(eval_every=1, eval_seeds=2, train_batch_size=256, minibatch_size=128, num_epochs=1,
                num_envs_per_env_runner=16, hidden=(8, 8), quiet=True, iterations=4, sampler="lean", lr=0.0)
    checkpoint = train(TrainArgs(out=tmp_path, run_name="val", **FAMILY, validation_scenarios=2, patience=1, **tiny))
    run = checkpoint.parent
    held = [f"broad_1_{i}" for i in validation_places(200, 2)]
    history = json.loads((run / "history.json").read_text())
    assert [row["iteration"] for row in history] == [1, 2]  # stopped before its budget of 4
    assert history[1]["score"] == history[0]["score"]
    assert all(sorted(k.removeprefix("score/") for k in row if k.startswith("score/")) == sorted(held)
               for row in history)
    assert sorted(json.loads((run / "references.json").read_text())) == sorted(held)
    assert sorted(json.loads((run / "final_scores.json").read_text())) == sorted(held)
    recorded = tomllib.loads((run / "experiment.toml").read_text())["train"]
    assert (recorded["validation_scenarios"], recorded["patience"]) == (2, 1)
