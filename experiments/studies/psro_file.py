"""The ``commons-arena psro`` experiment file (:mod:`experiments.studies.psro`), checked: the ``[psro]`` table's
loop settings, every number and list bounded, and each training's arguments (``[best_response]``,
``[allocator]``) with what the loop sets per round refused."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

import commons_arena
from commons_arena.enums import BROKER, TIERS
from commons_arena.errors import format_validation_error
from commons_arena.inputs import load_toml_file
from experiments.seeds import SEED_RANGES
from experiments.studies.exploit import seats_of
from experiments.training.args import MAX_EVAL_SEEDS, MAX_FIRST_SEED, MAX_ITERATIONS, MAX_MINUTES, TrainArgs
from experiments.training.config_file import train_section
from experiments.training.kinds import ALLOCATOR_KINDS

MAX_ROUNDS = 50
PAYOFF_OFFSET = 50_000  # the payoff matrices' seeds start this far into the psro range


class PsroError(ValueError):
    """A psro file or folder that cannot be used; the message names what to fix."""


PsroName = Annotated[str, Field(min_length=1, max_length=1_000)]  # a scenario or policy: a name or a path
_Seeds = Annotated[int, Field(ge=1, le=MAX_EVAL_SEEDS)]
_FirstSeed = Annotated[int, Field(ge=0, le=MAX_FIRST_SEED)]
_Iterations = Annotated[int, Field(ge=1, le=MAX_ITERATIONS)]
MAX_PSRO_SEATS = 64
MAX_PSRO_TIERS = 64


class _Psro(BaseModel):
    """The ``[psro]`` table: every number bounded here, every list bounded and without duplicates."""

    model_config = ConfigDict(extra="forbid", strict=True)
    scenario: PsroName = "crisis"
    allocator: PsroName = "planner"
    rounds: Annotated[int, Field(ge=1, le=MAX_ROUNDS)] = 2
    seats: Annotated[list[PsroName], Field(max_length=MAX_PSRO_SEATS)] = []  # team seats; empty: every team seat
    broker: bool = False
    tiers: Annotated[list[PsroName], Field(min_length=1, max_length=MAX_PSRO_TIERS)] = list(TIERS)
    seeds: Annotated[int, Field(ge=2, le=MAX_EVAL_SEEDS)] = 100  # at least 2: a paired CI
    first_seed: _FirstSeed = SEED_RANGES["psro"].first
    payoff_seeds: _Seeds = 30
    payoff_first_seed: _FirstSeed = SEED_RANGES["psro"].first + PAYOFF_OFFSET
    own_share: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)] = 0.5  # the members need some weight
    best_response_iterations: _Iterations = 20
    allocator_iterations: _Iterations = 40
    minutes: Annotated[float, Field(gt=0, le=MAX_MINUTES, allow_inf_nan=False)] = 30.0

    @field_validator("seats", "tiers")
    @classmethod
    def _no_duplicates(cls, value: list[str]) -> list[str]:
        repeated = sorted({v for v in value if value.count(v) > 1})
        if repeated:
            raise ValueError(f"names {repeated[:3]} more than once")
        return value


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")
    psro: _Psro
    best_response: dict[str, Any] = {}
    allocator: dict[str, Any] = {}


@dataclass(frozen=True)
class PsroConfig:
    """An experiment file, checked: the loop's settings and each training's arguments."""

    scenario: str
    allocator: str
    rounds: int
    seats: tuple[str, ...]  # the learning seats (team seats, then the broker when asked)
    tiers: tuple[str, ...]
    seeds: tuple[int, ...]  # held-out: the exploit cells' and the welfare's
    payoff_seeds: tuple[int, ...]  # the meta-game's
    own_share: float
    best_response: TrainArgs  # budget and report seeds set
    allocator_args: TrainArgs  # budget set; scenario, mixture, out and the warm start per round
    settings: Mapping[str, Any]  # the file as parsed (the folder's key, less `rounds`)


def load_psro(path: str | Path) -> PsroConfig:
    """Read and check a psro experiment file (one line naming the key on any error)."""
    path = Path(path)
    return psro_from_dict(load_toml_file(path, "psro", PsroError), str(path))


def psro_from_dict(data: Mapping[str, Any], source: str = "<dict>") -> PsroConfig:
    try:
        model = _File.model_validate(data)
    except ValidationError as err:
        raise PsroError(f"invalid psro file {source}: {format_validation_error(err)}") from None
    p = model.psro
    for first, count, name in ((p.first_seed, p.seeds, "first_seed"), (p.payoff_first_seed, p.payoff_seeds,
                                                                     "payoff_first_seed")):
        if first + count - 1 > MAX_FIRST_SEED:
            raise PsroError(f"invalid psro file {source}: psro.{name} must be at most {MAX_FIRST_SEED - count + 1}, "
                            f"got {first}")
    for section, table in (("best_response", model.best_response), ("allocator", model.allocator)):
        fixed = sorted(set(table) & set(SET_PER_STEP[section]))
        if fixed:
            raise PsroError(f"invalid psro file {source}: {section}.{fixed[0]} is set by the loop (psro table or "
                            "per round); drop it")
    best = train_section(dict(model.best_response), f"psro file {source}: best_response")
    alloc = train_section(dict(model.allocator), f"psro file {source}: allocator")
    if not alloc.kind.continues_allocator():
        raise PsroError(f"invalid psro file {source}: allocator.experiment must be one of "
                        f"{', '.join(ALLOCATOR_KINDS)}, got {alloc.experiment!r}")
    seeds = tuple(range(p.first_seed, p.first_seed + p.seeds))
    payoff = tuple(range(p.payoff_first_seed, p.payoff_first_seed + p.payoff_seeds))
    try:
        from experiments.evaluation.evaluate import validate_lineup

        validate_lineup([p.scenario, *p.tiers], [p.allocator], list(seeds))
        validate_lineup([p.scenario], [p.allocator], list(payoff))
        config = commons_arena.load_scenario(p.scenario)
        seats = seats_of(p.scenario, p.seats or list(config.team_names))
    except ValueError as err:
        raise PsroError(f"invalid psro file {source}: {err}") from None
    if BROKER in seats and not p.broker:
        raise PsroError(f"invalid psro file {source}: psro.seats names the broker: set psro.broker = true instead")
    seats += [BROKER] if p.broker else []
    best = replace(best, iterations=p.best_response_iterations, minutes=p.minutes, report_seeds=p.seeds,
                   report_first_seed=p.first_seed)
    alloc = replace(alloc, iterations=p.allocator_iterations, minutes=p.minutes)
    for section, used in (("best_response", best), ("allocator", alloc)):  # the values the trainings use, checked
        try:
            used.validate()
        except ValueError as err:
            raise PsroError(f"invalid psro file {source}: {section} (with the psro table's budget): {err}") from None
    settings = json.loads(json.dumps({**model.model_dump(), "psro": {**p.model_dump(), "rounds": None}}))
    return PsroConfig(p.scenario, p.allocator, p.rounds, tuple(seats), tuple(p.tiers), seeds, payoff, p.own_share,
                      best, alloc, settings)


# what the loop sets in each training (a file that sets them is refused)
SET_PER_STEP = {"best_response": ("experiment", "learners", "scenario", "background", "iterations", "minutes",
                                  "report_seeds", "report_first_seed", "out", "mix_background", "mixture"),
                "allocator": ("scenario", "iterations", "minutes", "out", "init_from", "mix_background", "mixture",
                              "learners")}



__all__ = ["MAX_PSRO_SEATS", "MAX_ROUNDS", "PsroName", "PsroConfig", "PsroError", "SET_PER_STEP", "load_psro", "psro_from_dict"]
