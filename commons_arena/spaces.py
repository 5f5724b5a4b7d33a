"""Observation and action layouts: flat arrays with named fields.

Every observation is a flat ``Box(float32)`` (RLlib's default encoders take it) and every
action a ``MultiDiscrete`` (RLlib's PPO samples it with a multi-categorical head). A
:class:`Layout` names the parts of such a flat vector, so that nobody counts indices::

    layout = observation_layout(config, "allocator")
    layout.view(obs)["declared"]      # (n_teams, n_tiers) array

Layouts are pure data, cached per scenario content. Gymnasium space objects are built per
environment instance (a space carries its own sampling generator, and PettingZoo's seed
test seeds each env's spaces separately).

Actions (all integers):

=========  ==========================  =============================================
agent      field (shape)               meaning
=========  ==========================  =============================================
allocator  buy (tiers)                 spot GPUs bought now from the visible offer
allocator  grant (teams, tiers)        GPUs granted to each team for this tick
team       request (tiers)             GPUs declared as needed for the next tick
team       stance (1)                  0 accept, 1 counter, 2 escalate (last grant)
broker     quantity (tiers)            GPUs offered for the next tick
broker     price_level (tiers)         price = max_price x level / (price_levels - 1)
=========  ==========================  =============================================
"""

from __future__ import annotations

import copy
import functools
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from gymnasium import spaces

from commons_arena.enums import ALLOCATOR, BROKER, Role, ShockKind, Stance
from commons_arena.rules import rules_for
from commons_arena.scenario import (
    MAX_AMOUNT,
    MAX_GPUS,
    MAX_JOBS,
    MAX_MULTIPLIER,
    MAX_PRIORITY,
    MAX_SHOCKS,
    MAX_TICKS,
    MAX_TIERS,
    ScenarioConfig,
)

# Finite upper bounds for the quantities no scenario number caps directly. They follow from
# the scenario limits (commons_arena.scenario MAX_*), so they hold for every valid file, and
# they depend on nothing but the scenario's shape (tiers, teams, ticks, capacity): the
# curriculum tiers keep identical spaces, and wrappers that need finite bounds (SuperSuit's
# normalize_obs) work. They are worst cases, not scales: learned policies scale by the
# observations they saw (policies.learned.observation_scale).
AMOUNT_BOUND = MAX_AMOUNT  # budget, carbon cap, unit cost, intensity, memory, remaining work
PRICE_BOUND = MAX_AMOUNT * MAX_MULTIPLIER  # top of a price grid x the worst overlapping crises
VALUE_BOUND = 2 * MAX_AMOUNT  # a job's value plus its noise
DEADLINE_BOUND = 2 * MAX_TICKS  # arrival + slack, counted from tick 0
JOB_BOUND = MAX_JOBS + MAX_TICKS + MAX_SHOCKS * MAX_TICKS  # listed + generated + shock-injected jobs per team
NEED_BOUND = JOB_BOUND * MAX_GPUS  # GPUs a team's unresolved jobs can need at once
SHOCK_COUNT_BOUND = MAX_SHOCKS * MAX_TICKS  # shocks of one kind fired in an episode
INTENSITY_BOUND = MAX_AMOUNT * MAX_MULTIPLIER  # kg/kWh under the worst overlapping grid spikes
CARBON_BOUND = MAX_TIERS * 2 * MAX_GPUS * MAX_AMOUNT * INTENSITY_BOUND * MAX_TICKS  # busy GPUs x kW x kg/kWh x h
JOB_SLOT_FIELDS = (
    "present",  # 1 if the slot holds a job
    "gpus",
    "min_memory_gb",
    "remaining_work",
    "ticks_to_deadline",
    "value",
    "priority",
    "ready",  # arrived and dependencies done
)
JOB_SLOT_BOUNDS = np.array(  # upper bound of each JOB_SLOT_FIELDS entry, in that order
    [1, MAX_GPUS, AMOUNT_BOUND, AMOUNT_BOUND, DEADLINE_BOUND, VALUE_BOUND, MAX_PRIORITY, 1], dtype=np.float64
)


@dataclass(frozen=True)
class Field:
    name: str
    shape: tuple[int, ...]
    low: float | np.ndarray
    high: float | np.ndarray
    doc: str

    @functools.cached_property
    def size(self) -> int:
        return int(np.prod(self.shape))


@dataclass(frozen=True)
class Layout:
    """Named, contiguous fields of one flat vector."""

    fields: tuple[Field, ...]
    slices: dict[str, slice] = field(init=False)
    low: np.ndarray = field(init=False)
    high: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        slices, start = {}, 0
        for f in self.fields:
            slices[f.name] = slice(start, start + f.size)
            start += f.size
        object.__setattr__(self, "slices", slices)
        object.__setattr__(self, "low", self._flat("low"))
        object.__setattr__(self, "high", self._flat("high"))

    def _flat(self, attr: str) -> np.ndarray:
        parts = [np.broadcast_to(np.asarray(getattr(f, attr), dtype=np.float64), f.shape).ravel() for f in self.fields]
        return np.concatenate(parts) if parts else np.zeros(0)

    @functools.cached_property
    def size(self) -> int:
        return int(sum(f.size for f in self.fields))

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {f.name: f.shape for f in self.fields}

    def view(self, vector: np.ndarray) -> dict[str, np.ndarray]:
        """Field name → the slice of ``vector`` in the field's shape (a view, not a copy)."""
        vector = np.asarray(vector)
        return {f.name: vector[self.slices[f.name]].reshape(f.shape) for f in self.fields}

    def describe(self) -> list[tuple[str, tuple[int, ...], str]]:
        return [(f.name, f.shape, f.doc) for f in self.fields]


_OBS_CACHE: dict[tuple[str, str], Layout] = {}
_ACT_CACHE: dict[tuple[str, str], Layout] = {}


def role_of(config: ScenarioConfig, agent: str) -> Role:
    if agent == ALLOCATOR:
        return Role.ALLOCATOR
    if agent == BROKER:
        return Role.BROKER
    if agent in config.team_names:
        return Role.TEAM
    raise ValueError(f"unknown agent {agent!r}; agents of scenario {config.name!r} are {list(config.agents)}")


def observation_layout(config: ScenarioConfig, agent: str) -> Layout:
    key = (config.content_hash, agent)
    if key not in _OBS_CACHE:
        _OBS_CACHE[key] = _build_observation_layout(config, agent)
    return _OBS_CACHE[key]


def action_layout(config: ScenarioConfig, agent: str) -> Layout:
    key = (config.content_hash, agent)
    if key not in _ACT_CACHE:
        _ACT_CACHE[key] = _build_action_layout(config, agent)
    return _ACT_CACHE[key]


def _build_observation_layout(config: ScenarioConfig, agent: str) -> Layout:
    rules = rules_for(config)
    T, N = rules.n_tiers, rules.n_teams
    cap = rules.capacity  # most GPUs of a tier a tick can ever grant: owned + spot
    inventory = np.array(rules.spot_inventory, dtype=np.float64)
    tick = Field("tick", (1,), 0, config.max_ticks, "current tick")
    offer = [
        Field("offer_qty", (T,), 0, inventory, "spot GPUs offered for this tick"),
        Field("offer_price", (T,), 0, PRICE_BOUND, "unit price of the offer (crises included)"),
    ]
    role = role_of(config, agent)
    if role is Role.ALLOCATOR:
        fields = [
            tick,
            Field("owned", (T,), 0, cap, "GPUs owned per tier"),
            Field("online", (T,), 0, cap, "owned GPUs not offline from incidents"),
            Field("budget", (1,), 0, AMOUNT_BOUND, "money left for spot purchases (bound shared by every scenario)"),
            Field("carbon_used", (1,), 0, CARBON_BOUND, "kg CO2 emitted so far"),
            Field("carbon_cap", (1,), 0, AMOUNT_BOUND, "episode cap, kg CO2"),
            Field("intensity_forecast", (config.carbon.forecast_horizon,), 0, AMOUNT_BOUND, "kg/kWh, this tick onward"),
            *offer,
            Field("declared", (N, T), 0, cap, "each team's declared request for this tick"),
            Field("stance", (N, len(Stance)), 0, 1, "one-hot stance on last tick's grant"),
            Field("escalations", (N,), 0, config.max_ticks, "escalations so far"),
            Field("credibility", (N,), 0, 1, "credibility in [0, 1]"),
            Field("pressure", (N,), 0, 2, "coarse public pressure: 0 low, 1 medium, 2 high"),
            Field("revealed", (N,), 0, 1, "1 once a team's true need is revealed"),
            Field("revealed_need", (N, T), 0, NEED_BOUND, "true need of revealed teams (0 otherwise)"),
            Field("shocks_seen", (len(ShockKind),), 0, SHOCK_COUNT_BOUND, "shocks fired so far, per kind"),
            Field("shocks_active", (len(ShockKind),), 0, 1, "1 while a shock of that kind has effect"),
        ]
    elif role is Role.BROKER:
        fields = [
            tick,
            Field("inventory", (T,), 0, inventory, "GPUs it may offer now (crises shrink it)"),
            Field("unit_cost", (T,), 0, AMOUNT_BOUND, "its cost per GPU-tick sold"),
            Field("last_sold", (T,), 0, inventory, "GPUs sold last tick"),
            Field("last_price", (T,), 0, PRICE_BOUND, "unit price of last tick's offer"),
            *offer,
            Field("demand", (T,), 0, N * cap, "total declared requests for this tick"),
            Field("crisis", (1,), 0, 1, "1 while a market crisis lasts"),
        ]
    else:
        K = config.queue_slots
        fields = [
            tick,
            Field("need", (T,), 0, NEED_BOUND, "own true need this tick"),
            Field("last_grant", (T,), 0, cap, "GPUs granted to it last tick"),
            Field("declared", (T,), 0, cap, "its own declared request for this tick"),
            Field("credibility", (1,), 0, 1, "own credibility"),
            Field("starved_streak", (1,), 0, config.max_ticks, "consecutive ticks its grant fell short of need"),
            *offer,
            Field("others_declared", (N - 1, T), 0, cap, "other teams' declared requests, in team order"),
            Field("jobs", (K, len(JOB_SLOT_FIELDS)), 0, np.broadcast_to(JOB_SLOT_BOUNDS, (K, len(JOB_SLOT_FIELDS))),
                  "most urgent unresolved jobs: " + ", ".join(JOB_SLOT_FIELDS)),
        ]
    return Layout(tuple(fields))


def _build_action_layout(config: ScenarioConfig, agent: str) -> Layout:
    rules = rules_for(config)
    T, N = rules.n_tiers, rules.n_teams
    cap = rules.capacity  # most GPUs of a tier a tick can ever grant: owned + spot
    inventory = np.array(rules.spot_inventory, dtype=np.float64)
    role = role_of(config, agent)
    if role is Role.ALLOCATOR:
        fields = [
            Field("buy", (T,), 0, inventory, "spot GPUs to buy from the visible offer"),
            Field("grant", (N, T), 0, np.broadcast_to(cap, (N, T)), "GPUs per (team, tier) for this tick"),
        ]
    elif role is Role.BROKER:
        fields = [
            Field("quantity", (T,), 0, inventory, "GPUs offered for next tick"),
            Field("price_level", (T,), 0, config.price_levels - 1, "index into the price grid"),
        ]
    else:
        fields = [
            Field("request", (T,), 0, cap, "GPUs declared as needed next tick"),
            Field("stance", (1,), 0, len(Stance) - 1, "0 accept, 1 counter, 2 escalate"),
        ]
    return Layout(tuple(fields))


def make_observation_space(config: ScenarioConfig, agent: str) -> spaces.Box:
    layout = observation_layout(config, agent)
    # No zero-width dimension (a tier without a spot market): normalising wrappers divide by
    # high - low. The observation itself is unchanged.
    high = np.maximum(layout.high, layout.low + 1)
    return copy.deepcopy(_box(layout.low.astype(np.float32).tobytes(), high.astype(np.float32).tobytes()))


@functools.lru_cache(maxsize=256)
def _box(low: bytes, high: bytes) -> spaces.Box:
    """A Box of these float32 bounds, of which each space is a copy (its own arrays and generator): gymnasium
    prints both bounds as text when it makes a Box, a tenth of a millisecond, and every env makes one per seat."""
    return spaces.Box(np.frombuffer(low, np.float32).copy(), np.frombuffer(high, np.float32).copy(), dtype=np.float32)


def make_action_space(config: ScenarioConfig, agent: str) -> spaces.MultiDiscrete:
    layout = action_layout(config, agent)
    return spaces.MultiDiscrete((layout.high + 1).astype(np.int64))


class AgentSpaces:
    """Each agent's observation and action space, built once per env instance (a space carries
    its own sampling generator): the spaces part of the reference env and of the batched one."""

    possible_agents: list[str]

    def build_spaces(self, config: ScenarioConfig) -> None:
        self._observation_spaces = {a: make_observation_space(config, a) for a in config.agents}
        self._action_spaces = {a: make_action_space(config, a) for a in config.agents}
        self._nvec = {a: space.nvec for a, space in self._action_spaces.items()}

    def observation_space(self, agent: str) -> spaces.Box:
        if agent not in self._observation_spaces:
            raise ValueError(f"unknown agent {agent!r}; agents are {self.possible_agents}")
        return self._observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.MultiDiscrete:
        if agent not in self._action_spaces:
            raise ValueError(f"unknown agent {agent!r}; agents are {self.possible_agents}")
        return self._action_spaces[agent]


def check_action(agent: str, action: object, nvec: np.ndarray) -> list[int]:
    """Return ``action`` as a list of ints or raise ValueError saying what is wrong.

    Accepts integer arrays/lists, and floats that hold exact integers. Anything else
    (wrong shape, NaN, negatives, values past the space) is not an action of this space.
    A list, because the env reads a handful of entries one by one (cheaper than numpy's
    per-element access) and because it is a copy: the state never aliases the caller's buffer.
    """
    if isinstance(action, np.ndarray) and action.dtype.kind in "iu" and action.shape == nvec.shape:
        # fast path for what samplers and policies produce
        values = action.tolist()
        if min(values) >= 0 and all(map(operator.lt, values, nvec.tolist())):
            return values
    try:
        # Python ints stay exact (numpy would turn [0, 2**64 - 1] into floats and round them)
        items = list(action) if isinstance(action, list | tuple) else None
        exact = items is not None and all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in items)
        if exact and items is not None:
            arr = np.empty(len(items), dtype=object)
            arr[:] = [int(v) for v in items]
        else:
            arr = np.asarray(action)
    except Exception as err:  # pragma: no cover - exotic objects
        raise ValueError(f"action for {agent!r} is not array-like: {err}") from None
    if arr.shape != nvec.shape:
        raise ValueError(
            f"action for {agent!r} has shape {arr.shape}; its space is MultiDiscrete with shape {nvec.shape}"
        )
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"action for {agent!r} contains NaN or infinity: {arr.tolist()}")
        if not np.all(arr == np.round(arr)):
            raise ValueError(f"action for {agent!r} must hold integers, got {arr.tolist()}")
    elif exact:
        pass  # Python ints, kept exact: too large ones are reported as out of range below
    elif arr.dtype.kind not in "iub":
        raise ValueError(f"action for {agent!r} must be integers, got dtype {arr.dtype}")
    # Compared as Python ints: casting first would wrap 2**64 - 1 to -1 and misreport it.
    values = [int(v) for v in arr.tolist()]
    for i, (value, n) in enumerate(zip(values, nvec.tolist(), strict=True)):
        if not 0 <= value < n:
            raise ValueError(f"action for {agent!r} is outside its space at index {i}: {value} not in [0, {n - 1}]")
    return values


# The seed domain of every front door (command line, server, results rows: a SQLite INTEGER);
# reset() itself takes any int >= 0 (check_seed).
MAX_SEED = 2**63 - 1


def check_seed(seed: object) -> int | None:
    """``reset()``'s seed as an int (or None), or ValueError saying what a seed must be.

    numpy's own errors for ``-1`` or ``1.5`` do not mention the seed at all."""
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise ValueError(f"seed must be a non-negative integer or None, got {seed!r} ({type(seed).__name__})")
    if seed < 0:
        raise ValueError(f"seed must be a non-negative integer or None, got {seed}")
    return int(seed)


class Intents(NamedTuple):
    """Every agent's action of one tick, by name, over any leading axes ``...`` (one arena: none;
    a batch: ``B``); T tiers, N teams."""

    offer_quantity: np.ndarray  # (..., T) broker: for next tick
    price_level: np.ndarray  # (..., T) broker: index into the price grid
    requests: np.ndarray  # (..., N, T) teams: declared for next tick
    stances: np.ndarray  # (..., N) a Stance about last tick's grant
    buy: np.ndarray  # (..., T) allocator: from the offer posted last tick
    grant: np.ndarray  # (..., N, T) allocator: for this tick


class IntentDecoder:
    """Splits checked actions ``agent -> (..., act_dim)`` into :class:`Intents` by the action layouts:
    the one decoder of the per-arena env and the batched core."""

    def __init__(self, config: ScenarioConfig) -> None:
        self.teams = config.team_names
        self.n_tiers = len(config.gpu_tiers)
        allocator, broker = action_layout(config, ALLOCATOR).slices, action_layout(config, BROKER).slices
        team = action_layout(config, self.teams[0]).slices
        self.buy, self.grant = allocator["buy"], allocator["grant"]
        self.quantity, self.price_level = broker["quantity"], broker["price_level"]
        self.request, self.stance = team["request"], team["stance"].start

    def __call__(self, actions: Mapping[str, np.ndarray | Sequence[int]]) -> Intents:
        allocator, broker = np.asarray(actions[ALLOCATOR]), np.asarray(actions[BROKER])
        teams = [np.asarray(actions[team]) for team in self.teams]
        return Intents(
            offer_quantity=broker[..., self.quantity],
            price_level=broker[..., self.price_level],
            requests=np.stack([team[..., self.request] for team in teams], axis=-2),
            stances=np.stack([team[..., self.stance] for team in teams], axis=-1),
            buy=allocator[..., self.buy],
            grant=allocator[..., self.grant].reshape(*allocator.shape[:-1], len(self.teams), self.n_tiers),
        )
