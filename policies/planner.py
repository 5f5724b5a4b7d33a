"""``planner``: the strongest allocator that plays fair (SPEC §9), observation-only.

**What it knows.** Its own observation, read through the named fields of
``observation_layout`` (declared requests, revealed true needs, pressure, stances,
credibility, escalations, shocks seen, online GPUs, the offer, budget, carbon), and the
scenario's public parameters: the GPU tiers (memory, speed, owned counts, operating cost,
power, spot inventory), the carbon cap and intensity profile, the budget and horizon,
the team names, each team's archetype *name* and board pressure, the audit tolerance and
credibility losses, and its own reward weights. It never reads job lists, job generators,
shock rates or ``env.hidden_state()``: it is built from the config alone and is never
given the env.

**What it estimates.** Each team's *inflation* (bluff factor ``b``: a team declares
``ceil(need x b)`` per tier) as a posterior over a grid of factors, starting from a prior
centred on the factor its archetype name stands for (``policies.teams.ARCHETYPE_PROFILES``; an
unknown style starts from a broad prior around 1.25). The team's own history updates it:

* every declared count must be reachable as ``ceil(n x b)`` for some integer ``n``
  (a factor of 2 never yields an odd count);
* once a team's true need is revealed, the declaration that follows it must equal
  ``ceil(revealed need x b)`` tier by tier;
* an audit that exposes (or clears) a team's declaration says its declared total was
  above (or within) ``need x (1 + tolerance)``.

A team's need this tick is then its revealed need once revealed, else its declaration
(made last tick for this tick) undone with the posterior's most likely factor ``b``, less
``margin`` of the inflation (it deflates by ``1 + (1 - margin) x (b - 1)``; default
``margin=0.5``). The estimate is one tick late — jobs that arrived this tick are not seen
yet, jobs that finished last tick still are — and the kept headroom catches some of the
new ones (measured: fully deflating scores a little higher on ``standard`` and lower on
``crisis``).

**How it plans (a greedy per tick).** Teams are served in order of urgency (``pressure``,
an escalating stance, board pressure; then smaller need first):

1. each team's estimated need on its own tier from online GPUs, large-memory tiers first
   (their GPUs go to the jobs that need them before small jobs spill into them);
2. what is left unmet goes whole onto the smallest larger tier with room (a job fits any
   tier with at least its memory), else split upward;
3. what is still unmet is bought, cheapest fitting offered tier first, when its price plus
   operating and carbon cost stays below the value a GPU-tick is worth to that team
   (``gpu_tick_value``, more when the team is urgent), within a paced budget
   (``budget x min(1, pacing / ticks_left)``) — the allocator's own rubric decides.

It then fits the plan within every limit it observes (``policies.limits.fit_action``, the
baselines' step): purchases within the offer and the budget, grants within online + bought
GPUs and within a hard carbon cap's carbon left, the teams it serves last giving up their
units first, purchases the carbon cut leaves unused given back. So the planner is repaired
only when an incident or a grid spike fires in the tick it acts. (It prices a soft cap's kg
once its pace would exceed the cap.) A hard cap it spends as work waits, not as a budget paced
over the episode: pacing it (by the carbon left, the intensity forecast and the urgency of the
waiting work) was measured below this on every binding-cap cluster tried, since carbon held
back turns work in progress into missed deadlines. Once the carbon left is below
``CAP_HORIZON`` ticks of every team's need, it spends it on work that can finish
(:func:`cap_admission`): the teams it has served in full for the most ticks first, and a team
is started only if the carbon not yet reserved covers ``CAP_HORIZON`` ticks of its need
(docs/bring_your_own_cluster.md, "When a hard cap binds"; ``scripts/planner_hard_cap.py``).
Under a soft cap none of this runs.

**In N arenas at once.** :class:`BatchPlanner` is the planner's one definition, over a leading
arena axis; the per-arena policy (``make_policy("planner", ...)``) is its batch of one
(:class:`~policies.batch.OneArena`). The list-based planner it replaced is the spec it is held to
bit for bit (tests/reference/planner.py, tests/policies/test_batch_planner.py).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from commons_arena.enums import ShockKind, Stance
from commons_arena.scenario import ScenarioConfig
from policies.allocators import PRICE_SLACK, SPEND_EPS, tiers_by_memory
from policies.batch import BatchScripted
from policies.limits import LimitReader, fit_action
from policies.teams import ARCHETYPE_PROFILES

BLUFF_GRID = np.round(np.arange(1.0, 3.0001, 0.05), 2)  # candidate inflation factors
UNKNOWN_STYLE_BLUFF = 1.25  # prior centre for a team whose archetype name says nothing
# log-likelihood penalties of evidence that contradicts a factor
UNREACHABLE = -2.0  # a declared count no integer need maps to under this factor
MISMATCH = -6.0  # a declaration that does not follow from the revealed need
AUDIT = -4.0  # an audit outcome this factor does not explain
CAP_HORIZON = 4.0  # ticks of a team's full need the carbon left must cover to start (or finish) its work
# count d -> per factor of the grid: is d = ceil(n x factor) for some integer n? (pure, shared)
_REACHABLE: dict[int, np.ndarray] = {}


def inflate(need: np.ndarray | int, bluff: float) -> np.ndarray:
    """What a team with this factor declares for ``need`` (the teams' own rounding)."""
    return np.ceil(np.asarray(need) * bluff - 1e-6).astype(np.int64)


def deflate(declared: int, bluff: float, ceiling: int | None = None) -> int:
    """The integer need whose declaration under ``bluff`` is ``declared`` (closest if none).

    A declaration at ``ceiling`` (the most a request may ask for) may have been cut: the
    need is then at least the smallest one that reaches the ceiling, which is returned."""
    if declared <= 0:
        return 0
    if ceiling is not None and declared >= ceiling:
        n = 1
        while int(inflate(n, bluff)) < ceiling:
            n += 1
        return n
    guess = declared / bluff
    candidates = range(max(int(guess) - 1, 0), int(guess) + 3)
    return min(candidates, key=lambda n: (abs(int(inflate(n, bluff)) - declared), abs(n - guess)))


# (declared, bluff, ceiling) -> deflate(...): a handful of distinct arguments per episode,
# each an exact integer function of them (memoised: the planner asks every tick)
_deflate = functools.lru_cache(maxsize=65_536)(deflate)


def reachable_by(d: int) -> np.ndarray:
    """Per factor of ``BLUFF_GRID``: is ``d = ceil(n x factor)`` for some integer ``n``?"""
    if d not in _REACHABLE:
        counts = inflate(np.outer(BLUFF_GRID, np.arange(1, d + 2)), 1.0)  # factor x need
        _REACHABLE[d] = (counts == d).any(axis=1)
    return _REACHABLE[d]


def prior_log_weights(centre: float, sigma: float) -> np.ndarray:
    """A team's log-weights over ``BLUFF_GRID`` before any evidence: a Gaussian in log-factor around
    ``centre`` plus a small uniform floor, so evidence can overrule the prior."""
    log_ratio = np.log(BLUFF_GRID / centre)
    prior = np.exp(-0.5 * (log_ratio / sigma) ** 2) + 0.02
    return np.log(prior / prior.sum())



def first_come(need: np.ndarray, online: np.ndarray) -> np.ndarray:
    """Grants ``(arenas, teams, tiers)`` of ``need`` (teams in serving order) from ``online`` ``(arenas, tiers)``
    GPUs: each team on its own tier after what the teams before it asked for."""
    asked_before = np.cumsum(need, axis=1) - need
    return np.minimum(need, np.maximum(online[:, None, :] - asked_before, 0))


def cap_admission(need: np.ndarray, kg_per_gpu: np.ndarray, headroom_kg: np.ndarray, streak: np.ndarray,
                  rank: np.ndarray, horizon: float = CAP_HORIZON) -> tuple[np.ndarray, np.ndarray]:
    """Which teams' work a binding hard cap still pays for, in ``n`` arenas: ``(admitted, first)``,
    both ``(n, teams)`` bool.

    Under a hard cap a job pays only if it completes, on all its GPUs at once, so carbon spent
    on work the cap later stops is lost. The cap *binds* in an arena when its carbon left
    (``headroom_kg``) is below ``horizon`` ticks of every team's full need (``need``
    ``(n, teams, tiers)`` at this tick's ``kg_per_gpu`` ``(n, tiers)``). There, teams are
    taken in progress first (``streak`` ``(n, teams)``: consecutive ticks served in full; the
    longest first, its work the closest to done), then in the planner's order (``rank``
    ``(n, teams)``), and each is admitted only if the carbon not yet reserved covers what it
    may still burn: ``horizon`` ticks of its need, less the ticks it has run. A team not
    admitted is not started (its need is dropped, not cut to a part that runs no job). Where
    the cap does not bind, every team is admitted and none goes first (the plan is unchanged).
    ``first``: the admitted teams in progress, which the plan serves before the others.
    """
    n, N = streak.shape
    need_kg = (need * kg_per_gpu[:, None, :]).sum(axis=2)
    live = need_kg > 0
    binding = headroom_kg < horizon * need_kg.sum(axis=1)
    running = live & (streak > 0)
    ar = np.arange(n)
    walk = np.lexsort((rank, np.where(running, -streak, 0), ~running), axis=-1)
    left = np.asarray(headroom_kg, dtype=np.float64).copy()
    admitted = np.ones((n, N), dtype=bool)
    for p in range(N):
        i = walk[:, p]
        reserve = need_kg[ar, i] * np.where(running[ar, i], np.maximum(horizon - streak[ar, i], 1.0), horizon)
        ok = ~binding | (reserve <= left)
        left = np.where(binding & ok, left - reserve, left)
        admitted[ar, i] = ok
    return admitted, running & admitted & binding[:, None]


def served_streak(streak: np.ndarray, need: np.ndarray, grant: np.ndarray) -> np.ndarray:
    """Each team's consecutive ticks served in full (its grant at least its estimated need, some
    need): ``streak`` ``(..., teams)`` after a tick planned for ``need`` and granted ``grant``
    (``(..., teams, tiers)`` each)."""
    want = need.sum(axis=-1)
    return np.where((want > 0) & (grant.sum(axis=-1) >= want), streak + 1, 0)


DEFLATE_TABLE_WIDTH = 4096  # declared counts per tier kept undone in a table
INFLATE_TABLE_LIMIT = 1 << 16  # GPUs: the largest need the inflation table grows to (one row per count)


class BatchPlanner(BatchScripted):
    """``planner`` in ``num_envs`` arenas of one scenario (module docstring); its per-arena form is a
    batch of one (:class:`~policies.batch.OneArena`).

    The per-arena state is arrays with a leading arena axis: the teams' log-weights
    :attr:`log_w` ``(N, teams, factors)``, what each arena's last observation showed (the evidence
    of its next one), the last need estimate :attr:`last_estimate` ``(N, teams, tiers)`` and, under
    a hard cap, :attr:`streak` ``(N, teams)`` (:func:`cap_admission`). The loops run over the small
    fixed axes only (teams, tiers, a tier's larger tiers); each float is made element-wise by the
    same operations in the same order as the list-based planner it replaced
    (tests/reference/planner.py), so every arena rounds as one arena did.

    Deflating a declaration (:func:`deflate`), too branchy to vectorise, is looked up in a table per
    (factor, tier, declared count) filled on first use by that rule (counts above
    ``DEFLATE_TABLE_WIDTH`` are computed one by one); a headroom is added to the table's counts.
    """

    role = "allocator"
    name = "planner"

    def __init__(self, config: ScenarioConfig, agent: str, num_envs: int, pacing: float = 2.0,
                 gpu_tick_value: float = 6.0, prior_sigma: float = 0.1, margin: float = 0.5,
                 headroom: float | None = None, heed_escalation: bool = True, buy_headroom: bool = True) -> None:
        if not pacing > 0:
            raise ValueError(f"pacing must be > 0, got {pacing}")
        if not gpu_tick_value >= 0:
            raise ValueError(f"gpu_tick_value must be >= 0, got {gpu_tick_value}")
        if not prior_sigma > 0:
            raise ValueError(f"prior_sigma must be > 0, got {prior_sigma}")
        if not 0.0 <= margin <= 1.0:
            raise ValueError(f"margin must be in [0, 1], got {margin}")
        if headroom is not None and not 0.0 <= headroom <= 1.0:
            raise ValueError(f"headroom must be in [0, 1], got {headroom}")
        self.pacing, self.gpu_tick_value, self.prior_sigma = float(pacing), float(gpu_tick_value), float(prior_sigma)
        self.margin = float(margin)
        self.headroom = None if headroom is None else float(headroom)
        self.heed_escalation = bool(heed_escalation)  # False: a team's escalating stance buys it no precedence
        self.buy_headroom = bool(buy_headroom)  # False: granted last, from GPUs online the needs leave; never bought
        # public scenario parameters, read once
        tiers, teams = config.gpu_tiers, config.teams
        T, M, G = len(tiers), len(teams), len(BLUFF_GRID)
        self.max_ticks = config.max_ticks
        self.tolerance = config.credibility.audit_tolerance
        self.bluff_loss = config.credibility.bluff_loss
        self.weights = config.rewards.allocator
        self.hard_cap = config.carbon.mode == "hard"
        # the most a team may request per tier (requests are cut to owned + spot inventory)
        self.ceiling = np.array([t.owned + t.spot_inventory for t in tiers], dtype=np.int64)
        # tier, declared count (0 .. the largest ceiling) -> what the declaration adds to the
        # log-weights: UNREACHABLE for each factor no need maps to d; 0.0 where it says nothing
        # (d = 0, or at the tier's ceiling: a count there may have been cut)
        self.unreachable = np.array([
            [np.where(reachable_by(d) | (not 0 < d < top), 0.0, UNREACHABLE) for d in range(int(self.ceiling.max(initial=0)) + 1)]
            for top in self.ceiling.tolist()
        ]).reshape(T, -1, G)
        self.by_memory = tiers_by_memory(config)
        rank = {k: r for r, k in enumerate(self.by_memory)}
        self.larger = [[j for j in self.by_memory if rank[j] > rank[k]] for k in range(T)]  # where a tier's need may spill
        self._larger = [np.array(tiers_above, dtype=np.int64) for tiers_above in self.larger]
        self._rank = np.array([rank[k] for k in range(T)], dtype=np.int64)
        self._fits = np.array([[rank[j] >= rank[k] for j in range(T)] for k in range(T)], dtype=bool).reshape(T, T)
        self._board = np.array([t.board_pressure for t in teams], dtype=np.float64)
        self._op_cost = np.array([t.op_cost for t in tiers], dtype=np.float64)
        self._carbon_power = np.array([self.weights.carbon * t.power_kw for t in tiers], dtype=np.float64)
        self.prior = np.array([self._prior_of(t.archetype) for t in teams]).reshape(M, G)  # log-weights at an episode's start
        # per arena: the beliefs and what the last observation showed (the evidence of the next one)
        self.log_w = np.zeros((num_envs, M, G))
        self._has_prev = np.zeros(num_envs, dtype=bool)
        self._prev_declared = np.zeros((num_envs, M, T), dtype=np.int64)
        self._prev_revealed = np.zeros((num_envs, M), dtype=bool)
        self._prev_revealed_need = np.zeros((num_envs, M, T), dtype=np.int64)
        self._prev_credibility = np.zeros((num_envs, M), dtype=np.float64)
        self._prev_audits = np.zeros(num_envs, dtype=np.float64)
        self.last_estimate = np.zeros((num_envs, M, T), dtype=np.int64)
        self.last_headroom = np.zeros((num_envs, M, T), dtype=np.int64)  # the headroom in last_estimate (kept when not bought)
        self.streak = np.zeros((num_envs, M), dtype=np.int64)  # ticks each team has been served in full (hard cap)
        # per factor of the grid: the deflation estimate_need applies (its own expression, to the bit)
        self._deflation = [1.0 + (1.0 - self.margin) * (float(b) - 1.0) for b in BLUFF_GRID]
        # (factor, tier, column) -> the deflated count; column 0: nothing declared, else 1 + min(declared, ceiling)
        width = min(int(self.ceiling.max(initial=0)), DEFLATE_TABLE_WIDTH) + 2
        self._undone = np.full((G, T, width), -1, dtype=np.int64)
        self._undone[:, :, 0] = 0
        self._inflate_table = inflate(np.arange(64)[:, None] * BLUFF_GRID, 1.0)  # grown by _inflated as needs grow
        super().__init__(config, agent, num_envs)  # checks the seat; clears every arena
        self._limits = LimitReader(config, self.obs_layout)
        self._fields = {f.name: (self.obs_layout.slices[f.name], f.shape) for f in self.obs_layout.fields}
        self._arenas = np.arange(num_envs)
        # per arena (as many rows as arenas; a call on some arenas takes the first rows): the teams' and tiers' indices
        self._team_index = np.broadcast_to(np.arange(M), (num_envs, M))
        self._tier_rank = np.broadcast_to(self._rank, (num_envs, T))
        self._tiers = np.arange(T)

    @property
    def params(self) -> dict[str, Any]:
        return {"pacing": self.pacing, "gpu_tick_value": self.gpu_tick_value, "prior_sigma": self.prior_sigma,
                "margin": self.margin, **self._flags}

    @property
    def _flags(self) -> dict[str, Any]:
        """The flags that differ from their defaults (a policy's name leaves the defaults out)."""
        return {**({} if self.heed_escalation else {"heed_escalation": False}),
                **({} if self.buy_headroom else {"buy_headroom": False})}

    @property
    def settings(self) -> dict[str, Any]:
        """Every parameter of the planner (:attr:`params` names a policy; ``fair_planner`` leaves out what it fixes)."""
        return {"pacing": self.pacing, "gpu_tick_value": self.gpu_tick_value, "prior_sigma": self.prior_sigma,
                "margin": self.margin, "headroom": self.headroom, "heed_escalation": self.heed_escalation,
                "buy_headroom": self.buy_headroom}

    @property
    def arguments(self) -> dict[str, Any]:
        return self.settings

    def _prior_of(self, archetype: str) -> np.ndarray:
        style = ARCHETYPE_PROFILES.get(archetype)
        if style is None:
            return prior_log_weights(UNKNOWN_STYLE_BLUFF, 3 * self.prior_sigma)
        return prior_log_weights(style.bluff, self.prior_sigma)

    def factors(self) -> np.ndarray:
        """Each arena's most likely inflation factor per team ``(N, teams)``."""
        return BLUFF_GRID[np.argmax(self.log_w, axis=2)]

    def _field(self, obs: np.ndarray, name: str) -> np.ndarray:
        sl, shape = self._fields[name]
        return obs[:, sl].reshape((len(obs), *shape))

    def _rows(self, obs: np.ndarray, index: np.ndarray | None) -> np.ndarray:
        rows = self._arenas if index is None else np.asarray(index, dtype=np.int64).reshape(-1)
        if index is not None and (len(np.unique(rows)) != len(rows) or (rows.size and not 0 <= rows.min() <= rows.max() < self.num_envs)):
            raise ValueError(f"index must name distinct arenas of 0..{self.num_envs - 1}, got {rows.tolist()}")
        if obs.ndim != 2 or len(obs) != len(rows) or obs.shape[1] != self.obs_dim:
            raise ValueError(f"planner observations must be (arenas, {self.obs_dim}) with one row "
                             f"per arena ({len(rows)}), got shape {obs.shape}")
        return rows

    # ------------------------------------------------------------------ protocol
    def clear(self, arenas: np.ndarray) -> None:
        """New episodes in ``arenas``: their beliefs back to the prior, nothing seen yet."""
        self.log_w[arenas] = self.prior
        self._has_prev[arenas] = False
        self.last_estimate[arenas] = 0
        self.last_headroom[arenas] = 0
        self.streak[arenas] = 0

    def act(self, observations: np.ndarray, index: np.ndarray | None = None) -> np.ndarray:
        """Every arena's action (``index``: only these arenas, whose observations are the rows given)."""
        if index is None:
            return super().act(observations)
        obs = np.asarray(observations)
        return np.clip(self.decide(obs, index), 0, self.high)

    def decide(self, obs: np.ndarray, index: np.ndarray | None = None) -> np.ndarray:
        need = self.observe(obs, index)
        rows = self._arenas if index is None else np.asarray(index, dtype=np.int64).reshape(-1)  # observe checked them
        if not self.hard_cap:
            return self.plan(obs, need, headroom=self.unbought(rows))
        action = self.plan(obs, need, self.streak[rows], self.unbought(rows))
        grant = action[:, self.n_tiers:].reshape(len(obs), self.n_teams, self.n_tiers)
        self.streak[rows] = served_streak(self.streak[rows], need, grant)
        return action

    # ------------------------------------------------------------------ belief
    def observe(self, observations: np.ndarray, index: np.ndarray | None = None) -> np.ndarray:
        """Update the arenas' beliefs with their observations (``index``: only these arenas, whose
        observations are the rows given); their need estimates ``(arenas, teams, tiers)``.

        The evidence of each team, added to its log-weights in this order: each declared count's
        (tier by tier: a count no need maps to under a factor), then the pair (the need revealed last
        tick, the declaration made in that tick: it must be ``ceil(need x factor)``), then an audit's
        (it exposed or cleared the team's declared total). A team's estimate is its revealed need,
        else its declaration undone by :meth:`estimate_need` with its most likely factor."""
        obs = np.asarray(observations)
        rows = self._rows(obs, index)
        declared = self._field(obs, "declared").astype(np.int64)
        revealed = self._field(obs, "revealed") > 0.5
        revealed_need = self._field(obs, "revealed_need").astype(np.int64)
        credibility = self._field(obs, "credibility").astype(np.float64)
        audits = self._field(obs, "shocks_seen")[:, int(ShockKind.COMPLIANCE_AUDIT)].astype(np.float64)
        has_prev = self._has_prev[rows]
        log_w = self.log_w if index is None else self.log_w[rows]  # (a copy when some arenas: written back below)
        counts = np.minimum(declared, self.unreachable.shape[1] - 1)
        for k in range(self.n_tiers):
            log_w += self.unreachable[k][counts[:, :, k]]
        # the revealed pairs: only a team revealed last tick receives anything but 0.0 (adding 0.0 to a
        # log-weight, finite and negative, changes no bit, so the other teams are skipped)
        arena, team = np.nonzero(has_prev[:, None] & self._prev_revealed[rows])
        if arena.size:
            need = self._prev_revealed_need[rows[arena], team]  # pairs x tiers
            hit = np.minimum(self._inflated(need), self.ceiling[:, None]) == declared[arena, team, :, None]
            mismatch = np.where(hit, 0.0, MISMATCH)
            sub = log_w[arena, team]
            for k in range(self.n_tiers):
                sub += mismatch[:, k]
            log_w[arena, team] = sub
        audited = np.flatnonzero(has_prev & (audits > self._prev_audits[rows]))
        if audited.size:
            before, now = self._prev_credibility[rows[audited]], credibility[audited]
            total = self._prev_declared[rows[audited]].sum(axis=2)  # declared totals, arenas x teams
            # a team heard nothing from an audit its credibility could not pay for, or of nothing declared
            heard = (before >= self.bluff_loss) & (total > 0)
            exposed = before - now >= self.bluff_loss - 1e-6
            # under factor b the need behind the declaration is about total / b
            exposed_if = total[..., None] / BLUFF_GRID * (1 + self.tolerance) < total[..., None] - 1e-9
            sub = log_w[audited]
            sub[heard] += np.where(exposed_if == exposed[..., None], 0.0, AUDIT)[heard]
            log_w[audited] = sub
        if index is not None:
            self.log_w[rows] = log_w
        self._has_prev[rows] = True
        self._prev_declared[rows] = declared
        self._prev_revealed[rows] = revealed
        self._prev_revealed_need[rows] = revealed_need
        self._prev_credibility[rows] = credibility
        self._prev_audits[rows] = audits
        # keep ``margin`` of the estimated inflation: the estimate is a tick late, and a little
        # headroom catches jobs that arrived since
        deflated = self._undo(declared, np.argmax(log_w, axis=2))
        undone = deflated if self.headroom is None else deflated + self._headroom(deflated, self.ceiling)
        estimate = np.where(revealed[..., None], revealed_need, undone)
        self.last_estimate[rows] = estimate
        if not self.buy_headroom:
            self.last_headroom[rows] = np.where(revealed[..., None], 0, undone - deflated)
        return estimate

    def unbought(self, rows: np.ndarray) -> np.ndarray | None:
        """The headroom of arenas ``rows``' last estimates ``(rows, teams, tiers)`` when it is never bought
        (:meth:`plan`'s ``headroom``), else None."""
        return None if self.buy_headroom else self.last_headroom[rows]

    def estimate_need(self, declared: list[int], factor: float, ceilings: list[int]) -> list[int]:
        """A team's need per tier from its declaration and its most likely inflation ``factor``:
        undone with all but ``margin`` of the inflation; with a ``headroom`` (``fair_planner``), that
        share of the need so deflated is added (rounded half up, within the ceiling), the same for every team."""
        bluff = 1.0 + (1.0 - self.margin) * (factor - 1.0)
        deflated = np.array([_deflate(d, bluff, top) for d, top in zip(declared, ceilings, strict=True)], dtype=np.int64)
        return (deflated + self._headroom(deflated, np.asarray(ceilings, dtype=np.int64))).tolist()

    def _headroom(self, need: np.ndarray, ceiling: np.ndarray) -> np.ndarray:
        """What the headroom adds to each deflated ``need``: ``headroom`` x need rounded half up, within the
        tier's ``ceiling`` (0 without a headroom)."""
        if self.headroom is None:
            return np.zeros_like(need)
        return np.minimum(need + np.floor(self.headroom * need + 0.5).astype(np.int64), ceiling) - need

    def _undo(self, declared: np.ndarray, factor: np.ndarray) -> np.ndarray:
        """Each declaration (arenas x teams x tiers) undone under ``factor`` (an index of ``BLUFF_GRID``
        per arena and team), :meth:`estimate_need`'s deflation before the headroom, through the table."""
        column = np.where(declared <= 0, 0, np.minimum(declared, self.ceiling) + 1)
        table = self._undone
        inside = column < table.shape[2]
        out = table[factor[..., None], self._tiers, np.where(inside, column, 0)]
        missing = (out < 0) | ~inside
        if missing.any():
            g = np.broadcast_to(factor[..., None], declared.shape)
            k = np.broadcast_to(np.arange(self.n_tiers), declared.shape)
            # the count depends on a declaration d only through min(d, ceiling) when d > 0 (at the ceiling: a lower bound)
            for gi, ki, ci in set(zip(g[missing].tolist(), k[missing].tolist(), column[missing].tolist(), strict=True)):
                value = _deflate(max(ci - 1, 1), self._deflation[gi], int(self.ceiling[ki]))
                if ci < table.shape[2]:
                    table[gi, ki, ci] = value
                out[missing & (g == gi) & (k == ki) & (column == ci)] = value
        return out

    def _inflated(self, need: np.ndarray) -> np.ndarray:
        """``inflate(need x factor, 1.0)`` for every factor of the grid (a last axis), from a table
        of ``inflate(n x BLUFF_GRID, 1.0)`` rows grown to the largest need seen."""
        top = int(need.max()) if need.size else 0
        if need.size and (int(need.min()) < 0 or top >= INFLATE_TABLE_LIMIT):
            # (no count is negative; a count past the table's limit, possible only far beyond any
            # shipped cluster, is computed directly rather than grow a table to it)
            return inflate(need[..., None] * BLUFF_GRID, 1.0)
        if top >= len(self._inflate_table):
            size = min(max(top + 1, 2 * len(self._inflate_table)), INFLATE_TABLE_LIMIT)
            self._inflate_table = inflate(np.arange(size)[:, None] * BLUFF_GRID, 1.0)
        return self._inflate_table[need]

    # ------------------------------------------------------------------ plan
    def plan(self, observations: np.ndarray, need: np.ndarray, streak: np.ndarray | None = None,
             headroom: np.ndarray | None = None) -> np.ndarray:
        """Each arena's (unclipped) action for ``need`` ``(arenas, teams, tiers)``, fitted within the
        observed limits; ``streak`` ``(arenas, teams)``, under a hard cap: the ticks each team has been
        served in full, for :func:`cap_admission` (None: every team's need is planned for);
        ``headroom`` ``(arenas, teams, tiers)``: the part of each need never bought (:meth:`unbought`), granted
        on its own tier after every need, from the GPUs online they leave. A need below 0 is read as 0."""
        obs = np.asarray(observations)
        n, N, T = len(obs), self.n_teams, self.n_tiers
        arena = self._arenas[:n, None]  # (indexes each arena's row of a per-team array)
        need = np.maximum(np.asarray(need, dtype=np.int64).reshape(n, N, T), 0)
        online = self._field(obs, "online").astype(np.int64)
        pressure = self._field(obs, "pressure").astype(np.float64)
        escalating = (self._field(obs, "stance")[:, :, int(Stance.ESCALATE)] > 0.5) & self.heed_escalation
        order = self._order(need, pressure, escalating)
        if streak is not None:
            # a binding hard cap: finish the work in progress, start only what the carbon left can finish
            limits = self._limits(obs)
            assert limits.headroom_kg is not None  # a streak is kept under a hard cap only
            rank = np.empty_like(order)
            rank[arena, order] = np.arange(N)
            admitted, first = cap_admission(need, limits.kg_per_gpu, limits.headroom_kg, streak, rank)
            need = np.where(admitted[..., None], need, 0)
            order = self._order(need, pressure, escalating, first)
        # the teams in that order (position p: the p-th team served), so the greedy below reads columns
        need_at = need[arena, order]
        spare_at = None  # the headroom is served last, from what the needs leave online
        if headroom is not None:
            spare_at = np.minimum(np.asarray(headroom, dtype=np.int64).reshape(n, N, T)[arena, order], need_at)
            need_at = need_at - spare_at
        # 1. each team's need on its own tier from online GPUs, in serving order: what the teams before
        # it asked for goes first (the teams without need come last and take nothing)
        grant_at = first_come(need_at, online)
        unmet = need_at - grant_at
        left = online - grant_at.sum(axis=1)
        buy = np.zeros((n, T), dtype=np.int64)
        if unmet.any():  # 2. spill upward, whole onto the smallest larger tier with room, else split
            self._spill(grant_at, left, unmet)
        if spare_at is not None:  # the headroom on its own tier from what is left online, never spilled or bought
            grant_at += first_come(spare_at, left)
        if unmet.any():
            # 3. buy what is worth buying (the arenas with need still unmet)
            lacking = (unmet > 0).any(axis=(1, 2))
            rows = np.flatnonzero(lacking) if not lacking.all() else self._arenas[:n]
            if rows.size:
                pick = order[rows]
                buy[rows], grant_at[rows] = self._buy(obs[rows], pressure[rows[:, None], pick], escalating[rows[:, None], pick],
                                                      unmet[rows], grant_at[rows])
        grant = np.empty_like(grant_at)
        grant[arena, order] = grant_at
        # within every observed limit: teams it serves last give up first
        buy, grant = fit_action(self._limits(obs), buy, grant, order)
        return np.concatenate([buy, grant.reshape(n, N * T)], axis=1)

    def _order(self, need: np.ndarray, pressure: np.ndarray, escalating: np.ndarray,
               first: np.ndarray | None = None) -> np.ndarray:
        """Per arena, the teams in urgency order: ``first`` (these teams before the others), then
        ``pressure``, an escalating stance, board pressure, then smaller need, then index; the teams
        without need last, in index order (the trim order's tail)."""
        n, N = need.shape[:2]
        totals = need.sum(axis=2)
        served = totals > 0
        keys = [self._team_index[:n], np.where(served, totals, 0), np.where(served, -self._board, 0.0),
                served & ~escalating, np.where(served, -pressure, 0.0)]
        if first is not None:
            keys.append(~(served & first))
        return np.lexsort((*keys, ~served), axis=-1)

    def _spill(self, grant: np.ndarray, left: np.ndarray, unmet: np.ndarray) -> None:
        """Step 2 of the plan, in place, on teams in serving order: each unmet need whole onto the
        smallest larger tier with room, else split upward, team by team, large-memory tiers first."""
        arena = self._arenas[: len(grant)]
        lacking = unmet.max(axis=0) > 0  # (team, tier) pairs with unmet need in some arena
        for p in range(self.n_teams):
            for k in reversed(self.by_memory):
                larger = self._larger[k]
                if not larger.size or not lacking[p, k]:
                    continue
                rest = unmet[:, p, k]
                room = left[:, larger] >= rest[:, None]  # the larger tiers that take it whole, smallest first
                whole = (rest > 0) & room.any(axis=1)
                onto = larger[room.argmax(axis=1)]  # (where none has room: a tier that receives nothing)
                moved = np.where(whole, rest, 0)
                grant[arena, p, onto] += moved
                left[arena, onto] -= moved
                rest = rest - moved
                if rest.any():  # split upward what no larger tier takes whole
                    for j in larger.tolist():
                        give = np.minimum(rest, left[:, j])
                        grant[:, p, j] += give
                        left[:, j] -= give
                        rest = rest - give
                unmet[:, p, k] = rest

    def _buy(self, obs: np.ndarray, pressure: np.ndarray, escalating: np.ndarray, unmet: np.ndarray,
             grant: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Step 3 of the plan on teams in serving order: what is still unmet is bought, cheapest
        fitting offered tier first, while its price plus operating and carbon cost stays below what
        a GPU-tick is worth to the team (more when it is urgent), within the paced budget.

        Every arena's tiers are put in price order once (cheapest first, ties: smaller memory), so
        a tier's need walks the columns of that order (those that fit it) in every arena at once."""
        n, T = len(obs), self.n_tiers
        tick = self._field(obs, "tick")[:, 0].astype(np.int64)
        budget = self._field(obs, "budget")[:, 0].astype(np.float64)
        ticks_left = np.maximum(self.max_ticks - tick, 1)
        money = np.maximum(budget * np.minimum(1.0, self.pacing / ticks_left) - SPEND_EPS, 0.0)
        offer_price = self._field(obs, "offer_price").astype(np.float64)
        price = offer_price * PRICE_SLACK
        cost = self.weights.spend * (price + self._op_cost) + self._kg_cost(obs, tick)
        by_price = np.lexsort((self._tier_rank[:n], offer_price), axis=-1)  # column -> tier, per arena
        arena = self._arenas[:n, None]
        price, cost = price[arena, by_price], cost[arena, by_price]
        free = price <= 0
        divisor = np.where(free, 1.0, price)
        room = self._field(obs, "offer_qty").astype(np.int64)[arena, by_price]  # left on offer
        fits = self._fits[:, by_price]  # tier k, arena, column: does a column's tier fit tier k's jobs?
        bought = np.zeros((n, T), dtype=np.int64)  # in column order
        lacking = unmet.max(axis=0) > 0
        for p in range(self.n_teams):
            if not lacking[p].any():
                continue
            worth = self.gpu_tick_value * (1.0 + 0.5 * pressure[:, p] + 0.5 * escalating[:, p])
            worth_it = ~(cost > worth[:, None])
            taken = np.zeros((n, T), dtype=np.int64)  # this team's purchases, in column order
            for k in reversed(self.by_memory):
                if not lacking[p, k]:
                    continue
                rest = unmet[:, p, k]
                usable = fits[k] & worth_it  # the columns this need may be bought from (elsewhere nothing is)
                for c in np.flatnonzero(usable.any(axis=0)).tolist():
                    most = np.minimum(rest, room[:, c])
                    afford = np.floor_divide(money, divisor[:, c])  # Python's money // price
                    give = np.where(free[:, c], most, np.minimum(most, afford).astype(np.int64))
                    give = np.where(usable[:, c] & (give > 0), give, 0)
                    taken[:, c] += give
                    room[:, c] -= give
                    money = money - give * price[:, c]  # (nothing bought: less 0.0, the same money)
                    rest = rest - give
                    if not rest.any():
                        break
                unmet[:, p, k] = rest
            grant[arena, p, by_price] += taken
            bought += taken
        buy = np.empty_like(bought)
        buy[arena, by_price] = bought
        return buy, grant

    def _kg_cost(self, obs: np.ndarray, tick: np.ndarray) -> np.ndarray:
        """Carbon cost of one more busy GPU-tick per arena and tier: charged only once the pace so far,
        kept up to the end of the episode, would pass the (soft) cap."""
        used = self._field(obs, "carbon_used")[:, 0].astype(np.float64)
        cap = self._field(obs, "carbon_cap")[:, 0].astype(np.float64)
        intensity = self._field(obs, "intensity_forecast")[:, 0].astype(np.float64)
        pace = used / np.maximum(tick, 1)
        projected = used + pace * (self.max_ticks - tick)
        charged = ~(projected <= cap) & (self.weights.carbon != 0)
        return np.where(charged[:, None], self._carbon_power * intensity[:, None], 0.0)


__all__ = ["BLUFF_GRID", "BatchPlanner", "cap_admission", "deflate", "inflate", "prior_log_weights", "reachable_by",
           "served_streak"]
