"""The one table of seed ranges: which episode seeds each purpose plays.

An episode is a function of its scenario, its policies and its seed, so a result is only
held out from training (or from a selection) if its seeds are. Every command takes its
default seeds from :data:`SEED_RANGES`; the blocks tile ``[0, 2**31 - 1)`` without
overlapping, so no two purposes share a seed:

* ``training`` is everything from 2**20 up: training episodes draw their seeds there
  (``experiments.training.env``), so every range below is held out from training by
  construction, whichever command or count uses it.
* ``training_eval`` (training's own held-out evaluation, which chooses ``best``) sits below
  it; the checkpoint comparison, the tournament, ``exploit`` / ``analyze`` and the
  best-response report each have their own block, so a checkpoint chosen on
  ``training_eval`` seeds is never judged on them.
* ``evaluate`` (scripted tables) also holds the fixed-code *selection* seeds: a fixed code
  chosen there is played on ``best_response_report`` / ``exploit`` / ``benchmark`` seeds, never
  on its own.
* ``benchmark`` (``commons-arena benchmark``): a suite's episodes, the focal policy's and its
  references' (random, oracle or the best fixed code, and the reference policy) alike.

A block's ``stop`` bounds the default counts; a user who asks ``--seeds`` beyond a block
(or any ``--first-seed``) can reach into the next one, which the commands allow.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import MappingProxyType

from commons_arena.spaces import MAX_SEED, check_seed


@dataclass(frozen=True)
class SeedRange:
    """Seeds ``first`` .. ``stop - 1``, and who plays them."""

    first: int
    stop: int
    used_by: str

    def seeds(self, count: int, first: int | None = None) -> list[int]:
        """``count`` consecutive seeds from ``first`` (default: this range's first)."""
        start = self.first if first is None else first
        return list(range(start, start + count))


SEED_RANGES: MappingProxyType[str, SeedRange] = MappingProxyType({
    "codes_report": SeedRange(0, 100, "the fixed-code figures of docs/codecs.md (experiments.evaluation.fixed_codes)"),
    "measure": SeedRange(100, 1_000, "need_gap's measurement of the planner's average need gap"),
    "evaluate": SeedRange(1_000, 5_000, "commons-arena evaluate; fixed-code selection (fixed_codes, best response)"),
    "tournament": SeedRange(5_000, 7_000, "commons-arena tournament without a roster"),
    "compare": SeedRange(7_000, 500_000, "the checkpoint comparison with every scripted allocator (checkpoint, "
                                         "train --train-seeds' aggregate), need_gap's test, corrections"),
    "benchmark": SeedRange(500_000, 600_000, "commons-arena benchmark (a suite's episodes and its references; the "
                                             "best fixed code of a team or broker seat is chosen on evaluate seeds)"),
    "best_response_report": SeedRange(600_000, 700_000, "the best-response report at the end of training"),
    "exploit": SeedRange(700_000, 720_000, "commons-arena exploit and analyze"),
    "arms_race": SeedRange(720_000, 800_000, "commons-arena arms-race's paired comparisons"),
    "psro": SeedRange(800_000, 900_000, "commons-arena psro: its exploit cells and welfare (800000..), its payoff "
                                        "matrices (850000..)"),
    "training_eval": SeedRange(900_000, 1_000_000, "training's held-out evaluation (which checkpoint is best)"),
    "distil_check": SeedRange(1_000_000, 2**20, "commons-arena distil's per-round check of the student against planner"),
    "training": SeedRange(2**20, 2**31 - 1, "training episodes (drawn at random in this range)"),
})


def first_seed(purpose: str) -> int:
    """The first seed of ``purpose``'s range (KeyError names the purposes)."""
    try:
        return SEED_RANGES[purpose].first
    except KeyError:
        raise KeyError(f"no seed range {purpose!r}; ranges: {', '.join(SEED_RANGES)}") from None


def validate_seeds(seeds: Sequence[int]) -> None:
    """At least one seed, each what ``reset(seed=...)`` accepts (:func:`commons_arena.spaces.check_seed`)
    and at most :data:`MAX_SEED`: the one check of a list of seeds."""
    if len(seeds) == 0:
        raise ValueError("no seeds to play: ask for at least one (--seeds 1 or more)")
    bad = []
    for seed in seeds:
        try:
            check_seed(seed)
        except ValueError:
            bad.append(seed)
            continue
        if seed is None or seed > MAX_SEED:
            bad.append(seed)
    if bad:
        raise ValueError(f"seeds must be integers in [0, 2**63 - 1], got {bad[:3]}")


__all__ = ["SEED_RANGES", "SeedRange", "first_seed", "validate_seeds"]
