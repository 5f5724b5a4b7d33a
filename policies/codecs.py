"""Action codecs for learned allocators: how a module's ``MultiDiscrete`` output becomes an
allocator action, plus the features a codec adds to the module's observation.

A codec is selected by name (``CODECS``; ``commons-arena train --action-codec``) and
recorded in the checkpoint's sidecar, so ``learned:<dir>`` decodes the same way.

==============  ===============================================  =============================
codec           the module chooses                               can express
==============  ===============================================  =============================
``relative``    a share level per team of its demand (revealed   only shares of what a team
                need, else declaration) and a buy level per      declared, on the tier it
                tier (none / shortfall / everything offered)     declared; nothing at tick 0
``absolute``    the grant per (team, tier), 0 .. owned + spot    any grant; purchases follow
                                                                 from the grants
``residual``    a correction per (team, tier) in                 everything ``planner`` does,
                ``DELTAS`` = -2..+2 GPUs, added to the           plus grants no declaration is
                ``planner``'s grant (0 = play the planner)       behind, on any tier
``need``        a correction per (team, tier) in ``DELTAS``,     needs the planner cannot see
                added to the ``planner``'s *need estimate*;      (tick 0, jobs that arrive this
                the planner then plans (0 = play the planner)    tick), planned with its spill
                                                                 to larger tiers and purchases
==============  ===============================================  =============================

Every codec decodes to an action that needs no repair: purchases are what the grants need
beyond the online GPUs (cut to the offer, then to the budget, most expensive tier first,
like the env), and grants above online + bought are scaled down with the env's own rule.

``residual`` runs the planner itself (it keeps the planner's per-episode beliefs, so
:meth:`Codec.reset` starts an episode) and shows the module what the planner proposes:
:meth:`Codec.features` returns the planner's need estimate and grant per (team, tier),
appended to the module's observation. Its ``zero_code`` (every correction 0) is the action
training starts from (see ``experiments.training.rllib_adapter.favour_code``).

``need`` corrects the planner's *estimate* instead of its grant, and the planner plans on
the corrected needs (its order of urgency, the spill to larger tiers, paced purchases). It
exists because of what the planner cannot know: its estimate is a declaration undone, one
tick late, so at tick 0 (nothing declared yet) and whenever jobs arrive it sees nothing,
while a learner sees, episode after episode, what teams need at each tick. Measured with
``python -m experiments.bench.need_gap`` (30 held-out seeds, standard / elevated / crisis):
the planner plus the rounded average of (true need − estimate) at tick 0, learned from 200
episodes (reading the hidden need, so only a measurement), beats the planner by +11.4 / +29.0 / +42.8; that correction at every tick,
-0.5 / +35.3 / +57.2; the same applied to the grants instead (what ``residual`` can do),
-3.6 / +30.2 / +45.8. Its features add a one-hot of the tick, so a per-tick
correction is one weight away for the module.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from commons_arena.mechanics.grants import repair_grants
from commons_arena.scenario import ScenarioConfig
from commons_arena.spaces import make_action_space, observation_layout
from policies.allocators import PRICE_SLACK, SPEND_EPS


class Codec:
    """Base: ``nvec`` (the module's action space), ``decode`` and optional features."""

    name: ClassVar[str] = ""

    def __init__(self, config: ScenarioConfig) -> None:
        self.config = config
        self.obs = observation_layout(config, "allocator")
        self.n_teams, self.n_tiers = len(config.teams), len(config.gpu_tiers)
        self.env_nvec = make_action_space(config, "allocator").nvec
        self.ceiling = np.array([t.owned + t.spot_inventory for t in config.gpu_tiers], dtype=np.int64)

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

    # ---------------------------------------------------------------- shared
    def feasible(self, view: dict[str, np.ndarray], wanted: np.ndarray, buy: np.ndarray | None = None) -> np.ndarray:
        """The env action for ``wanted`` grants (teams x tiers): buy what the grants need beyond
        the online GPUs (or ``buy``), within offer and budget; scale grants to what exists."""
        online = view["online"].astype(np.int64)
        offered = view["offer_qty"].astype(np.int64)
        wanted = np.clip(wanted, 0, self.ceiling)
        if buy is None:
            buy = np.maximum(wanted.sum(axis=0) - online, 0)
        buy = within_budget(np.minimum(buy, offered), view["offer_price"], float(view["budget"][0]))
        grants, _ = repair_grants(wanted, online + buy)
        return np.minimum(np.concatenate([buy, grants.ravel()]), self.env_nvec - 1)


def within_budget(buy: np.ndarray, price: np.ndarray, budget: float) -> np.ndarray:
    """Cut purchases to the budget, most expensive tier first (ties: higher index), as the env does."""
    buy = buy.astype(np.int64).copy()
    prices = (np.asarray(price, dtype=np.float64) * PRICE_SLACK).tolist()
    money = budget - SPEND_EPS
    cost = float(buy @ np.asarray(prices))
    for tier in sorted(range(len(buy)), key=lambda k: (prices[k], k), reverse=True):
        while buy[tier] > 0 and cost > money:
            buy[tier] -= 1
            cost -= prices[tier]
    return buy


class RelativeAllocatorCodec(Codec):
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

    def __init__(self, config: ScenarioConfig) -> None:
        super().__init__(config)
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


class AbsoluteAllocatorCodec(Codec):
    """The grant per (team, tier) itself (0 .. owned + spot inventory of the tier); purchases
    are what the grants need beyond the online GPUs, and nothing is ever repaired."""

    name = "absolute"

    @property
    def nvec(self) -> np.ndarray:
        return np.tile(self.ceiling + 1, self.n_teams)

    def decode(self, observation: np.ndarray, code: np.ndarray) -> np.ndarray:
        wanted = np.asarray(code, dtype=np.int64).reshape(self.n_teams, self.n_tiers)
        return self.feasible(self.obs.view(observation), wanted)


class ResidualPlannerCodec(Codec):
    """Corrections to the ``planner``'s grants: ``DELTAS[code]`` GPUs per (team, tier).

    The zero correction plays the planner exactly (its purchases are what its grants need
    beyond the online GPUs, which is what this codec buys). Features: the planner's need
    estimate and its grant, per (team, tier), each divided by the tier's ceiling.
    """

    DELTAS = (-2, -1, 0, 1, 2)
    name = "residual"

    def __init__(self, config: ScenarioConfig) -> None:
        from policies.planner import PlannerAllocator

        super().__init__(config)
        self.planner = PlannerAllocator(config)
        self.deltas = np.array(self.DELTAS, dtype=np.int64)
        self._proposal: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # (obs, buy, grant)

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
        self.planner.reset()
        self._proposal = None

    def _propose(self, observation: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The planner's (buy, grant) for this observation; the planner sees each tick once."""
        if self._proposal is None or not np.array_equal(self._proposal[0], observation):
            action = self.planner.act(observation)
            T = self.n_tiers
            self._proposal = (np.array(observation, copy=True), action[:T], action[T:].reshape(self.n_teams, T))
        return self._proposal[1], self._proposal[2]

    def features(self, observation: np.ndarray) -> np.ndarray:
        _, grant = self._propose(observation)
        estimate = self.planner.last_estimate
        assert estimate is not None
        return (np.concatenate([estimate.ravel(), grant.ravel()]) / np.tile(self.ceiling, 2 * self.n_teams)).astype(
            np.float32
        )

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

    def __init__(self, config: ScenarioConfig) -> None:
        super().__init__(config)
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
        estimate = self.planner.last_estimate
        assert estimate is not None
        need = np.clip(estimate + delta, 0, self.ceiling)
        action = np.asarray(self.planner.plan(observation, need.tolist()), dtype=np.int64)
        return np.minimum(action, self.env_nvec - 1)


CODECS: dict[str, type[Codec]] = {
    c.name: c for c in (RelativeAllocatorCodec, AbsoluteAllocatorCodec, ResidualPlannerCodec, NeedResidualCodec)
}


def make_codec(name: str, config: ScenarioConfig) -> Codec:
    if name not in CODECS:
        raise ValueError(f"unknown action codec {name!r}; codecs: {', '.join(CODECS)}")
    return CODECS[name](config)


__all__ = ["CODECS", "AbsoluteAllocatorCodec", "Codec", "NeedResidualCodec", "RelativeAllocatorCodec", "ResidualPlannerCodec", "make_codec"]
