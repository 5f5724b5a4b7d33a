"""Codecs over a batch of arenas: one seat's codec in N arenas, on stacked observations and codes.

A :class:`BatchCodec` is N copies of one per-arena :class:`~policies.codecs.Codec` (same
scenario, same seat) held as arrays, with the same shape of interface:

==========================================  ====================================================
``reset(index=None)``                       new episodes in arenas ``index`` (all when None)
``features(observations) -> (N, k)``        float32, row *i* = the codec's ``features`` of row *i*
``decode(observations, codes) -> (N, a)``   int64, row *i* = the codec's ``decode`` of row *i*
``codec``                                   the per-arena codec: ``name``, ``nvec``, ``zero_code``,
                                            ``n_features`` (the code space is the same)
==========================================  ====================================================

Row *i* is bit for bit what the per-arena codec returns after the same resets and calls
(tests/policies/test_batch_codecs.py); a stateful codec (``need``, ``residual``: the planner's
beliefs; ``bluff``: last tick's declaration) keeps its state per arena. :class:`LoopBatchCodec`
(N per-arena codecs in a loop) is the reference and the fallback: :func:`make_batch_codec` gives
the batched form where one exists (:data:`BATCH_CODECS`: every codec of ``policies.codecs``) and
the loop otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from commons_arena.batched.tick import repair_grants
from commons_arena.enums import ALLOCATOR, BROKER, Stance
from commons_arena.numerics import left_to_right_sum
from commons_arena.scenario import ScenarioConfig
from policies.allocators import PRICE_SLACK, SPEND_EPS
from policies.batch import reset_indices
from policies.codecs import (
    AbsoluteAllocatorCodec,
    AllocatorCodec,
    BluffTeamCodec,
    Codec,
    FairNeedCodec,
    ImpartialNeedCodec,
    MarkupBrokerCodec,
    NeedResidualCodec,
    PerTierBluffTeamCodec,
    RelativeAllocatorCodec,
    ResidualPlannerCodec,
    make_codec,
)
from policies.teams import declare


def _arenas(num_envs: int, index: np.ndarray | None) -> np.ndarray:
    """The arenas a ``reset(index)`` names (all when None), checked."""
    return reset_indices(num_envs, [None] * (num_envs if index is None else np.asarray(index).size), index)


class BatchCodec:
    """Base of the batched codecs (module docstring): ``codec`` is the per-arena codec they copy."""

    name: ClassVar[str] = ""
    codec: Codec
    num_envs: int

    def _start(self, codec: Codec, num_envs: int) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, got {num_envs}")
        self.codec, self.num_envs = codec, num_envs
        self._slices = codec.obs.slices

    def field(self, observations: np.ndarray, name: str, shape: tuple[int, ...] = ()) -> np.ndarray:
        """One named observation field of every arena, ``(N, *shape)``."""
        return observations[:, self._slices[name]].reshape((len(observations), *shape) if shape else (len(observations), -1))

    def check(self, observations: np.ndarray, codes: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The observations (and codes) as arrays of the right shape; ValueError naming what is wrong."""
        obs = np.asarray(observations)
        if obs.shape != (self.num_envs, self.codec.obs.size):
            raise ValueError(f"codec {self.codec.name!r}: observations must be ({self.num_envs}, {self.codec.obs.size}), "
                             f"one row per arena, got shape {obs.shape}")
        if codes is None:
            return obs, np.zeros((0,), dtype=np.int64)
        code = np.asarray(codes, dtype=np.int64)
        nvec = self.codec.nvec
        if code.shape != (self.num_envs, len(nvec)) or ((code < 0) | (code >= nvec)).any():
            raise ValueError(f"codec {self.codec.name!r}: codes must be ({self.num_envs}, {len(nvec)}) in "
                             f"MultiDiscrete{nvec.tolist()}, got shape {code.shape}")
        return obs, code

    def reset(self, index: np.ndarray | None = None) -> None:
        """New episodes in arenas ``index`` (all when None); stateless codecs only check ``index``."""
        _arenas(self.num_envs, index)

    def features(self, observations: np.ndarray) -> np.ndarray:
        obs, _ = self.check(observations)
        return np.zeros((len(obs), 0), dtype=np.float32)

    def decode(self, observations: np.ndarray, codes: np.ndarray) -> np.ndarray:
        raise NotImplementedError


class LoopBatchCodec(BatchCodec):
    """N per-arena codecs called one by one: the reference every batched codec is held to, and
    how a codec with no batched form acts in a batch."""

    def __init__(self, make: Callable[[], Codec], num_envs: int) -> None:
        self.codecs = [make() for _ in range(max(num_envs, 1))]
        self._start(self.codecs[0], num_envs)

    def reset(self, index: np.ndarray | None = None) -> None:
        for i in _arenas(self.num_envs, index).tolist():
            self.codecs[i].reset()

    def features(self, observations: np.ndarray) -> np.ndarray:
        obs, _ = self.check(observations)
        return np.stack([c.features(o) for c, o in zip(self.codecs, obs, strict=True)])

    def decode(self, observations: np.ndarray, codes: np.ndarray) -> np.ndarray:
        obs, code = self.check(observations, codes)
        return np.stack([np.asarray(c.decode(o, k), dtype=np.int64) for c, o, k in zip(self.codecs, obs, code, strict=True)])


# ---------------------------------------------------------------------- the allocator


def within_budget_rows(buy: np.ndarray, price: np.ndarray, budget: np.ndarray) -> np.ndarray:
    """:func:`policies.codecs.within_budget` of each row: purchases ``(N, tiers)`` cut to the
    budget, most expensive tier first (ties: higher index), one unit at a time."""
    buy = buy.astype(np.int64)
    prices = np.asarray(price, dtype=np.float64) * PRICE_SLACK
    money = np.asarray(budget, dtype=np.float64) - SPEND_EPS
    cost = left_to_right_sum(buy * prices)
    ar = np.arange(len(buy))
    tiers = np.broadcast_to(np.arange(buy.shape[1]), buy.shape)
    for tier in np.lexsort((tiers, prices), axis=-1)[:, ::-1].T:  # dearest first
        unit = prices[ar, tier]
        cutting = (buy[ar, tier] > 0) & (cost > money)
        while cutting.any():
            buy[ar, tier] -= cutting
            cost = np.where(cutting, cost - unit, cost)
            cutting &= (buy[ar, tier] > 0) & (cost > money)
    return buy


def repair_grants_rows(grants: np.ndarray, available: np.ndarray) -> np.ndarray:
    """:func:`commons_arena.mechanics.grants.repair_grants` of each row: grants ``(N, teams,
    tiers)`` scaled per tier to ``available`` ``(N, tiers)`` (the batched core's own repair)."""
    fixed, _ = repair_grants(grants.astype(np.int64), np.asarray(available).astype(np.int64))
    return fixed


class BatchAllocatorCodec(BatchCodec):
    """Base of the batched allocator codecs: :meth:`feasible` is :meth:`AllocatorCodec.feasible` per row."""

    codec: AllocatorCodec

    def __init__(self, config: ScenarioConfig, num_envs: int, agent: str = ALLOCATOR) -> None:
        self._start(self.per_arena(config, agent), num_envs)
        self._top = self.codec.env_nvec - 1

    per_arena: ClassVar[type[AllocatorCodec]]

    def feasible(self, obs: np.ndarray, wanted: np.ndarray, buy: np.ndarray | None = None) -> np.ndarray:
        online = self.field(obs, "online").astype(np.int64)
        offered = self.field(obs, "offer_qty").astype(np.int64)
        wanted = np.clip(wanted, 0, self.codec.ceiling)
        if buy is None:
            buy = np.maximum(wanted.sum(axis=1) - online, 0)
        buy = within_budget_rows(np.minimum(buy, offered), self.field(obs, "offer_price"), self.field(obs, "budget")[:, 0])
        grants = repair_grants_rows(wanted, online + buy)
        return np.minimum(np.concatenate([buy, grants.reshape(len(obs), -1)], axis=1), self._top)


class BatchRelativeCodec(BatchAllocatorCodec):
    """``relative`` in N arenas (:class:`~policies.codecs.RelativeAllocatorCodec`)."""

    name = "relative"
    per_arena = RelativeAllocatorCodec

    def decode(self, observations: np.ndarray, codes: np.ndarray) -> np.ndarray:
        obs, code = self.check(observations, codes)
        c = self.codec
        assert isinstance(c, RelativeAllocatorCodec)
        T, N = c.n_tiers, c.n_teams
        buy_level, share_level = code[:, :T], code[:, T:]
        revealed = self.field(obs, "revealed")
        demand = np.where(revealed[:, :, None] > 0, self.field(obs, "revealed_need", (N, T)),
                          self.field(obs, "declared", (N, T))).astype(np.int64)
        levels = len(c.GRANT_SHARES)
        plus_one = (share_level == levels)[:, :, None]
        share = c.shares[np.minimum(share_level, levels - 1)][:, :, None]
        wanted = np.where(plus_one, demand + (demand > 0), np.rint(share * demand)).astype(np.int64)
        online = self.field(obs, "online").astype(np.int64)
        offered = self.field(obs, "offer_qty").astype(np.int64)
        shortfall = np.maximum(wanted.sum(axis=1) - online, 0)
        buy = np.select([buy_level == 1, buy_level == 2], [np.minimum(shortfall, offered), offered], 0)
        return self.feasible(obs, wanted, buy)


class BatchAbsoluteCodec(BatchAllocatorCodec):
    """``absolute`` in N arenas (:class:`~policies.codecs.AbsoluteAllocatorCodec`)."""

    name = "absolute"
    per_arena = AbsoluteAllocatorCodec

    def decode(self, observations: np.ndarray, codes: np.ndarray) -> np.ndarray:
        obs, code = self.check(observations, codes)
        return self.feasible(obs, code.reshape(len(obs), self.codec.n_teams, self.codec.n_tiers))


class BatchResidualCodec(BatchAllocatorCodec):
    """``residual`` in N arenas: one :class:`~policies.planner.BatchPlanner` proposes for every
    arena, each arena's planner seeing each of its observations once (as the per-arena codec's
    cache: a repeated observation is not observed again)."""

    name = "residual"
    per_arena = ResidualPlannerCodec
    codec: ResidualPlannerCodec

    def __init__(self, config: ScenarioConfig, num_envs: int, agent: str = ALLOCATOR) -> None:
        super().__init__(config, num_envs, agent)
        c = self.codec
        self.planner = c.planner.resized(num_envs)
        self._proposed = np.zeros(num_envs, dtype=bool)  # the row below holds a proposal for its arena
        self._seen = np.zeros((num_envs, c.obs.size), dtype=np.float64)
        self._buy = np.zeros((num_envs, c.n_tiers), dtype=np.int64)
        self._grant = np.zeros((num_envs, c.n_teams, c.n_tiers), dtype=np.int64)

    def reset(self, index: np.ndarray | None = None) -> None:
        arenas = _arenas(self.num_envs, index)
        self.planner.reset([None] * len(arenas), arenas)
        self._proposed[arenas] = False

    def _propose(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The planner's (buy, grant) of every arena; an arena's planner observes only an observation it has not just seen."""
        stale = np.flatnonzero(~self._proposed | ~(self._seen == obs).all(axis=1))
        if stale.size:
            everyone = stale.size == self.num_envs
            action = self.planner.act(obs if everyone else obs[stale], None if everyone else stale)
            T = self.codec.n_tiers
            self._seen[stale] = obs[stale]
            self._buy[stale] = action[:, :T]
            self._grant[stale] = action[:, T:].reshape(len(stale), self.codec.n_teams, T)
            self._proposed[stale] = True
        return self._buy, self._grant

    def proposal(self, observations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The planner's need estimate and grant of every arena ``(N, teams, tiers)`` each."""
        obs, _ = self.check(observations)
        _, grant = self._propose(obs)
        return self.planner.last_estimate, grant

    def features(self, observations: np.ndarray) -> np.ndarray:
        estimate, grant = self.proposal(observations)
        n = self.num_envs
        return (np.concatenate([estimate.reshape(n, -1), grant.reshape(n, -1)], axis=1)
                / self.codec.feature_scale).astype(np.float32)

    def correction(self, code: np.ndarray) -> np.ndarray:
        return self.codec.deltas[code].reshape(len(code), self.codec.n_teams, self.codec.n_tiers)

    def decode(self, observations: np.ndarray, codes: np.ndarray) -> np.ndarray:
        obs, code = self.check(observations, codes)
        buy, grant = self._propose(obs)
        delta = self.correction(code)
        action = np.concatenate([buy, grant.reshape(len(obs), -1)], axis=1)
        moved = np.flatnonzero(delta.any(axis=(1, 2)))
        if moved.size:
            action[moved] = self.corrected(obs[moved], moved, delta[moved])
        return action

    def corrected(self, obs: np.ndarray, arenas: np.ndarray, delta: np.ndarray) -> np.ndarray:
        """The action of the arenas ``arenas`` whose correction is not zero."""
        return self.feasible(obs, self._grant[arenas] + delta)


class BatchNeedCodec(BatchResidualCodec):
    """``need`` in N arenas (:class:`~policies.codecs.NeedResidualCodec`): the planner's
    estimate corrected, then the batched planner's plan of the arenas with a correction."""

    name = "need"
    per_arena = NeedResidualCodec
    codec: NeedResidualCodec

    def features(self, observations: np.ndarray) -> np.ndarray:
        obs, _ = self.check(observations)
        ticks = self.codec.ticks
        tick = np.zeros((len(obs), ticks), dtype=np.float32)
        tick[np.arange(len(obs)), np.minimum(self.field(obs, "tick")[:, 0].astype(np.int64), ticks - 1)] = 1.0
        return np.concatenate([super().features(obs), tick], axis=1)

    def corrected(self, obs: np.ndarray, arenas: np.ndarray, delta: np.ndarray) -> np.ndarray:
        need = np.minimum(np.maximum(self.planner.last_estimate[arenas] + delta, 0), self.codec.ceiling_row)
        return np.minimum(self.planner.plan(obs, need), self._top)


class BatchFairNeedCodec(BatchNeedCodec):
    """``need_fair`` in N arenas (:class:`~policies.codecs.FairNeedCodec`): ``need`` over the batched ``fair_planner``."""

    name = "need_fair"
    per_arena = FairNeedCodec
    codec: FairNeedCodec


class BatchImpartialNeedCodec(BatchFairNeedCodec):
    """``need_impartial`` in N arenas (:class:`~policies.codecs.ImpartialNeedCodec`)."""

    name = "need_impartial"
    per_arena = ImpartialNeedCodec
    codec: ImpartialNeedCodec


# ---------------------------------------------------------------------- teams


class BatchBluffCodec(BatchCodec):
    """``bluff`` (and ``bluff_per_tier``) in N arenas: the declaration each arena's last grant
    answered, and its true need then, kept per arena."""

    name = "bluff"
    codec: BluffTeamCodec

    def __init__(self, config: ScenarioConfig, num_envs: int, agent: str) -> None:
        self._start((PerTierBluffTeamCodec if self.name == "bluff_per_tier" else BluffTeamCodec)(config, agent), num_envs)
        T = self.codec.n_tiers
        self._answered = np.zeros((num_envs, T), dtype=np.float64)
        self._last_need = np.zeros((num_envs, T), dtype=np.float64)
        self._has_answer = np.zeros(num_envs, dtype=bool)
        rules = self.codec.STANCE_RULES
        self._escalate_after = np.array([-1 if r.escalate_after is None else r.escalate_after for r in rules])
        self._counter = np.array([r.counter for r in rules])

    def reset(self, index: np.ndarray | None = None) -> None:
        self._has_answer[_arenas(self.num_envs, index)] = False

    def features(self, observations: np.ndarray) -> np.ndarray:
        obs, _ = self.check(observations)
        c = self.codec
        grant = self.field(obs, "last_grant").astype(np.float64)
        asked = self._answered.sum(axis=1)
        granted = grant.sum(axis=1)
        discount = np.where(asked > 0, np.minimum(granted / np.where(asked > 0, asked, 1.0), 2.0), 1.0)
        live = np.concatenate([(self._answered - grant) / c.feature_ceiling, (self._last_need - grant) / c.feature_ceiling,
                               discount[:, None]], axis=1)
        blank = np.concatenate([np.zeros(2 * c.n_tiers), [1.0]])
        return np.where(self._has_answer[:, None], live, blank).astype(np.float32)

    def decode(self, observations: np.ndarray, codes: np.ndarray) -> np.ndarray:
        obs, code = self.check(observations, codes)
        c = self.codec
        need = self.field(obs, "need")
        request = declare(need, c.factors[code[:, : c.n_factors]], c.request_high)
        rule = code[:, -1]
        after, counter = self._escalate_after[rule], self._counter[rule]
        grant = self.field(obs, "last_grant")
        # policies.teams.stance, every arena at once
        escalate = (after >= 0) & (self.field(obs, "starved_streak")[:, 0] >= after)
        short = self._has_answer & (grant < self._answered).any(axis=1)
        answer = np.where(escalate, int(Stance.ESCALATE), np.where(counter & short, int(Stance.COUNTER), int(Stance.ACCEPT)))
        self._answered = self.field(obs, "declared").astype(np.float64)
        self._last_need = need.astype(np.float64)
        self._has_answer[:] = True
        return np.concatenate([request, answer[:, None]], axis=1).astype(np.int64)


class BatchPerTierBluffCodec(BatchBluffCodec):
    """``bluff_per_tier`` in N arenas."""

    name = "bluff_per_tier"


# ---------------------------------------------------------------------- the broker


class BatchMarkupCodec(BatchCodec):
    """``markup`` in N arenas (stateless)."""

    name = "markup"
    codec: MarkupBrokerCodec

    def __init__(self, config: ScenarioConfig, num_envs: int, agent: str = BROKER) -> None:
        self._start(MarkupBrokerCodec(config, agent), num_envs)
        c = self.codec
        self._slopes, self._crisis_levels = np.array(c.SLOPES), np.array(c.CRISIS_LEVELS)
        self._supply = np.array(c.SUPPLY)

    def features(self, observations: np.ndarray) -> np.ndarray:
        obs, _ = self.check(observations)
        return np.minimum(self.field(obs, "demand") / self.codec.capacity, 2.0).astype(np.float32)

    def decode(self, observations: np.ndarray, codes: np.ndarray) -> np.ndarray:
        obs, code = self.check(observations, codes)
        c = self.codec
        T = c.n_tiers
        base = c.base_levels[code[:, :T], np.arange(T)]
        demand = self.field(obs, "demand")
        # policies.brokers.demand_levels, every arena at once
        level = base + np.rint(self._slopes[code[:, T]][:, None] * np.minimum(demand / c.capacity, 2.0)).astype(np.int64)
        crisis = self.field(obs, "crisis")[:, 0] > 0
        level = np.minimum(np.where(crisis[:, None], level + self._crisis_levels[code[:, T + 1]][:, None], level), c.top)
        inventory = self.field(obs, "inventory").astype(np.int64)
        supply = self._supply[code[:, T + 2]][:, None]
        quantity = np.minimum(np.ceil(inventory * supply - 1e-9).astype(np.int64), inventory)
        return np.minimum(np.concatenate([quantity, level], axis=1), c.env_nvec - 1).astype(np.int64)


# ---------------------------------------------------------------------- by name

BATCH_CODECS: dict[str, type[BatchCodec]] = {
    c.name: c
    for c in (BatchRelativeCodec, BatchAbsoluteCodec, BatchResidualCodec, BatchNeedCodec, BatchFairNeedCodec,
              BatchImpartialNeedCodec, BatchBluffCodec,
              BatchPerTierBluffCodec, BatchMarkupCodec)
}


def make_batch_codec(name: str, config: ScenarioConfig, num_envs: int, agent: str = ALLOCATOR, **params: Any) -> BatchCodec:
    """Codec ``name`` for ``agent``'s seat in ``num_envs`` arenas: its batched form, or the loop
    of per-arena codecs when it has none or is given parameters (the per-arena codec checks
    name, role and parameters: :func:`~policies.codecs.make_codec`)."""
    make_codec(name, config, agent, **params)  # the same errors as one arena's
    batched = BATCH_CODECS.get(name)
    if batched is None or params:
        return LoopBatchCodec(lambda: make_codec(name, config, agent, **params), num_envs)
    return batched(config, num_envs, agent)  # type: ignore[call-arg]


__all__ = [
    "BATCH_CODECS",
    "BatchAbsoluteCodec",
    "BatchAllocatorCodec",
    "BatchBluffCodec",
    "BatchCodec",
    "BatchFairNeedCodec",
    "BatchImpartialNeedCodec",
    "BatchMarkupCodec",
    "BatchNeedCodec",
    "BatchPerTierBluffCodec",
    "BatchRelativeCodec",
    "BatchResidualCodec",
    "LoopBatchCodec",
    "make_batch_codec",
    "repair_grants_rows",
    "within_budget_rows",
]
