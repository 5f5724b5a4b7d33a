"""Action codecs: how a learned module's ``MultiDiscrete`` output becomes a seat's action,
plus the features a codec adds to the module's observation (docs/codecs.md).

A codec drives seats of one role (``Codec.role``). It is selected per seat by name
(:func:`make_codec`, which refuses another role's codec naming the right ones;
:func:`codecs_for_role`; :data:`DEFAULT_CODECS`) and recorded in the checkpoint's sidecar
(``{"name", "params"}``), so ``learned:<dir>`` decodes the same way. No codec at all (raw
actions: the module outputs the env action) stays selectable for every role.

==================  =========  ========================================  ==============================
codec               role       the module chooses                        can express
==================  =========  ========================================  ==============================
``relative``        allocator  a share level per team of its demand      only shares of what a team
                               (revealed need, else declaration) and a   declared, on the tier it
                               buy level per tier (none / shortfall /    declared; nothing at tick 0
                               everything offered)
``absolute``        allocator  the grant per (team, tier), 0 .. owned    any grant; purchases follow
                               + spot                                    from the grants
``residual``        allocator  a correction per (team, tier) in          everything ``planner`` does,
                               ``DELTAS`` = -2..+2 GPUs, added to the    plus grants no declaration is
                               ``planner``'s grant (0 = the planner)     behind, on any tier
``need``            allocator  a correction per (team, tier) in          needs the planner cannot see
                               ``DELTAS``, added to the ``planner``'s    (tick 0, jobs that arrive this
                               *need estimate*; the planner then plans   tick), planned with its spill
                               (0 = play the planner)                    to larger tiers and purchases
``need_fair``       allocator  the same over ``fair_planner``'s          the same, from a base that
                               estimate (the whole inflation undone,     pays no bluff in proportion
                               the same headroom for every team)         (0 = ``fair_planner``)
``need_impartial``  allocator  the same over ``fair_planner`` heeding    the same, an escalation buying
                               no escalating stance                      a team no precedence
``bluff``           team       one declaration factor of ``FACTORS``     declaring 0.5x .. 3x its own
                               (0.5, 0.75, 1, 1.1, 1.25, 1.5, 2, 3) for  true need, tick by tick, and
                               every tier, and a stance rule of          when to counter / escalate;
                               ``STANCE_RULES`` (accept, counter,        every scripted archetype is
                               escalate after 1 / 2 / 3 starved ticks,   one fixed code; zero code =
                               escalate always)                          ``truthful``
``bluff_per_tier``  team       the same, with one factor per tier        different bluffs per tier
                                                                         (measured: no more than
                                                                         ``bluff`` gains, see below)
``markup``          broker     a margin over unit cost per tier          a price that follows demand
                               (``MARGINS`` 1 .. 3x), a demand slope     (slope), crises (premium)
                               (``SLOPES``: levels per unit of demand /  and cost per tier, and
                               capacity), a crisis premium (+0..3        withholding supply; both
                               levels) and the share of inventory        scripted brokers are fixed
                               offered (1, 1/2, 0)                       codes; zero code =
                                                                         ``demand_priced``
==================  =========  ========================================  ==============================

Every codec also acts in N arenas at once, bit for bit per arena: ``policies.batch_codecs``
(docs/codecs.md). Every codec decodes to an action that needs no repair. Allocator codecs: purchases are what
the grants need beyond the online GPUs (cut to the offer, then to the budget, most expensive
tier first, like the env), and grants above online + bought are scaled down with the env's
own rule. Team codecs cut declarations to the action space; ``markup`` cuts price levels to
the grid and offers at most the inventory it observes.

``bluff`` and ``bluff_per_tier`` are strategies over what the team observes and the
allocator does not: its own true need. They keep the declaration the last grant answered (as
the scripted teams do), so :meth:`Codec.reset` starts an episode, and their features are
what a strategist reads from last tick: how far the grant fell short of the declaration and
of the true need, per tier, and the allocator's overall discount (granted / declared). Why
``bluff`` (one factor) is the team default: on ``crisis`` against ``proportional`` (search
seat) the best of all 512 per-tier factor triples gains exactly what the best single factor
gains (``commons-arena fixed-codes``, docs/codecs.md), while a factor on a
tier the team does not use is a choice with no consequence, noise in the gradient of every
other choice.

``markup`` makes "price follows demand" one choice (the slope) instead of a price level per
tier for every demand level; its feature is the demand ratio the slope multiplies.

``residual`` runs the planner itself (it keeps the planner's per-episode beliefs, so
:meth:`Codec.reset` starts an episode) and shows the module what the planner proposes:
:meth:`Codec.features` returns the planner's need estimate and grant per (team, tier),
appended to the module's observation. Its ``zero_code`` (every correction 0) is the action
training starts from (see ``experiments.training.weights.favour_code``).

``need`` corrects the planner's *estimate* instead of its grant, and the planner plans on
the corrected needs (its order of urgency, the spill to larger tiers, paced purchases). It
exists because of what the planner cannot know: its estimate is a declaration undone, one
tick late, so at tick 0 (nothing declared yet) and whenever jobs arrive it sees nothing,
while a learner sees, episode after episode, what teams need at each tick. Measured with
``commons-arena need-gap`` (30 held-out seeds, standard / elevated / crisis):
the planner plus the rounded average of (true need − estimate) at tick 0, learned from 200
episodes (reading the hidden need, so only a measurement), beats the planner by +11.4 / +29.0 / +42.8; that correction at every tick,
-0.5 / +35.3 / +57.2; the same applied to the grants instead (what ``residual`` can do),
-3.6 / +30.2 / +45.8. Its features add a one-hot of the tick, so a per-tick
correction is one weight away for the module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

from commons_arena.batched.tick import repair_grants
from commons_arena.enums import ALLOCATOR, BROKER, Role
from commons_arena.numerics import dot
from commons_arena.rules import rules_for
from commons_arena.scenario import ScenarioConfig
from commons_arena.spaces import make_action_space, observation_layout, role_of
from policies.allocators import PRICE_SLACK, SPEND_EPS


class Codec:
    """Base of every codec: ``nvec`` (the module's action space), ``decode`` and optional features.

    ``role`` says which seats it may drive (:func:`make_codec` refuses another role's seat);
    ``agent`` is the seat it decodes for."""

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

    @property
    def nvec(self) -> np.ndarray:
        raise NotImplementedError

    @property
    def zero_code(self) -> np.ndarray | None:
        """The code that plays the codec's base policy, if it has one."""
        return None

    @property
    def n_features(self) -> int:
        """Length of :meth:`features`."""
        return 0

    def reset(self) -> None:
        """A new episode starts (stateful codecs forget the last one)."""

    def features(self, observation: np.ndarray) -> np.ndarray:
        """Extra inputs for the module, computed once per tick before :meth:`decode`."""
        return np.zeros(0, dtype=np.float32)

    def decode(self, observation: np.ndarray, code: np.ndarray) -> np.ndarray:
        raise NotImplementedError


@runtime_checkable
class DescribesCodes(Protocol):
    """A codec that puts a code in words (the team and broker codecs; reports name codes by it)."""

    def describe(self, code: np.ndarray) -> str: ...


class AllocatorCodec(Codec):
    """Base of the allocator's codecs: :meth:`feasible` turns wanted grants into an action
    that needs no repair."""

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
    """Grants relative to demand.

    The module chooses one *share level* per team and one *buy level* per tier:

    * a team's grant on each tier is ``round(share x demand)``, where demand is its
      revealed true need once revealed, else its declaration, and ``share`` is one of
      ``GRANT_SHARES``; the last level grants the demand plus one GPU on each tier it asks for;
    * a tier's purchase is none, the shortfall (granted demand above the online GPUs), or
      everything offered, cut to the budget (most expensive tier first, as the env would).

    Grants above a tier's online + bought GPUs are scaled down with the env's own repair rule,
    so the codec never asks for more than exists (nothing is repaired). Learning one discount per team is far
    easier for a categorical policy than absolute GPU counts per (team, tier) — bluffs are
    per team — but it cannot grant without a declaration (tick 0, a job that arrived this
    tick) nor move a need to another tier.
    """

    GRANT_SHARES = (0.0, 1 / 3, 1 / 2, 2 / 3, 3 / 4, 1.0)  # then one more level: demand + 1
    BUY_LEVELS = 3  # none, shortfall, all offered
    name = "relative"

    def __init__(self, config: ScenarioConfig, agent: str = ALLOCATOR) -> None:
        super().__init__(config, agent)
        self.shares = np.array(self.GRANT_SHARES)

    @property
    def nvec(self) -> np.ndarray:
        return np.array([self.BUY_LEVELS] * self.n_tiers + [len(self.GRANT_SHARES) + 1] * self.n_teams)

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
    """The grant per (team, tier) itself (0 .. owned + spot inventory of the tier); purchases
    are what the grants need beyond the online GPUs, and nothing is ever repaired."""

    name = "absolute"

    @property
    def nvec(self) -> np.ndarray:
        return np.tile(self.ceiling + 1, self.n_teams)

    def decode(self, observation: np.ndarray, code: np.ndarray) -> np.ndarray:
        wanted = np.asarray(code, dtype=np.int64).reshape(self.n_teams, self.n_tiers)
        return self.feasible(self.obs.view(observation), wanted)


class ResidualPlannerCodec(AllocatorCodec):
    """Corrections to the ``planner``'s grants: ``DELTAS[code]`` GPUs per (team, tier).

    The zero correction plays the planner exactly (its purchases are what its grants need
    beyond the online GPUs, which is what this codec buys). Features: the planner's need
    estimate and its grant, per (team, tier), each divided by the tier's ceiling.
    """

    DELTAS = (-2, -1, 0, 1, 2)
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

    @property
    def n_features(self) -> int:
        return 2 * self.n_teams * self.n_tiers

    @property
    def nvec(self) -> np.ndarray:
        return np.full(self.n_teams * self.n_tiers, len(self.DELTAS))

    @property
    def zero_code(self) -> np.ndarray:
        return np.full(self.n_teams * self.n_tiers, self.DELTAS.index(0))

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

    def proposal(self, observation: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The planner's need estimate and grant for this observation (teams x tiers each, GPUs)."""
        _, grant = self._propose(observation)
        return self.planner.last_estimate[0], grant

    def features(self, observation: np.ndarray) -> np.ndarray:
        estimate, grant = self.proposal(observation)
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
    """Corrections to the ``planner``'s need estimate: ``DELTAS[code]`` GPUs per (team,
    tier), then the planner plans on the corrected needs (cut to 0 .. the tier's ceiling).

    The zero correction plays the planner exactly. Features: the planner's need estimate and
    its grant per (team, tier) (each divided by the tier's ceiling), then a one-hot of the
    tick (``max_ticks + 1`` entries; the last is also used for any later tick).
    """

    name = "need"

    def __init__(self, config: ScenarioConfig, agent: str = ALLOCATOR) -> None:
        super().__init__(config, agent)
        self.ticks = config.max_ticks + 1
        self._tick = self.obs.slices["tick"]

    @property
    def n_features(self) -> int:
        return super().n_features + self.ticks

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
        return np.minimum(self.planner.plan(observation[None], need[None])[0], self._top_action)


class FairNeedCodec(NeedResidualCodec):
    """``need`` over ``fair_planner`` (:class:`~policies.mechanisms.BatchFairPlanner`): the
    corrections move an estimate that undoes a team's whole inflation and adds the same headroom
    share for every team, so the zero code pays no bluff in proportion to it (``planner`` keeps
    half the inflation). The base of an allocator meant to be hard to exploit (docs/negotiation.md)."""

    name = "need_fair"

    @staticmethod
    def base_planner(config: ScenarioConfig) -> Any:
        from policies.mechanisms import BatchFairPlanner

        return BatchFairPlanner(config, ALLOCATOR, 1)


class ImpartialNeedCodec(FairNeedCodec):
    """``need_fair`` whose base heeds no escalation: ``fair_planner`` serving teams in order of board
    pressure, size and need, a team's escalating stance buying it no precedence and no purchase. On crisis
    this base keeps ``fair_planner``'s welfare while an escalating bluffer's gain falls (docs/negotiation.md)."""

    name = "need_impartial"

    @staticmethod
    def base_planner(config: ScenarioConfig) -> Any:
        from policies.mechanisms import BatchFairPlanner

        return BatchFairPlanner(config, ALLOCATOR, 1, heed_escalation=False)


# ---------------------------------------------------------------------- teams


@dataclass(frozen=True)
class StanceRule:
    """How a team answers last tick's grant (``policies.teams.stance``): escalate once starved
    ``escalate_after`` ticks in a row (0: every tick, None: never), else counter a grant short
    of its declaration (when ``counter``), else accept."""

    name: str
    escalate_after: int | None
    counter: bool


class BluffTeamCodec(Codec):
    """A declaration factor over the team's own true need, and a stance rule.

    The module chooses one factor of ``FACTORS`` (``bluff``: one for every tier;
    ``bluff_per_tier``: one per tier) and one rule of ``STANCE_RULES``; the team declares
    ``ceil(need x factor)`` per tier (``policies.teams.declare``, cut to the action space) and
    answers last tick's grant by the rule (``policies.teams.stance``). Every scripted archetype
    is one fixed code (:meth:`archetype_code`), and the zero code is ``truthful`` (factor 1,
    escalate after 2 starved ticks).

    Features (``2 x tiers + 1``), what a strategist reads from last tick: per tier, how far
    the grant fell short of the declaration it answered, and of the true need of that tick
    (each divided by the tier's ceiling; negative: more was granted), then the allocator's
    discount, total granted / total declared (cut to [0, 2]; 1 before anything was declared).
    """

    FACTORS = (0.5, 0.75, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0)
    STANCE_RULES = (
        StanceRule("accept", None, False),
        StanceRule("counter", None, True),
        StanceRule("escalate_1", 1, True),  # safety_first
        StanceRule("escalate_2", 2, True),  # truthful, growth, greedy_bluffer
        StanceRule("escalate_3", 3, True),  # reliability
        StanceRule("escalate", 0, True),  # every tick: unjustified whenever the team was not starved
    )
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

    @property
    def nvec(self) -> np.ndarray:
        return np.array([len(self.FACTORS)] * self.n_factors + [len(self.STANCE_RULES)])

    @property
    def zero_code(self) -> np.ndarray:
        return self.archetype_code("truthful")

    def code(self, factor: float, escalate_after: int | None, counter: bool = True) -> np.ndarray:
        """The code of ``factor`` on every tier with that stance rule (ValueError if the grid lacks it)."""
        rules = [(r.escalate_after, r.counter) for r in self.STANCE_RULES]
        if factor not in self.FACTORS or (escalate_after, counter) not in rules:
            raise ValueError(f"codec {self.name!r} has no code for factor {factor} with escalate_after={escalate_after}; "
                             f"factors: {list(self.FACTORS)}, stance rules: {[r.name for r in self.STANCE_RULES]}")
        return np.array([self.FACTORS.index(factor)] * self.n_factors + [rules.index((escalate_after, counter))])

    def archetype_code(self, archetype: str) -> np.ndarray:
        """The fixed code that plays a scripted archetype (``policies.teams.ARCHETYPE_PROFILES``)."""
        from policies.teams import ARCHETYPE_PROFILES

        profile = ARCHETYPE_PROFILES[archetype]
        return self.code(profile.bluff, profile.escalate_after)

    def describe(self, code: np.ndarray) -> str:
        """``code`` in words, e.g. ``x1.5, escalate_2`` (per tier: ``x1/x2/x1, accept``)."""
        code = np.asarray(code, dtype=np.int64)
        factors = "/".join(f"x{self.FACTORS[i]:g}" for i in code[:-1])
        return f"{factors}, {self.STANCE_RULES[code[-1]].name}"

    def reset(self) -> None:
        self._answered: np.ndarray | None = None  # the declaration last tick's grant answered
        self._last_need: np.ndarray | None = None  # true need at last tick

    @property
    def n_features(self) -> int:
        return 2 * self.n_tiers + 1

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
    """``bluff`` with one factor per tier (see :class:`BluffTeamCodec`)."""

    name = "bluff_per_tier"
    per_tier = True


# ---------------------------------------------------------------------- the broker


class MarkupBrokerCodec(Codec):
    """Prices relative to what the broker observes: a markup over unit cost, a demand slope,
    a crisis premium, and how much of the inventory to offer.

    The module chooses per tier a margin of ``MARGINS`` (the base level is the lowest price
    level covering ``unit_cost x margin``, ``policies.brokers.cost_covering_levels``), and
    once a slope of ``SLOPES`` (levels per unit of declared demand / tier capacity, the ratio
    cut at 2), a crisis premium of ``CRISIS_LEVELS`` (levels added while a market crisis
    lasts) and a share of the inventory to offer from ``SUPPLY`` (rounded up). Levels are
    cut to the price grid, quantities to the inventory: nothing is ever repaired. Both
    scripted brokers are fixed codes; the zero code is ``demand_priced`` (margin 1.2, slope
    3, premium 1, whole inventory). Features: the demand ratio per tier (what the slope
    multiplies).
    """

    MARGINS = (1.0, 1.2, 1.5, 2.0, 3.0)
    SLOPES = (0, 1, 2, 3, 5)
    CRISIS_LEVELS = (0, 1, 2, 3)
    SUPPLY = (1.0, 0.5, 0.0)
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

    @property
    def nvec(self) -> np.ndarray:
        return np.array([len(self.MARGINS)] * self.n_tiers
                        + [len(self.SLOPES), len(self.CRISIS_LEVELS), len(self.SUPPLY)])

    @property
    def zero_code(self) -> np.ndarray:
        return self.code(1.2, 3, 1, 1.0)

    def code(self, margin: float, slope: int, crisis_levels: int, supply: float = 1.0) -> np.ndarray:
        """The code of one margin on every tier and these choices (ValueError if the grid lacks one)."""
        grids = {"margin": (self.MARGINS, margin), "slope": (self.SLOPES, slope),
                 "crisis_levels": (self.CRISIS_LEVELS, crisis_levels), "supply": (self.SUPPLY, supply)}
        for what, (grid, value) in grids.items():
            if value not in grid:
                raise ValueError(f"codec {self.name!r} has no {what} {value}; {what}s: {list(grid)}")
        return np.array([self.MARGINS.index(margin)] * self.n_tiers
                        + [self.SLOPES.index(slope), self.CRISIS_LEVELS.index(crisis_levels), self.SUPPLY.index(supply)])

    def describe(self, code: np.ndarray) -> str:
        code = np.asarray(code, dtype=np.int64)
        T = self.n_tiers
        margins = "/".join(f"{self.MARGINS[i]:g}" for i in code[:T])
        return (f"margin {margins}, slope {self.SLOPES[code[T]]}, crisis +{self.CRISIS_LEVELS[code[T + 1]]}, "
                f"supply {self.SUPPLY[code[T + 2]]:g}")

    @property
    def n_features(self) -> int:
        return self.n_tiers

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
              ImpartialNeedCodec, BluffTeamCodec, PerTierBluffTeamCodec, MarkupBrokerCodec)
}
# The codec a learning seat of each role uses unless told otherwise (``None`` would be raw actions).
DEFAULT_CODECS: dict[str, str] = {Role.ALLOCATOR: "need", Role.TEAM: "bluff", Role.BROKER: "markup"}


def codecs_for_role(role: str) -> list[str]:
    """The codec names a seat of ``role`` (``allocator``, ``team``, ``broker``) may use."""
    if role not in set(Role):
        raise ValueError(f"unknown role {role!r}; roles are {[str(r) for r in Role]}")
    return [name for name, cls in CODECS.items() if cls.role == role]


def check_codec(name: str, config: ScenarioConfig, agent: str) -> type[Codec]:
    """The codec class ``name`` if it may drive ``agent``'s seat; ValueError naming that role's codecs otherwise."""
    role = role_of(config, agent)
    allowed = ", ".join(codecs_for_role(role))
    if name not in CODECS:
        raise ValueError(f"unknown action codec {name!r}; codecs for {role} seats: {allowed} (or none: raw actions)")
    cls = CODECS[name]
    if cls.role != role:
        raise ValueError(f"action codec {name!r} drives {cls.role} seats, but {agent!r} of scenario {config.name!r} "
                         f"plays the {role} role; codecs for {role} seats: {allowed} (or none: raw actions)")
    return cls


def make_codec(name: str, config: ScenarioConfig, agent: str = ALLOCATOR, **params: Any) -> Codec:
    """Codec ``name`` for ``agent``'s seat (refused, naming the right codecs, if it is another role's)."""
    return check_codec(name, config, agent)(config, agent, **params)


class CodedPolicy:
    """A policy that plays one fixed code of a codec every tick (a scripted policy written in
    the codec's terms: what the codec expresses without learning anything)."""

    def __init__(self, codec: Codec, code: np.ndarray) -> None:
        code = np.asarray(code, dtype=np.int64)
        if code.shape != codec.nvec.shape or not ((code >= 0) & (code < codec.nvec)).all():
            raise ValueError(f"code {code.tolist()} is not in codec {codec.name!r}'s space MultiDiscrete{codec.nvec.tolist()}")
        self.codec, self.code = codec, code

    def reset(self, seed: int | None = None) -> None:
        self.codec.reset()

    def act(self, observation: np.ndarray) -> np.ndarray:
        return self.codec.decode(np.asarray(observation), self.code)


__all__ = [
    "CODECS",
    "DEFAULT_CODECS",
    "AbsoluteAllocatorCodec",
    "AllocatorCodec",
    "BluffTeamCodec",
    "Codec",
    "CodedPolicy",
    "DescribesCodes",
    "MarkupBrokerCodec",
    "FairNeedCodec",
    "ImpartialNeedCodec",
    "NeedResidualCodec",
    "PerTierBluffTeamCodec",
    "RelativeAllocatorCodec",
    "ResidualPlannerCodec",
    "StanceRule",
    "check_codec",
    "codecs_for_role",
    "make_codec",
]
