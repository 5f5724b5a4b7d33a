"""What the experiment kinds (experiments/training/kinds.py) say about a run without a scenario to plan on."""

from __future__ import annotations

import commons_arena
from commons_arena.enums import ALLOCATOR
from experiments.training.kinds import KINDS, kind_of


def test_whether_the_allocator_learns_agrees_with_each_kinds_seat_plan():
    config = commons_arena.load_scenario("standard")
    cases = {name: [("allocator",)] for name in KINDS}
    cases["seats_ppo"] = [("allocator",), ("team",), ("broker", "allocator"), ("search",)]
    cases["best_response"] = [("search",), ("broker",)]
    for name, learner_sets in cases.items():
        for learners in learner_sets:
            kind = kind_of(name)
            planned = ALLOCATOR in kind.seat_plan(config, learners, "shared").seats
            assert kind.allocator_learns(learners) is planned, (name, learners)
    assert not kind_of("league").allocator_learns(("allocator",))  # the default --learners: the league's teams learn
    assert kind_of("allocator_mixed").allocator_learns(("allocator",))
