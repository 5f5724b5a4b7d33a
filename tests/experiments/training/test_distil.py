"""The privileged-teacher distillation of the universal allocator (experiments/training/distil.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from commons_arena.enums import ALLOCATOR
from commons_arena.family import FamilyError
from commons_arena.scenario import load_scenario
from experiments.evaluation.engine import play
from experiments.training.distil import (
    DISTIL_FILE,
    ROWS_FILE,
    DaggerAllocator,
    DistilArgs,
    distil,
    fit_student,
    play_dagger,
    teacher_codes,
)
from policies.learned import LearnedPolicy, load_network
from policies.population import Population

DELTAS = (-2, -1, 0, 1, 2)


def test_teacher_codes_are_the_clipped_gap_to_the_true_need() -> None:
    need = np.array([[3, 0], [1, 9]])
    estimate = np.array([[1, 2], [1, 1]])
    # gaps +2, -2, 0, +8 (cut to +2) -> the codes of those deltas
    assert teacher_codes(need, estimate, DELTAS, 2).tolist() == [[4, 0], [2, 4]]
    assert teacher_codes(need, estimate, DELTAS, 1).tolist() == [[3, 1], [2, 3]]


def test_play_dagger_marks_where_each_episode_starts() -> None:
    config = load_scenario("standard")
    seat = play_dagger(config, [3, 4])
    assert len(seat.starts) == 2 and seat.starts[0] == 0
    assert 0 < seat.starts[1] < len(seat.features) <= 2 * config.max_ticks  # one row per tick the seat acted
    assert all(f.shape[0] == len(config.teams) * len(config.gpu_tiers) for f in seat.features)


def test_the_collecting_seat_records_every_real_cell_and_plays_the_teacher() -> None:
    config = "crisis"
    made: list[DaggerAllocator] = []

    def lineup(env):
        policies = Population.default(config).build(env.config, env=env, strict=False)
        made.append(DaggerAllocator(env, None, 1.0, 2))
        policies[ALLOCATOR] = made[-1]
        return policies
    teacher = [e.summaries[ALLOCATOR]["return"] for e in play(config, lineup, [11, 12])]
    seat = made[0]
    n_cells = seat.interface.batched.encoder.n_teams * seat.interface.batched.encoder.n_tiers
    ticks = len(seat.labels)
    assert ticks > 0 and all(f.shape == (n_cells, seat.features[0].shape[1]) for f in seat.features)
    assert all(label.shape == (n_cells,) and set(label.tolist()) <= set(range(5)) for label in seat.labels)
    # the teacher changes what the planner does (it is not the zero code everywhere) ...
    assert any((label != seat.interface.batched.zero).any() for label in seat.labels)
    # ... and is privileged: its returns differ from planner's on the same seeds
    planner = [e.summaries[ALLOCATOR]["return"]
               for e in play(config, Population.default(config).with_agent(ALLOCATOR, "planner"), [11, 12])]
    assert teacher != planner


def test_a_small_distillation_writes_a_universal_checkpoint_that_plays_any_shipped_tier(tmp_path) -> None:
    args = DistilArgs(limit=2, scenarios=("standard",), rounds=2, seeds=1, epochs=2, check_scenarios=1,
                      check_seeds=1, workers=1, out=tmp_path / "d")
    report = distil(args)
    assert [r["round"] for r in report["rounds"]] == [1, 2]
    assert report["rounds"][0]["beta"] == 1.0 and report["rounds"][1]["beta"] == 0.5
    stored = json.loads((args.out / DISTIL_FILE).read_text())
    assert stored["rounds"] == report["rounds"] and np.isfinite(stored["teacher_minus_planner"])
    rows = np.load(args.out / ROWS_FILE)
    assert rows["features"].shape[0] == rows["labels"].shape[0] == rows["groups"].shape[0] == report["rounds"][1]["rows"]
    assert len(np.unique(rows["groups"])) == 2 * 3  # one collection per (round, scenario)
    assert report["rounds"][1]["rows"] > report["rounds"][0]["rows"]  # DAgger keeps every round's rows
    policy = LearnedPolicy.load(args.out, "elevated", ALLOCATOR)  # a tier it never played
    lineup = Population.default("elevated").build(load_scenario("elevated"), strict=False) | {ALLOCATOR: policy}
    episode = next(play("elevated", lineup, [3]))
    assert np.isfinite(episode.summaries[ALLOCATOR]["return"])
    # the same settings give the same network (every seed flows from the arguments)
    again = distil(DistilArgs(**{**args.__dict__, "out": tmp_path / "e"}))
    assert again["rounds"][1]["rows"] == report["rounds"][1]["rows"]
    a, b = load_network(args.out)[1].tensors(), load_network(tmp_path / "e")[1].tensors()
    assert all(np.array_equal(a[k].numpy(), b[k].numpy()) for k in a)


def test_the_fit_holds_out_whole_collections_not_single_rows() -> None:
    from policies.universal import N_FEATURES

    rng = np.random.default_rng(0)
    features = rng.normal(size=(200, N_FEATURES)).astype(np.float32)
    labels = rng.integers(0, 5, size=200)
    groups = np.repeat(np.arange(20), 10)  # 20 collections of 10 rows
    args = DistilArgs(epochs=1, hidden=(8,))
    _, by_group = fit_student(features, labels, args, 5, 2, groups=groups)
    assert by_group["held_rows"] == 20  # two whole collections (a tenth of 20), not 20 rows drawn anywhere
    _, by_row = fit_student(features, labels, args, 5, 2)
    assert by_row["held_rows"] == 20
    with pytest.raises(ValueError, match="nothing left to fit"):
        fit_student(features, labels, args, 5, 2, groups=np.zeros(200, dtype=np.int64))


@pytest.mark.parametrize("bad, message", [
    ({"rounds": 0}, "--rounds"), ({"seeds": 0}, "--seeds"), ({"teacher_share": 1.5}, "--teacher-share"),
    ({"lr": float("nan")}, "--lr"), ({"hidden": ()}, "--hidden"), ({"limit": -1}, "--limit"),
    ({"rounds": 10**12}, "--rounds"), ({"seeds": 10**9}, "--seeds"), ({"epochs": 10**9}, "--epochs"),
    ({"batch": 10**12}, "--batch"), ({"workers": 10**6}, "--workers"), ({"clip": 10**9}, "--clip"),
    ({"lr": 1e300}, "--lr"), ({"hidden": (2**20,)}, "--hidden"), ({"hidden": (8,) * 100}, "--hidden"),
    ({"check_seeds": 10**9}, "--check-seeds"), ({"seed": -1}, "--seed"), ({"rounds": 1000, "seeds": 10_000}, "--rounds x"),
    ({"scenarios": ("standard", "standard")}, "more than once"),
])
def test_bad_settings_are_refused_naming_the_flag(bad, message) -> None:
    with pytest.raises(ValueError, match=message):
        DistilArgs(**bad).validate()


def test_the_heldout_split_is_refused(tmp_path) -> None:
    with pytest.raises(FamilyError, match="held-out"):
        distil(DistilArgs(split="broad-heldout", limit=1, out=tmp_path / "d"))
