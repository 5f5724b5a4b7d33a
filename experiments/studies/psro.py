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
from pydantic import Field, TypeAdapter, ValidationError
from typing_extensions import TypedDict  # pydantic reads TypedDicts of typing_extensions on Python 3.11

import commons_arena
from commons_arena.enums import ALLOCATOR, BROKER
from commons_arena.errors import format_validation_error
from commons_arena.files import make_folder, write_file
from commons_arena.inputs import load_json_object
from experiments.evaluation.metagame import zero_sum_nash
from experiments.evaluation.store import Share, StoredNumber
from experiments.evaluation.tables import markdown_table
from experiments.statistics import mean_ci95
from experiments.studies.arms_race import continuation, seat_roster, tournament_series
from experiments.studies.exploit import BROKER_BASE, TEAM_BASE, Cell, run_cell
from experiments.studies.exploitability import (
    WELFARE_DIR,
    allocator_identity,
    exploitability_rows,
    move_aside,
    welfare,
)
from experiments.studies.psro_file import (
    MAX_PSRO_SEATS,
    MAX_ROUNDS,
    PsroConfig,
    PsroError,
    PsroName,
)
from experiments.studies.psro_report import slug_of, write_psro_report
from experiments.training.mixture import mixture_hash, mixture_text
from experiments.training.warm_start import LEARNED_PREFIX

PSRO_FILE = "psro_settings.json"  # the settings a folder was made with (a rerun resumes it)
METAGAME_FILE = "metagame.json"
ALLOCATOR_FILE = "allocator.json"
MIXTURE_FILE = "mixture.toml"
DISCOUNTING_FILE = "discounting.json"  # what round 1's and the last round's allocator learned (item 4)
OWN = "own population"  # the mixture entry of each scenario's own population
@dataclass(frozen=True)
class Member:
    """A frozen best response of the population: its name (``r<round>-<seat>``), seat and policy."""

    name: str
    seat: str
    policy: str


# ------------------------------------------------------------------ the steps' records read back

_Number = StoredNumber  # finite, bounded (experiments/evaluation/store.py)


class _Member(TypedDict):
    name: PsroName
    seat: PsroName
    policy: PsroName


class _Game(TypedDict):
    allocators: Annotated[dict[PsroName, PsroName], Field(max_length=MAX_ROUNDS + 1)]
    members: Annotated[list[_Member], Field(max_length=(MAX_ROUNDS + 1) * MAX_PSRO_SEATS)]
    gain: list[list[_Number]]
    gain_ci95: list[list[_Number]]
    member_mixture: dict[PsroName, Share]
    allocator_mixture: dict[PsroName, Share]
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
        stored = stored_step(path, key, "allocator", TypeAdapter(PsroName))
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


__all__ = ["Member", "PsroConfig", "PsroError", "check_folder", "is_psro_folder", "metagame", "population",
           "psro", "what_rounds_learned", "write_mixture"]
