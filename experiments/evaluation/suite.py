"""Benchmark suites: named lists of *evaluation scenarios* (SPEC §14, Melting Pot's "scenario").

An evaluation scenario is a game scenario, the focal seat and a background population (the
co-players in every other seat). A suite is a TOML file under ``experiments/suites/`` (or
any path)::

    name = "heldout-allocator"
    description = "..."
    seat = "allocator"          # allocator | broker | team:<name>: the focal seat of every entry
    reference = "planner"       # probability of improvement over this policy (default per role:
                                # planner / truthful / demand_priced)
    selection_seeds = 10        # team / broker seats: seeds choosing the best fixed code (score 1)

    [[evaluation]]              # one evaluation scenario per game scenario of a family split
    split = "broad-heldout"
    [[evaluation]]              # the first 10 of it again, against held-out co-players
    split = "broad-heldout"
    take = 10
    background = "bluffers"
    [[evaluation]]              # the validation set training holds out of a training split
    split = "broad-train"       # (commons_arena.family.hold_out: the scenarios --validation-scenarios 16 sets aside)
    validation = 16
    [[evaluation]]              # or one scenario by name or path (relative to the suite file)
    scenario = "crisis"
    background = "fixed_price"
    seat = "team:safety"        # an entry may name another seat of the same role

    [backgrounds.default]       # empty: each scenario's own [population] (the default)
    [backgrounds.bluffers]      # a Population table (policies/population.py): roles / agents,
    roles = { team = "greedy_bluffer" }   # a policy, { policy = ..., <param> = ... } or learned:<dir>

Why under ``experiments/`` and not ``scenarios/``: ``scenarios/`` is the game's data, read by
``commons_arena`` (the lowest layer, which knows no policies); a suite names background
policies and checkpoints and only the benchmark reads it. Like the family's split lists, a
suite is data: nothing that trains reads one.

Structure errors come from pydantic, meaning errors (an unknown split, scenario, seat,
background or policy, a background a scenario cannot seat) are checked for every entry
when the suite loads; both name the file and the entry: ``suite s.toml: evaluation[2]: ...``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from commons_arena.enums import ALLOCATOR, BROKER
from commons_arena.errors import format_validation_error
from commons_arena.inputs import load_toml_file
from commons_arena.scenario import ScenarioConfig, ScenarioError, load_scenario, resolve_reference
from experiments.evaluation.engine import EvaluationScenario
from experiments.evaluation.roster import (
    SEAT_TEAMS,
    BackgroundTables,
    RosterError,
    backgrounds_of,
    focal_agents,
    parse_seat,
    seat_role,
)
from policies.population import PopulationError

SUITES_DIR = Path(__file__).resolve().parents[1] / "suites"
DEFAULT_REFERENCE = {ALLOCATOR: "planner", "team": "truthful", BROKER: "demand_priced"}
MAX_SELECTION_SEEDS = 1_000


class SuiteError(ValueError):
    """A suite file is malformed or names something that cannot play; the message names file and entry."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class EntryModel(_Strict):
    scenario: str | None = None
    split: str | None = None
    take: int | None = Field(default=None, ge=1)
    validation: int | None = Field(default=None, ge=1)
    background: str = "default"
    seat: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> EntryModel:
        if (self.scenario is None) == (self.split is None):
            raise ValueError("give exactly one of scenario = <name or path> and split = <family split>")
        if (self.take is not None or self.validation is not None) and self.split is None:
            raise ValueError("take (the first N scenarios) and validation (a training split's validation set) "
                             "apply to a split only")
        if self.take is not None and self.validation is not None:
            raise ValueError("give take or validation, not both")
        return self


class SuiteModel(_Strict):
    name: str = Field(min_length=1)
    description: str = ""
    seat: str = ALLOCATOR
    reference: str | None = None
    selection_seeds: int = Field(default=10, ge=1, le=MAX_SELECTION_SEEDS)
    evaluation: list[EntryModel] = Field(min_length=1)
    backgrounds: BackgroundTables


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    role: str  # allocator | team | broker: the focal policy's role in every evaluation scenario
    reference: str  # the probability of improvement is over this policy
    selection_seeds: int
    evaluations: tuple[EvaluationScenario, ...]
    source: str = "<dict>"


def _one_seat(seat: str, where: str) -> str:
    """A suite's focal seat: a roster's seat (:func:`~experiments.evaluation.roster.parse_seat`), but one seat."""
    parsed = parse_seat(seat)
    if parsed == SEAT_TEAMS:
        raise SuiteError(f"{where}: seat: a suite's focal seat is one seat (allocator, broker or team:<name>), "
                         "not every team")
    return parsed


def list_suites() -> list[str]:
    """The shipped suites' names (``experiments/suites/*.toml``)."""
    return sorted(p.stem for p in SUITES_DIR.glob("*.toml"))


def suite_path(name: str | Path) -> Path:
    """A shipped suite's file by name, or a path to a TOML file."""
    text = str(name)
    if text.endswith(".toml") or "/" in text or Path(text).is_file():
        path = Path(text)
        if not path.is_file():
            raise SuiteError(f"suite file not found: {path}")
        return path
    path = SUITES_DIR / f"{text}.toml"
    if not path.is_file():
        raise SuiteError(f"unknown suite {text!r}; shipped suites: {', '.join(list_suites())} (or give a TOML path)")
    return path


def load_suite(name: str | Path) -> Suite:
    """A shipped suite by name, or a suite TOML file, validated (every entry resolved and checked)."""
    path = suite_path(name)  # a special file, too large, not UTF-8 or nested too deeply: one line, as a roster
    return suite_from_dict(load_toml_file(path, "suite", SuiteError), source=str(path), base=path.parent)


def _split(name: str) -> tuple[ScenarioConfig, ...]:
    try:
        from commons_arena.family import load_split  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        raise ValueError(f"split {name!r}: this install has no scenario families (commons_arena.family)") from None
    try:
        return tuple(load_split(name))
    except (KeyError, LookupError) as err:
        raise ValueError(f"split {name!r}: {err}") from None


def _scenarios(entry: EntryModel, base: Path | None) -> tuple[ScenarioConfig, ...]:
    if entry.split is not None:
        configs = _split(entry.split)
        if entry.validation is not None:  # the K scenarios training holds out of this split to choose checkpoints
            from commons_arena.family import hold_out, split_file  # type: ignore[import-not-found,unused-ignore]

            if split_file(entry.split).heldout:
                raise ValueError(f"split {entry.split!r} is held out: a validation set is carved from a training split")
            return hold_out(configs, entry.validation)[1]
        return configs[: entry.take] if entry.take is not None else configs
    assert entry.scenario is not None
    return (load_scenario(resolve_reference(entry.scenario, base)),)


def suite_from_dict(data: Mapping[str, Any], source: str = "<dict>", base: Path | None = None) -> Suite:
    """Validate ``data`` (the parsed TOML); relative scenario paths resolve against ``base``."""
    try:
        model = SuiteModel.model_validate(dict(data))
    except ValidationError as err:
        raise SuiteError(f"suite {source}: {format_validation_error(err)}") from None
    seat = _one_seat(model.seat, f"suite {source}")
    role = seat_role(seat)
    try:
        backgrounds = backgrounds_of(model.backgrounds)
    except PopulationError as err:
        raise SuiteError(f"suite {source}: {str(err).removeprefix('population ')}") from None
    reference = model.reference or DEFAULT_REFERENCE[role]
    from policies.registry import policy_spec

    try:
        if not policy_spec(reference).plays(role):
            raise ValueError(f"policy {reference!r} does not play the {role} role (the focal seat's)")
    except ValueError as err:
        raise SuiteError(f"suite {source}: reference: {err}") from None
    evaluations: list[EvaluationScenario] = []
    for i, entry in enumerate(model.evaluation):
        where = f"suite {source}: evaluation[{i}]"
        entry_seat = _one_seat(entry.seat, where) if entry.seat is not None else seat
        if seat_role(entry_seat) != role:
            raise SuiteError(f"{where}: seat {entry_seat!r} plays the {seat_role(entry_seat)} role; this suite's "
                             f"focal seat is a {role} ({seat!r}): one policy plays every entry")
        if entry.background not in backgrounds:
            raise SuiteError(f"{where}: background {entry.background!r} is not defined; backgrounds: "
                             f"{', '.join(backgrounds)} (add [backgrounds.{entry.background}])")
        try:
            configs = _scenarios(entry, base)
        except (ScenarioError, ValueError) as err:
            raise SuiteError(f"{where}: {err}") from None
        for config in configs:
            evaluation = EvaluationScenario(config, entry_seat, entry.background, backgrounds[entry.background])
            try:
                focal_agents(entry_seat, config)
                evaluation.background.resolve(config)
            except (RosterError, PopulationError) as err:
                raise SuiteError(f"{where} ({config.name}): {err}") from None
            evaluations.append(evaluation)
    names = [e.name for e in evaluations]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise SuiteError(f"suite {source}: evaluation scenarios listed twice: {', '.join(twice[:5])}")
    return Suite(model.name, model.description, role, reference, model.selection_seeds, tuple(evaluations), source)


__all__ = ["EvaluationScenario", "Suite", "SuiteError", "list_suites", "load_suite", "suite_from_dict"]
