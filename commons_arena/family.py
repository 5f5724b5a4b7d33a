"""Scenario families: a TOML file of ranges → any number of valid scenarios, drawn by a seeded generator.

A **family** (``scenarios/families/<name>.toml``, validated here like a scenario file: frozen
models, unknown keys refused, every number bounded) states the ranges a cluster may take:
how many teams and with which archetypes, how many GPU tiers and their hardware, the
horizon, the budget, a hard or soft carbon cap and how tight it is, which shocks may strike,
and how jobs arrive. :func:`generate_scenarios` draws scenarios from it; scenario ``i`` of
``(family, seed)`` comes from its own generator (``numpy.random.default_rng([seed, i])``),
so it is the same whatever ``count`` is asked for, and every one passes
:class:`~commons_arena.scenario.ScenarioConfig` validation (jobs fit some tier, deadlines
follow arrivals, shocks target existing teams and tiers).

A **split** (``scenarios/splits/<name>.toml``) is a named list of generated scenarios: the
recipe (family, seed, count) and the content hash of each scenario. :func:`load_split`
regenerates the scenarios and refuses, loudly, if any hash differs (the generator or the
family file drifted), so a frozen split never changes silently. A held-out split's hashes are
:func:`heldout_hashes`; anything that trains calls :func:`refuse_heldout` on what it reads.
A **validation set** is carved out of a training split by :func:`hold_out` (a fixed draw,
:func:`validation_places`): training plays the rest and chooses checkpoints on it.

docs/families.md describes the family file, the generator and the splits.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, Strict, TypeAdapter, model_validator
from typing_extensions import TypedDict  # pydantic reads TypedDicts of typing_extensions on Python 3.11

from commons_arena.enums import ALLOCATOR, BROKER, ShockKind
from commons_arena.files import check_target, make_folder, remove_file, toml_text, toml_value, write_file
from commons_arena.inputs import load_record
from commons_arena.scenario import (
    ARCHETYPES,
    MAX_AMOUNT,
    MAX_FORECAST,
    MAX_MULTIPLIER,
    MAX_QUEUE_SLOTS,
    MAX_TEAMS,
    MAX_TEXT,
    MAX_TICKS,
    MAX_TIERS,
    MAX_WEIGHT,
    Fraction,
    Gpus,
    Multiplier,
    Name,
    NonNegFloat,
    PosFloat,
    PosGpus,
    Priority,
    ScenarioConfig,
    ScenarioError,
    Share,
    Tick,
    Ticks,
    _Frozen,
    _scenario_dirs,
    names_a_file,
    read_toml,
    scenario_from_dict,
    validate_data,
)

MAX_GENERATE = 100_000  # scenarios per generate_scenarios call / `scenarios generate --count`
MAX_SEED = 2**63 - 1  # a generation seed (numpy's SeedSequence takes any non-negative int)
MAX_FIXED_JOBS = 64  # fixed jobs per generated team
TEAM_NAMES = (  # more than MAX_TEAMS, drawn without replacement
    "search", "robotics", "safety", "vision", "speech", "ads",
    "infra", "research", "finance", "health", "maps", "games",
)  # fmt: skip
SHOCK_KINDS = tuple(k.label for k in ShockKind)
JOB_SHOCKS = ("compliance_audit", "customer_escalation", "production_incident")

Archetype = Literal[ARCHETYPES]  # type: ignore[valid-type]


class FamilyError(ScenarioError):
    """A family file, a split file or a split's regenerated content is wrong; the message says which."""


# ------------------------------------------------------------------ the family file


def _ordered(model: _Frozen, keys: Iterable[str]) -> None:
    for key in keys:
        value = getattr(model, key)
        if value is not None and value[0] > value[1]:
            raise ValueError(f"{key} range [{value[0]}, {value[1]}] has lo > hi")


class TierRanges(_Frozen):
    """Ranges of one GPU tier's numbers. Tiers are sorted by memory; speed, op_cost and power
    are drawn per tier and sorted the same way (a bigger GPU is faster, dearer, hungrier)."""

    memory_gb: Annotated[tuple[PosFloat, ...], Field(min_length=1, max_length=64)]  # choices, distinct per scenario
    owned: tuple[PosGpus, PosGpus]
    speed: tuple[PosFloat, PosFloat]
    op_cost: tuple[NonNegFloat, NonNegFloat]
    power_kw: tuple[PosFloat, PosFloat]
    spot_inventory: tuple[Gpus, Gpus]
    spot_unit_cost: tuple[NonNegFloat, NonNegFloat]
    max_price: tuple[PosFloat, PosFloat]
    empty_spot_market: Fraction = 0.0  # probability that no tier has spot inventory

    @model_validator(mode="after")
    def _check(self) -> TierRanges:
        _ordered(self, ("owned", "speed", "op_cost", "power_kw", "spot_inventory", "spot_unit_cost", "max_price"))
        if len(set(self.memory_gb)) != len(self.memory_gb):
            raise ValueError(f"memory_gb choices must be distinct, got {list(self.memory_gb)}")
        names = {_tier_name(m) for m in self.memory_gb}
        if len(names) != len(self.memory_gb):
            raise ValueError("memory_gb choices must differ in whole GB (tiers are named gpu<GB>)")
        return self


CarbonWeight = Annotated[float, Field(ge=0.0, le=MAX_WEIGHT, allow_inf_nan=False)]


class CarbonRanges(_Frozen):
    """The cap is ``tightness`` x the energy of every owned GPU busy every tick at the mean intensity."""

    hard: Fraction = 0.5  # probability of a hard cap (else soft)
    tightness: tuple[PosFloat, PosFloat]
    intensity: tuple[NonNegFloat, NonNegFloat]  # the profile's mean, kg CO2/kWh
    variation: Fraction = 0.2  # each tick's intensity is mean x (1 ± variation)
    forecast_horizon: tuple[Annotated[int, Field(ge=1, le=MAX_FORECAST)], Annotated[int, Field(ge=1, le=MAX_FORECAST)]] = (
        3, 3)
    weight: tuple[CarbonWeight, CarbonWeight] = (1.0, 1.0)  # the allocator's reward weight per kg over a soft cap

    @model_validator(mode="after")
    def _check(self) -> CarbonRanges:
        _ordered(self, ("tightness", "intensity", "forecast_horizon", "weight"))
        return self


class JobRanges(_Frozen):
    """Fixed jobs (known before the episode) of each team. ``min_memory_gb`` is one of the
    scenario's tier memories (or 0 with ``any_memory``) that has room for the job."""

    count: tuple[Annotated[int, Field(ge=0, le=MAX_FIXED_JOBS)], Annotated[int, Field(ge=0, le=MAX_FIXED_JOBS)]]
    gpus: tuple[PosGpus, PosGpus]
    work: tuple[PosFloat, PosFloat]
    slack: tuple[Tick, Tick]  # deadline = arrival + slack (cut at the last tick)
    value: tuple[NonNegFloat, NonNegFloat]
    value_noise: Fraction = 0.0  # noise up to this share of the value
    priority: tuple[Priority, Priority] = (1, 3)
    any_memory: Fraction = 0.3  # probability a job needs no particular memory
    depends: Fraction = 0.0  # probability a job depends on the team's previous one

    @model_validator(mode="after")
    def _check(self) -> JobRanges:
        _ordered(self, ("count", "gpus", "work", "slack", "value", "priority"))
        return self


class GeneratorRanges(_Frozen):
    """A team's seeded job stream (a scenario's ``[teams.generator]``), present with probability ``present``."""

    present: Fraction = 1.0
    rate: tuple[Fraction, Fraction]
    gpus: tuple[PosGpus, PosGpus]  # the stream's gpus range is drawn inside this one, cut to fit its memory
    work: tuple[PosFloat, PosFloat]
    slack: tuple[Tick, Tick]
    value: tuple[NonNegFloat, NonNegFloat]
    priority: tuple[Priority, Priority] = (1, 2)
    last_share: tuple[Fraction, Fraction] = (0.6, 0.9)  # last_tick as a share of the horizon

    @model_validator(mode="after")
    def _check(self) -> GeneratorRanges:
        _ordered(self, ("rate", "gpus", "work", "slack", "value", "priority", "last_share"))
        return self


class UrgentRanges(_Frozen):
    gpus: tuple[PosGpus, PosGpus]
    work: tuple[PosFloat, PosFloat]
    slack: tuple[Tick, Tick]
    value: tuple[NonNegFloat, NonNegFloat]
    priority: tuple[Priority, Priority] = (3, 3)

    @model_validator(mode="after")
    def _check(self) -> UrgentRanges:
        _ordered(self, ("gpus", "work", "slack", "value", "priority"))
        return self


class ShockRanges(_Frozen):
    """One shock the family may include (with probability ``include``), random (``rate``) or,
    with probability ``scheduled``, at one drawn tick. Its target team and tier are drawn."""

    kind: Literal[SHOCK_KINDS]  # type: ignore[valid-type]
    include: Fraction = 0.5
    scheduled: Fraction = 0.0
    rate: tuple[Fraction, Fraction] = (0.05, 0.1)
    duration: tuple[Ticks, Ticks] = (1, 2)
    gpus_offline: tuple[Gpus, Gpus] = (1, 1)  # production_incident; cut at the tier's owned count
    price_multiplier: tuple[Multiplier, Multiplier] = (1.0, 1.0)  # market_crisis
    inventory_factor: tuple[Fraction, Fraction] = (1.0, 1.0)  # market_crisis
    intensity_multiplier: tuple[Multiplier, Multiplier] = (1.0, 1.0)  # grid_spike
    job: UrgentRanges | None = None  # audit, escalation, incident (required for the first two)

    @model_validator(mode="after")
    def _check(self) -> ShockRanges:
        _ordered(self, ("rate", "duration", "gpus_offline", "price_multiplier", "inventory_factor",
                        "intensity_multiplier"))
        if self.kind in ("compliance_audit", "customer_escalation") and self.job is None:
            raise ValueError(f"a {self.kind} shock needs 'job' (the job it injects)")
        if self.kind not in JOB_SHOCKS and self.job is not None:
            raise ValueError(f"a {self.kind} shock injects no job; remove 'job'")
        return self


class FamilyConfig(_Frozen):
    """A scenario family: the ranges every generated scenario is drawn from (see docs/families.md)."""

    name: Name
    description: str = Field(min_length=1, max_length=MAX_TEXT)
    teams: tuple[Annotated[int, Field(ge=2, le=MAX_TEAMS)], Annotated[int, Field(ge=2, le=MAX_TEAMS)]]
    archetypes: Annotated[tuple[Archetype, ...], Field(min_length=1, max_length=len(ARCHETYPES))] = ARCHETYPES
    board_pressure: tuple[Share, Share] = (1.0, 1.0)
    tiers: tuple[Annotated[int, Field(ge=1, le=MAX_TIERS)], Annotated[int, Field(ge=1, le=MAX_TIERS)]]
    tier: TierRanges
    max_ticks: tuple[Annotated[int, Field(ge=2, le=MAX_TICKS)], Annotated[int, Field(ge=2, le=MAX_TICKS)]]
    budget: tuple[NonNegFloat, NonNegFloat]
    no_budget: Fraction = 0.0  # probability the budget is 0
    reveal_after: tuple[Ticks, Ticks] = (2, 2)
    queue_slots: tuple[Annotated[int, Field(ge=1, le=MAX_QUEUE_SLOTS)], Annotated[int, Field(ge=1, le=MAX_QUEUE_SLOTS)]] = (
        6, 6)
    carbon: CarbonRanges
    jobs: JobRanges
    generator: GeneratorRanges | None = None
    no_shocks: Fraction = 0.0  # probability the scenario has no shock at all
    shocks: Annotated[tuple[ShockRanges, ...], Field(max_length=32)] = ()
    allocator: Name = "proportional"  # the generated scenarios' default population
    broker: Name = "demand_priced"

    @model_validator(mode="after")
    def _check(self) -> FamilyConfig:
        _ordered(self, ("teams", "board_pressure", "tiers", "max_ticks", "budget", "reveal_after", "queue_slots"))
        problems = []
        if len(set(self.archetypes)) != len(self.archetypes):
            problems.append(f"archetypes must be distinct, got {list(self.archetypes)}")
        if len(self.tier.memory_gb) < self.tiers[1]:
            problems.append(f"tier.memory_gb has {len(self.tier.memory_gb)} choices but up to {self.tiers[1]} "
                            "tiers need distinct memories")
        for attr in ("price_multiplier", "intensity_multiplier"):
            log_worst = sum(
                (1 if s.scheduled >= 1.0 else s.duration[1]) * math.log(getattr(s, attr)[1]) for s in self.shocks)
            if log_worst > math.log(MAX_MULTIPLIER) + 1e-9:
                problems.append(f"shocks: at their largest, overlapping {attr}s can reach x{math.exp(log_worst):.4g}; "
                                f"keep the worst case at most x{MAX_MULTIPLIER:g} (effects multiply)")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @functools.cached_property
    def content_hash(self) -> str:
        """sha256 (first 12 hex) of the validated content, like a scenario's; a split records it."""
        canonical = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:12]


# ------------------------------------------------------------------ loading


def _data_dirs(kind: str) -> list[Path]:
    return [d / kind for d in _scenario_dirs() if (d / kind).is_dir()]


def list_families() -> tuple[str, ...]:
    """Names of the shipped families (``scenarios/families/*.toml``), sorted."""
    return tuple(sorted({p.stem for d in _data_dirs("families") for p in d.glob("*.toml")}))


def family_from_dict(data: Mapping[str, Any], source: str = "<dict>") -> FamilyConfig:
    return validate_data(FamilyConfig, data, "family", source, FamilyError)


def load_family(family: str | Path | FamilyConfig) -> FamilyConfig:
    """A family by name (``"broad"``: ``scenarios/families/broad.toml``), by path, or passed through."""
    if isinstance(family, FamilyConfig):
        return family
    text = str(family)
    path = Path(text)
    if isinstance(family, Path) or names_a_file(text):
        if not path.is_file():
            raise FamilyError(f"family file not found: {path}")
    else:
        found = [d / f"{text}.toml" for d in _data_dirs("families") if (d / f"{text}.toml").is_file()]
        if not found:
            raise FamilyError(f"no family named {text!r}; known families: {', '.join(list_families()) or 'none'}")
        path = found[0]
    return family_from_dict(read_toml(path, "family", FamilyError), source=str(path))


# ------------------------------------------------------------------ the generator


def _tier_name(memory_gb: float) -> str:
    return f"gpu{round(memory_gb)}"


class _Draw:
    """The draws the generator makes, all from ``Generator.random()`` (53 bits of one PCG64 output:
    a stream numpy keeps stable, unlike the algorithms behind ``integers`` or ``choice``, which a
    numpy release may change), rounded so the TOML reads well and round-trips exactly."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng

    def unit(self) -> float:
        return float(self.rng.random())

    def integer(self, bounds: tuple[int, int]) -> int:
        lo, hi = bounds
        return min(hi, lo + math.floor(self.unit() * (hi - lo + 1)))

    def real(self, bounds: tuple[float, float], digits: int = 2) -> float:
        lo, hi = bounds
        return min(hi, max(lo, round(lo + (hi - lo) * self.unit(), digits)))  # rounding stays in range

    def chance(self, p: float) -> bool:
        return self.unit() < p

    def choice(self, options: tuple[Any, ...] | list[Any]) -> Any:
        return options[self.integer((0, len(options) - 1))]

    def sample(self, n: int, k: int) -> list[int]:
        """``k`` distinct indices of ``range(n)``, sorted (a partial Fisher-Yates shuffle)."""
        pool = list(range(n))
        for i in range(k):
            j = self.integer((i, n - 1))
            pool[i], pool[j] = pool[j], pool[i]
        return sorted(pool[:k])


def _tiers(fam: FamilyConfig, d: _Draw, count: int) -> list[dict[str, Any]]:
    r = fam.tier
    picks = d.sample(len(r.memory_gb), count)
    memories = sorted(float(r.memory_gb[i]) for i in picks)
    speed, op_cost, power = (sorted(d.real(b) for _ in range(count)) for b in (r.speed, r.op_cost, r.power_kw))
    empty = d.chance(r.empty_spot_market)
    tiers = []
    for k, memory in enumerate(memories):
        spot_cost = d.real(r.spot_unit_cost)
        tiers.append({
            "name": _tier_name(memory),
            "owned": d.integer(r.owned),
            "memory_gb": memory,
            "speed": speed[k],
            "op_cost": op_cost[k],
            "power_kw": power[k],
            "spot_inventory": 0 if empty else d.integer(r.spot_inventory),
            "spot_unit_cost": spot_cost,
            "max_price": min(MAX_AMOUNT, max(d.real(r.max_price), round(spot_cost + 1.0, 2))),
        })
    return tiers


def _room(tiers: list[dict[str, Any]], memory: float) -> int:
    """The most GPUs one tier with at least ``memory`` GB can ever give a job (owned + spot)."""
    return max((t["owned"] + t["spot_inventory"] for t in tiers if t["memory_gb"] >= memory), default=0)


def _job_shape(d: _Draw, tiers: list[dict[str, Any]], gpus: tuple[int, int], any_memory: float) -> tuple[int, float]:
    """GPUs and min_memory_gb for one job: a tier's memory (or 0) with room for the GPUs drawn."""
    memory = 0.0 if d.chance(any_memory) else float(d.choice(tiers)["memory_gb"])
    wanted = d.integer(gpus)
    return max(1, min(wanted, _room(tiers, memory))), memory


def _ticks_needed(tiers: list[dict[str, Any]], gpus: int, memory: float, work: float) -> int:
    """Ticks a job needs on the fastest tier that fits it (memory, and room for its GPUs)."""
    speed = max(t["speed"] for t in tiers if t["memory_gb"] >= memory and t["owned"] + t["spot_inventory"] >= gpus)
    return max(1, math.ceil(work / (gpus * speed) - 1e-9))


def _fixed_jobs(fam: FamilyConfig, d: _Draw, tiers: list[dict[str, Any]], team: str, horizon: int) -> list[dict[str, Any]]:
    r = fam.jobs
    jobs: list[dict[str, Any]] = []
    for k in range(d.integer(r.count)):
        gpus, memory = _job_shape(d, tiers, r.gpus, r.any_memory)
        work = d.real(r.work)
        # feasible on its own: arrival and deadline leave the ticks the fastest fitting tier needs
        needed = min(_ticks_needed(tiers, gpus, memory, work), horizon)
        arrival = d.integer((0, horizon - needed))
        value = d.real(r.value)
        job: dict[str, Any] = {
            "id": f"{team}_job{k}",
            "gpus": gpus,
            "min_memory_gb": memory,
            "work": work,
            "arrival": arrival,
            "deadline": min(arrival + max(d.integer(r.slack), needed - 1), horizon - 1),
            "value": value,
            "value_noise": round(min(value, value * d.real((0.0, r.value_noise), 3)), 2),
            "priority": d.integer(r.priority),
            "depends_on": [],
        }
        if jobs and d.chance(r.depends):
            job["depends_on"] = [jobs[-1]["id"]]
        jobs.append(job)
    return jobs


def _generator(fam: FamilyConfig, d: _Draw, tiers: list[dict[str, Any]], horizon: int) -> dict[str, Any] | None:
    r = fam.generator
    if r is None or not d.chance(r.present):
        return None
    memories = sorted({0.0, *(float(d.choice(tiers)["memory_gb"]) for _ in range(2))})
    room = min(_room(tiers, m) for m in memories)
    lo, hi = sorted((d.integer(r.gpus), d.integer(r.gpus)))
    hi = max(1, min(hi, room))
    lo = min(lo, hi)
    last = min(horizon - 1, max(0, int(d.real(r.last_share, 3) * horizon)))
    work = sorted((d.real(r.work), d.real(r.work)))
    slack = sorted((d.integer(r.slack), d.integer(r.slack)))
    value = sorted((d.real(r.value), d.real(r.value)))
    priority = sorted((d.integer(r.priority), d.integer(r.priority)))
    return {
        "rate": d.real(r.rate),
        "first_tick": 0,
        "last_tick": last,
        "gpus": [lo, hi],
        "min_memory_gb": memories,
        "work": work,
        "slack": slack,
        "value": value,
        "priority": priority,
    }


def _shocks(fam: FamilyConfig, d: _Draw, tiers: list[dict[str, Any]], teams: list[str],
            horizon: int) -> list[dict[str, Any]]:
    if d.chance(fam.no_shocks):
        return []
    shocks = []
    for r in fam.shocks:
        if not d.chance(r.include):
            continue
        spec: dict[str, Any] = {"kind": r.kind, "duration": d.integer(r.duration)}
        if d.chance(r.scheduled):
            spec["tick"] = d.integer((0, horizon - 1))
        else:
            spec["rate"] = d.real(r.rate, 3)
        if r.kind == "production_incident":
            tier = d.choice(tiers)
            spec["tier"] = tier["name"]
            spec["gpus_offline"] = min(d.integer(r.gpus_offline), tier["owned"])
        if r.kind == "market_crisis":
            spec["price_multiplier"] = d.real(r.price_multiplier)
            spec["inventory_factor"] = d.real(r.inventory_factor)
        if r.kind == "grid_spike":
            spec["intensity_multiplier"] = d.real(r.intensity_multiplier)
        if r.job is not None:
            spec["team"] = d.choice(teams)
            gpus, memory = _job_shape(d, tiers, r.job.gpus, 0.5)
            work = d.real(r.job.work)
            spec["job"] = {
                "gpus": gpus,
                "min_memory_gb": memory,
                "work": work,
                "slack": max(d.integer(r.job.slack), min(_ticks_needed(tiers, gpus, memory, work), horizon) - 1),
                "value": d.real(r.job.value),
                "priority": d.integer(r.job.priority),
            }
        shocks.append(spec)
    return shocks


def generate_one(family: FamilyConfig, seed: int, index: int) -> ScenarioConfig:
    """Scenario ``index`` of ``(family, seed)``: a function of the three alone (not of how many are asked for)."""
    fam = family
    d = _Draw(np.random.default_rng([seed, index]))
    horizon = d.integer(fam.max_ticks)
    n_teams, n_tiers = d.integer(fam.teams), d.integer(fam.tiers)
    tiers = _tiers(fam, d, n_tiers)
    names = [TEAM_NAMES[i] for i in d.sample(len(TEAM_NAMES), n_teams)]
    teams = []
    for name in names:
        team: dict[str, Any] = {
            "name": name,
            "archetype": d.choice(fam.archetypes),
            "board_pressure": d.real(fam.board_pressure),
            "jobs": _fixed_jobs(fam, d, tiers, name, horizon),
        }
        generator = _generator(fam, d, tiers, horizon)
        if generator is not None:
            team["generator"] = generator
        teams.append(team)
    c = fam.carbon
    mean = d.real(c.intensity, 3)
    intensity = [min(MAX_AMOUNT, round(mean * (1.0 + d.real((-c.variation, c.variation), 3)), 3))
                 for _ in range(horizon)]
    full_energy = sum(t["owned"] * t["power_kw"] for t in tiers) * max(mean, 1e-3) * horizon
    hard = d.chance(c.hard)
    carbon = {
        "cap_kg": min(MAX_AMOUNT, max(0.1, round(d.real(c.tightness, 3) * full_energy, 2))),
        "mode": "hard" if hard else "soft",
        "intensity": intensity,
        "forecast_horizon": d.integer(c.forecast_horizon),
    }
    budget = 0.0 if d.chance(fam.no_budget) else d.real(fam.budget, 1)
    data: dict[str, Any] = {
        "name": scenario_name(fam.name, seed, index),
        "description": (f"Generated from family {fam.name!r} (hash {fam.content_hash}), seed {seed}, index {index}: "
                        f"{n_teams} teams, {n_tiers} tier{'s' if n_tiers > 1 else ''}, {horizon} ticks, "
                        f"{carbon['mode']} carbon cap, budget {budget:g}."),
        "max_ticks": horizon,
        "budget": budget,
        "reveal_after": d.integer(fam.reveal_after),
        "queue_slots": d.integer(fam.queue_slots),
        "gpu_tiers": tiers,
        "teams": teams,
        "carbon": carbon,
        "shocks": _shocks(fam, d, tiers, names, horizon),
        "rewards": {"allocator": {"carbon": d.real(c.weight)}},
        "population": {ALLOCATOR: fam.allocator, **{t["name"]: t["archetype"] for t in teams}, BROKER: fam.broker},
    }
    return scenario_from_dict(data, source=f"{data['name']} (generated)")


def scenario_name(family: str, seed: int, index: int) -> str:
    name = f"{family}_{seed}_{index}"  # scenario names are [a-z][a-z0-9_]*, at most 32 characters
    if len(name) > 32:
        raise FamilyError(f"the scenario name {name!r} is longer than 32 characters; use a shorter family name or seed")
    return name


def _check_count_seed(count: int, seed: int) -> None:
    if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_GENERATE:
        raise FamilyError(f"count must be an integer in [0, {MAX_GENERATE}], got {count!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise FamilyError(f"seed must be an integer in [0, {MAX_SEED}], got {seed!r}")


def generate_scenarios(family: str | Path | FamilyConfig, count: int, seed: int) -> tuple[ScenarioConfig, ...]:
    """``count`` valid scenarios of ``family``, in memory; scenario ``i`` is named ``<family>_<seed>_<i>``
    and does not depend on ``count``."""
    fam = load_family(family)
    _check_count_seed(count, seed)
    scenario_name(fam.name, seed, max(count - 1, 0))
    return tuple(generate_one(fam, seed, i) for i in range(count))


# ------------------------------------------------------------------ TOML out


def scenario_to_toml(config: ScenarioConfig) -> str:
    """A scenario as a TOML file's text: ``scenario_from_dict(tomllib.loads(text))`` has the same
    content hash. Every top-level number is written; a job's or shock's defaults are left out."""
    data = config.plain_dump(exclude_none=True)
    for ti, team in enumerate(config.teams):
        data["teams"][ti]["jobs"] = [job.model_dump(mode="json", exclude_defaults=True) for job in team.jobs]
    data["shocks"] = [shock.model_dump(mode="json", exclude_defaults=True) for shock in config.shocks]
    text = toml_text(data, header=[f"{config.name}: content hash {config.content_hash}"])
    back = scenario_from_dict(tomllib.loads(text), source=f"{config.name} (written)")
    if back.content_hash != config.content_hash:  # a bug in this writer, never silent
        raise AssertionError(f"{config.name}: TOML round trip changed the content hash")
    return text


_WRITTEN = re.compile(r"[0-9]{5}_[0-9a-f]{12}\.toml")  # the names write_scenarios gives


def scenario_filename(index: int, config: ScenarioConfig) -> str:
    return f"{index:05d}_{config.content_hash}.toml"


class _IndexRow(TypedDict):
    index: Annotated[int, Strict(), Field(ge=0, le=MAX_GENERATE)]
    name: str
    hash: str
    file: Annotated[str, Field(pattern=_WRITTEN.pattern)]


_INDEX = TypeAdapter(Annotated[list[_IndexRow], Field(max_length=MAX_GENERATE)])


def listed_scenarios(out: Path) -> list[Path]:
    """What an earlier :func:`write_scenarios` wrote in ``out``, by its ``index.json`` (read by the one reader):
    the files it lists that are there, and the index itself; nothing without an index."""
    index = out / "index.json"
    if not index.is_file() and not index.is_symlink():
        return []
    rows = load_record(index, _INDEX, "scenario index", own=True)
    return [index, *(out / row["file"] for row in rows if os.path.lexists(out / row["file"]))]


def write_scenarios(configs: Iterable[ScenarioConfig], out: Path, replace: bool = False) -> list[Path]:
    """Write each scenario as ``<index>_<hash>.toml`` in ``out`` (created if missing) and an
    ``index.json`` listing index, name, hash and file; return the scenario paths. The caller
    checks overwriting; ``replace`` first removes what an earlier call wrote there (the files its
    index.json lists, and index.json), nothing else: a user's file merely named like one stays."""
    configs = tuple(configs)
    texts = [scenario_to_toml(c) for c in configs]  # every text before any file
    make_folder(out)
    if replace:
        olds = listed_scenarios(out)
        for old in olds:  # all checked before any is removed: a link is removed as a link, an input never
            if not old.is_symlink():
                check_target(old)
        for old in olds:
            remove_file(old)
    written, index = [], []
    for i, config in enumerate(configs):
        path = write_file(out / scenario_filename(i, config), texts[i])
        written.append(path)
        index.append({"index": i, "name": config.name, "hash": config.content_hash, "file": path.name})
    write_file(out / "index.json", json.dumps(index, indent=1) + "\n")
    return written


# ------------------------------------------------------------------ splits


class SplitFile(_Frozen):
    """``scenarios/splits/<name>.toml``: a recipe and the hashes it must give."""

    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[a-z][a-z0-9_-]*$")]
    family: Name
    family_hash: Annotated[str, Field(pattern=r"^[0-9a-f]{12}$")]
    seed: Annotated[int, Field(ge=0, le=MAX_SEED)]
    heldout: bool
    hashes: Annotated[tuple[Annotated[str, Field(pattern=r"^[0-9a-f]{12}$")], ...], Field(min_length=1,
                                                                                         max_length=MAX_GENERATE)]
    game_hashes: Annotated[tuple[Annotated[str, Field(pattern=r"^[0-9a-f]{12}$")], ...], Field(min_length=1,
                                                                                              max_length=MAX_GENERATE)]
    """each scenario's ``game_hash`` (name and description left out): what the held-out refusal compares"""

    @model_validator(mode="after")
    def _one_game_hash_per_scenario(self) -> SplitFile:
        if len(self.game_hashes) != len(self.hashes):
            raise ValueError(f"game_hashes: one per scenario ({len(self.hashes)}), got {len(self.game_hashes)}")
        return self


def list_splits() -> tuple[str, ...]:
    """Names of the shipped splits (``scenarios/splits/*.toml``), sorted."""
    return tuple(sorted({p.stem for d in _data_dirs("splits") for p in d.glob("*.toml")}))


@functools.cache
def split_file(name: str) -> SplitFile:
    found = [d / f"{name}.toml" for d in _data_dirs("splits") if (d / f"{name}.toml").is_file()]
    if not found:
        raise FamilyError(f"no split named {name!r}; known splits: {', '.join(list_splits()) or 'none'}")
    split = validate_data(SplitFile, read_toml(found[0], "split", FamilyError), "split", str(found[0]), FamilyError)
    if split.name != name:
        raise FamilyError(f"invalid split {found[0]}: it names itself {split.name!r}")
    return split


@functools.cache
def load_split(name: str) -> tuple[ScenarioConfig, ...]:
    """The scenarios of split ``name``, regenerated from its recipe and checked hash by hash:
    if the family file or the generator changed, this raises instead of returning other scenarios."""
    return regenerate_split(split_file(name))


def regenerate_split(split: SplitFile) -> tuple[ScenarioConfig, ...]:
    """``split``'s scenarios from its recipe, each checked against the hash the split lists."""
    name = split.name
    family = load_family(split.family)
    if family.content_hash != split.family_hash:
        raise FamilyError(f"split {name!r} was made from family {split.family!r} with hash {split.family_hash}, "
                          f"but that family file now hashes to {family.content_hash}: the family changed; "
                          "restore it (a frozen split never changes) or make a new split")
    configs = generate_scenarios(family, len(split.hashes), split.seed)
    for i, (config, expected, game) in enumerate(zip(configs, split.hashes, split.game_hashes, strict=True)):
        if config.content_hash != expected or config.game_hash != game:
            raise FamilyError(f"split {name!r}: scenario {i} regenerates with hashes {config.content_hash} / game "
                              f"{config.game_hash}, the split lists {expected} / {game}: the generator drifted; restore "
                              "it (a frozen split never changes) or make a new split")
    return configs


def heldout_hashes() -> frozenset[str]:
    """The content hashes of every held-out split (read from the split files, not regenerated)."""
    return frozenset(h for name in list_splits() if split_file(name).heldout for h in split_file(name).hashes)


@functools.cache
def heldout_game_hashes() -> frozenset[str]:
    """The canonical game hashes (``ScenarioConfig.canonical_game_hash``: no name or description, labels by place,
    numbers at the digits that change an episode) of every held-out split's scenarios, regenerated (and so
    checked against the split file's pinned hashes) once per process."""
    return frozenset(c.canonical_game_hash for name in list_splits() if split_file(name).heldout
                     for c in load_split(name))


def refuse_heldout(configs: Iterable[ScenarioConfig], what: str) -> None:
    """Raise if any of ``configs`` is a held-out scenario's game: ``what`` (e.g. "training") must not read them.
    Compared by game content in a canonical form (``canonical_game_hash``), so a renamed, re-described or
    relabelled copy, or one nudged below the digits that change an episode, is refused too."""
    held = heldout_game_hashes()
    bad = [c for c in configs if c.canonical_game_hash in held]
    if bad:
        names = ", ".join(f"{c.name} (game {c.canonical_game_hash})" for c in bad[:3]) + (" ..." if len(bad) > 3 else "")
        raise FamilyError(f"{what} must not read held-out scenarios (compared by game content, whatever the name), "
                          f"got {len(bad)}: {names}")


# A validation set is carved out of a training split (never a held-out one) by this stream alone, not by a run's
# seed: every run that holds out K scenarios of a split holds out the same K, so their scores compare.
VALIDATION_STREAM = 0x7A11D


def validation_places(size: int, count: int) -> tuple[int, ...]:
    """The places (0-based, sorted) of the ``count`` scenarios a validation set takes out of a split of ``size``:
    the first ``count`` of one fixed permutation of ``range(size)`` (:data:`VALIDATION_STREAM`). Nested, so a
    larger set keeps a smaller one's scenarios; at least one scenario is left to train on."""
    if isinstance(count, bool) or not isinstance(count, int) or not 0 < count < size:
        raise FamilyError(f"a validation set takes 1 to {size - 1} of the split's {size} scenarios "
                          f"(at least one is left to train on), got {count!r}")
    order = np.random.default_rng(VALIDATION_STREAM).permutation(size)
    return tuple(sorted(int(i) for i in order[:count]))


def hold_out(configs: Sequence[ScenarioConfig], count: int) -> tuple[tuple[ScenarioConfig, ...], tuple[ScenarioConfig, ...]]:
    """``configs`` (a training split's scenarios, in order) parted into (what training plays, the validation set of
    ``count`` scenarios, :func:`validation_places`); the two share no game (``canonical_game_hash``)."""
    places = set(validation_places(len(configs), count))
    train = tuple(c for i, c in enumerate(configs) if i not in places)
    validation = tuple(configs[i] for i in sorted(places))
    shared = {c.canonical_game_hash for c in train} & {c.canonical_game_hash for c in validation}
    if shared:  # a split never repeats a scenario (split_to_toml), but a copy must not slip into both
        raise FamilyError(f"the validation set and the training scenarios share {len(shared)} game(s)")
    return train, validation


def split_to_toml(name: str, family: FamilyConfig, seed: int, count: int, heldout: bool) -> str:
    """A split file's text for ``count`` scenarios of ``family`` from ``seed`` (used once, to make a split)."""
    configs = generate_scenarios(family, count, seed)
    hashes = [c.content_hash for c in configs]
    if len(set(hashes)) != len(hashes):
        raise FamilyError(f"split {name!r}: the generator repeated a scenario; choose another seed")
    lines = [
        f"# Split {name!r}: {count} scenarios of family {family.name!r}, regenerated and checked on load.",
        "# Frozen: never edit these hashes; make a new split instead." if heldout else "",
        f"name = {toml_value(name)}",
        f"family = {toml_value(family.name)}",
        f"family_hash = {toml_value(family.content_hash)}",
        f"seed = {seed}",
        f"heldout = {'true' if heldout else 'false'}",
        "hashes = [",
        *(f'  "{h}",' for h in hashes),
        "]",
        "# the same scenarios' game hashes (name, description, difficulty and population left out): the held-out refusal",
        "game_hashes = [",
        *(f'  "{c.game_hash}",' for c in configs),
        "]",
    ]
    return "\n".join(line for line in lines if line) + "\n"


__all__ = [
    "MAX_GENERATE",
    "FamilyConfig",
    "FamilyError",
    "generate_scenarios",
    "heldout_game_hashes",
    "heldout_hashes",
    "hold_out",
    "list_families",
    "list_splits",
    "load_family",
    "load_split",
    "refuse_heldout",
    "scenario_to_toml",
    "validation_places",
    "write_scenarios",
]
