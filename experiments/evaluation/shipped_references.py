"""The shipped suites' reference returns, shipped as data (as benchmarks ship their normalisers).

A cold ``commons-arena benchmark`` of an allocator suite was mostly the oracle: a MILP per tick,
~640 s of single-core work for 50 held-out scenarios x 20 seeds. The anchors' returns (``random``: 0,
``oracle``: 1) depend only on the episode's identity, so they ship in ``reference_returns.json``, one
return per store key (seat, scenario and its content hash, background and its hash, player and its
hash, seed): :func:`copy_shipped_anchors` copies those a benchmark plans into its store before anything is
played. A suite of the user's own (another scenario, background or seed: another key) finds none and
plays its anchors as before.

A copied row holds the return only: ``episode`` is ``{}`` and ``wall_seconds`` 0 (the benchmark's
scores read the return alone). ``tests/experiments/evaluation/test_shipped_references.py`` replays a
sample and compares. Remake the file after a change to the rules, a scenario or a suite::

    python -m experiments.evaluation.benchmark --workers 2     # benchmark.remake_references
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from commons_arena.errors import format_validation_error
from commons_arena.files import write_file
from commons_arena.inputs import loads_json, read_text
from experiments.evaluation.results import planned_keys
from experiments.evaluation.roster import Roster
from experiments.evaluation.store import KEY, ResultStore

PATH = Path(__file__).with_name("reference_returns.json")
SEEDS = 20  # the benchmark's default --seeds: the first seeds of its range


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


def load_returns(path: Path = PATH) -> dict[tuple[Any, ...], tuple[str, float]]:
    """Store key (a tuple in KEY order) -> (policy, return): the file, checked by its model."""
    if not path.is_file():
        return {}
    try:
        data = _File.model_validate(loads_json(read_text(path, "reference returns", 64 * 2**20), str(path)))
    except ValidationError as err:
        raise ValueError(f"{path}: not a reference-returns file: {format_validation_error(err)}") from None
    return {(*s.key, s.first_seed + i): (s.policy, r) for s in data.series for i, r in enumerate(s.returns)}


def copy_shipped_anchors(rosters: Sequence[Roster], store: ResultStore, shipped: dict[tuple[Any, ...], tuple[str, float]]
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


def file_content(rows: Sequence[dict[str, Any]], seeds: Sequence[int]) -> dict[str, Any]:
    """The file's content from stored rows (:meth:`ResultStore.rows`) of every anchor on consecutive ``seeds``."""
    series: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in rows:
        key = tuple(row[k] for k in KEY[:-1])
        entry = series.setdefault(key, {"key": list(key), "policy": row["policy"], "first_seed": seeds[0],
                                        "returns": {}})
        entry["returns"][row["seed"]] = row["focal_return"]
    for entry in series.values():
        entry["returns"] = [entry["returns"][s] for s in seeds]  # seeds are consecutive: first_seed + i
    return {"format": "commons_arena.reference_returns", "series": list(series.values())}


def write_returns(data: dict[str, Any], out: Path = PATH) -> Path:
    return write_file(out, json.dumps(data, separators=(",", ":")) + "\n")


__all__ = ["PATH", "SEEDS", "copy_shipped_anchors", "file_content", "load_returns", "write_returns"]
