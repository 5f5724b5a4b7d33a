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
* **A fixed-size view for RLlib.** RLlib needs one observation and action space for every
  episode of a run, whatever scenario it plays: the cells are padded to
  :data:`MAX_TEAMS` x :data:`MAX_TIERS` (the family's maximum) and a mask says which are
  real. Padded cells' codes are ignored (the codec decodes the real cells only).

A scenario larger than the maximum is refused with a :class:`CheckpointError` naming both
shapes (:func:`check_shape`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from commons_arena.enums import ALLOCATOR, ShockKind, Stance
from commons_arena.rules import rules_for
from commons_arena.scenario import ARCHETYPES, MAX_TICKS, ScenarioConfig
from commons_arena.spaces import observation_layout, role_of
from policies.checkpoint_format import CheckpointError, PolicyNetwork
from policies.codecs import Codec, ResidualPlannerCodec, make_batch_codec, make_codec

# The family's largest cluster (commons_arena family "broad": teams 2-8, tiers 1-4); the
# padded view RLlib sees has this many cells.
MAX_TEAMS = 8
MAX_TIERS = 4
CELLS = MAX_TEAMS * MAX_TIERS
FEATURES_VERSION = "cells_v1"  # recorded in the checkpoint: a reader that computes other features refuses it
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
FEATURE_NAMES = GLOBAL_FEATURES + TIER_FEATURES + TEAM_FEATURES + CELL_FEATURES
N_FEATURES = len(FEATURE_NAMES)
OBS_SIZE = CELLS * N_FEATURES + CELLS  # every cell's features (team-major), then the mask
GPU_COUNT_CAP = 8.0  # absolute GPU counts (the corrections are -2..+2 GPUs) are shown cut at this, / this


def view_fields() -> dict[str, Any]:
    """The padded view a universal checkpoint records (and a reader must compute alike)."""
    return {"max_teams": MAX_TEAMS, "max_tiers": MAX_TIERS, "features": FEATURES_VERSION, "cell_features": N_FEATURES}


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

    def encode(self, observation: np.ndarray, estimate: np.ndarray, grant: np.ndarray) -> np.ndarray:
        """Features (teams x tiers x N_FEATURES) of this tick's observation: :meth:`encode_rows` of a batch of one."""
        return self.encode_rows(np.asarray(observation)[None], np.asarray(estimate)[None], np.asarray(grant)[None])[0]

    def encode_rows(self, observations: np.ndarray, estimate: np.ndarray, grant: np.ndarray) -> np.ndarray:
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


class UniversalInterface:
    """What sits between the allocator's seat and a shape-free module: the padded cell view.

    The same methods as :class:`policies.learned.ModuleInterface` (``observe``, ``act``,
    ``reset``, ``observation_space``, ``action_space``, ``input_size``, ``codec``), so
    training's env and ``learned:`` play it alike. ``observe`` returns the padded flat view
    (:data:`OBS_SIZE`: every cell's features, then the mask); ``act`` takes one code per
    padded cell and decodes the real ones with the codec.
    """

    shape_free = True
    history = 1

    def __init__(self, config: ScenarioConfig, agent: str = ALLOCATOR, codec: dict[str, Any] | str | None = "need") -> None:
        name = codec if isinstance(codec, str) or codec is None else codec["name"]
        if role_of(config, agent) != ALLOCATOR:
            raise CheckpointError(f"the universal view plays the allocator seat; {agent!r} is not it")
        if name not in SHAPE_FREE_CODECS:
            raise CheckpointError(f"the universal allocator acts through a per-(team, tier) codec "
                                  f"({', '.join(SHAPE_FREE_CODECS)}), not {name!r}")
        self.encoder = CellEncoder(config)  # refuses a scenario beyond the maximum
        self.config, self.agent = config, agent
        made: Codec = make_codec(name, config, agent)
        assert isinstance(made, ResidualPlannerCodec)
        self.codec: ResidualPlannerCodec = made
        self.n_actions = len(self.codec.DELTAS)
        self.zero = self.codec.DELTAS.index(0)
        N, T = self.encoder.n_teams, self.encoder.n_tiers
        self.mask = np.zeros((MAX_TEAMS, MAX_TIERS), dtype=np.float32)
        self.mask[:N, :T] = 1.0

    @property
    def input_size(self) -> int:
        return OBS_SIZE

    def observation_space(self) -> Any:
        import gymnasium as gym

        low = np.concatenate([np.full(CELLS * N_FEATURES, -FEATURE_BOUND), np.zeros(CELLS)]).astype(np.float32)
        high = np.concatenate([np.full(CELLS * N_FEATURES, FEATURE_BOUND), np.ones(CELLS)]).astype(np.float32)
        return gym.spaces.Box(low, high, dtype=np.float32)

    def action_space(self) -> Any:
        import gymnasium as gym

        return gym.spaces.MultiDiscrete(np.full(CELLS, self.n_actions))

    def reset(self) -> None:
        self.codec.reset()

    def observe(self, observation: np.ndarray) -> np.ndarray:
        estimate, grant = self.codec.proposal(np.asarray(observation, dtype=np.float32))
        cells = self.encoder.encode(observation, estimate, grant)
        N, T = self.encoder.n_teams, self.encoder.n_tiers
        padded = np.zeros((MAX_TEAMS, MAX_TIERS, N_FEATURES), dtype=np.float32)
        padded[:N, :T] = cells
        return np.concatenate([padded.ravel(), self.mask.ravel()])

    def code_for_scenario(self, module_action: np.ndarray) -> np.ndarray:
        """The real cells' codes (teams x tiers, raveled) of a padded action."""
        N, T = self.encoder.n_teams, self.encoder.n_tiers
        return np.asarray(module_action, dtype=np.int64).reshape(MAX_TEAMS, MAX_TIERS)[:N, :T].ravel()

    def act(self, observation: np.ndarray, module_action: np.ndarray) -> np.ndarray:
        return self.codec.decode(np.asarray(observation, dtype=np.float32), self.code_for_scenario(module_action))


class BatchUniversalInterface:
    """:class:`UniversalInterface` ``one`` in ``num_envs`` arenas: row *i* of :meth:`observe` and :meth:`act`
    is what arena *i*'s interface gives (the codec in N arenas, :func:`policies.codecs.make_batch_codec`)."""

    shape_free = True
    history = 1

    def __init__(self, one: UniversalInterface, num_envs: int) -> None:
        self.one, self.num_envs = one, num_envs
        self.encoder = one.encoder
        self.codec: Any = make_batch_codec(one.codec.name, one.config, num_envs, one.agent)
        self.no_action = np.full(CELLS, one.zero, dtype=np.int64)

    def reset(self, index: np.ndarray) -> None:
        self.codec.reset(index)

    def observe(self, observations: np.ndarray) -> np.ndarray:
        obs = np.asarray(observations, dtype=np.float32)
        estimate, grant = self.codec.proposal(obs)
        N, T, B = self.encoder.n_teams, self.encoder.n_tiers, len(obs)
        padded = np.zeros((B, MAX_TEAMS, MAX_TIERS, N_FEATURES), dtype=np.float32)
        padded[:, :N, :T] = self.encoder.encode_rows(obs, estimate, grant)
        return np.concatenate([padded.reshape(B, -1), np.broadcast_to(self.one.mask.ravel(), (B, CELLS))], axis=1)

    def act(self, observations: np.ndarray, module_actions: np.ndarray) -> np.ndarray:
        N, T = self.encoder.n_teams, self.encoder.n_tiers
        codes = np.asarray(module_actions, dtype=np.int64).reshape(-1, MAX_TEAMS, MAX_TIERS)[:, :N, :T]
        return self.codec.decode(np.asarray(observations, dtype=np.float32), codes.reshape(len(codes), -1))


def split_view(obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A padded flat view (or a batch of them) -> (cells x N_FEATURES features, cells mask)."""
    obs = np.asarray(obs)
    lead = obs.shape[:-1]
    return obs[..., : CELLS * N_FEATURES].reshape(*lead, CELLS, N_FEATURES), obs[..., CELLS * N_FEATURES:]


class CellNetwork:
    """A per-cell :class:`PolicyNetwork` (cell features -> its code's logits) played on every
    real cell of a padded view: ``greedy(view)`` -> one code per padded cell (``zero`` in
    padded ones). What a universal checkpoint's weights are.

    ``gate`` keeps a cell's correction only where the network is sure of it: a cell whose most likely
    code has probability below ``gate`` plays ``zero`` (the base planner's plan for that cell). 0 plays
    the argmax everywhere, as trained; on a cluster unlike the training ones an unsure correction is
    more often a mistake than a gain (docs/training.md, "The gate")."""

    def __init__(self, network: PolicyNetwork, zero: int, gate: float = 0.0) -> None:
        if network.input_size != N_FEATURES or len(network.nvec) != 1:
            raise CheckpointError(f"a per-cell network takes {N_FEATURES} features and outputs one code; this one takes "
                                  f"{network.input_size} and outputs {len(network.nvec)}")
        if not 0.0 <= gate < 1.0:
            raise ValueError(f"gate must be in [0, 1): the least probability of a correction that is played, got {gate}")
        self.network, self.zero, self.gate = network, int(zero), float(gate)
        self.input_size = OBS_SIZE

    def reset(self, rows: np.ndarray | None = None) -> None:
        """Stateless."""

    def greedy(self, obs: np.ndarray) -> np.ndarray:
        obs = np.asarray(obs, dtype=np.float32)
        if obs.shape != (OBS_SIZE,):
            raise ValueError(f"observation shape mismatch: the universal view is ({OBS_SIZE},), got {obs.shape}")
        return self.greedy_rows(obs[None])[0]

    def greedy_rows(self, obs: np.ndarray) -> np.ndarray:
        """One code per padded cell ``(B, CELLS)`` for ``(B, OBS_SIZE)`` views, one forward pass."""
        cells, mask = split_view(np.asarray(obs, dtype=np.float32))
        logits = self.network.logits(cells.reshape(-1, N_FEATURES)).reshape(*cells.shape[:2], -1)
        code = logits.argmax(axis=-1)
        if self.gate > 0.0:
            # the argmax's probability: 1 / sum(exp(logit - max logit)), no overflow
            sure = 1.0 / np.exp(logits - logits.max(axis=-1, keepdims=True)).sum(axis=-1) >= self.gate
            code = np.where(sure, code, self.zero)
        return np.where(mask > 0.5, code, self.zero).astype(np.int64)


__all__ = [
    "CELLS", "CELL_FEATURES", "FEATURES_VERSION", "FEATURE_NAMES", "GLOBAL_FEATURES", "MAX_TEAMS", "MAX_TIERS",
    "N_FEATURES", "OBS_SIZE", "SHAPE_FREE_CODECS", "TEAM_FEATURES", "TIER_FEATURES", "CellEncoder", "CellNetwork",
    "BatchUniversalInterface", "UniversalInterface", "check_shape", "split_view", "view_fields",
]
