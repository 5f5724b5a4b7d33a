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
``need_thrifty``    allocator  the same, the headroom never bought       the same, at less cost where GPUs
                                                                         are plenty
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

**One arena or N.** Each codec is defined once, over N arenas of one scenario (``num_envs``):
``features`` takes ``(N, obs_dim)`` observations, ``decode`` them and ``(N, len(nvec))`` codes, and
``reset(index)`` starts new episodes in some arenas; a stateful codec (``need``, ``residual``: the
planner's beliefs; ``bluff``: last tick's declaration) keeps its state per arena. One arena's codec
(:func:`make_codec`, ``num_envs`` 1) is a batch of one: given one observation ``(obs_dim,)`` (and
one code) it answers for it, without the leading axis (docs/codecs.md). The per-arena codecs this
replaced are the spec it is held to arena by arena (tests/reference/codecs.py).

Every codec decodes to an action that needs no repair. Allocator codecs: purchases are what
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
from commons_arena.enums import ALLOCATOR, BROKER, Role, Stance
from commons_arena.numerics import left_to_right_sum
from commons_arena.rules import rules_for
from commons_arena.scenario import ScenarioConfig
from commons_arena.spaces import make_action_space, observation_layout, role_of
from policies.allocators import PRICE_SLACK, SPEND_EPS
from policies.batch import reset_indices


class Codec:
    """Base of every codec: ``nvec`` (the module's action space), ``decode`` and optional features,
    in ``num_envs`` arenas (module docstring: one arena's codec also takes one observation).

    ``role`` says which seats it may drive (:func:`make_codec` refuses another role's seat);
    ``agent`` is the seat it decodes for. Subclasses implement :meth:`decode_rows` (and
    :meth:`features_of`, :meth:`clear` when they have features or state) over ``(N, ...)`` arrays."""

    name: ClassVar[str] = ""
    role: ClassVar[Role]

    def __init__(self, config: ScenarioConfig, agent: str, num_envs: int = 1) -> None:
        if role_of(config, agent) != self.role:
            raise ValueError(f"codec {self.name!r} drives {self.role} seats; {agent!r} plays the {role_of(config, agent)} role")
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, got {num_envs}")
        self.config, self.agent, self.num_envs = config, agent, num_envs
        self.obs = observation_layout(config, agent)
        self.n_teams, self.n_tiers = len(config.teams), len(config.gpu_tiers)
        self.env_nvec = make_action_space(config, agent).nvec
        self.ceiling = np.array([t.owned + t.spot_inventory for t in config.gpu_tiers], dtype=np.int64)
        # what features are divided by: a tier with no GPUs at all (owned 0, no spot) is valid and must not
        # divide by zero (0 / 0 = NaN reached the network)
        self.feature_ceiling = np.maximum(self.ceiling, 1)
        self._slices = self.obs.slices

    @property
    def nvec(self) -> np.ndarray:
        raise NotImplementedError

    @property
    def zero_code(self) -> np.ndarray | None:
        """The code that plays the codec's base policy, if it has one."""
        return None

    @property
    def n_features(self) -> int:
        """Length of a row of :meth:`features`."""
        return 0

    def reset(self, index: np.ndarray | None = None) -> None:
        """New episodes in arenas ``index`` (every arena when None): stateful codecs forget the last one."""
        self.clear(reset_indices(self.num_envs, [None] * (self.num_envs if index is None else np.asarray(index).size), index))

    def clear(self, arenas: np.ndarray) -> None:
        """Forget the per-episode state of ``arenas`` (a stateless codec has none)."""

    def features(self, observations: np.ndarray) -> np.ndarray:
        """Extra inputs for the module, computed once per tick before :meth:`decode`: ``(N, n_features)``
        float32 (one observation: its row)."""
        obs, one = self.rows(observations)
        out = self.features_of(obs)
        return out[0] if one else out

    def decode(self, observations: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """The env actions ``(N, act_dim)`` int64 for the module's codes (one observation and code: its row)."""
        obs, one = self.rows(observations)
        code = np.asarray(codes, dtype=np.int64)
        code = code[None] if one else code
        nvec = self.nvec
        if code.shape != (len(obs), len(nvec)) or ((code < 0) | (code >= nvec)).any():
            raise ValueError(f"codec {self.name!r}: codes must be ({len(obs)}, {len(nvec)}) in "
                             f"MultiDiscrete{nvec.tolist()}, got shape {code.shape}")
        out = self.decode_rows(obs, code)
        return out[0] if one else out

    def rows(self, observations: np.ndarray) -> tuple[np.ndarray, bool]:
        """The observations as ``(num_envs, obs_dim)`` rows, and whether one observation was given (a batch of one)."""
        obs = np.asarray(observations)
        one = obs.ndim == 1 and self.num_envs == 1
        obs = obs[None] if one else obs
        if obs.shape != (self.num_envs, self.obs.size):
            raise ValueError(f"codec {self.name!r}: observations must be ({self.num_envs}, {self.obs.size}), "
                             f"one row per arena{' (or one observation)' if self.num_envs == 1 else ''}, got shape "
                             f"{np.shape(observations)}")
        return obs, one

    def field(self, observations: np.ndarray, name: str, shape: tuple[int, ...] = ()) -> np.ndarray:
        """One named observation field of every arena, ``(N, *shape)``."""
        return observations[:, self._slices[name]].reshape((len(observations), *shape) if shape else (len(observations), -1))

    def features_of(self, obs: np.ndarray) -> np.ndarray:
        return np.zeros((len(obs), 0), dtype=np.float32)

    def decode_rows(self, obs: np.ndarray, code: np.ndarray) -> np.ndarray:
        raise NotImplementedError


@runtime_checkable
class DescribesCodes(Protocol):
    """A codec that puts a code in words (the team and broker codecs; reports name codes by it)."""

    def describe(self, code: np.ndarray) -> str: ...


class AllocatorCodec(Codec):
    """Base of the allocator's codecs: :meth:`feasible` turns wanted grants into an action
    that needs no repair."""

    role = Role.ALLOCATOR

    def __init__(self, config: ScenarioConfig, agent: str = ALLOCATOR, num_envs: int = 1) -> None:
        super().__init__(config, agent, num_envs)
        self._top_action = self.env_nvec - 1

    def feasible(self, obs: np.ndarray, wanted: np.ndarray, buy: np.ndarray | None = None) -> np.ndarray:
        """The env actions for ``wanted`` grants ``(N, teams, tiers)``: buy what the grants need beyond
        the online GPUs (or ``buy``), within offer and budget; scale grants to what exists (the env's
        own repair)."""
        online = self.field(obs, "online").astype(np.int64)
        offered = self.field(obs, "offer_qty").astype(np.int64)
        wanted = np.clip(wanted, 0, self.ceiling)
        if buy is None:
            buy = np.maximum(wanted.sum(axis=1) - online, 0)
        buy = within_budget(np.minimum(buy, offered), self.field(obs, "offer_price"), self.field(obs, "budget")[:, 0])
        grants, _ = repair_grants(wanted.astype(np.int64), online + buy)
        return np.minimum(np.concatenate([buy, grants.reshape(len(obs), -1)], axis=1), self._top_action)


def within_budget(buy: np.ndarray, price: np.ndarray, budget: np.ndarray) -> np.ndarray:
    """Purchases ``(N, tiers)`` cut to each row's budget, most expensive tier first (ties: higher
    index), one unit at a time, as the env does."""
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

    def __init__(self, config: ScenarioConfig, agent: str = ALLOCATOR, num_envs: int = 1) -> None:
        super().__init__(config, agent, num_envs)
        self.shares = np.array(self.GRANT_SHARES)

    @property
    def nvec(self) -> np.ndarray:
        return np.array([self.BUY_LEVELS] * self.n_tiers + [len(self.GRANT_SHARES) + 1] * self.n_teams)

    def decode_rows(self, obs: np.ndarray, code: np.ndarray) -> np.ndarray:
        T, N = self.n_tiers, self.n_teams
        buy_level, share_level = code[:, :T], code[:, T:]
        revealed = self.field(obs, "revealed")
        demand = np.where(revealed[:, :, None] > 0, self.field(obs, "revealed_need", (N, T)),
                          self.field(obs, "declared", (N, T))).astype(np.int64)
        levels = len(self.GRANT_SHARES)
        plus_one = (share_level == levels)[:, :, None]
        share = self.shares[np.minimum(share_level, levels - 1)][:, :, None]
        wanted = np.where(plus_one, demand + (demand > 0), np.rint(share * demand)).astype(np.int64)
        online = self.field(obs, "online").astype(np.int64)
        offered = self.field(obs, "offer_qty").astype(np.int64)
        shortfall = np.maximum(wanted.sum(axis=1) - online, 0)
        buy = np.select([buy_level == 1, buy_level == 2], [np.minimum(shortfall, offered), offered], 0)
        return self.feasible(obs, wanted, buy)


class AbsoluteAllocatorCodec(AllocatorCodec):
    """The grant per (team, tier) itself (0 .. owned + spot inventory of the tier); purchases
    are what the grants need beyond the online GPUs, and nothing is ever repaired."""

    name = "absolute"

    @property
    def nvec(self) -> np.ndarray:
        return np.tile(self.ceiling + 1, self.n_teams)

    def decode_rows(self, obs: np.ndarray, code: np.ndarray) -> np.ndarray:
        return self.feasible(obs, code.reshape(len(obs), self.n_teams, self.n_tiers))


class ResidualPlannerCodec(AllocatorCodec):
    """Corrections to the ``planner``'s grants: ``DELTAS[code]`` GPUs per (team, tier).

    The zero correction plays the planner exactly (its purchases are what its grants need
    beyond the online GPUs, which is what this codec buys). Features: the planner's need
    estimate and its grant, per (team, tier), each divided by the tier's ceiling.

    One :class:`~policies.planner.BatchPlanner` proposes for every arena, each arena's planner
    seeing each of its observations once (a repeated observation, as ``features`` then ``decode``
    of one tick give it, is not observed again).
    """

    DELTAS = (-2, -1, 0, 1, 2)
    name = "residual"

    def __init__(self, config: ScenarioConfig, agent: str = ALLOCATOR, num_envs: int = 1) -> None:
        super().__init__(config, agent, num_envs)
        self.planner = self.base_planner(config, agent, num_envs)
        self.deltas = np.array(self.DELTAS, dtype=np.int64)
        # per tick, once or twice: what would otherwise be rebuilt each call
        self.feature_scale = np.tile(self.feature_ceiling, 2 * self.n_teams)
        self.ceiling_row = self.ceiling[None, :]
        self._proposed = np.zeros(num_envs, dtype=bool)  # the row below holds a proposal for its arena
        self._seen = np.zeros((num_envs, self.obs.size), dtype=np.float64)
        self._buy = np.zeros((num_envs, self.n_tiers), dtype=np.int64)
        self._grant = np.zeros((num_envs, self.n_teams, self.n_tiers), dtype=np.int64)

    @staticmethod
    def base_planner(config: ScenarioConfig, agent: str, num_envs: int) -> Any:
        """The planner whose estimate and grants the codec corrects (its zero code plays it)."""
        from policies.planner import BatchPlanner

        return BatchPlanner(config, agent, num_envs)

    @property
    def n_features(self) -> int:
        return 2 * self.n_teams * self.n_tiers

    @property
    def nvec(self) -> np.ndarray:
        return np.full(self.n_teams * self.n_tiers, len(self.DELTAS))

    @property
    def zero_code(self) -> np.ndarray:
        return np.full(self.n_teams * self.n_tiers, self.DELTAS.index(0))

    def clear(self, arenas: np.ndarray) -> None:
        self.planner.reset([None] * len(arenas), arenas)
        self._proposed[arenas] = False

    def _propose(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The planner's (buy, grant) of every arena; an arena's planner observes only an observation it has not just seen."""
        stale = np.flatnonzero(~self._proposed | ~(self._seen == obs).all(axis=1))
        if stale.size:
            everyone = stale.size == self.num_envs
            action = self.planner.act(obs if everyone else obs[stale], None if everyone else stale)
            T = self.n_tiers
            self._seen[stale] = obs[stale]
            self._buy[stale] = action[:, :T]
            self._grant[stale] = action[:, T:].reshape(len(stale), self.n_teams, T)
            self._proposed[stale] = True
        return self._buy, self._grant

    def proposal(self, observations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The planner's need estimate and grant of every arena ``(N, teams, tiers)`` each (one
        observation: its arena's ``(teams, tiers)``), GPUs."""
        obs, one = self.rows(observations)
        _, grant = self._propose(obs)
        estimate = self.planner.last_estimate
        return (estimate[0], grant[0]) if one else (estimate, grant)

    def features_of(self, obs: np.ndarray) -> np.ndarray:
        _, grant = self._propose(obs)
        n = len(obs)
        return (np.concatenate([self.planner.last_estimate.reshape(n, -1), grant.reshape(n, -1)], axis=1)
                / self.feature_scale).astype(np.float32)

    def correction(self, code: np.ndarray) -> np.ndarray:
        """The GPUs ``code`` adds per (team, tier): ``(N, teams, tiers)`` for ``(N, len(nvec))`` codes
        (one code: ``(teams, tiers)``)."""
        code = np.asarray(code, dtype=np.int64)
        return self.deltas[code].reshape(*code.shape[:-1], self.n_teams, self.n_tiers)

    def decode_rows(self, obs: np.ndarray, code: np.ndarray) -> np.ndarray:
        buy, grant = self._propose(obs)
        delta = self.correction(code)
        action = np.concatenate([buy, grant.reshape(len(obs), -1)], axis=1)
        moved = np.flatnonzero(delta.any(axis=(1, 2)))
        if moved.size:
            action[moved] = self.corrected(obs[moved], moved, delta[moved])
        return action

    def corrected(self, obs: np.ndarray, arenas: np.ndarray, delta: np.ndarray) -> np.ndarray:
        """The actions of the arenas ``arenas`` whose correction is not zero."""
        return self.feasible(obs, self._grant[arenas] + delta)


class NeedResidualCodec(ResidualPlannerCodec):
    """Corrections to the ``planner``'s need estimate: ``DELTAS[code]`` GPUs per (team,
    tier), then the planner plans on the corrected needs (cut to 0 .. the tier's ceiling).

    The zero correction plays the planner exactly. Features: the planner's need estimate and
    its grant per (team, tier) (each divided by the tier's ceiling), then a one-hot of the
    tick (``max_ticks + 1`` entries; the last is also used for any later tick).
    """

    name = "need"

    def __init__(self, config: ScenarioConfig, agent: str = ALLOCATOR, num_envs: int = 1) -> None:
        super().__init__(config, agent, num_envs)
        self.ticks = config.max_ticks + 1

    @property
    def n_features(self) -> int:
        return super().n_features + self.ticks

    def features_of(self, obs: np.ndarray) -> np.ndarray:
        tick = np.zeros((len(obs), self.ticks), dtype=np.float32)
        tick[np.arange(len(obs)), np.minimum(self.field(obs, "tick")[:, 0].astype(np.int64), self.ticks - 1)] = 1.0
        return np.concatenate([super().features_of(obs), tick], axis=1)

    def corrected(self, obs: np.ndarray, arenas: np.ndarray, delta: np.ndarray) -> np.ndarray:
        need = np.minimum(self.planner.last_estimate[arenas] + delta, self.ceiling_row)  # (plan reads a need below 0 as 0)
        return np.minimum(self.planner.plan(obs, need, headroom=self.planner.unbought(arenas)), self._top_action)


class FairNeedCodec(NeedResidualCodec):
    """``need`` over ``fair_planner`` (:class:`~policies.mechanisms.BatchFairPlanner`): the
    corrections move an estimate that undoes a team's whole inflation and adds the same headroom
    share for every team, so the zero code pays no bluff in proportion to it (``planner`` keeps
    half the inflation). The base of an allocator meant to be hard to exploit (docs/negotiation.md)."""

    name = "need_fair"

    @staticmethod
    def base_planner(config: ScenarioConfig, agent: str, num_envs: int) -> Any:
        from policies.mechanisms import BatchFairPlanner

        return BatchFairPlanner(config, agent, num_envs)


class ImpartialNeedCodec(FairNeedCodec):
    """``need_fair`` whose base heeds no escalation: ``fair_planner`` serving teams in order of board
    pressure, size and need, a team's escalating stance buying it no precedence and no purchase. On crisis
    this base keeps ``fair_planner``'s welfare while an escalating bluffer's gain falls (docs/negotiation.md)."""

    name = "need_impartial"

    @staticmethod
    def base_planner(config: ScenarioConfig, agent: str, num_envs: int) -> Any:
        from policies.mechanisms import BatchFairPlanner

        return BatchFairPlanner(config, agent, num_envs, heed_escalation=False)


class ThriftyNeedCodec(ImpartialNeedCodec):
    """``need_impartial`` whose base never buys its headroom: ``fair_planner`` heeding no escalation, the
    headroom share granted after every team's need, from the GPUs online they leave, and never purchased. On ``standard`` the bought headroom was most of
    what ``fair_planner`` gives up to ``planner`` (spot purchases and idle GPUs); on ``crisis`` a bluff pays
    about as little (docs/negotiation.md, "The honest allocator")."""

    name = "need_thrifty"

    @staticmethod
    def base_planner(config: ScenarioConfig, agent: str, num_envs: int) -> Any:
        from policies.mechanisms import BatchFairPlanner

        return BatchFairPlanner(config, agent, num_envs, heed_escalation=False, buy_headroom=False)


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
    The declaration each arena's last grant answered, and its true need then, are kept per arena.
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

    def __init__(self, config: ScenarioConfig, agent: str, num_envs: int = 1) -> None:
        super().__init__(config, agent, num_envs)
        self.request_high = self.env_nvec[: self.n_tiers] - 1
        self.factors = np.array(self.FACTORS)
        self.n_factors = self.n_tiers if self.per_tier else 1
        self._escalate_after = np.array([-1 if r.escalate_after is None else r.escalate_after for r in self.STANCE_RULES])
        self._counter = np.array([r.counter for r in self.STANCE_RULES])
        self._answered = np.zeros((num_envs, self.n_tiers), dtype=np.float64)  # the declaration last tick's grant answered
        self._last_need = np.zeros((num_envs, self.n_tiers), dtype=np.float64)  # true need at last tick
        self._has_answer = np.zeros(num_envs, dtype=bool)

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

    def clear(self, arenas: np.ndarray) -> None:
        self._has_answer[arenas] = False

    @property
    def n_features(self) -> int:
        return 2 * self.n_tiers + 1

    def features_of(self, obs: np.ndarray) -> np.ndarray:
        grant = self.field(obs, "last_grant").astype(np.float64)
        asked = self._answered.sum(axis=1)
        discount = np.where(asked > 0, np.minimum(grant.sum(axis=1) / np.where(asked > 0, asked, 1.0), 2.0), 1.0)
        live = np.concatenate([(self._answered - grant) / self.feature_ceiling,
                               (self._last_need - grant) / self.feature_ceiling, discount[:, None]], axis=1)
        blank = np.concatenate([np.zeros(2 * self.n_tiers), [1.0]])
        return np.where(self._has_answer[:, None], live, blank).astype(np.float32)

    def decode_rows(self, obs: np.ndarray, code: np.ndarray) -> np.ndarray:
        from policies.teams import declare

        need = self.field(obs, "need")
        request = declare(need, self.factors[code[:, : self.n_factors]], self.request_high)
        rule = code[:, -1]
        after, counter = self._escalate_after[rule], self._counter[rule]
        grant = self.field(obs, "last_grant")
        # policies.teams.stance, every arena at once
        escalate = (after >= 0) & (self.field(obs, "starved_streak")[:, 0] >= after)
        short = self._has_answer & (grant < self._answered).any(axis=1)
        answer = np.where(escalate, int(Stance.ESCALATE), np.where(counter & short, int(Stance.COUNTER), int(Stance.ACCEPT)))
        # this tick's `declared` is what next tick's `last_grant` answers (as in policies.teams)
        self._answered = self.field(obs, "declared").astype(np.float64)
        self._last_need = need.astype(np.float64)
        self._has_answer[:] = True
        return np.concatenate([request, answer[:, None]], axis=1).astype(np.int64)


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

    def __init__(self, config: ScenarioConfig, agent: str = BROKER, num_envs: int = 1) -> None:
        from policies.brokers import cost_covering_levels

        super().__init__(config, agent, num_envs)
        self.base_levels = np.stack([cost_covering_levels(config, m) for m in self.MARGINS])  # margins x tiers
        self.capacity = np.maximum(rules_for(config).capacity, 1.0)
        self.top = config.price_levels - 1
        self._slopes, self._crisis_levels, self._supply = np.array(self.SLOPES), np.array(self.CRISIS_LEVELS), np.array(self.SUPPLY)

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

    def features_of(self, obs: np.ndarray) -> np.ndarray:
        return np.minimum(self.field(obs, "demand") / self.capacity, 2.0).astype(np.float32)

    def decode_rows(self, obs: np.ndarray, code: np.ndarray) -> np.ndarray:
        T = self.n_tiers
        base = self.base_levels[code[:, :T], np.arange(T)]
        demand = self.field(obs, "demand")
        # policies.brokers.demand_levels, every arena at once
        level = base + np.rint(self._slopes[code[:, T]][:, None] * np.minimum(demand / self.capacity, 2.0)).astype(np.int64)
        crisis = self.field(obs, "crisis")[:, 0] > 0
        level = np.minimum(np.where(crisis[:, None], level + self._crisis_levels[code[:, T + 1]][:, None], level), self.top)
        inventory = self.field(obs, "inventory").astype(np.int64)
        supply = self._supply[code[:, T + 2]][:, None]
        quantity = np.minimum(np.ceil(inventory * supply - 1e-9).astype(np.int64), inventory)
        return np.minimum(np.concatenate([quantity, level], axis=1), self.env_nvec - 1).astype(np.int64)


# ---------------------------------------------------------------------- by name

CODECS: dict[str, type[Codec]] = {
    c.name: c
    for c in (RelativeAllocatorCodec, AbsoluteAllocatorCodec, ResidualPlannerCodec, NeedResidualCodec, FairNeedCodec,
              ImpartialNeedCodec, ThriftyNeedCodec, BluffTeamCodec, PerTierBluffTeamCodec, MarkupBrokerCodec)
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
    """Codec ``name`` for ``agent``'s seat in one arena (refused, naming the right codecs, if it is another role's)."""
    return check_codec(name, config, agent)(config, agent, **params)


def make_batch_codec(name: str, config: ScenarioConfig, num_envs: int, agent: str = ALLOCATOR, **params: Any) -> Codec:
    """Codec ``name`` for ``agent``'s seat in ``num_envs`` arenas (the same checks as :func:`make_codec`)."""
    return check_codec(name, config, agent)(config, agent, num_envs, **params)


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
    "ThriftyNeedCodec",
    "NeedResidualCodec",
    "PerTierBluffTeamCodec",
    "RelativeAllocatorCodec",
    "ResidualPlannerCodec",
    "StanceRule",
    "check_codec",
    "codecs_for_role",
    "make_batch_codec",
    "make_codec",
    "within_budget",
]
