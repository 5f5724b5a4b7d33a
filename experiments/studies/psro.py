"""Rounds of training toward an allocator that is hard to exploit: a PSRO-style loop on the arms race (issue 30).

    commons-arena psro --config experiments/configs/psro.toml --out results/psro

One experiment file (:func:`load_psro`, the ``[psro]`` table and the training settings of the best
responses and of the allocator) drives every round. ``A0`` is the file's allocator (scripted, or
``learned:``); round ``k`` = 1 .. ``rounds``:

a. **best responses**: one per team seat (and the broker with ``broker = true``) against ``A(k-1)``,
   an exploit cell each (:func:`experiments.studies.exploit.run_cell`: the codec's best fixed code
   searched first, learning from it, the tournament on the held-out seeds; ``A<k-1>/<cell>/``);
   with them ``A(k-1)``'s exploitability (max over the team seats of the best response's gain over
   ``truthful``, with the exploiting seat's CI) and its welfare against the default population on
   every tier (:mod:`experiments.studies.exploitability`);
b. the learned checkpoints join the **population** (``r<k>-<seat>``; a roster cannot name a fixed
   code, so a cell whose best response came from the search contributes its checkpoint, which
   started at that code);
c. the **meta-game**: every member's gain over its seat's base policy (``truthful``; the broker's
   ``demand_priced``) against every allocator so far, ``A0`` .. ``A(k-1)``, played through the
   tournament engine on the payoff seeds (``round-<k>/payoff/<seat>/``), solved as the zero-sum game
   in which the allocators minimise the gain and the members maximise it
   (:func:`experiments.evaluation.metagame.zero_sum_nash`, the tournaments' solver): the members'
   Nash mixture ``q``;
d. ``A(k)`` is ``A(k-1)`` **continued** (``--init-from`` for a learned one, as in the arms race;
   a scripted one starts a fresh run at its codec's zero code) against a mixture
   (``round-<k>/mixture.toml``, :mod:`experiments.training.mixture`): the scenario's own population
   with weight ``own_share``, member ``j`` in its seat with ``(1 - own_share) * q_j``.

After the last round ``A(rounds)`` is measured as in (a). Every step is stored and skipped when the
command reruns: an exploit cell (``cell.json``), a welfare (``welfare/``), a meta-game
(``round-<k>/metagame.json``), an allocator run (``round-<k>/allocator.json``; a run folder an
interrupted continuation left is moved aside). More ``rounds`` in the file continue a finished run;
any other change is refused (another ``--out``).

Report (``psro.md``, ``psro.csv``, ``psro.json``, ``psro.png``), rewritten after every step: per
allocator ``A0`` .. its exploitability (CI, seat, from search / learning), the broker's gain when
measured, its welfare on every tier (CI); per round the payoff matrix (markdown and JSON) with the
Nash mixture the next allocator trained against.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator
from typing_extensions import TypedDict  # pydantic reads TypedDicts of typing_extensions on Python 3.11

import commons_arena
from commons_arena.enums import ALLOCATOR, BROKER, TIERS
from commons_arena.errors import format_validation_error
from commons_arena.files import make_folder, write_figure, write_file
from commons_arena.inputs import load_json_object, load_toml_file
from experiments.evaluation.metagame import zero_sum_nash
from experiments.evaluation.store import Share, StoredNumber
from experiments.evaluation.tables import markdown_table, write_table
from experiments.seeds import SEED_RANGES
from experiments.statistics import mean_ci95
from experiments.studies.arms_race import continuation, seat_roster, tournament_series
from experiments.studies.exploit import BROKER_BASE, TEAM_BASE, Cell, run_cell, seats_of
from experiments.studies.exploitability import (
    WELFARE_DIR,
    allocator_identity,
    exploitability_rows,
    move_aside,
    welfare,
)
from experiments.training.args import MAX_EVAL_SEEDS, MAX_FIRST_SEED, MAX_ITERATIONS, MAX_MINUTES, TrainArgs
from experiments.training.config_file import train_section
from experiments.training.kinds import ALLOCATOR_KINDS
from experiments.training.mixture import mixture_hash, mixture_text
from experiments.training.warm_start import LEARNED_PREFIX

PSRO_FILE = "psro_settings.json"  # the settings a folder was made with (a rerun resumes it)
METAGAME_FILE = "metagame.json"
ALLOCATOR_FILE = "allocator.json"
MIXTURE_FILE = "mixture.toml"
DISCOUNTING_FILE = "discounting.json"  # what round 1's and the last round's allocator learned (item 4)
OWN = "own population"  # the mixture entry of each scenario's own population
MAX_ROUNDS = 50
PAYOFF_OFFSET = 50_000  # the payoff matrices' seeds start this far into the psro range


class PsroError(ValueError):
    """A psro file or folder that cannot be used; the message names what to fix."""


_Name = Annotated[str, Field(min_length=1, max_length=1_000)]  # a scenario or policy: a name or a path
_Seeds = Annotated[int, Field(ge=1, le=MAX_EVAL_SEEDS)]
_FirstSeed = Annotated[int, Field(ge=0, le=MAX_FIRST_SEED)]
_Iterations = Annotated[int, Field(ge=1, le=MAX_ITERATIONS)]
MAX_PSRO_SEATS = 64
MAX_PSRO_TIERS = 64


class _Psro(BaseModel):
    """The ``[psro]`` table: every number bounded here, every list bounded and without duplicates."""

    model_config = ConfigDict(extra="forbid", strict=True)
    scenario: _Name = "crisis"
    allocator: _Name = "planner"
    rounds: Annotated[int, Field(ge=1, le=MAX_ROUNDS)] = 2
    seats: Annotated[list[_Name], Field(max_length=MAX_PSRO_SEATS)] = []  # team seats; empty: every team seat
    broker: bool = False
    tiers: Annotated[list[_Name], Field(min_length=1, max_length=MAX_PSRO_TIERS)] = list(TIERS)
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


@dataclass(frozen=True)
class Member:
    """A frozen best response of the population: its name (``r<round>-<seat>``), seat and policy."""

    name: str
    seat: str
    policy: str


# ------------------------------------------------------------------ the steps' records read back

_Number = StoredNumber  # finite, bounded (experiments/evaluation/store.py)


class _Member(TypedDict):
    name: _Name
    seat: _Name
    policy: _Name


class _Game(TypedDict):
    allocators: Annotated[dict[_Name, _Name], Field(max_length=MAX_ROUNDS + 1)]
    members: Annotated[list[_Member], Field(max_length=(MAX_ROUNDS + 1) * MAX_PSRO_SEATS)]
    gain: list[list[_Number]]
    gain_ci95: list[list[_Number]]
    member_mixture: dict[_Name, Share]
    allocator_mixture: dict[_Name, Share]
    equilibrium_gain: _Number


class _Verdict(TypedDict):
    allocator: str
    seat: str
    vs: str
    discount_minus: _Number
    discount_minus_ci95: _Number
    generosity_minus: _Number
    generosity_minus_ci95: _Number
    verdict: str


class _Learned(TypedDict):
    rows: Annotated[list[dict[str, Any]], Field(max_length=10_000)]
    verdicts: Annotated[list[_Verdict], Field(max_length=10_000)]


GAME: TypeAdapter[_Game] = TypeAdapter(_Game)
LEARNED: TypeAdapter[_Learned] = TypeAdapter(_Learned)


def stored_step(path: Path, key: Mapping[str, Any], field: str, model: TypeAdapter[Any]) -> Any:
    """A step's record (``{"key": ..., <field>: ...}``, written by this module) read back by the one reader: its
    payload checked by ``model`` when its key is ``key``; None when made with another key. A file that is not such
    a record is refused (PsroError naming it), never a traceback later."""
    raw = load_json_object(path, "psro record", allow_nan=True, own=True)
    if set(raw) != {"key", field}:
        raise PsroError(f"{path} is not a record psro writes (keys key and {field}, got {sorted(raw)[:5]}); remove it "
                        "to recompute that step")
    if raw["key"] != json.loads(json.dumps(key, default=str)):
        return None
    try:
        return model.validate_python(raw[field])
    except ValidationError as err:
        raise PsroError(f"{path}: {field}: {format_validation_error(err)}; remove it to recompute that step") from None


def check_game(game: Mapping[str, Any], path: Path) -> None:
    """A stored meta-game agrees with itself: a gain row per allocator, a column per member, a weight per name."""
    members = [m["name"] for m in game["members"]]
    shape = [len(game["allocators"]), len(members)]
    for name in ("gain", "gain_ci95"):
        if len(game[name]) != shape[0] or any(len(row) != shape[1] for row in game[name]):
            raise PsroError(f"{path}: game.{name} must be {shape[0]} rows of {shape[1]}; remove it to recompute")
    if set(game["member_mixture"]) != set(members) or set(game["allocator_mixture"]) != set(game["allocators"]):
        raise PsroError(f"{path}: the game's mixtures must weigh its members and allocators; remove it to recompute")


# ------------------------------------------------------------------ the steps


def measure_allocator(index: int, allocator: str, cfg: PsroConfig, out: Path) -> dict[str, Any]:
    """Step (a) for ``A<index>``: its exploit cells (stored ones read back) and welfare on every tier."""
    folder = out / f"A{index}"
    cells = [run_cell(Cell(cfg.scenario, allocator, seat), folder, cfg.best_response, cfg.seeds) for seat in cfg.seats]
    welfares = {tier: welfare(tier, allocator, cfg.seeds, out / WELFARE_DIR / f"{slug_of(tier)}-A{index}.json")
                for tier in cfg.tiers}
    summary = exploitability_rows(cells, {})[0]  # one scenario and allocator: one row (welfare per tier beside it)
    return {"index": index, "allocator": allocator, "cells": cells, "summary": summary, "welfare": welfares}


def slug_of(name: str) -> str:
    return Path(name).stem if name.endswith(".toml") else name


def population(measured: Sequence[Mapping[str, Any]]) -> list[Member]:
    """Step (b): the best responses to every allocator measured so far (their checkpoints, by round)."""
    return [Member(f"r{m['index'] + 1}-{cell['seat']}", str(cell["seat"]), str(cell["checkpoint"]))
            for m in measured for cell in m["cells"]]


def metagame(k: int, allocators: Sequence[str], members: Sequence[Member], cfg: PsroConfig, out: Path) -> dict[str, Any]:
    """Step (c) of round ``k``: the payoff matrix (member's gain over its seat's base, per allocator) and its
    Nash mixtures; read back from ``round-<k>/metagame.json`` when stored for the same allocators, members and seeds."""
    folder = out / f"round-{k}"
    key = {"allocators": [allocator_identity(a) for a in allocators], "members": [m.__dict__ for m in members],
           "seeds": list(cfg.payoff_seeds), "scenario_hash": commons_arena.load_scenario(cfg.scenario).content_hash}
    path = folder / METAGAME_FILE
    if path.is_file():
        stored = stored_step(path, key, "game", GAME)
        if stored is not None:
            check_game(stored, path)
            print(f"== round {k}: meta-game stored, skipped")
            return dict(stored)
    print(f"== round {k}: payoff matrix of {len(members)} members x {len(allocators)} allocators "
          f"({len(cfg.payoff_seeds)} seeds)")
    names = [f"A{i}" for i in range(len(allocators))]
    gain = np.zeros((len(allocators), len(members)))
    ci = np.zeros_like(gain)
    for seat in dict.fromkeys(m.seat for m in members):
        base = BROKER_BASE if seat == BROKER else TEAM_BASE
        mine = [m for m in members if m.seat == seat]
        series = tournament_series(f"psro round {k}: {seat}", seat, [cfg.scenario],
                                   {base: base, **{m.name: m.policy for m in mine}},
                                   {n: {"agents": {ALLOCATOR: a}} for n, a in zip(names, allocators, strict=True)},
                                   cfg.payoff_seeds, folder / "payoff" / seat)  # its store resumes
        for i, name in enumerate(names):
            for m in mine:
                j = members.index(m)
                gain[i, j], ci[i, j] = mean_ci95(list(np.subtract(series[(cfg.scenario, name, m.name)],
                                                                  series[(cfg.scenario, name, base)])))
    rows, q, value = zero_sum_nash(-gain)  # the allocators minimise the gain; q: the members' Nash mixture
    game = {"allocators": dict(zip(names, allocators, strict=True)), "members": [m.__dict__ for m in members],
            "gain": gain.tolist(), "gain_ci95": ci.tolist(), "member_mixture": dict(zip([m.name for m in members],
                                                                                        q.tolist(), strict=True)),
            "allocator_mixture": dict(zip(names, rows.tolist(), strict=True)), "equilibrium_gain": -value}
    make_folder(folder)
    write_file(path, json.dumps({"key": key, "game": game}, indent=1))
    return game


def write_mixture(k: int, game: Mapping[str, Any], cfg: PsroConfig, out: Path) -> Path:
    """The round's training mixture: the scenario's own population (``own_share``) and every member in its
    seat with ``(1 - own_share)`` times its Nash weight (``round-<k>/mixture.toml``, its rosters beside it)."""
    folder = out / f"round-{k}"
    make_folder(folder / "rosters")
    entries: list[tuple[str, str | None, float]] = [(OWN, None, cfg.own_share)]
    for member in game["members"]:
        roster = folder / "rosters" / f"{member['name']}.toml"
        write_file(roster, seat_roster(f"{member['name']} in {member['seat']}", member["seat"], member["policy"]))
        entries.append((member["name"], f"rosters/{roster.name}",
                        (1 - cfg.own_share) * float(game["member_mixture"][member["name"]])))
    path = folder / MIXTURE_FILE
    write_file(path, mixture_text(entries))
    return path


def continue_allocator(k: int, allocator: str, mixture: Path, cfg: PsroConfig, out: Path) -> str:
    """Step (d): ``A<k>`` = ``allocator`` continued against the mixture; read back from
    ``round-<k>/allocator.json`` when stored for the same allocator, mixture and settings."""
    from experiments.training.train import train

    folder = out / f"round-{k}"
    args = continuation(replace(cfg.allocator_args, scenario=cfg.scenario, mixture=mixture, out=folder,
                                run_name=ALLOCATOR), allocator)
    key = {"allocator": allocator_identity(allocator), "mixture": mixture_hash(mixture),
           "train": json.loads(json.dumps({k: v for k, v in args.__dict__.items() if k not in ("out", "mixture")},
                                          default=str))}
    path = folder / ALLOCATOR_FILE
    if path.is_file():
        stored = stored_step(path, key, "allocator", TypeAdapter(_Name))
        if stored is None:
            raise PsroError(f"{path} holds an allocator made with other settings; rerun with the same file, or "
                            "choose another --out")
        print(f"== round {k}: allocator stored, skipped")
        return str(stored)
    print(f"== round {k}: {allocator} continued ({args.experiment}, {args.iterations} iterations) against "
          f"{mixture}")
    move_aside(folder / ALLOCATOR)
    checkpoint = train(args)  # the run's last checkpoint, as in the arms race
    continued = f"{LEARNED_PREFIX}{checkpoint}"
    write_file(path, json.dumps({"key": key, "allocator": continued}, indent=1))
    return continued


def what_rounds_learned(allocators: Sequence[str], cfg: PsroConfig, out: Path) -> dict[str, Any]:
    """Item 4 of issue 30 for round 1 and the last round: per team seat, does ``A<k>`` discount a x3 bluffer
    (relative to a truthful team with the same need) or is it only more generous to everyone, paired by seed
    against ``A0`` on the held-out seeds (:mod:`experiments.evaluation.discounting`); read back from
    ``discounting.json`` when stored for the same allocators and seeds."""
    from experiments.evaluation.discounting import seat_verdicts

    rounds = sorted({1, len(allocators) - 1})
    teams = [seat for seat in cfg.seats if seat != BROKER]
    key = {"allocators": [allocator_identity(allocators[k]) for k in (0, *rounds)], "seats": teams,
           "seeds": list(cfg.seeds), "scenario": cfg.scenario}
    path = out / DISCOUNTING_FILE
    if path.is_file():
        stored = stored_step(path, key, "learned", LEARNED)
        if stored is not None:
            print("== what the allocators learned: stored, skipped")
            return dict(stored)
    print(f"== what A{', A'.join(str(k) for k in rounds)} learned: a x3 bluffer and a truthful team in "
          f"{', '.join(teams)} ({len(cfg.seeds)} seeds)")
    measured, verdicts = seat_verdicts(cfg.scenario, {f"A{k}": allocators[k] for k in (0, *rounds)}, "A0", teams,
                                       cfg.seeds)
    rows = [{c: v for c, v in row.items() if c != "per_seed"} for by_seat in measured.values() for row in by_seat.values()]
    learned = {"rows": rows, "verdicts": verdicts}
    write_file(path, json.dumps({"key": key, "learned": learned}, indent=1))
    return learned


def learned_markdown(learned: Mapping[str, Any]) -> str:
    from experiments.evaluation.discounting import COLUMNS

    verdicts = [{"allocator": v["allocator"], "seat": v["seat"], "vs": v["vs"],
                 "discount": f"{v['discount_minus']:+.3f} ± {v['discount_minus_ci95']:.3f}",
                 "generosity": f"{v['generosity_minus']:+.3f} ± {v['generosity_minus_ci95']:.3f}",
                 "verdict": v["verdict"]} for v in learned["verdicts"]]
    return ("## What round 1's and the last round's allocator learned (paired against A0, ± 95% CI)\n\n"
            "`discount` = 1 - (granted/declared of a x3 bluffer) / (granted/declared of a truthful team with the "
            "same need); `generosity` = granted / true need of the truthful team "
            "(experiments/evaluation/discounting.py). A change in discount with its CI above 0: it *discounts a "
            "bluffer*; in generosity alone: it is only *more generous to everyone*.\n\n"
            + markdown_table(verdicts) + "\n\n"
            + markdown_table([{c: r.get(c, "") for c in COLUMNS} for r in learned["rows"]]) + "\n")


# ------------------------------------------------------------------ the loop and its report


def check_folder(out: Path, cfg: PsroConfig) -> None:
    """``<out>/psro_settings.json`` holds the settings the folder was made with (less ``rounds``): a rerun with the same
    ones resumes, with others is refused."""
    path = out / PSRO_FILE
    if path.is_file():
        stored = load_json_object(path, "psro settings", allow_nan=True, own=True)
        if stored != cfg.settings:
            changed = sorted(k for section in set(stored) | set(cfg.settings)
                             for k in [section] if stored.get(section) != cfg.settings.get(section))
            raise PsroError(f"{out} holds a psro run made with other settings ({', '.join(changed)}); rerun with the "
                            "same file (more rounds may be added), or choose another --out")
        return
    make_folder(out)
    write_file(path, json.dumps(cfg.settings, indent=1))


def is_psro_folder(out: Path) -> bool:
    return (out / PSRO_FILE).is_file()


def psro(cfg: PsroConfig, out: Path) -> list[dict[str, Any]]:
    """Every round (see the module docstring), each step skipped when stored; returns the report's rows."""
    check_folder(out, cfg)
    allocators = [cfg.allocator]
    measured: list[dict[str, Any]] = []
    games: list[dict[str, Any]] = []
    for k in range(1, cfg.rounds + 1):
        print(f"== round {k}: best responses against A{k - 1} = {allocators[-1]}")
        measured.append(measure_allocator(k - 1, allocators[-1], cfg, out))
        write_psro_report(measured, games, cfg, out)
        game = metagame(k, allocators, population(measured), cfg, out)
        games.append(game)
        mixture = write_mixture(k, game, cfg, out)
        allocators.append(continue_allocator(k, allocators[-1], mixture, cfg, out))
        write_psro_report(measured, games, cfg, out)
    print(f"== the last allocator A{cfg.rounds}: best responses and welfare")
    measured.append(measure_allocator(cfg.rounds, allocators[-1], cfg, out))
    write_psro_report(measured, games, cfg, out)
    learned = what_rounds_learned(allocators, cfg, out)
    rows = write_psro_report(measured, games, cfg, out, learned)
    print(markdown_table(rows))
    return rows


def psro_rows(measured: Sequence[Mapping[str, Any]], cfg: PsroConfig) -> list[dict[str, Any]]:
    """One row per allocator: its exploitability (max over team seats, CI, seat), the broker's gain, its welfare
    on every tier."""
    rows = []
    for m in measured:
        s = m["summary"]
        row: dict[str, Any] = {"allocator": f"A{m['index']}", "policy": m["allocator"], "scenario": cfg.scenario,
                               "exploitability": s["exploitability"], "exploitability_ci95": s["exploitability_ci95"],
                               "exploiting_seat": s["exploiting_seat"], "from_search": s.get("from_search", ""),
                               "from_learning": s.get("from_learning", ""), "broker_gain": s.get("broker_gain", ""),
                               "broker_gain_ci95": s.get("broker_gain_ci95", "")}
        for tier, w in m["welfare"].items():
            row[f"welfare_{slug_of(tier)}"], row[f"welfare_{slug_of(tier)}_ci95"] = w["welfare"], w["welfare_ci95"]
        row["seeds"] = len(cfg.seeds)
        rows.append(row)
    return rows


def payoff_markdown(k: int, game: Mapping[str, Any]) -> str:
    members = [m["name"] for m in game["members"]]
    table = [{"allocator": name, **{m: f"{g:+.2f} ± {c:.2f}" for m, g, c in zip(members, gains, cis, strict=True)},
              "allocator weight": f"{game['allocator_mixture'][name]:.2f}"}
             for (name, gains, cis) in zip(game["allocators"], game["gain"], game["gain_ci95"], strict=True)]
    table.append({"allocator": "member weight (the next allocator's mixture)",
                  **{m: f"{game['member_mixture'][m]:.2f}" for m in members}, "allocator weight": ""})
    return (f"### Round {k}: payoff matrix (member's gain over its seat's base policy, ± 95% CI; equilibrium gain "
            f"{game['equilibrium_gain']:+.2f})\n\n" + markdown_table(table) + "\n")


def write_psro_report(measured: Sequence[Mapping[str, Any]], games: Sequence[Mapping[str, Any]], cfg: PsroConfig,
                      out: Path, learned: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """``psro.{md,csv,json,png}`` in ``out`` from what is measured so far (``learned``: what round 1's and the
    last round's allocator learned, :func:`what_rounds_learned`)."""
    rows = psro_rows(measured, cfg)
    preamble = ("# PSRO rounds: exploitability and welfare per allocator\n\n"
                f"`A0` = `{cfg.allocator}`; `A<k>` is `A<k-1>` continued against round k's mixture of the scenario's "
                f"own population ({cfg.own_share:.0%}) and the population of best responses, weighted by the "
                f"meta-game's Nash mixture (experiments/studies/psro.py). **exploitability**: the maximum over the "
                f"team seats of the best response's gain over `truthful` on `{cfg.scenario}` (the exploiting seat's "
                f"95% CI); **welfare**: the allocator's return against each tier's default population; held-out "
                f"seeds {cfg.seeds[0]} .. {cfg.seeds[-1]}; payoff matrices on seeds {cfg.payoff_seeds[0]} .. "
                f"{cfg.payoff_seeds[-1]}.\n\n")
    write_table(rows, out, "psro", preamble)
    md = out / "psro.md"
    write_file(md, md.read_text() + "\n" + "\n".join(payoff_markdown(k, g) for k, g in enumerate(games, 1))
               + ("\n" + learned_markdown(learned) if learned else ""))
    write_file(out / "psro.json", json.dumps({"rows": rows, "rounds": [dict(g) for g in games],
                                            **({"learned": dict(learned)} if learned else {})}, indent=1))
    if rows:
        psro_figure(rows, cfg, out / "psro.png")
    return rows


def psro_figure(rows: Sequence[Mapping[str, Any]], cfg: PsroConfig, path: Path) -> Path:
    """Exploitability (left) and welfare per tier (right) of every allocator, with 95% CIs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = np.arange(len(rows))
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))

    def value(row: Mapping[str, Any], key: str) -> float:
        return float(row[key]) if row.get(key, "") != "" else float("nan")

    left.errorbar(x, [value(r, "exploitability") for r in rows], yerr=[value(r, "exploitability_ci95") for r in rows],
                  marker="o", capsize=4)
    left.axhline(0, color="black", linewidth=0.8)
    left.set_title(f"exploitability on {cfg.scenario} (max over team seats)")
    left.set_ylabel("best response's gain over truthful")
    for tier in cfg.tiers:
        key = f"welfare_{slug_of(tier)}"
        right.errorbar(x, [value(r, key) for r in rows], yerr=[value(r, f"{key}_ci95") for r in rows], marker="o",
                       capsize=4, label=slug_of(tier))
    right.set_title("welfare against the default population")
    right.set_ylabel("allocator's return")
    right.legend(fontsize=8)
    for ax in (left, right):
        ax.set_xticks(x, [str(r["allocator"]) for r in rows])
        ax.set_xlabel("allocator (round)")
    fig.tight_layout()
    write_figure(path, fig, dpi=120)
    plt.close(fig)
    return path


__all__ = ["Member", "PsroConfig", "PsroError", "check_folder", "is_psro_folder", "load_psro", "metagame", "population",
           "psro", "psro_from_dict", "psro_rows", "what_rounds_learned", "write_mixture"]
