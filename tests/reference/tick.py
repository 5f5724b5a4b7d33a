"""The reference's tick: decoded intents in, a typed :class:`TickReport` out (list-based; the
game runs in ``commons_arena/batched/tick.py``, held to this one by the equivalence test).

:func:`play_tick` runs the phases of a tick in the order of ``docs/rules.md`` ("One
tick"), each a small named function that reads the scenario's :class:`Rules`, updates
the parts of the :class:`ArenaState` it owns and returns what happened:

(:class:`~commons_arena.spaces.Intents`, decoded as the batched core decodes them, are arrays; the
phases here turn them into the short lists they compute over.)

1. :func:`post_offer`        the broker posts next tick's offer (cut to its inventory)
2. :func:`take_requests`     teams declare for next tick and answer last tick's grant
3. :func:`buy_spot`          the allocator buys from the offer posted last tick (repaired)
4. :func:`fire_shocks`       shocks due now fire; incident capacity goes offline
5. :func:`grant_gpus`        grants are repaired to what is online + bought, then to a hard cap
6. :func:`run_jobs`          teams run ready jobs; carbon accrues; unused grants are idle
7. :func:`audit`             a compliance audit exposes declarations above true need
8. :func:`track_starvation`  starvation streaks advance and reveal true needs
9. :func:`judge_escalations` escalations about last tick's grant cost board pressure or credibility
10. :func:`score`            raw measurements → the rubric's weighted terms;
    :func:`advance`          the state moves to the next tick

The numbers are the steps of ``docs/rules.md`` §5, the one numbering. Grants apply after
shocks because capacity lost to an incident is removed before grants apply. The rules
themselves (how to repair, how jobs run, ...) are pure functions in
:mod:`commons_arena.mechanics`; this module decides only what feeds what.

Per-tier and per-team vectors are short lists here (a few entries each): a numpy call
per operation would cost more than the arithmetic.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from commons_arena import rewards
from commons_arena.enums import ALLOCATOR, BROKER, ShockKind, Stance
from commons_arena.numerics import dot
from commons_arena.rules import Rules
from commons_arena.scenario import ShockSpec
from commons_arena.spaces import Intents
from tests.reference import rewards as reference_rewards
from tests.reference.mechanics import carbon, grants, jobs, market, shocks, social
from tests.reference.state import ArenaState

Event = dict[str, Any]  # a fired shock as plain data: tick, kind, until, and team/job or tier/gpus_offline


# ---------------------------------------------------------------------------- the report
class TickReport(NamedTuple):
    """Everything one played tick did: what the render, the recording and the episode
    ledger read. Immutable (a NamedTuple: typed fields, cheap to build every tick); its
    arrays are shared with the env's state, so treat them as read-only."""

    tick: int  # the tick played
    # what the allocator acted on
    declared: np.ndarray  # teams x tiers: requests made last tick for this tick
    offer_qty: np.ndarray  # tiers: the offer posted last tick
    offer_price: np.ndarray  # tiers: its unit prices (= prices paid)
    budget_before: float  # before this tick's purchase
    # what happened
    bought: np.ndarray  # tiers, repaired
    purchase_cost: float
    granted: np.ndarray  # teams x tiers, repaired
    used: np.ndarray  # tiers: granted GPUs that ran a job
    used_total: int  # Σ used
    granted_total: int  # Σ granted
    need: np.ndarray  # teams x tiers: true need this tick (hidden)
    intensity: float  # grid kg/kWh this tick
    events: list[Event]  # shocks fired
    repairs: rewards.Repairs
    teams: list[jobs.TeamTick]  # per team: its jobs' tick (need, used, completed, missed, starved)
    exposed_bluffs: list[bool]  # per team (audits only)
    justified: list[bool]  # per team: justified escalations
    unjustified: list[bool]  # per team
    outcome: reference_rewards.TickOutcome  # raw measurements the rubric scores
    terms: dict[str, dict[str, float]]  # agent -> weighted reward terms
    rewards: dict[str, float]  # agent -> Σ terms


# ---------------------------------------------------------------------------- phases
class Offer(NamedTuple):
    qty: np.ndarray
    price: np.ndarray
    cut: int  # units above the inventory


def post_offer(rules: Rules, intents: Intents, active: list[shocks.Effect]) -> Offer:
    """1. The broker's offer for next tick, under the effects active now (crises)."""
    qty, price, cut = market.post_offer(
        intents.offer_quantity.tolist(),
        intents.price_level.tolist(),
        shocks.spot_inventory(rules.spot_inventory, active),
        rules.price_grid,
        shocks.price_multiplier(active),
    )
    return Offer(qty, price, cut)


def take_requests(intents: Intents, t: int) -> tuple[list[list[int]], list[bool]]:
    """2. Teams' declarations (kept for next tick) and who escalates (no grant to answer at tick 0)."""
    stances = intents.stances.tolist()
    escalating = [stance == Stance.ESCALATE for stance in stances] if t > 0 else [False] * len(stances)
    return intents.requests.tolist(), escalating


class Purchase(NamedTuple):
    bought: np.ndarray
    cost: float
    offer_cut: int
    budget_cut: int


def buy_spot(s: ArenaState, intents: Intents) -> Purchase:
    """3. Purchases from the offer posted last tick, cut to the offer then the budget; paid now."""
    bought, cost, offer_cut, budget_cut = market.repair_purchases(
        intents.buy.tolist(), s.offer_qty.tolist(), s.offer_price, s.budget
    )
    s.budget = max(0.0, s.budget - cost)
    return Purchase(bought, cost, offer_cut, budget_cut)


class Shocks(NamedTuple):
    fired: list[ShockSpec]
    events: list[Event]
    active: list[shocks.Effect]  # effects active this tick, the new ones included


def fire_shocks(rules: Rules, s: ArenaState, rng: np.random.Generator, active: list[shocks.Effect]) -> Shocks:
    """4. Shocks due this tick start their effects and inject their jobs; online capacity follows.

    ``active``: the effects active at the start of the tick."""
    fired = shocks.due_shocks(rules.config.shocks, s.t, rng)
    events = [_start_shock(rules, s, spec) for spec in fired]
    if fired:  # new effects; otherwise ``s.online`` is still the one advance() derived from them
        active = shocks.active(s.effects, s.t)
        s.online = online_gpus(rules, active)
    return Shocks(fired, events, active)


def _start_shock(rules: Rules, s: ArenaState, spec: ShockSpec) -> Event:
    t, kind = s.t, spec.shock_kind
    s.shocks_seen[kind] += 1
    tier = rules.tier_index[spec.tier] if spec.tier is not None else -1
    s.effects.append(shocks.Effect(spec=spec, tier_index=tier, until=t + spec.duration - 1))
    event: Event = {"tick": t, "kind": kind.label, "until": t + spec.duration - 1}
    if spec.job is not None:
        target = rules.config.target_team(spec)
        assert target is not None  # a job shock always has a team (ShockSpec.target_team's default)
        team = rules.team_index[target]
        s.injected += 1
        job = jobs.urgent_job(spec.job, f"{kind.label}_{s.injected}", t, rules.config.gpu_tiers)
        s.jobs[team].append(job)
        s.orders[team] = jobs.edf_order(s.jobs[team])
        event.update(team=target, job=job.id)
    if tier >= 0:
        event.update(tier=spec.tier, gpus_offline=spec.gpus_offline)
    return event


def online_gpus(rules: Rules, effects: list[shocks.Effect]) -> np.ndarray:
    """Owned GPUs not offline from incidents (``effects``: those active now)."""
    if not effects:
        return rules.owned.copy()
    return np.maximum(rules.owned - shocks.offline_gpus(effects, rules.n_tiers), 0)


class Grants(NamedTuple):
    granted: np.ndarray  # teams x tiers
    capacity_cut: int
    carbon_cut: int
    intensity: float  # grid intensity this tick (the hard cap's and the emissions')


def grant_gpus(rules: Rules, s: ArenaState, intents: Intents, bought: np.ndarray, active: list[shocks.Effect]) -> Grants:
    """5. Grants cut to online + bought GPUs (largest remainder), then to a hard carbon cap."""
    available = [online + b for online, b in zip(s.online.tolist(), bought.tolist(), strict=True)]
    granted, capacity_cut = grants.repair_grants(intents.grant.tolist(), available)
    cfg = rules.config.carbon
    intensity = carbon.intensity_at(cfg.intensity, s.t, shocks.intensity_multiplier(active))
    carbon_cut = 0
    if rules.hard_cap:
        granted, carbon_cut = carbon.cut_for_hard_cap(granted, rules.power_kw, intensity, cfg.cap_kg - s.carbon_used)
    return Grants(granted, capacity_cut, carbon_cut, intensity)


class JobsRun(NamedTuple):
    teams: list[jobs.TeamTick]
    used: np.ndarray  # per tier: granted GPUs that ran a job
    used_total: int
    granted_total: int  # Σ granted GPUs
    granted_by_tier: list[int]
    carbon_before: float  # kg, before this tick's emissions


def run_jobs(rules: Rules, s: ArenaState, granted: np.ndarray, intensity: float) -> JobsRun:
    """6. Each team runs its ready jobs on its grant; busy GPUs emit; the rest is idle."""
    rows = granted.tolist()
    teams = [jobs.run_team_jobs(s.jobs[i], s.orders[i], rows[i], rules.speed, s.t) for i in range(rules.n_teams)]
    used_by_tier = [sum(column) for column in zip(*[r.used_by_tier for r in teams], strict=True)]
    used = np.array(used_by_tier, dtype=np.int64)
    granted_by_tier = [sum(column) for column in zip(*rows, strict=True)]
    carbon_before = s.carbon_used
    s.carbon_used += carbon.emissions(used, rules.power_kw, intensity)
    return JobsRun(teams, used, sum(used_by_tier), sum(granted_by_tier), granted_by_tier, carbon_before)


def audit(rules: Rules, s: ArenaState, fired: list[ShockSpec], need: np.ndarray) -> list[bool]:
    """7. A compliance audit compares this tick's declarations with this tick's true need."""
    if not any(spec.shock_kind is ShockKind.COMPLIANCE_AUDIT for spec in fired):
        return [False] * rules.n_teams
    return social.exposed_bluffs(s.declared, need, rules.config.credibility.audit_tolerance).tolist()


def track_starvation(rules: Rules, s: ArenaState, starved: list[bool]) -> None:
    """8. Consecutive starved ticks; ``reveal_after`` of them reveal a team's true need for good."""
    social.update_starvation(s.streak, starved, s.revealed, rules.config.reveal_after)


def judge_escalations(
    rules: Rules, s: ArenaState, escalating: list[bool], bluffs: list[bool]
) -> tuple[list[bool], list[bool], list[float]]:
    """9. Escalations about last tick's grant: justified if the team was starved then.

    Returns (justified, unjustified, credibility lost); the loss also counts exposed bluffs."""
    justified, unjustified = social.judge_escalations(escalating, s.starved_last.tolist())
    cred = rules.config.credibility
    lost = social.lose_credibility(
        s.credibility,
        [bluff * cred.bluff_loss + wrong * cred.unjustified_escalation_loss
         for bluff, wrong in zip(bluffs, unjustified, strict=True)],
    )
    s.escalations += escalating
    return justified, unjustified, lost


def score(
    rules: Rules,
    rubric: rewards.Rubric,
    s: ArenaState,
    run: JobsRun,
    purchase: Purchase,
    offer: Offer,
    granted: Grants,
    justified: list[bool],
    lost: list[float],
) -> tuple[reference_rewards.TickOutcome, dict[str, dict[str, float]]]:
    """10. The tick's raw measurements and every agent's weighted terms."""
    results = run.teams
    outcome = reference_rewards.TickOutcome(
        completed_value=[r.completed_value for r in results],
        missed_value=[r.missed_value for r in results],
        satisfaction=[r.satisfaction for r in results],
        has_need=[r.ready_gpus > 0 for r in results],
        credibility_lost=lost,
        purchase_cost=purchase.cost,
        operating_cost=dot(run.granted_by_tier, rules.op_cost),
        idle_gpus=run.granted_total - run.used_total,
        carbon_over_kg=(
            0.0 if rules.hard_cap
            else carbon.over_cap_increment(run.carbon_before, s.carbon_used, rules.config.carbon.cap_kg)
        ),
        # a sum, not numpy's dot: with 0/1 weights every product is exact, so they agree to the bit
        justified_pressure=sum((p for p, yes in zip(rules.board_pressure, justified, strict=True) if yes), 0.0),
        # every repaired unit of the allocator's action is charged
        allocator_invalid=purchase.offer_cut + purchase.budget_cut + granted.capacity_cut + granted.carbon_cut,
        broker_profit=market.broker_profit(purchase.bought, s.offer_price, rules.spot_unit_cost),
        broker_invalid=offer.cut,
    )
    terms = {ALLOCATOR: rubric.allocator_terms(outcome)}
    for i, team in enumerate(rules.config.team_names):
        terms[team] = rubric.team_terms(outcome, i)
    terms[BROKER] = rubric.broker_terms(outcome)
    return outcome, terms


def advance(
    rules: Rules,
    s: ArenaState,
    requests: list[list[int]],
    stances: np.ndarray,
    granted: np.ndarray,
    starved: list[bool],
    bought: np.ndarray,
    offer: Offer,
) -> None:
    """The state of the next tick: this tick's declarations, grant and sales become 'last';
    ``s.effects`` and ``s.online`` are those of the next tick (until a shock fires then)."""
    s.t += 1
    s.declared = np.array(requests, dtype=np.int64)
    s.stance = np.array(stances, dtype=np.int64)
    s.last_grant = granted
    s.starved_last = np.array(starved)
    s.last_sold, s.last_price = bought, s.offer_price
    s.offer_qty, s.offer_price = offer.qty, offer.price
    s.effects = shocks.active(s.effects, s.t)
    s.online = online_gpus(rules, s.effects)


# ---------------------------------------------------------------------------- the tick
def play_tick(
    rules: Rules, rubric: rewards.Rubric, s: ArenaState, intents: Intents, rng: np.random.Generator
) -> TickReport:
    """Play tick ``s.t`` with ``intents`` (phases in the module docstring); ``s`` ends at tick ``s.t + 1``."""
    t, declared, offer_qty, offer_price, budget = s.t, s.declared, s.offer_qty, s.offer_price, s.budget
    active = shocks.active(s.effects, t)
    offer = post_offer(rules, intents, active)
    requests, escalating = take_requests(intents, t)
    purchase = buy_spot(s, intents)
    fired = fire_shocks(rules, s, rng, active)
    granted = grant_gpus(rules, s, intents, purchase.bought, fired.active)
    run = run_jobs(rules, s, granted.granted, granted.intensity)
    need = np.array([r.need_by_tier for r in run.teams], dtype=np.int64)
    bluffs = audit(rules, s, fired.fired, need)
    starved = [r.starved for r in run.teams]
    track_starvation(rules, s, starved)
    justified, unjustified, lost = judge_escalations(rules, s, escalating, bluffs)
    outcome, terms = score(rules, rubric, s, run, purchase, offer, granted, justified, lost)
    advance(rules, s, requests, intents.stances, granted.granted, starved, purchase.bought, offer)
    return TickReport(
        tick=t,
        declared=declared,
        offer_qty=offer_qty,
        offer_price=offer_price,
        budget_before=budget,
        bought=purchase.bought,
        purchase_cost=purchase.cost,
        granted=granted.granted,
        used=run.used,
        used_total=run.used_total,
        granted_total=run.granted_total,
        need=need,
        intensity=granted.intensity,
        events=fired.events,
        repairs=rewards.Repairs(purchase.offer_cut, purchase.budget_cut, granted.capacity_cut, granted.carbon_cut, offer.cut),
        teams=run.teams,
        exposed_bluffs=bluffs,
        justified=justified,
        unjustified=unjustified,
        outcome=outcome,
        terms=terms,
        rewards={agent: float(sum(agent_terms.values())) for agent, agent_terms in terms.items()},
    )
