"""The action codecs as first written: one arena each (the executable spec of ``policies.codecs``).

``policies.codecs`` defines every codec once, over N arenas (one arena is a batch of one); these
are the per-arena codecs it replaced, kept as the spec it is held to arena by arena
(tests/policies/test_codecs.py, through :class:`LoopCodec`: N of them called one by one). The
docstrings of the policies module describe what each codec expresses; here only the rules are
kept. It is not shipped.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from commons_arena.batched.tick import repair_grants
from commons_arena.enums import ALLOCATOR, BROKER, Role
from commons_arena.numerics import dot
from commons_arena.rules import rules_for
from commons_arena.scenario import ScenarioConfig
from commons_arena.spaces import make_action_space, observation_layout, role_of
from policies import codecs as one
from policies.allocators import PRICE_SLACK, SPEND_EPS


class Codec:
    name: ClassVar[str] = ""
    role: ClassVar[Role]

    def __init__(self, config: ScenarioConfig, agent: str) -> None:
        if role_of(config, agent) != self.role:
            raise ValueError(f"codec {self.name!r} drives {self.role} seats; {agent!r} plays the {role_of(config, agent)} role")
        self.config, self.agent = config, agent
        self.obs = observation_layout(config, agent)
        self.n_teams, self.n_tiers = len(config.teams), len(config.gpu_tiers)
        self.env_nvec = make_action_space(config, agent).nvec
        self.ceiling = np.array([t.owned + t.spot_inventory for t in config.gpu_tiers], dtype=np.int64)
        # what features are divided by: a tier with no GPUs at all (owned 0, no spot) is valid and must not
        # divide by zero (0 / 0 = NaN reached the network)
        self.feature_ceiling = np.maximum(self.ceiling, 1)

    def reset(self) -> None:
        """A new episode starts (stateful codecs forget the last one)."""

    def features(self, observation: np.ndarray) -> np.ndarray:
        """Extra inputs for the module, computed once per tick before :meth:`decode`."""
        return np.zeros(0, dtype=np.float32)

    def decode(self, observation: np.ndarray, code: np.ndarray) -> np.ndarray:
        raise NotImplementedError


class AllocatorCodec(Codec):
    role = Role.ALLOCATOR

    def __init__(self, config: ScenarioConfig, agent: str = ALLOCATOR) -> None:
        super().__init__(config, agent)

    def feasible(self, view: dict[str, np.ndarray], wanted: np.ndarray, buy: np.ndarray | None = None) -> np.ndarray:
        """The env action for ``wanted`` grants (teams x tiers): buy what the grants need beyond
        the online GPUs (or ``buy``), within offer and budget; scale grants to what exists."""
        online = view["online"].astype(np.int64)
        offered = view["offer_qty"].astype(np.int64)
        wanted = np.clip(wanted, 0, self.ceiling)
        if buy is None:
            buy = np.maximum(wanted.sum(axis=0) - online, 0)
        buy = within_budget(np.minimum(buy, offered), view["offer_price"], float(view["budget"][0]))
        grants = repair_grants(wanted[None].astype(np.int64), (online + buy)[None].astype(np.int64))[0][0]
        return np.minimum(np.concatenate([buy, grants.ravel()]), self.env_nvec - 1)


def within_budget(buy: np.ndarray, price: np.ndarray, budget: float) -> np.ndarray:
    """Cut purchases to the budget, most expensive tier first (ties: higher index), as the env does."""
    buy = buy.astype(np.int64).copy()
    prices = (np.asarray(price, dtype=np.float64) * PRICE_SLACK).tolist()
    money = budget - SPEND_EPS
    cost = dot(buy, prices)
    for tier in sorted(range(len(buy)), key=lambda k: (prices[k], k), reverse=True):
        while buy[tier] > 0 and cost > money:
            buy[tier] -= 1
            cost -= prices[tier]
    return buy


class RelativeAllocatorCodec(AllocatorCodec):
    GRANT_SHARES = one.RelativeAllocatorCodec.GRANT_SHARES
    BUY_LEVELS = one.RelativeAllocatorCodec.BUY_LEVELS
    name = "relative"

    def __init__(self, config: ScenarioConfig, agent: str = ALLOCATOR) -> None:
        super().__init__(config, agent)
        self.shares = np.array(self.GRANT_SHARES)

    def decode(self, observation: np.ndarray, code: np.ndarray) -> np.ndarray:
        view = self.obs.view(observation)
        code = np.asarray(code, dtype=np.int64)
        buy_level, share_level = code[: self.n_tiers], code[self.n_tiers :]
        demand = np.where(view["revealed"][:, None] > 0, view["revealed_need"], view["declared"]).astype(np.int64)
        plus_one = (share_level == len(self.GRANT_SHARES))[:, None]
        share = self.shares[np.minimum(share_level, len(self.GRANT_SHARES) - 1)][:, None]
        wanted = np.where(plus_one, demand + (demand > 0), np.rint(share * demand)).astype(np.int64)
        online = view["online"].astype(np.int64)
        offered = view["offer_qty"].astype(np.int64)
        shortfall = np.maximum(wanted.sum(axis=0) - online, 0)
        buy = np.select([buy_level == 1, buy_level == 2], [np.minimum(shortfall, offered), offered], 0)
        return self.feasible(view, wanted, buy)


class AbsoluteAllocatorCodec(AllocatorCodec):
    name = "absolute"

    def decode(self, observation: np.ndarray, code: np.ndarray) -> np.ndarray:
        wanted = np.asarray(code, dtype=np.int64).reshape(self.n_teams, self.n_tiers)
        return self.feasible(self.obs.view(observation), wanted)


class ResidualPlannerCodec(AllocatorCodec):
    DELTAS = one.ResidualPlannerCodec.DELTAS
    name = "residual"

    def __init__(self, config: ScenarioConfig, agent: str = ALLOCATOR) -> None:
        super().__init__(config, agent)
        self.planner = self.base_planner(config)
        self.deltas = np.array(self.DELTAS, dtype=np.int64)
        self._proposal: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # (obs, buy, grant)
        # per tick, once or twice: what would otherwise be rebuilt each call (np.clip and np.tile
        # cost more than the arithmetic on arrays this small)
        self.feature_scale = np.tile(self.feature_ceiling, 2 * self.n_teams)
        self.ceiling_row = self.ceiling[None, :]
        self._top_action = self.env_nvec - 1

    @staticmethod
    def base_planner(config: ScenarioConfig) -> Any:
        """The planner whose estimate and grants the codec corrects (its zero code plays it), in one arena."""
        from policies.planner import BatchPlanner

        return BatchPlanner(config, ALLOCATOR, 1)

    def reset(self) -> None:
        self.planner.reset([None])
        self._proposal = None

    def _propose(self, observation: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The planner's (buy, grant) for this observation; the planner sees each tick once."""
        if self._proposal is None or not np.array_equal(self._proposal[0], observation):
            action = self.planner.act(observation[None])[0]
            T = self.n_tiers
            self._proposal = (np.array(observation, copy=True), action[:T], action[T:].reshape(self.n_teams, T))
        return self._proposal[1], self._proposal[2]

    def features(self, observation: np.ndarray) -> np.ndarray:
        _, grant = self._propose(observation)
        estimate = self.planner.last_estimate[0]
        return (np.concatenate([estimate.ravel(), grant.ravel()]) / self.feature_scale).astype(np.float32)

    def correction(self, code: np.ndarray) -> np.ndarray:
        """The GPUs ``code`` adds per (team, tier)."""
        return self.deltas[np.asarray(code, dtype=np.int64)].reshape(self.n_teams, self.n_tiers)

    def decode(self, observation: np.ndarray, code: np.ndarray) -> np.ndarray:
        buy, grant = self._propose(observation)
        delta = self.correction(code)
        if not delta.any():
            return np.concatenate([buy, grant.ravel()]).astype(np.int64)
        return self.feasible(self.obs.view(observation), grant + delta)


class NeedResidualCodec(ResidualPlannerCodec):
    name = "need"

    def __init__(self, config: ScenarioConfig, agent: str = ALLOCATOR) -> None:
        super().__init__(config, agent)
        self.ticks = config.max_ticks + 1
        self._tick = self.obs.slices["tick"]

    def features(self, observation: np.ndarray) -> np.ndarray:
        tick = np.zeros(self.ticks, dtype=np.float32)
        tick[min(int(observation[self._tick][0]), self.ticks - 1)] = 1.0
        return np.concatenate([super().features(observation), tick])

    def decode(self, observation: np.ndarray, code: np.ndarray) -> np.ndarray:
        buy, grant = self._propose(observation)
        delta = self.correction(code)
        if not delta.any():
            return np.concatenate([buy, grant.ravel()]).astype(np.int64)
        need = np.minimum(np.maximum(self.planner.last_estimate[0] + delta, 0), self.ceiling_row)  # np.clip's result
        headroom = self.planner.unbought(np.arange(1))
        return np.minimum(self.planner.plan(observation[None], need[None], headroom=headroom)[0], self._top_action)


class FairNeedCodec(NeedResidualCodec):
    name = "need_fair"

    @staticmethod
    def base_planner(config: ScenarioConfig) -> Any:
        from policies.mechanisms import BatchFairPlanner

        return BatchFairPlanner(config, ALLOCATOR, 1)


class ImpartialNeedCodec(FairNeedCodec):
    name = "need_impartial"

    @staticmethod
    def base_planner(config: ScenarioConfig) -> Any:
        from policies.mechanisms import BatchFairPlanner

        return BatchFairPlanner(config, ALLOCATOR, 1, heed_escalation=False)


class ThriftyNeedCodec(ImpartialNeedCodec):
    name = "need_thrifty"

    @staticmethod
    def base_planner(config: ScenarioConfig) -> Any:
        from policies.mechanisms import BatchFairPlanner

        return BatchFairPlanner(config, ALLOCATOR, 1, heed_escalation=False, buy_headroom=False)


# ---------------------------------------------------------------------- teams




class BluffTeamCodec(Codec):
    FACTORS = one.BluffTeamCodec.FACTORS
    STANCE_RULES = one.BluffTeamCodec.STANCE_RULES
    name = "bluff"
    role = Role.TEAM
    per_tier = False

    def __init__(self, config: ScenarioConfig, agent: str) -> None:
        super().__init__(config, agent)
        sl = self.obs.slices
        self._need, self._grant, self._declared = sl["need"], sl["last_grant"], sl["declared"]
        self._streak = sl["starved_streak"].start
        self.request_high = self.env_nvec[: self.n_tiers] - 1
        self.factors = np.array(self.FACTORS)
        self.n_factors = self.n_tiers if self.per_tier else 1
        self.reset()

    def reset(self) -> None:
        self._answered: np.ndarray | None = None  # the declaration last tick's grant answered
        self._last_need: np.ndarray | None = None  # true need at last tick

    def features(self, observation: np.ndarray) -> np.ndarray:
        if self._answered is None or self._last_need is None:
            return np.concatenate([np.zeros(2 * self.n_tiers), [1.0]]).astype(np.float32)
        grant = observation[self._grant].astype(np.float64)
        asked = float(self._answered.sum())
        discount = min(float(grant.sum()) / asked, 2.0) if asked > 0 else 1.0
        return np.concatenate([(self._answered - grant) / self.feature_ceiling, (self._last_need - grant) / self.feature_ceiling,
                               [discount]]).astype(np.float32)

    def decode(self, observation: np.ndarray, code: np.ndarray) -> np.ndarray:
        from policies.teams import declare, stance

        code = np.asarray(code, dtype=np.int64)
        need = observation[self._need]
        request = declare(need, self.factors[code[: self.n_factors]], self.request_high)
        rule = self.STANCE_RULES[int(code[-1])]
        answer = stance(observation[self._streak], observation[self._grant], self._answered, rule.escalate_after,
                        rule.counter)
        # this tick's `declared` is what next tick's `last_grant` answers (as in policies.teams)
        self._answered = observation[self._declared].astype(np.float64)
        self._last_need = need.astype(np.float64)
        return np.concatenate([request, [int(answer)]]).astype(np.int64)


class PerTierBluffTeamCodec(BluffTeamCodec):
    name = "bluff_per_tier"
    per_tier = True


# ---------------------------------------------------------------------- the broker


class MarkupBrokerCodec(Codec):
    MARGINS = one.MarkupBrokerCodec.MARGINS
    SLOPES = one.MarkupBrokerCodec.SLOPES
    CRISIS_LEVELS = one.MarkupBrokerCodec.CRISIS_LEVELS
    SUPPLY = one.MarkupBrokerCodec.SUPPLY
    name = "markup"
    role = Role.BROKER

    def __init__(self, config: ScenarioConfig, agent: str = BROKER) -> None:
        from policies.brokers import cost_covering_levels

        super().__init__(config, agent)
        sl = self.obs.slices
        self._inventory, self._demand, self._crisis = sl["inventory"], sl["demand"], sl["crisis"].start
        self.base_levels = np.stack([cost_covering_levels(config, m) for m in self.MARGINS])  # margins x tiers
        self.capacity = np.maximum(rules_for(config).capacity, 1.0)
        self.top = config.price_levels - 1

    def features(self, observation: np.ndarray) -> np.ndarray:
        return np.minimum(observation[self._demand] / self.capacity, 2.0).astype(np.float32)

    def decode(self, observation: np.ndarray, code: np.ndarray) -> np.ndarray:
        from policies.brokers import demand_levels

        code = np.asarray(code, dtype=np.int64)
        T = self.n_tiers
        base = self.base_levels[code[:T], np.arange(T)]
        level = demand_levels(base, observation[self._demand], self.capacity, self.SLOPES[code[T]],
                              bool(observation[self._crisis] > 0), self.CRISIS_LEVELS[code[T + 1]], self.top)
        inventory = observation[self._inventory].astype(np.int64)
        quantity = np.minimum(np.ceil(inventory * self.SUPPLY[code[T + 2]] - 1e-9).astype(np.int64), inventory)
        return np.minimum(np.concatenate([quantity, level]), self.env_nvec - 1).astype(np.int64)


# ---------------------------------------------------------------------- by name


CODECS: dict[str, type[Codec]] = {
    c.name: c
    for c in (RelativeAllocatorCodec, AbsoluteAllocatorCodec, ResidualPlannerCodec, NeedResidualCodec, FairNeedCodec,
              ImpartialNeedCodec, ThriftyNeedCodec, BluffTeamCodec, PerTierBluffTeamCodec, MarkupBrokerCodec)
}


class LoopCodec:
    def __init__(self, name: str, config: ScenarioConfig, agent: str, num_envs: int) -> None:
        self.codecs = [CODECS[name](config, agent) for _ in range(num_envs)]

    def reset(self, index: np.ndarray | None = None) -> None:
        for i in range(len(self.codecs)) if index is None else np.asarray(index).reshape(-1).tolist():
            self.codecs[i].reset()

    def features(self, observations: np.ndarray) -> np.ndarray:
        return np.stack([c.features(o) for c, o in zip(self.codecs, observations, strict=True)])

    def decode(self, observations: np.ndarray, codes: np.ndarray) -> np.ndarray:
        return np.stack([np.asarray(c.decode(o, k), dtype=np.int64) for c, o, k in zip(self.codecs, observations, codes, strict=True)])
