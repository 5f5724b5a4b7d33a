"""Scenario files: TOML on disk → one frozen, validated :class:`ScenarioConfig`.

This module is the only place where untyped data is checked. Every model forbids unknown
keys and uses strict types (``"3"`` is not an int), and cross-field rules (deadline before
arrival, unknown tier, dependency cycles, a job no GPU can ever run) are checked here so
the environment can trust its config. Problems are reported together, as one
:class:`ScenarioError` naming the file, the key and what is wrong.

Validation uses pydantic (v2): it gives precise key paths for nested errors and frozen,
typed models without hand-written checking code.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import tomllib
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from commons_arena.enums import ALLOCATOR, BROKER, DEFAULT_SHOCK_TEAM, DIFFICULTIES, CarbonMode, ShockKind
from commons_arena.errors import format_validation_error
from commons_arena.inputs import InputError, loads_toml, read_text

# Bounds. Every number is finite, and every size is capped so that a valid file cannot
# exhaust memory (observation and queue sizes grow with these), overflow an int64 action
# space or turn a reward into inf. They are far above any shipped scenario; docs/environment.md lists them.
MAX_TICKS = 1000  # episode length; also bounds every tick-valued field
MAX_GPUS = 100_000  # per tier: owned, spot inventory; a job's GPUs; GPUs knocked offline
MAX_AMOUNT = 1e9  # money (budget, values, costs, prices), work units, memory, speed, power, carbon
MAX_MULTIPLIER = 1000.0  # shock multipliers, board pressure, credibility tolerances
MAX_WEIGHT = 1e4  # |reward weight|
MAX_QUEUE_SLOTS = 64  # jobs shown per team observation
MAX_FORECAST = 64  # carbon-intensity ticks the allocator sees ahead
MAX_JOBS = 1000  # listed jobs per team
MAX_SHOCKS = 256
MAX_LIST = 1000  # intensity profile length, choices, dependencies
MAX_PRIORITY = 1000
MAX_TEXT = 10_000  # description characters
MAX_TIERS = 6
GAME_DIGITS = 6  # significant digits of a number the held-out refusal compares (canonical_game_hash)
# No episode return of a valid scenario reaches this: ticks x |weight| x a tick's largest money term (prices of
# MAX_AMOUNT x MAX_MULTIPLIER on MAX_GPUS of each tier) x a dozen terms is about 6e25. Stored returns, welfare
# and gains above it are not numbers this program wrote.
MAX_RETURN = 1e30
MAX_TEAMS = 8
MAX_FILE_BYTES = 4 * 2**20

NonNegFloat = Annotated[float, Field(ge=0.0, le=MAX_AMOUNT, allow_inf_nan=False)]
PosFloat = Annotated[float, Field(gt=0.0, le=MAX_AMOUNT, allow_inf_nan=False)]
Multiplier = Annotated[float, Field(ge=1.0, le=MAX_MULTIPLIER, allow_inf_nan=False)]
Fraction = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)]
Share = Annotated[float, Field(ge=0.0, le=MAX_MULTIPLIER, allow_inf_nan=False)]
Weight = Annotated[float, Field(ge=-MAX_WEIGHT, le=MAX_WEIGHT, allow_inf_nan=False)]
Tick = Annotated[int, Field(ge=0, le=MAX_TICKS)]
Ticks = Annotated[int, Field(ge=1, le=MAX_TICKS)]
Gpus = Annotated[int, Field(ge=0, le=MAX_GPUS)]
PosGpus = Annotated[int, Field(ge=1, le=MAX_GPUS)]
Priority = Annotated[int, Field(ge=0, le=MAX_PRIORITY)]
Name = Annotated[str, Field(min_length=1, max_length=32, pattern=r"^[a-z][a-z0-9_]*$")]

ARCHETYPES = ("safety_first", "growth", "reliability", "truthful", "greedy_bluffer")


class ScenarioError(ValueError):
    """A scenario file or dict is malformed; the message says where and what to fix."""


# Checks of the ``[population]`` table that need the policy registry, which lives above this
# package (``policies`` imports ``commons_arena``, never the reverse): ``policies.registry``
# appends one on import. Each returns a list of problems ("population.<agent>: ...").
POPULATION_CHECKS: list[Callable[[ScenarioConfig], list[str]]] = []


class _Frozen(BaseModel):
    # each field's docstring is its meaning in the JSON schema: docs/scenario_reference.md is generated from it
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False,
                              use_attribute_docstrings=True)


M = TypeVar("M", bound=BaseModel)


class GpuTierConfig(_Frozen):
    """One GPU tier: owned capacity, hardware, and the broker's spot inventory of it."""

    name: Name
    """the tier's name (lower case, digits, underscores), used in actions and observations"""
    owned: Gpus
    """GPUs of this tier the organisation owns (online unless an incident takes some offline)"""
    memory_gb: PosFloat
    """memory per GPU; a job runs only on a tier whose memory fits its min_memory_gb"""
    speed: PosFloat
    """work units one GPU does per tick"""
    op_cost: NonNegFloat
    """operating cost the allocator pays per granted GPU-tick, used or not"""
    power_kw: NonNegFloat
    """power draw of one busy GPU (kW); times the grid intensity, kg CO2 per tick"""
    spot_inventory: Gpus = 0
    """GPUs of this tier the broker can sell per tick (0: no spot market for the tier)"""
    spot_unit_cost: NonNegFloat = 0.0
    """the broker's cost per GPU-tick it sells"""
    max_price: PosFloat = 10.0
    """top of the broker's price grid for this tier (its price levels run from 0 to this)"""


class JobSpec(_Frozen):
    """A job known before the episode starts (part of a team's hidden truth)."""

    id: Name
    """the job's name, unique within its team (depends_on refers to it)"""
    gpus: PosGpus
    """GPUs it needs at once, all on one tier"""
    min_memory_gb: NonNegFloat = 0.0
    """memory per GPU it needs: it runs only on tiers with at least this much"""
    work: PosFloat
    """work units; progress per tick = gpus x tier speed"""
    arrival: Tick
    """first tick it may run"""
    deadline: Tick
    """last tick on which it may complete (not before arrival)"""
    value: NonNegFloat
    """paid to the team (and counted for the allocator) on completion"""
    value_noise: NonNegFloat = 0.0
    """value is drawn uniformly from value +- noise at reset (at most value)"""
    priority: Priority = 1
    """higher runs first among a team's jobs with the same deadline"""
    depends_on: Annotated[tuple[Name, ...], Field(max_length=MAX_LIST)] = ()
    """ids of this team's jobs that must complete before this one may run (no cycles)"""

    @model_validator(mode="after")
    def _deadline_after_arrival(self) -> JobSpec:
        if self.deadline < self.arrival:
            raise ValueError(f"deadline {self.deadline} is before arrival {self.arrival}")
        if self.value_noise > self.value:
            raise ValueError(f"value_noise {self.value_noise} exceeds value {self.value}")
        return self


class JobGenerator(_Frozen):
    """A seeded stream of jobs: each tick in [first_tick, last_tick] a job arrives with
    probability ``rate``; its fields are drawn uniformly from the given [lo, hi] ranges."""

    rate: Fraction
    """probability that a job arrives on each tick of the window"""
    first_tick: Tick = 0
    """first tick a generated job may arrive"""
    last_tick: Tick
    """last tick a generated job may arrive (before max_ticks)"""
    gpus: tuple[PosGpus, PosGpus]
    """[lo, hi] GPUs per job"""
    min_memory_gb: Annotated[tuple[NonNegFloat, ...], Field(max_length=MAX_LIST)] = (0.0,)
    """choices of memory per GPU a job needs (one is drawn per job)"""
    work: tuple[PosFloat, PosFloat]
    """[lo, hi] work units per job"""
    slack: tuple[Tick, Tick]
    """[lo, hi] ticks from arrival to deadline (deadline = arrival + slack)"""
    value: tuple[NonNegFloat, NonNegFloat]
    """[lo, hi] value paid on completion"""
    priority: tuple[Priority, Priority] = (1, 1)
    """[lo, hi] priority"""

    @model_validator(mode="after")
    def _ranges_ordered(self) -> JobGenerator:
        for key in ("gpus", "work", "slack", "value", "priority"):
            lo, hi = getattr(self, key)
            if lo > hi:
                raise ValueError(f"{key} range [{lo}, {hi}] has lo > hi")
        if self.first_tick > self.last_tick:
            raise ValueError(f"first_tick {self.first_tick} is after last_tick {self.last_tick}")
        if not self.min_memory_gb:
            raise ValueError("min_memory_gb needs at least one choice")
        return self


class TeamConfig(_Frozen):
    """A product team: its seat, how its default policy plays, and its jobs (fixed and generated)."""

    name: Name
    """the team's name: its seat id, and the name actions and observations use"""
    archetype: Literal[ARCHETYPES] = "truthful"  # type: ignore[valid-type]
    """how the team's scripted policy declares and escalates when no [population] entry names another"""
    board_pressure: Share = 1.0
    """scales the allocator's cost of this team's justified escalations"""
    jobs: Annotated[tuple[JobSpec, ...], Field(max_length=MAX_JOBS)] = ()
    """jobs known before the episode starts"""
    generator: JobGenerator | None = None
    """a seeded stream of further jobs (none if absent)"""


class UrgentJob(_Frozen):
    """The job a shock injects: arrives at the shock tick, deadline = tick + slack."""

    gpus: PosGpus
    """GPUs it needs at once, all on one tier"""
    min_memory_gb: NonNegFloat = 0.0
    """memory per GPU it needs"""
    work: PosFloat
    """work units"""
    slack: Tick
    """ticks from the shock to the deadline"""
    value: NonNegFloat
    """paid on completion"""
    priority: Priority = 3
    """higher runs first among the team's jobs with the same deadline"""


SHOCK_KEYS = {  # a shock's keys that only some kinds read, and those kinds (tick, rate, duration, job: every kind)
    "tier": {ShockKind.PRODUCTION_INCIDENT},
    "gpus_offline": {ShockKind.PRODUCTION_INCIDENT},
    "price_multiplier": {ShockKind.MARKET_CRISIS},
    "inventory_factor": {ShockKind.MARKET_CRISIS},
}


class ShockSpec(_Frozen):
    """A shock fired at a fixed ``tick`` or, each tick, with probability ``rate``."""

    kind: Literal[tuple(k.label for k in ShockKind)]  # type: ignore[valid-type]
    """what happens (docs/rules.md): an audit exposes bluffs, an escalation or incident injects an urgent job,
    an incident also takes GPUs offline, a market crisis raises spot prices, a grid spike raises carbon intensity"""
    tick: Tick | None = None
    """the tick it fires (exactly one of tick and rate)"""
    rate: Fraction | None = None
    """probability it fires on each tick (exactly one of tick and rate)"""
    duration: Ticks = 1
    """ticks the effect lasts (incident, crisis, spike)"""
    team: Name | None = None
    """the team its job goes to (shocks with a job); default: the kind's usual team (audit: safety, escalation:
    search, incident: robotics) if the scenario has it, else the scenario's first team"""
    tier: Name | None = None
    """production_incident (required): the tier that loses GPUs"""
    gpus_offline: Gpus = 0
    """production_incident: GPUs of the tier offline while it lasts"""
    price_multiplier: Multiplier = 1.0
    """market_crisis: multiplies spot prices while it lasts"""
    inventory_factor: Fraction = 1.0
    """market_crisis: multiplies the broker's spot inventory while it lasts"""
    intensity_multiplier: Multiplier = 1.0
    """grid_spike (only): multiplies the grid's carbon intensity while it lasts"""
    job: UrgentJob | None = None
    """the urgent job it injects (compliance_audit and customer_escalation: required; production_incident:
    optional)"""

    @model_validator(mode="after")
    def _exactly_one_trigger(self) -> ShockSpec:
        if (self.tick is None) == (self.rate is None):
            raise ValueError("a shock needs exactly one of 'tick' (scheduled) or 'rate' (random)")
        if self.shock_kind is ShockKind.PRODUCTION_INCIDENT and self.tier is None:
            raise ValueError("production_incident needs 'tier'")
        if self.intensity_multiplier != 1.0 and self.shock_kind is not ShockKind.GRID_SPIKE:
            # the allocator sees which kinds are active, so only a grid spike may change the intensity
            raise ValueError(f"only a grid_spike has an intensity_multiplier; {self.kind} cannot")
        # a key the kind never reads is a mistake the file's author would not see in any episode: refuse it (at its
        # default it is harmless: a whole model_dump() loads back)
        fields = type(self).model_fields
        idle = sorted(k for k, kinds in SHOCK_KEYS.items()
                      if self.shock_kind not in kinds and getattr(self, k) != fields[k].default)
        if self.team is not None and self.job is None:
            idle = ["team", *idle]
        if idle:
            raise ValueError(f"{', '.join(idle)} {'means' if len(idle) == 1 else 'mean'} nothing for a {self.kind} shock"
                             + (" with no job (team names the team its job goes to)" if "team" in idle else "")
                             + "; remove it")
        return self

    @property
    def shock_kind(self) -> ShockKind:
        return ShockKind.from_label(self.kind)

    def target_team(self, teams: Sequence[str]) -> str | None:
        """The team a job shock injects its job into: ``team`` when set; else the kind's usual team
        (:data:`~commons_arena.enums.DEFAULT_SHOCK_TEAM`: audit -> safety, escalation -> search, incident ->
        robotics) when the scenario has a team of that name; else the scenario's first team (so a cluster
        with team names of its own needs no ``team``). None for a shock that injects no job."""
        if self.job is None:
            return None
        if self.team is not None:
            return self.team
        usual = DEFAULT_SHOCK_TEAM.get(self.shock_kind)
        return usual if usual in teams else (teams[0] if teams else None)


class CarbonConfig(_Frozen):
    """The episode's carbon cap and the grid's intensity profile."""

    cap_kg: PosFloat
    """kg CO2 the whole episode may emit"""
    mode: Literal["hard", "soft"] = "soft"
    """hard: grants that would exceed the cap are cut before jobs run; soft: emissions over it are charged"""
    intensity: Annotated[tuple[NonNegFloat, ...], Field(max_length=MAX_LIST)]
    """kg CO2 per kWh on each tick, at least one value (the last repeats to the end)"""
    forecast_horizon: Annotated[int, Field(ge=1, le=MAX_FORECAST)] = 3
    """ticks of intensity the allocator sees ahead"""

    @property
    def carbon_mode(self) -> CarbonMode:
        return CarbonMode(self.mode)

    @model_validator(mode="after")
    def _has_profile(self) -> CarbonConfig:
        if not self.intensity:
            raise ValueError("intensity needs at least one value")
        return self


class CredibilityConfig(_Frozen):
    """How audits and escalations cost a team credibility."""

    audit_tolerance: Share = 0.25
    """an audit exposes a declaration whose total exceeds true need by more than this share"""
    bluff_loss: Share = 0.2
    """credibility lost per exposed bluff"""
    unjustified_escalation_loss: Share = 0.1
    """credibility lost per escalation by a team that was not starved"""


class AllocatorWeights(_Frozen):
    """The allocator's reward weights (docs/rules.md: each term's definition)."""

    job_value: Weight = 1.0
    """per unit of value of every team's completed jobs"""
    spend: Weight = 1.0
    """per unit of money spent (spot purchases plus operating cost)"""
    missed: Weight = 0.6
    """per unit of value of jobs that missed their deadline"""
    idle: Weight = 0.5
    """per granted GPU no job used"""
    carbon: Weight = 1.0
    """per kg CO2 over a soft cap"""
    escalation: Weight = 2.0
    """per justified escalation (times the team's board_pressure)"""
    fairness: Weight = 1.0
    """times the fairness term: Jain's index of the teams' satisfaction minus 1 (a fair tick costs nothing)"""
    invalid: Weight = 1.0
    """per unit the rules cut from the allocator's action"""


class TeamWeights(_Frozen):
    """A team's reward weights."""

    job_value: Weight = 1.0
    """per unit of value of its completed jobs"""
    missed: Weight = 0.6
    """per unit of value of its jobs that missed their deadline"""
    credibility: Weight = 10.0
    """per unit of credibility it lost"""


class BrokerWeights(_Frozen):
    """The broker's reward weights."""

    profit: Weight = 1.0
    """per unit of profit (sales minus its unit cost)"""
    invalid: Weight = 0.1
    """per unit the rules cut from its offer"""


class RewardWeights(_Frozen):
    """Every role's reward weights."""

    allocator: AllocatorWeights = AllocatorWeights()
    """the allocator's weights"""
    team: TeamWeights = TeamWeights()
    """every team's weights"""
    broker: BrokerWeights = BrokerWeights()
    """the broker's weights"""


NOT_GAME = ("name", "description", "difficulty", "population")  # fields the environment never reads



def _rounded(value: Any) -> Any:
    """``value`` (JSON data) with every float at :data:`GAME_DIGITS` significant digits (iteratively: no recursion)."""
    def one(item: Any) -> Any:
        return float(f"{item:.{GAME_DIGITS}g}") if isinstance(item, float) else item

    root = [value]
    stack: list[Any] = [root]
    while stack:
        node = stack.pop()
        keys = node.keys() if isinstance(node, dict) else range(len(node))
        for key in keys:
            node[key] = one(node[key])
            if isinstance(node[key], dict | list):
                stack.append(node[key])
    return root[0]

class ScenarioConfig(_Frozen):
    """Everything that makes one scenario: the numbers the rules (docs/rules.md) leave to scenario files."""

    name: Name
    """the scenario's name (lower case, digits, underscores)"""
    description: str = Field(min_length=1, max_length=MAX_TEXT)
    """what the scenario is about, in words (shown on the play page and by scenarios list)"""
    difficulty: Literal[DIFFICULTIES] | None = None  # type: ignore[valid-type]
    """the curriculum tier, if it is one"""
    max_ticks: Ticks
    """episode length in ticks"""
    budget: NonNegFloat
    """money the allocator has for the whole episode (spot purchases and operating cost)"""
    reveal_after: Ticks = 2
    """ticks a team must be starved in a row before its true need is revealed to the allocator for good"""
    queue_slots: Annotated[int, Field(ge=1, le=MAX_QUEUE_SLOTS)] = 6
    """jobs shown per team observation, most urgent first"""
    price_levels: Annotated[int, Field(ge=2, le=101)] = 11
    """size of the broker's price grid (0 to each tier's max_price)"""
    gpu_tiers: Annotated[tuple[GpuTierConfig, ...], Field(min_length=1, max_length=MAX_TIERS)]
    """the GPU tiers ([[gpu_tiers]] tables)"""
    teams: Annotated[tuple[TeamConfig, ...], Field(min_length=2, max_length=MAX_TEAMS)]
    """the product teams ([[teams]] tables); each is a seat"""
    carbon: CarbonConfig
    """the carbon cap and the grid's intensity"""
    credibility: CredibilityConfig = CredibilityConfig()
    """how teams lose credibility"""
    shocks: Annotated[tuple[ShockSpec, ...], Field(max_length=MAX_SHOCKS)] = ()
    """scheduled and random shocks ([[shocks]] tables)"""
    rewards: RewardWeights = RewardWeights()
    """reward weights per role ([rewards.allocator], [rewards.team], [rewards.broker])"""
    shock_teams: Literal["usual", "drawn"] = "usual"
    """where the job of a shock with no `team` goes: usual (the kind's usual team if the scenario has it, else the
    first team) or drawn (the teams in turn, in an order drawn once from the game's hash: spread over the teams,
    the same in every episode)"""
    population: dict[str, Annotated[str, Field(min_length=1, max_length=4096)]] = Field(default_factory=dict)
    """agent -> the policy that plays it by default (a registered name, `name:key=value,...` or `learned:PATH`);
    a seat not named plays its default (allocator: proportional, teams: their archetype, broker: demand_priced)"""

    @model_validator(mode="after")
    def _cross_checks(self) -> ScenarioConfig:
        problems: list[str] = []
        tiers = [t.name for t in self.gpu_tiers]
        teams = [t.name for t in self.teams]
        for label, names in (("gpu_tiers", tiers), ("teams", teams)):
            if len(set(names)) != len(names):
                problems.append(f"{label}: names must be unique, got {names}")
        if {ALLOCATOR, BROKER} & set(teams):
            problems.append("teams: 'allocator' and 'broker' are reserved agent names")
        max_memory = max(t.memory_gb for t in self.gpu_tiers)
        for ti, team in enumerate(self.teams):
            ids = [j.id for j in team.jobs]
            if len(set(ids)) != len(ids):
                problems.append(f"teams[{ti}].jobs: job ids must be unique, got {ids}")
            for ji, job in enumerate(team.jobs):
                where = f"teams[{ti}].jobs[{ji}] ({job.id})"
                problems += _job_fit_problems(where, job.gpus, job.min_memory_gb, self.gpu_tiers)
                for dep in job.depends_on:
                    if dep not in ids:
                        problems.append(f"{where}.depends_on: unknown job {dep!r} in team {team.name!r}")
            cycle = _dependency_cycle({j.id: j.depends_on for j in team.jobs})
            if cycle:
                problems.append(f"teams[{ti}].jobs: dependency cycle {' -> '.join(cycle)}")
            gen = team.generator
            if gen is not None:
                where = f"teams[{ti}].generator"
                if gen.last_tick >= self.max_ticks:
                    problems.append(f"{where}.last_tick {gen.last_tick} is not before max_ticks {self.max_ticks}")
                if any(m > max_memory for m in gen.min_memory_gb):
                    problems.append(f"{where}.min_memory_gb: some choice exceeds every tier's memory ({max_memory} GB)")
                for mem in gen.min_memory_gb:
                    problems += _job_fit_problems(where, gen.gpus[1], mem, self.gpu_tiers)
        for si, shock in enumerate(self.shocks):
            where = f"shocks[{si}] ({shock.kind})"
            if shock.tier is not None and shock.tier not in tiers:
                problems.append(f"{where}.tier: unknown tier {shock.tier!r}; tiers are {tiers}")
            if shock.job is not None:
                target = self.target_team(shock)
                if target not in teams:
                    problems.append(
                        f"{where}.team: {target!r} is not one of this scenario's teams {teams}; name one of them"
                    )
                problems += _job_fit_problems(where + ".job", shock.job.gpus, shock.job.min_memory_gb, self.gpu_tiers)
            if shock.tick is not None and shock.tick >= self.max_ticks:
                problems.append(f"{where}.tick {shock.tick} is not before max_ticks {self.max_ticks}")
        for attr in ("price_multiplier", "intensity_multiplier"):
            worst = worst_overlap_multiplier(self.shocks, attr, self.max_ticks)
            if worst > MAX_MULTIPLIER * (1 + 1e-9):
                problems.append(
                    f"shocks: overlapping {attr}s can reach x{worst:.4g} (effects multiply; a random shock overlaps "
                    f"itself up to its duration); keep the worst case at most x{MAX_MULTIPLIER:g}"
                )
        agents = {ALLOCATOR, BROKER, *teams}
        for agent in self.population:
            if agent not in agents:
                problems.append(f"population: unknown agent {agent!r}; agents are {sorted(agents)}")
        if not problems:
            for check in POPULATION_CHECKS:
                problems += check(self)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    # ---- derived views (no new information, just names) ----
    @cached_property
    def tier_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.gpu_tiers)

    @cached_property
    def team_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.teams)

    @cached_property
    def agents(self) -> tuple[str, ...]:
        return (ALLOCATOR, *self.team_names, BROKER)

    def plain_dump(self, **options: Any) -> dict[str, Any]:
        """``model_dump(mode="json")`` without keys newer than the shipped scenarios when at their defaults (so
        adding one changes no content hash, game hash or written file)."""
        data = self.model_dump(mode="json", **options)
        if data.get("shock_teams") == "usual":
            del data["shock_teams"]
        return data

    @cached_property
    def shock_targets(self) -> tuple[str | None, ...]:
        """Per shock, the team its job goes to (None: it injects no job); see ``shock_teams``."""
        teams = self.team_names
        out = [spec.target_team(teams) for spec in self.shocks]
        if self.shock_teams == "drawn" and teams:
            rng = random.Random(int(self.game_hash, 16))  # seeded by the game: every episode and both paths agree
            order: list[str] = []
            for i, spec in enumerate(self.shocks):
                if spec.job is not None and spec.team is None:
                    if not order:  # each team once per round, in a drawn order
                        order = random_order(rng, teams)
                    out[i] = order.pop()
        return tuple(out)

    def target_team(self, shock: ShockSpec) -> str | None:
        """The team ``shock`` (one of :attr:`shocks`) injects its job into (:attr:`shock_targets`)."""
        index = next((i for i, spec in enumerate(self.shocks) if spec is shock), None)
        return shock.target_team(self.team_names) if index is None else self.shock_targets[index]

    @cached_property
    def content_hash(self) -> str:
        """sha256 (first 12 hex) of the validated content: comments and layout don't count."""
        canonical = json.dumps(self.plain_dump(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:12]

    @cached_property
    def game_hash(self) -> str:
        """sha256 (first 12 hex) of the game alone: :data:`NOT_GAME` (the name, the description, the difficulty
        label, the default background population) left out, so a renamed copy of a scenario has its game hash.
        What guards the held-out splits (``commons_arena.family.refuse_heldout``)."""
        canonical = json.dumps(self.plain_dump(exclude=set(NOT_GAME)), sort_keys=True,
                               separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:12]

    @cached_property
    def canonical_game_hash(self) -> str:
        """sha256 (first 12 hex) of the game in a canonical form: what the held-out refusal compares. Beyond
        :attr:`game_hash` (pinned in the split files, so left as it is), labels count by their place (team *i*,
        tier *i*, a team's job *j*, and the shocks' and dependencies' references to them) and numbers at
        :data:`GAME_DIGITS` significant digits: a relabelled team or tier, or a number nudged by 1e-9, plays
        the same episodes, so it is the same game."""
        canonical = json.dumps(_rounded(self._game_by_place()), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:12]

    def _game_by_place(self) -> dict[str, Any]:
        data = self.model_dump(mode="json", exclude=set(NOT_GAME))
        teams = {team["name"]: i for i, team in enumerate(data["teams"])}
        tiers = {tier["name"]: i for i, tier in enumerate(data["gpu_tiers"])}
        for tier in data["gpu_tiers"]:
            tier["name"] = tiers[tier["name"]]
        for team in data["teams"]:
            team["name"] = teams[team["name"]]
            jobs = {job["id"]: j for j, job in enumerate(team["jobs"])}
            for job in team["jobs"]:
                job["id"], job["depends_on"] = jobs[job["id"]], [jobs.get(d, d) for d in job["depends_on"]]
        for shock in data["shocks"]:
            shock["team"], shock["tier"] = teams.get(shock["team"], shock["team"]), tiers.get(shock["tier"], shock["tier"])
        return data


def random_order(rng: random.Random, names: Sequence[str]) -> list[str]:
    order = list(names)
    rng.shuffle(order)
    return order


def worst_overlap_multiplier(shocks: tuple[ShockSpec, ...], attr: str, max_ticks: int) -> float:
    """The largest product of ``attr`` over effects that can be active at once: every shock,
    a random one as many times as its effect lasts (it may fire again each tick)."""
    log_total = 0.0
    for spec in shocks:
        copies = 1 if spec.tick is not None else min(spec.duration, max_ticks)
        log_total += copies * math.log(getattr(spec, attr))
    return math.exp(min(log_total, 700.0))


def _job_fit_problems(where: str, gpus: int, min_memory_gb: float, tiers: tuple[GpuTierConfig, ...]) -> list[str]:
    fitting = [t for t in tiers if t.memory_gb >= min_memory_gb]
    if not fitting:
        return [f"{where}: needs {min_memory_gb} GB but no tier has that much memory"]
    if max(t.owned + t.spot_inventory for t in fitting) < gpus:
        return [f"{where}: needs {gpus} GPUs on one tier but no fitting tier ever has that many"]
    return []


def _dependency_cycle(graph: Mapping[str, tuple[str, ...]]) -> list[str] | None:
    """Return one cycle as a list of ids (first id repeated at the end), or None.

    Depth-first with an explicit stack: a chain of MAX_LIST jobs each depending on the next
    is as deep as the search goes, past Python's recursion limit."""
    state: dict[str, int] = {}  # 1 = on the path, 2 = done
    for root in graph:
        if root in state:
            continue
        path: list[str] = [root]
        todo: list[list[str]] = [list(graph.get(root, ()))]  # per node on the path: deps not yet visited
        state[root] = 1
        while path:
            if not todo[-1]:
                state[path.pop()] = 2
                todo.pop()
                continue
            dep = todo[-1].pop(0)
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep in graph and state.get(dep) is None:
                state[dep] = 1
                path.append(dep)
                todo.append(list(graph.get(dep, ())))
    return None


# ---------------------------------------------------------------- loading


def _scenario_dirs() -> list[Path]:
    here = Path(__file__).resolve().parent
    # Inside a wheel the files ship as commons_arena/scenarios; in a checkout they sit at the top.
    return [d for d in (here / "scenarios", here.parent / "scenarios") if d.is_dir()]


def list_scenarios() -> list[str]:
    """Names of every scenario shipped with the package, sorted."""
    names = {p.stem for d in _scenario_dirs() for p in d.glob("*.toml")}
    return sorted(names)


def scenario_path(name: str) -> Path:
    for directory in _scenario_dirs():
        path = directory / f"{name}.toml"
        if path.is_file():
            return path
    raise ScenarioError(f"no scenario named {name!r}; known scenarios: {', '.join(list_scenarios())}")


def scenario_from_dict(data: Mapping[str, Any], source: str = "<dict>") -> ScenarioConfig:
    return validate_data(ScenarioConfig, data, "scenario", source)


def validate_data(model: type[M], data: Mapping[str, Any], what: str, source: str,
                  error: type[ScenarioError] = ScenarioError) -> M:
    """``data`` (a scenario, or another file of this package: a family) as ``model``; ``error`` says what is wrong."""
    try:
        # JSON mode: TOML arrays validate as tuples while strict types still refuse "3" for 3.
        payload = json.dumps(dict(data))
    except (TypeError, ValueError) as err:
        raise error(f"invalid {what} {source}: unsupported value ({err})") from None
    except RecursionError:
        raise error(f"invalid {what} {source}: nested too deeply") from None
    try:
        return model.model_validate_json(payload)
    except ValidationError as err:
        problems = format_validation_error(err, separator="\n  ")  # one indented line each
        raise error(f"invalid {what} {source}:\n  {problems}") from None


def names_a_file(text: str) -> bool:
    """Whether a scenario (or family, suite, ...) reference is a path rather than a shipped name."""
    return text.endswith(".toml") or "/" in text


def resolve_reference(name: str, base: Path | None) -> str:
    """``name`` as given, or, if it is a relative path, relative to ``base`` (the folder of the
    file that names it: a roster, a suite)."""
    if base is not None and names_a_file(name) and not Path(name).is_absolute():
        return str(base / name)
    return name


def load_scenario(scenario: str | Path | ScenarioConfig) -> ScenarioConfig:
    """Load a scenario by name (``"standard"``), by path to a TOML file, or pass one through."""
    if isinstance(scenario, ScenarioConfig):
        return scenario
    text = str(scenario)
    path = Path(text)
    if isinstance(scenario, Path) or names_a_file(text):
        if not path.exists():
            raise ScenarioError(f"scenario file not found: {path}")
    else:
        path = scenario_path(text)
    return scenario_from_dict(read_toml(path), source=str(path))


def read_toml(path: Path, what: str = "scenario", error: type[ScenarioError] = ScenarioError) -> dict[str, Any]:
    """A TOML file of at most MAX_FILE_BYTES as a dict; ``error`` names the file and what is wrong."""
    try:
        data = loads_toml(read_text(path, what, MAX_FILE_BYTES))
    except InputError as err:  # a special file, too large, not UTF-8, nested too deeply
        raise error(f"invalid {what} {path}: {err.reason}") from None
    except tomllib.TOMLDecodeError as err:
        raise error(f"invalid {what} {path}: not valid TOML: {err}") from None
    except OSError as err:
        raise error(f"cannot read {what} {path}: {err.strerror or err}") from None
    return data
