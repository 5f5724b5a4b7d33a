"""The reference allocators' per-seed returns on a run's held-out seeds: random, oracle and
the scripted baselines, the anchors of the normalised score ``(R - R_random) / (R_oracle -
R_random)``. The run's setup reads them once (cached per scenario content and seeds);
:mod:`heldout` scores the learned policies against them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from commons_arena.files import make_folder, write_file
from commons_arena.inputs import load_record
from commons_arena.scenario import ScenarioConfig
from experiments.evaluation.evaluate import BASELINE_ALLOCATORS, allocator_returns, play_many

References = dict[str, list[float]]  # reference allocator -> per-seed returns


def reference_returns(config: ScenarioConfig, seeds: Sequence[int]) -> References:
    """Per-seed allocator returns of random, oracle and each baseline on the held-out seeds."""
    return {name: allocator_returns(play_many(config, name, seeds))  # type: ignore[arg-type]
            for name in ("random", "oracle", *BASELINE_ALLOCATORS)}


def cached_reference_returns(cache: Path, config: ScenarioConfig, seeds: Sequence[int]) -> References:
    """:func:`reference_returns`, kept in ``<cache>`` by scenario content and seeds: every run
    in the same folder that evaluates on those seeds reuses them (they are a pure function of
    scenario, seeds and the reference allocators)."""
    key = f"{config.content_hash}-{seeds[0]}-{len(seeds)}-{'-'.join(BASELINE_ALLOCATORS)}"
    path = cache / f"{key}.json"
    if path.is_file() and len(seeds) == seeds[-1] - seeds[0] + 1:
        return load_record(path, References, "reference cache", own=True, allow_nan=True)  # type: ignore[no-any-return]
    references = reference_returns(config, seeds)
    make_folder(path.parent)
    write_file(path, json.dumps(references))
    return references


REWARD_SCALE_SEEDS = 4  # episodes per (scenario, allocator) a family's reward scales are measured on
REWARD_SCALE_STREAM = 0x5CA1E5  # their seeds: SeedSequence([stream, run seed]), apart from every other seed rule


def reward_scale(planner: Sequence[float], random: Sequence[float]) -> float:
    """The factor that brings one scenario's allocator reward to a common scale: 100 over the gap
    between ``planner``'s and the random allocator's mean episode return (where planner is not above
    random, the random returns' spread; at least 1), so one planner-over-random gap is worth 100 in
    every scenario of a family whose returns otherwise differ by 100x."""
    gap = float(np.mean(planner)) - float(np.mean(random))
    return 100.0 / max(gap, float(np.std(random)), 1.0)


def reward_scales(configs: Sequence[ScenarioConfig], run_seed: int, episodes: int = REWARD_SCALE_SEEDS
                  ) -> dict[str, float]:
    """Scenario content hash -> :func:`reward_scale`, from ``planner`` and random played on seeds of
    the run's own stream (cheap: no oracle)."""
    seeds = [int(s) for s in np.random.SeedSequence([REWARD_SCALE_STREAM, run_seed]).generate_state(episodes)]
    return {c.content_hash: reward_scale(allocator_returns(play_many(c, "planner", seeds)),  # type: ignore[arg-type]
                                         allocator_returns(play_many(c, "random", seeds)))  # type: ignore[arg-type]
            for c in configs}


def anchor_means(references: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Scenario -> allocator -> mean return (older runs stored the means themselves)."""
    return {s: {a: float(np.mean(v)) for a, v in refs.items()} for s, refs in references.items()}


__all__ = ["References", "anchor_means", "cached_reference_returns", "reference_returns", "reward_scale", "reward_scales"]
