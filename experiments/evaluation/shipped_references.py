"""The shipped suites' reference returns, shipped as data (as benchmarks ship their normalisers).

A cold ``commons-arena benchmark`` of an allocator suite was mostly the oracle: a MILP per tick,
~640 s of single-core work for 50 held-out scenarios x 20 seeds. The anchors' returns (``random``: 0,
``oracle``: 1) depend only on the episode's identity, so they ship in ``reference_returns.json``, one
return per store key (seat, scenario and its content hash, background and its hash, player and its
hash, seed): :func:`fill_store` copies those a benchmark plans into its store before anything is
played. A suite of the user's own (another scenario, background or seed: another key) finds none and
plays its anchors as before.

A copied row holds the return only: ``episode`` is ``{}`` and ``wall_seconds`` 0 (the benchmark's
scores read the return alone). ``tests/experiments/evaluation/test_shipped_references.py`` replays a
sample and compares. Remake the file after a change to the rules, a scenario or a suite::

    python -m experiments.evaluation.shipped_references --workers 2
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from commons_arena.enums import ALLOCATOR
from commons_arena.errors import format_validation_error
from commons_arena.files import write_file
from commons_arena.inputs import loads_json, read_text
from experiments.evaluation.engine import QUIET, PlayOptions, planned_keys, play_rosters
from experiments.evaluation.roster import Player, Roster
from experiments.evaluation.store import EpisodeKey, ResultStore
from experiments.evaluation.suite import Suite, list_suites, load_suite
from policies.population import Entry

PATH = Path(__file__).with_name("reference_returns.json")
SEEDS = 20  # the benchmark's default --seeds: the first seeds of its range
ANCHORS = ("random", "oracle")  # the allocator seat's score 0 and 1


class _Series(BaseModel):
    """One (evaluation scenario, anchor): its key without the seed, its policy and a return per seed."""

    model_config = ConfigDict(extra="forbid")
    key: Annotated[list[str], Field(min_length=7, max_length=7)]  # store KEY without the seed
    policy: str
    first_seed: Annotated[int, Field(ge=0)]
    returns: list[float]


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")
    format: Annotated[str, Field(pattern="^commons_arena.reference_returns$")]
    series: list[_Series]


def anchor_rosters(suite: Suite, seeds: Sequence[int]) -> list[Roster]:
    """Per evaluation scenario, a roster of the anchors alone (the benchmark's players of the same names and
    entries: their keys are the benchmark's)."""
    from experiments.evaluation.benchmark import evaluation_roster, low_anchor

    top = Player("oracle", Entry("oracle"), "high", entrant=False)
    return [evaluation_roster(suite, e, [low_anchor(suite.role), top], seeds) for e in suite.evaluations]


def load(path: Path = PATH) -> dict[tuple[Any, ...], tuple[str, float]]:
    """Store key (a tuple in KEY order) -> (policy, return): the file, checked by its model."""
    if not path.is_file():
        return {}
    try:
        data = _File.model_validate(loads_json(read_text(path, "reference returns", 64 * 2**20), str(path)))
    except ValidationError as err:
        raise ValueError(f"{path}: not a reference-returns file: {format_validation_error(err)}") from None
    return {(*s.key, s.first_seed + i): (s.policy, r) for s in data.series for i, r in enumerate(s.returns)}


def fill_store(rosters: Sequence[Roster], store: ResultStore, shipped: dict[tuple[Any, ...], tuple[str, float]]
               ) -> int:
    """Copy the shipped returns of every planned key the store lacks; how many were copied."""
    copied = 0
    for roster in rosters:
        done = store.existing(roster.seat)
        for key in planned_keys(roster):
            found = shipped.get(key.as_tuple())
            if found is not None and key.as_tuple() not in done:
                copied += store.append(key, found[0], found[1], {}, 0.0)
    return copied


def compute(suites: Sequence[Suite], seeds: Sequence[int], store: ResultStore, options: PlayOptions = QUIET
            ) -> dict[str, Any]:
    """Play the anchors of ``suites`` on ``seeds`` into ``store``; the file's content."""
    rosters = [r for suite in suites for r in anchor_rosters(suite, seeds)]
    play_rosters(rosters, store, options, desc="references")
    series: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in store.rows([k for r in rosters for k in planned_keys(r)]):
        key = EpisodeKey(*(row[k] for k in ("seat", "scenario", "scenario_hash", "background", "background_hash",
                                            "player", "player_hash", "seed")))
        entry = series.setdefault(key.as_tuple()[:-1], {"key": list(key.as_tuple()[:-1]), "policy": row["policy"],
                                                         "first_seed": seeds[0], "returns": {}})
        entry["returns"][key.seed] = row["focal_return"]
    for entry in series.values():
        entry["returns"] = [entry["returns"][s] for s in seeds]  # seeds are consecutive: first_seed + i
    return {"format": "commons_arena.reference_returns", "series": list(series.values())}


def main(workers: int = 2, out: Path = PATH) -> None:
    import tempfile

    from experiments.evaluation.benchmark import benchmark_seeds
    from experiments.evaluation.engine import PlayOptions

    suites = [s for s in map(load_suite, list_suites()) if s.role == ALLOCATOR]
    with tempfile.TemporaryDirectory() as tmp, ResultStore(Path(tmp) / "refs.sqlite") as store:
        data = compute(suites, benchmark_seeds(SEEDS), store, PlayOptions(workers=workers))
    write_file(out, json.dumps(data, separators=(",", ":")) + "\n")
    print(f"wrote {out}: {sum(len(s['returns']) for s in data['series'])} returns")


if __name__ == "__main__":
    import tyro

    tyro.cli(main)
