"""The universal allocator: one network for every cluster up to the family's largest shape.

A learned allocator's network is usually tied to the shape it was trained on: its input is
the scenario's flat observation and its output one code per (team, tier), so a cluster
with another number of teams or tiers does not fit. This module gives the allocator a view
that does not depend on the shape (docs/training.md, "One allocator for any cluster"):

* **Cells.** The allocator's decision with the ``need`` (or ``residual``) codec is one
  correction per (team, tier) *cell*. Each cell gets a feature vector of
  :data:`N_FEATURES` numbers (:data:`FEATURE_NAMES`): the episode's global state, its
  tier's state, its team's state and the cell's own numbers (declared, revealed need, the
  planner's estimate and grant), every one divided by a quantity of the scenario's public
  parameters (a tier's capacity, the budget, the carbon cap, the horizon), so the same
  number means the same thing in every cluster. No fitted observation scale: nothing here
  was measured on the training scenarios.
* **One network per cell, shared.** The policy is a small MLP from a cell's features to
  the logits of its correction (``DELTAS``); the same weights play every cell. Its size
  depends on neither the number of teams nor of tiers.
* **Two versions of the features** (:data:`CELL_VIEWS`, recorded in every universal checkpoint's
  sidecar). ``cells_v1`` sees this tick only. ``cells_v2`` adds :data:`MEMORY_FEATURES`: what
  the allocator has seen of each team over the episode so far (its declarations, its own
  grants, the need of a revealed team against what the team declared), kept per episode by
  :class:`DeclarationMemory` from the allocator's own observations and decoded actions: a
  bluffer's history is evidence of its true need that one tick does not show.
* **A fixed-size view for RLlib.** RLlib needs one observation and action space for every
  episode of a run, whatever scenario it plays: the cells are padded to
  :data:`MAX_TEAMS` x :data:`MAX_TIERS` (the family's maximum) and a mask says which are
  real. Padded cells' codes are ignored (the codec decodes the real cells only).

A scenario larger than the maximum is refused with a :class:`CheckpointError` naming both
shapes (:func:`check_shape`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from commons_arena.enums import ALLOCATOR, ShockKind, Stance
from commons_arena.rules import rules_for
from commons_arena.scenario import ARCHETYPES, MAX_TICKS, ScenarioConfig
from commons_arena.spaces import observation_layout, role_of
from policies.batch import OneArenaInterface
from policies.checkpoint_format import CheckpointError, PolicyNetwork
from policies.codecs import ResidualPlannerCodec, make_batch_codec

# The family's largest cluster (commons_arena family "broad": teams 2-8, tiers 1-4); the
# padded view RLlib sees has this many cells.
MAX_TEAMS = 8
MAX_TIERS = 4
CELLS = MAX_TEAMS * MAX_TIERS
FEATURES_VERSION = "cells_v1"  # the default version (CELL_VIEWS): what every checkpoint before cells_v2 records
FEATURE_BOUND = 10.0  # every feature is cut to [-bound, bound]
SHAPE_FREE_CODECS = ("need", "residual")  # codecs that decode one code per (team, tier) cell

GLOBAL_FEATURES = (
    "tick_share", "ticks_left_share", "log_horizon", "budget_left_share", "has_budget", "carbon_used_share",
    "hard_cap", "intensity_now", "intensity_ahead",
    *(f"shock_active_{k.label}" for k in ShockKind), *(f"shocks_seen_{k.label}" for k in ShockKind),
    "teams_share", "tiers_share",
)
TIER_FEATURES = (
    "owned_share", "log_capacity", "speed", "memory", "op_cost", "power", "memory_rank", "spot_share",
    "online_share", "offer_share", "offer_price", "tier_declared", "tier_estimate", "tier_grant", "tier_revealed",
)
TEAM_FEATURES = (
    *(f"stance_{s.name.lower()}" for s in Stance), "escalations", "credibility", "pressure", "revealed",
    *(f"archetype_{a}" for a in ARCHETYPES), "board_pressure", "team_declared", "team_estimate",
)
CELL_FEATURES = (
    "declared", "revealed_need", "estimate", "grant", "estimate_gpus", "declared_gpus", "grant_gpus",
    "declared_minus_estimate",
)
FEATURE_NAMES = GLOBAL_FEATURES + TIER_FEATURES + TEAM_FEATURES + CELL_FEATURES  # cells_v1's
N_FEATURES = len(FEATURE_NAMES)  # cells_v1's
OBS_SIZE = CELLS * N_FEATURES + CELLS  # cells_v1's: every cell's features (team-major), then the mask
GPU_COUNT_CAP = 8.0  # absolute GPU counts (the corrections are -2..+2 GPUs) are shown cut at this, / this

# cells_v2's memory of the episode so far (DeclarationMemory), after every cells_v1 feature. "So far" is the
# ticks the allocator has acted in plus this one; a grant is known only for the ticks it acted in. Each is a
# share of the tier's capacity (a cell's) or a ratio of GPUs to GPUs (a team's), as cluster-free as cells_v1's.
MEMORY_FEATURES = (
    # the level a team keeps asking for in this tier: one tick's declaration may be a job's arrival, the mean is
    # its habit; a bluffer's mean stays above what the planner estimates, an honest team's follows its jobs
    "mean_declared",
    # what the allocator gave this cell on average (its own decoded grants): with mean_declared, how far its asks
    # were cut, which is what moves a team to inflate or to escalate
    "mean_granted",
    # last tick's grant: what the team's stance this tick answers (the stance is on last tick's grant)
    "last_granted",
    # this tick's declaration minus last tick's: a rise after a cut is the bluffer's reflex, a rise after a full
    # grant more likely a new job (0 on the first tick)
    "declared_change",
    # mean of (declared - revealed need) over the ticks the team has been revealed: how much it inflates in this
    # tier, seen where the truth is known (0 until revealed)
    "revealed_overclaim",
    # the team's granted / declared GPUs over the ticks the allocator acted in (all tiers): 1 for a team given
    # what it asks, low for one the allocator has learned to discount (0 before the first grant, or while it has
    # declared nothing)
    "team_granted_over_declared",
    # the share of the episode's ticks so far in which the team was revealed (reveal is for good: how long its
    # declarations have been checkable)
    "team_revealed_share",
    # the team's declared / revealed need over its revealed ticks (all tiers): its inflation factor, 1 for an
    # honest team (0 until revealed, or while its revealed need is 0)
    "team_declared_over_need",
)
N_MEMORY_FEATURES = len(MEMORY_FEATURES)


@dataclass(frozen=True)
class CellView:
    """A version of the cell features: what a cell's network sees, recorded in a universal checkpoint's sidecar
    (``universal.features``), so a reader computes the features it was trained on or refuses it."""

    name: str
    feature_names: tuple[str, ...]
    memory: bool  # keeps per-episode memory of declarations and grants (DeclarationMemory)

    @property
    def n_features(self) -> int:
        return len(self.feature_names)

    @property
    def obs_size(self) -> int:
        """The padded flat view: every cell's features (team-major), then the mask of real cells."""
        return CELLS * self.n_features + CELLS

    def fields(self) -> dict[str, Any]:
        """The padded view a universal checkpoint records (and a reader must compute alike)."""
        return {"max_teams": MAX_TEAMS, "max_tiers": MAX_TIERS, "features": self.name,
                "cell_features": self.n_features}


CELL_VIEWS = {view.name: view for view in (
    CellView("cells_v1", FEATURE_NAMES, memory=False),  # this tick only
    CellView("cells_v2", FEATURE_NAMES + MEMORY_FEATURES, memory=True),  # + the episode's memory, appended
)}


def cell_view(features: str | CellView = FEATURES_VERSION) -> CellView:
    """The cell view of a features version (``cells_v1``, ``cells_v2``); CheckpointError naming the known ones."""
    if isinstance(features, CellView):
        return features
    if features not in CELL_VIEWS:
        raise CheckpointError(f"cell features {features!r} are not ones this commons_arena computes "
                              f"({', '.join(CELL_VIEWS)})")
    return CELL_VIEWS[features]


def check_shape(config: ScenarioConfig, what: str = "the universal allocator") -> None:
    """CheckpointError unless ``config`` fits the padded view (at most MAX_TEAMS x MAX_TIERS)."""
    teams, tiers = len(config.teams), len(config.gpu_tiers)
    if teams > MAX_TEAMS or tiers > MAX_TIERS:
        raise CheckpointError(
            f"scenario {config.name!r} has {teams} teams x {tiers} tiers; {what} plays clusters of at most "
            f"{MAX_TEAMS} teams x {MAX_TIERS} tiers (the scenario family's maximum)")


def _share(x: np.ndarray | float, of: np.ndarray | float) -> np.ndarray:
    """x / of where of > 0, else 0 (no division by zero, ever)."""
    x, of = np.asarray(x, dtype=np.float64), np.asarray(of, dtype=np.float64)
    return np.divide(x, of, out=np.zeros(np.broadcast_shapes(x.shape, of.shape)), where=of > 0)


class CellEncoder:
    """A scenario's allocator observation (+ the planner's estimate and grant) -> features per cell.

    The static parts (a tier's capacity, hardware relative to the scenario's best tier, a
    team's archetype and board pressure) are computed once per scenario."""

    def __init__(self, config: ScenarioConfig) -> None:
        check_shape(config)
        self.config = config
        self.layout = observation_layout(config, ALLOCATOR)
        rules = rules_for(config)
        self.n_teams, self.n_tiers = rules.n_teams, rules.n_tiers
        self.capacity = np.maximum(rules.capacity, 1.0)  # owned + spot: the most a tier can grant
        self.total_capacity = float(self.capacity.sum())
        self.max_price = np.asarray(rules.max_price, dtype=np.float64)
        memory = np.asarray(rules.memory_gb, dtype=np.float64)
        order = np.argsort(np.argsort(memory, kind="stable"), kind="stable")
        rank = order / (self.n_tiers - 1) if self.n_tiers > 1 else np.zeros(self.n_tiers)
        speed = np.asarray(rules.speed, dtype=np.float64)
        self.static_tier = np.stack([
            _share(rules.owned, self.capacity), np.log1p(self.capacity) / 5.0, _share(speed, speed.max()),
            _share(memory, memory.max()), _share(rules.op_cost, rules.op_cost.max()),
            _share(rules.power_kw, rules.power_kw.max()), rank,
            _share(np.asarray(rules.spot_inventory, dtype=np.float64), self.capacity),
        ], axis=1)  # tiers x 8
        archetype = np.zeros((self.n_teams, len(ARCHETYPES)))
        for i, team in enumerate(config.teams):
            archetype[i, ARCHETYPES.index(team.archetype)] = 1.0
        pressure = np.minimum(np.asarray(rules.board_pressure, dtype=np.float64), 5.0)[:, None] / 5.0
        self.static_team = np.concatenate([archetype, pressure], axis=1)  # teams x 6
        self.horizon = float(config.max_ticks)
        self.budget = float(config.budget)
        self.cap_kg = float(config.carbon.cap_kg)
        self.mean_intensity = float(np.mean(config.carbon.intensity))
        self.shape_share = [self.n_teams / MAX_TEAMS, self.n_tiers / MAX_TIERS]
        self.hard_cap = float(rules.hard_cap)

    def encode(self, observations: np.ndarray, estimate: np.ndarray, grant: np.ndarray) -> np.ndarray:
        """Features ``(B, teams, tiers, N_FEATURES)`` of ``B`` observations ``(B, obs_dim)``, with the planner's
        estimate and grant ``(B, teams, tiers)`` each."""
        obs = np.asarray(observations, dtype=np.float64)
        B = len(obs)
        v = {f.name: obs[:, self.layout.slices[f.name]].reshape(B, *f.shape) for f in self.layout.fields}
        N, T, cap = self.n_teams, self.n_tiers, self.capacity
        tick = v["tick"][:, 0]
        forecast = v["intensity_forecast"]
        constant = np.broadcast_to
        glob = np.concatenate([
            np.stack([tick / self.horizon, np.maximum(self.horizon - tick, 0.0) / self.horizon,
                      constant(math.log1p(self.horizon) / math.log1p(MAX_TICKS), (B,)),
                      _share(v["budget"][:, 0], self.budget), constant(float(self.budget > 0), (B,)),
                      _share(v["carbon_used"][:, 0], self.cap_kg), constant(self.hard_cap, (B,)),
                      _share(forecast[:, 0], self.mean_intensity), _share(forecast.mean(axis=1), self.mean_intensity)],
                     axis=1),
            v["shocks_active"], np.minimum(v["shocks_seen"], 3.0) / 3.0, constant(self.shape_share, (B, 2)),
        ], axis=1)
        declared, revealed_need = v["declared"], v["revealed_need"]
        estimate, grant = np.asarray(estimate, dtype=np.float64), np.asarray(grant, dtype=np.float64)
        tier = np.concatenate([constant(self.static_tier, (B, *self.static_tier.shape)), np.stack([
            _share(v["online"], cap), _share(v["offer_qty"], cap), _share(v["offer_price"], self.max_price),
            declared.sum(axis=1) / cap, estimate.sum(axis=1) / cap, grant.sum(axis=1) / cap,
            revealed_need.sum(axis=1) / cap,
        ], axis=2)], axis=2)
        team = np.concatenate([
            v["stance"], (np.minimum(v["escalations"], 5.0) / 5.0)[..., None], v["credibility"][..., None],
            (v["pressure"] / 2.0)[..., None], v["revealed"][..., None],
            constant(self.static_team, (B, *self.static_team.shape)),
            (declared.sum(axis=2) / self.total_capacity)[..., None],
            (estimate.sum(axis=2) / self.total_capacity)[..., None],
        ], axis=2)
        cell = np.stack([
            declared / cap, revealed_need / cap, estimate / cap, grant / cap,
            np.minimum(estimate, GPU_COUNT_CAP) / GPU_COUNT_CAP, np.minimum(declared, GPU_COUNT_CAP) / GPU_COUNT_CAP,
            np.minimum(grant, GPU_COUNT_CAP) / GPU_COUNT_CAP, (declared - estimate) / cap,
        ], axis=3)
        features = np.concatenate([
            constant(glob[:, None, None], (B, N, T, glob.shape[1])), constant(tier[:, None], (B, N, T, tier.shape[2])),
            constant(team[:, :, None], (B, N, T, team.shape[2])), cell,
        ], axis=3)
        return np.clip(np.nan_to_num(features, nan=0.0, posinf=FEATURE_BOUND, neginf=-FEATURE_BOUND),
                       -FEATURE_BOUND, FEATURE_BOUND)


class DeclarationMemory:
    """cells_v2's memory of the episode so far (:data:`MEMORY_FEATURES`) in ``num_envs`` arenas of one scenario.

    :meth:`features` reads it with this tick's observation and changes nothing (a view may be computed again);
    :meth:`record` adds the tick once the allocator has acted (its grant is known only then); :meth:`reset`
    forgets the episodes of the arenas named. It holds only what the allocator saw and did, never hidden state,
    and every number is computed arena by arena (elementwise, or a sum over one arena's tiers), so an arena's
    features are the same in a batch of one (:class:`UniversalInterface`) as in any batch, bit for bit."""

    def __init__(self, encoder: CellEncoder, num_envs: int) -> None:
        self.slices = {name: encoder.layout.slices[name] for name in ("declared", "revealed", "revealed_need")}
        self.capacity = encoder.capacity
        B, N, T = num_envs, encoder.n_teams, encoder.n_tiers
        self.shape = (N, T)
        self.ticks = np.zeros(B)  # ticks recorded (the allocator acted in them) this episode
        self.declared_sum, self.granted_sum = np.zeros((B, N, T)), np.zeros((B, N, T))
        self.last_declared, self.last_granted = np.zeros((B, N, T)), np.zeros((B, N, T))
        self.revealed_ticks = np.zeros((B, N))
        self.revealed_declared_sum, self.revealed_need_sum = np.zeros((B, N, T)), np.zeros((B, N, T))

    def reset(self, index: np.ndarray | slice = slice(None)) -> None:
        for memory in (self.ticks, self.declared_sum, self.granted_sum, self.last_declared, self.last_granted,
                       self.revealed_ticks, self.revealed_declared_sum, self.revealed_need_sum):
            memory[index] = 0.0

    def _seen(self, observations: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """This tick's declared (B, N, T), revealed flags (B, N) and revealed need (B, N, T), in GPUs."""
        obs = np.asarray(observations, dtype=np.float64)
        B, shape = len(obs), self.shape
        return (obs[:, self.slices["declared"]].reshape(B, *shape), obs[:, self.slices["revealed"]] > 0.5,
                obs[:, self.slices["revealed_need"]].reshape(B, *shape))

    def features(self, observations: np.ndarray) -> np.ndarray:
        """``(B, teams, tiers, N_MEMORY_FEATURES)``: the recorded ticks and this one (its grant is not known yet)."""
        declared, revealed, need = self._seen(observations)
        cap, ticks = self.capacity, self.ticks[:, None, None]
        now = revealed[..., None]
        revealed_ticks = self.revealed_ticks + revealed
        revealed_declared = self.revealed_declared_sum + np.where(now, declared, 0.0)
        revealed_need = self.revealed_need_sum + np.where(now, need, 0.0)
        cell = np.stack([
            (self.declared_sum + declared) / (ticks + 1.0) / cap,
            _share(self.granted_sum, ticks) / cap,
            self.last_granted / cap,
            np.where(ticks > 0, declared - self.last_declared, 0.0) / cap,
            _share(revealed_declared - revealed_need, revealed_ticks[..., None]) / cap,
        ], axis=3)
        team = np.stack([
            _share(self.granted_sum.sum(axis=2), self.declared_sum.sum(axis=2)),
            revealed_ticks / (self.ticks[:, None] + 1.0),
            _share(revealed_declared.sum(axis=2), revealed_need.sum(axis=2)),
        ], axis=2)
        B, (N, T) = len(declared), self.shape
        features = np.concatenate([cell, np.broadcast_to(team[:, :, None], (B, N, T, team.shape[2]))], axis=3)
        return np.clip(np.nan_to_num(features, nan=0.0, posinf=FEATURE_BOUND, neginf=-FEATURE_BOUND),
                       -FEATURE_BOUND, FEATURE_BOUND)

    def record(self, observations: np.ndarray, actions: np.ndarray) -> None:
        """Add the tick of ``observations`` and the allocator's decoded ``actions`` (B, buy + grants) to memory."""
        declared, revealed, need = self._seen(observations)
        B, (N, T) = len(declared), self.shape
        granted = np.asarray(actions, dtype=np.float64)[:, T:].reshape(B, N, T)
        now = revealed[..., None]
        self.ticks += 1.0
        self.declared_sum += declared
        self.granted_sum += granted
        self.last_declared[...], self.last_granted[...] = declared, granted
        self.revealed_ticks += revealed
        self.revealed_declared_sum += np.where(now, declared, 0.0)
        self.revealed_need_sum += np.where(now, need, 0.0)


class BatchUniversalInterface:
    """What sits between the allocator's seat and a shape-free module in ``num_envs`` arenas: the padded cell view,
    as arrays (row *i* is arena *i*'s). :class:`UniversalInterface` is one arena's.

    The same methods as :class:`policies.learned.BatchInterface` (``observe``, ``act``,
    ``reset``, ``observation_space``, ``action_space``, ``input_size``, ``codec``), so
    training's env and ``learned:`` play it alike. ``observe`` returns the padded flat view
    (``view.obs_size``: every cell's features, then the mask); ``act`` takes one code per
    padded cell and decodes the real ones with the codec. ``features``: the version of the
    cell features (:data:`CELL_VIEWS`); ``cells_v2`` keeps its memory of the episode from
    ``reset`` to ``reset``, a tick recorded by ``act`` (the grant is its decoded action).
    """

    def __init__(self, config: ScenarioConfig, agent: str = ALLOCATOR, codec: dict[str, Any] | str | None = "need",
                 features: str | CellView = FEATURES_VERSION, num_envs: int = 1) -> None:
        self.view = cell_view(features)
        name = codec if isinstance(codec, str) or codec is None else codec["name"]
        if role_of(config, agent) != ALLOCATOR:
            raise CheckpointError(f"the universal view plays the allocator seat; {agent!r} is not it")
        if name not in SHAPE_FREE_CODECS:
            raise CheckpointError(f"the universal allocator acts through a per-(team, tier) codec "
                                  f"({', '.join(SHAPE_FREE_CODECS)}), not {name!r}")
        self.encoder = CellEncoder(config)  # refuses a scenario beyond the maximum
        self.config, self.agent, self.num_envs = config, agent, num_envs
        made = make_batch_codec(name, config, num_envs, agent)
        assert isinstance(made, ResidualPlannerCodec)
        self.codec: ResidualPlannerCodec = made
        self.n_actions = len(self.codec.DELTAS)
        self.zero = self.codec.DELTAS.index(0)
        self.mask = np.zeros((MAX_TEAMS, MAX_TIERS), dtype=np.float32)
        self.mask[: self.encoder.n_teams, : self.encoder.n_tiers] = 1.0
        self.memory = DeclarationMemory(self.encoder, num_envs) if self.view.memory else None
        self.no_action = np.full(CELLS, self.zero, dtype=np.int64)

    def resized(self, num_envs: int) -> BatchUniversalInterface:
        return BatchUniversalInterface(self.config, self.agent, self.codec.name, self.view, num_envs)

    @property
    def input_size(self) -> int:
        return self.view.obs_size

    def observation_space(self) -> Any:
        import gymnasium as gym

        width = CELLS * self.view.n_features
        low = np.concatenate([np.full(width, -FEATURE_BOUND), np.zeros(CELLS)]).astype(np.float32)
        high = np.concatenate([np.full(width, FEATURE_BOUND), np.ones(CELLS)]).astype(np.float32)
        return gym.spaces.Box(low, high, dtype=np.float32)

    def action_space(self) -> Any:
        import gymnasium as gym

        return gym.spaces.MultiDiscrete(np.full(CELLS, self.n_actions))

    def reset(self, index: np.ndarray | None = None) -> None:
        self.codec.reset(index)
        if self.memory is not None:
            self.memory.reset(slice(None) if index is None else index)

    def observe(self, observations: np.ndarray) -> np.ndarray:
        obs = np.asarray(observations, dtype=np.float32)
        estimate, grant = self.codec.proposal(obs)
        N, T, B = self.encoder.n_teams, self.encoder.n_tiers, len(obs)
        cells = self.encoder.encode(obs, estimate, grant)
        if self.memory is not None:
            cells = np.concatenate([cells, self.memory.features(obs)], axis=3)
        padded = np.zeros((B, MAX_TEAMS, MAX_TIERS, self.view.n_features), dtype=np.float32)
        padded[:, :N, :T] = cells
        return np.concatenate([padded.reshape(B, -1), np.broadcast_to(self.mask.ravel(), (B, CELLS))], axis=1)

    def act(self, observations: np.ndarray, module_actions: np.ndarray) -> np.ndarray:
        """Every arena's env action from one code per padded cell ``(B, CELLS)``: the real cells' codes decoded."""
        N, T = self.encoder.n_teams, self.encoder.n_tiers
        codes = np.asarray(module_actions, dtype=np.int64).reshape(-1, MAX_TEAMS, MAX_TIERS)[:, :N, :T]
        obs = np.asarray(observations, dtype=np.float32)
        actions = self.codec.decode(obs, codes.reshape(len(codes), -1))
        if self.memory is not None:
            self.memory.record(obs, actions)
        return actions


class UniversalInterface(OneArenaInterface[BatchUniversalInterface]):
    """:class:`BatchUniversalInterface` in one arena (a batch of one): what a universal checkpoint plays through,
    and training's per-arena env shows a cell network; its ``batched`` holds the view, encoder and ``zero`` code."""

    def __init__(self, config: ScenarioConfig, agent: str = ALLOCATOR, codec: dict[str, Any] | str | None = "need",
                 features: str | CellView = FEATURES_VERSION) -> None:
        super().__init__(BatchUniversalInterface(config, agent, codec, features))


def split_view(obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A padded flat view (or a batch of them) of any version -> (cells x its features, cells mask)."""
    obs = np.asarray(obs)
    lead, n = obs.shape[:-1], obs.shape[-1] // CELLS - 1  # a view is CELLS x (features + 1) wide
    return obs[..., : CELLS * n].reshape(*lead, CELLS, n), obs[..., CELLS * n:]


class CellNetwork:
    """A per-cell :class:`PolicyNetwork` (cell features -> its code's logits) played on every
    real cell of a padded view: ``greedy(view)`` -> one code per padded cell (``zero`` in
    padded ones). What a universal checkpoint's weights are.

    ``gate`` keeps a cell's correction only where the network is sure of it: a cell whose most likely
    code has probability below ``gate`` plays ``zero`` (the base planner's plan for that cell). 0 plays
    the argmax everywhere, as trained; on a cluster unlike the training ones an unsure correction is
    more often a mistake than a gain (docs/training.md, "The gate"). ``features``: the cell view it reads."""

    def __init__(self, network: PolicyNetwork, zero: int, gate: float = 0.0,
                 features: str | CellView = FEATURES_VERSION) -> None:
        view = cell_view(features)
        if network.input_size != view.n_features or len(network.nvec) != 1:
            raise CheckpointError(f"a per-cell network of {view.name} takes {view.n_features} features and outputs one "
                                  f"code; this one takes {network.input_size} and outputs {len(network.nvec)}")
        if not 0.0 <= gate < 1.0:
            raise ValueError(f"gate must be in [0, 1): the least probability of a correction that is played, got {gate}")
        self.network, self.zero, self.gate, self.view = network, int(zero), float(gate), view
        self.input_size = view.obs_size

    def reset(self, rows: np.ndarray | None = None) -> None:
        """Stateless."""

    def greedy(self, obs: np.ndarray) -> np.ndarray:
        obs = np.asarray(obs, dtype=np.float32)
        if obs.shape != (self.input_size,):
            raise ValueError(f"observation shape mismatch: the universal view ({self.view.name}) is "
                             f"({self.input_size},), got {obs.shape}")
        return self.greedy_rows(obs[None])[0]

    def greedy_rows(self, obs: np.ndarray) -> np.ndarray:
        """One code per padded cell ``(B, CELLS)`` for ``(B, view.obs_size)`` views, one forward pass."""
        cells, mask = split_view(np.asarray(obs, dtype=np.float32))
        logits = self.network.logits(cells.reshape(-1, self.view.n_features)).reshape(*cells.shape[:2], -1)
        code = logits.argmax(axis=-1)
        if self.gate > 0.0:
            # the argmax's probability: 1 / sum(exp(logit - max logit)), no overflow
            sure = 1.0 / np.exp(logits - logits.max(axis=-1, keepdims=True)).sum(axis=-1) >= self.gate
            code = np.where(sure, code, self.zero)
        return np.where(mask > 0.5, code, self.zero).astype(np.int64)


__all__ = [
    "CELLS", "CELL_FEATURES", "CELL_VIEWS", "FEATURES_VERSION", "FEATURE_NAMES", "GLOBAL_FEATURES", "MAX_TEAMS",
    "MAX_TIERS", "MEMORY_FEATURES", "N_FEATURES", "N_MEMORY_FEATURES", "OBS_SIZE", "SHAPE_FREE_CODECS", "TEAM_FEATURES",
    "TIER_FEATURES", "CellEncoder", "CellNetwork", "CellView", "DeclarationMemory", "BatchUniversalInterface",
    "UniversalInterface", "cell_view", "check_shape", "split_view",
]
