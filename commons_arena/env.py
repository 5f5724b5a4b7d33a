"""
# Commons Arena

| | |
|---|---|
| Import | `from commons_arena import arena_v0` |
| API | Parallel (`parallel_env`), AEC via PettingZoo's conversion (`env`) |
| Agents | `["allocator", *teams, "broker"]`; default teams `search`, `robotics`, `safety` |
| Action spaces | `MultiDiscrete` per agent (see below) |
| Observation spaces | flat `Box(float32)` per agent, with named fields (`observation_layout`) |
| Episode end | every job resolved (termination) or `max_ticks` (truncation); all agents end together |
| Version | `commons_arena_v0` |

An allocator hands out a scarce, heterogeneous GPU cluster to product teams that declare
(and may overstate) what they need, buying spot capacity from a broker, under a carbon
cap, while shocks hit. Rules: `SPEC.md`; numbers: the scenario file.

## Arguments

`parallel_env(scenario="standard", render_mode=None)`: `scenario` is a shipped scenario
name (`list_scenarios()`), a path to a TOML file, or a `ScenarioConfig`.
`render_mode` is `None`, `"human"` (prints the text summary after every step), `"ansi"`
(`render()` returns a text summary of the last tick) or `"rgb_array"` (a dashboard frame,
`H x W x 3` uint8; see `commons_arena/render.py`).

## One tick (all agents act at once)

1. The broker posts next tick's offer (quantity cut to its inventory).
2. Teams declare requests for the next tick and a stance on last tick's grant.
3. The allocator buys from the offer posted last tick (cut to the offer, then to the
   budget, most expensive tier first) and grants GPUs per (team, tier) for this tick.
4. Shocks due this tick fire; incident capacity is removed, then grants above
   `online + bought` are repaired (proportional, largest remainder). A hard carbon cap
   then cuts grants from the most power-hungry tier. Every repaired unit is an
   `invalid` unit and is listed in `infos["allocator"]["repairs"]`.
5. Teams run ready jobs on their grants (EDF, memory fit, dependencies, gang placement
   on one tier); carbon accrues for busy GPUs; unused granted GPUs are idle.
6. Escalations about last tick's grant are judged (justified if the team was starved);
   starvation streaks advance and reveal true needs after `reveal_after` ticks; an audit
   exposes declarations above true need x (1 + tolerance).

## Observations (flat float32; `observation_layout(config, agent).view(obs)` names them)

| agent | fields |
|---|---|
| allocator | tick, owned, online, budget, carbon_used, carbon_cap, intensity_forecast, offer_qty, offer_price, declared (teams x tiers), stance (one-hot), escalations, credibility, pressure, revealed, revealed_need, shocks_seen, shocks_active |
| team | tick, need (own true need), last_grant, declared, credibility, starved_streak, offer_qty, offer_price, others_declared, jobs (queue_slots x 8) |
| broker | tick, inventory, unit_cost, last_sold, last_price, offer_qty, offer_price, demand, crisis |

No observation contains another agent's hidden state (jobs, true needs, starvation),
except revealed needs and the coarse `pressure` signal given to the allocator.

## Actions (`MultiDiscrete`; `action_layout(config, agent)` names the parts)

allocator `[buy per tier, grant per team x tier]`; team `[request per tier, stance]`;
broker `[quantity per tier, price level per tier]`. Values outside the space, NaN, a wrong
shape, or an unknown agent raise `ValueError` and leave the state unchanged. All agents
finish together, so an action for a finished agent is a step after the end: it raises
`EpisodeStateError` (both a `RuntimeError` and a `ValueError`), as does `step()` before `reset()`.
Agents missing from the action dict play a no-op (all zeros).

## Rewards (weights from the scenario; `infos[agent]["reward_terms"]` sums to the reward)

| role | terms |
|---|---|
| allocator | job_value, spend (spot + operating cost), missed (value of missed jobs), idle (GPUs), carbon (kg over a soft cap), escalation (justified, x board pressure), fairness (Jain index - 1), invalid (repaired units) |
| team | job_value, missed (own), credibility (lost to exposed bluffs and unjustified escalations) |
| broker | profit (revenue - unit cost), invalid (offer above inventory) |

At the end, `infos[agent]["episode"]` holds the episode's term totals and statistics.
`infos[agent]["scenario_hash"]` identifies the scenario content in every info.

## Choices where the SPEC is silent

* Ticks count from 0; a job's `deadline` is the last tick on which it may complete
  (inclusive) and it is *missed* at the end of that tick. Jobs still pending when the
  episode is truncated are neither paid nor missed.
* A job runs only with all its `gpus` on one tier whose memory fits, on the fitting tier
  with the least memory that has room; progress per tick is `gpus x speed`. A dependency
  completed this tick unlocks its dependants from the next tick.
* True need = GPUs per tier to run every ready job this tick on its smallest fitting tier.
  A team is *starved* when some ready job could not run on its grant; its satisfaction is
  the share of ready GPUs that ran (fairness = Jain's index of satisfactions over teams with
  a need, minus 1, so perfect fairness costs nothing).
* Declarations made at tick t are for tick t+1, so the allocator always sees last tick's
  requests; stances at tick 0 answer no grant and have no effect.
* Shocks fire after the actions of their tick: an incident's lost GPUs are repaired out of
  that tick's grants; a market crisis shapes offers posted while it lasts (bought a tick
  later); a grid spike raises this tick's intensity.
* A hard carbon cap counts every granted GPU as busy when it cuts, and its cuts are charged
  as `invalid` like every other repair.
* `pressure` (the allocator's coarse public signal) is 0/1/2 for how many of a team's ready
  jobs are due within 2 ticks: the one deliberate, coarse leak of hidden state.
* The episode terminates when every job is resolved and no scheduled shock will inject
  another; otherwise it is truncated at `max_ticks`. All agents end on the same step.

## Privileged access

`env.unwrapped.hidden_state()` returns the live `ArenaState` (jobs, true needs). It exists
for the oracle allocator and for tests; policies that use it say so.

## Version history

* v0: initial release. Later within v0 (observations unchanged): every observation bound is
  finite (derived from the scenario limits, identical across the curriculum tiers), and no
  dimension has zero width; `reset(seed=...)` takes None or a non-negative integer.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from commons_arena import rewards
from commons_arena.enums import ALLOCATOR, BROKER, CarbonMode, ShockKind, Stance
from commons_arena.mechanics import carbon, grants, jobs, market, shocks, social
from commons_arena.observations import ObservationBuilder
from commons_arena.render import render_ansi, render_rgb
from commons_arena.scenario import ScenarioConfig, load_scenario
from commons_arena.spaces import action_layout, check_action, check_seed, make_action_space, make_observation_space
from commons_arena.state import ArenaState, initial_state

EPISODE_STATS = (
    "completed",
    "missed",
    "completed_value",
    "missed_value",
    "spend",
    "purchased_gpus",
    "granted_gpu_ticks",
    "used_gpu_ticks",
    "idle_gpu_ticks",
    "invalid_units",
    "carbon_kg",
    "fairness_sum",
    "justified_escalations",
    "unjustified_escalations",
    "exposed_bluffs",
    "ticks",
)


class EpisodeStateError(RuntimeError, ValueError):
    """``step()`` with no episode running (before ``reset()`` or after the end).

    A RuntimeError (wrong call order) and a ValueError (an action for a finished agent),
    so either ``except`` catches it."""


RENDER_MODES = ("human", "ansi", "rgb_array")


class ArenaEnv(ParallelEnv):
    metadata = {"name": "commons_arena_v0", "render_modes": list(RENDER_MODES), "is_parallelizable": True}

    def __init__(self, scenario: str | ScenarioConfig = "standard", render_mode: str | None = None) -> None:
        if render_mode is not None and render_mode not in RENDER_MODES:
            raise ValueError(f"render_mode {render_mode!r} not supported; choose from {list(RENDER_MODES)}")
        self.config = load_scenario(scenario)
        self.render_mode = render_mode
        self.possible_agents = list(self.config.agents)
        self.agents: list[str] = []
        self.teams = self.config.team_names
        self._observe = ObservationBuilder(self.config)
        self._observation_spaces = {a: make_observation_space(self.config, a) for a in self.possible_agents}
        self._action_spaces = {a: make_action_space(self.config, a) for a in self.possible_agents}
        self._nvec = {a: space.nvec for a, space in self._action_spaces.items()}
        self._alloc = action_layout(self.config, ALLOCATOR).slices
        self._broker = action_layout(self.config, BROKER).slices
        tiers = self.config.gpu_tiers
        self._n_tiers = len(tiers)
        self._speed = np.array([t.speed for t in tiers])
        self._power = np.array([t.power_kw for t in tiers])
        self._op_cost = np.array([t.op_cost for t in tiers])
        self._owned = np.array([t.owned for t in tiers], dtype=np.int64)
        self._inventory = [t.spot_inventory for t in tiers]
        self._unit_cost = np.array([t.spot_unit_cost for t in tiers])
        self._grid = market.price_grid(np.array([t.max_price for t in tiers]), self.config.price_levels).tolist()
        self._board_pressure = [t.board_pressure for t in self.config.teams]
        self._tier_index = {name: i for i, name in enumerate(self.config.tier_names)}
        self._team_index = {name: i for i, name in enumerate(self.teams)}
        self._rubric = rewards.Rubric(self.config.rewards)
        # every step's terms of an agent come in the rubric's order: totals are kept in that order
        self._term_names = {a: self._rubric.term_names("team" if a in self.teams else a) for a in self.possible_agents}
        self._hard_cap = self.config.carbon.carbon_mode is CarbonMode.HARD
        # Seed-independent parts of every episode, prepared once (reset only draws).
        self._job_sources = [jobs.TeamJobSource(team, tiers) for team in self.config.teams]
        # A scheduled shock that injects a job keeps the episode open until it has fired.
        self._last_job_shock_tick = max(
            (spec.tick for spec in self.config.shocks if spec.tick is not None and spec.job is not None), default=-1
        )
        self._state: ArenaState | None = None
        self._rng = np.random.default_rng()
        self._last_tick: dict[str, Any] = {}

    # ------------------------------------------------------------------ spaces
    # Built once per instance: a space carries its own sampling generator.
    def observation_space(self, agent: str) -> spaces.Box:
        if agent not in self._observation_spaces:
            raise ValueError(f"unknown agent {agent!r}; agents are {self.possible_agents}")
        return self._observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.MultiDiscrete:
        if agent not in self._action_spaces:
            raise ValueError(f"unknown agent {agent!r}; agents are {self.possible_agents}")
        return self._action_spaces[agent]

    # ------------------------------------------------------------------ api
    def reset(self, seed: int | None = None, options: dict | None = None):
        self._rng = np.random.default_rng(check_seed(seed))
        self._state = initial_state(self.config, self._rng, self._job_sources)
        queues = self._refresh_queues(self._state)
        self.agents = list(self.possible_agents)
        self._totals = {a: [0.0] * len(names) for a, names in self._term_names.items()}
        self._stats = dict.fromkeys(EPISODE_STATS, 0.0)
        self._last_tick = {}
        info = {"scenario": self.config.name, "scenario_hash": self.config.content_hash}
        return self._observe.all(self._state, queues), {a: dict(info) for a in self.agents}

    def hidden_state(self) -> ArenaState:
        """Privileged: the live state, hidden truth included. For the oracle and tests."""
        if self._state is None:
            raise RuntimeError("call reset() before hidden_state()")
        return self._state

    def step(self, actions: dict[str, Any]):
        if self._state is None:
            raise EpisodeStateError("step() called before reset(); call reset(seed=...) first")
        if not self.agents:
            raise EpisodeStateError(
                "step() called after the episode ended (every agent has finished); call reset() to start a new one"
            )
        # Actions arrive as lists of ints; per-tier and per-team vectors are handled as
        # lists (a few entries each), and become arrays where the state keeps them.
        acts = self._checked_actions(actions)
        s, cfg, T, N = self._state, self.config, self._n_tiers, len(self.teams)
        t = s.t

        # 1. broker posts next tick's offer, under the effects active now
        active = shocks.active(s.effects, t)
        broker_act = acts[BROKER]
        next_qty, next_price, broker_cut = market.post_offer(
            broker_act[self._broker["quantity"]],
            broker_act[self._broker["price_level"]],
            shocks.spot_inventory(self._inventory, active),
            self._grid,
            shocks.price_multiplier(active),
        )
        declared_now = s.declared  # what teams declared last tick for this tick
        # 2. teams: requests for next tick, stance on last tick's grant
        requests = [acts[team][:T] for team in self.teams]
        stances = [acts[team][T] for team in self.teams]
        # 3. allocator: purchases from the visible offer, grants for this tick
        alloc_act = acts[ALLOCATOR]
        buys, offer_cut, budget_cut = market.repair_purchases(
            alloc_act[self._alloc["buy"]], s.offer_qty.tolist(), s.offer_price, s.budget
        )
        purchase_cost = float(buys @ s.offer_price)
        s.budget = max(0.0, s.budget - purchase_cost)
        # 5. shocks fire; incident capacity is gone before grants apply
        fired = shocks.due_shocks(cfg.shocks, t, self._rng)
        events = [self._fire(s, spec, t) for spec in fired]
        if fired:
            active = shocks.active(s.effects, t)
        s.online = self._online(active)
        flat = alloc_act[self._alloc["grant"]]
        requested = [flat[i * T : (i + 1) * T] for i in range(N)]
        available = [online + bought for online, bought in zip(s.online.tolist(), buys.tolist(), strict=True)]
        granted, grant_cut = grants.repair_grants(requested, available)
        intensity = carbon.intensity_at(cfg.carbon.intensity, t, shocks.intensity_multiplier(active))
        carbon_cut = 0
        if self._hard_cap:
            granted, carbon_cut = carbon.cut_for_hard_cap(
                granted, self._power, intensity, cfg.carbon.cap_kg - s.carbon_used
            )
        grant_rows = granted.tolist()
        # 6. teams run jobs
        results = [jobs.run_team_jobs(s.jobs[i], s.orders[i], grant_rows[i], self._speed, t) for i in range(N)]
        tier_used = [sum(column) for column in zip(*[r.used_by_tier for r in results], strict=True)]
        used = np.array(tier_used, dtype=np.int64)
        carbon_before = s.carbon_used
        s.carbon_used += carbon.emissions(used, self._power, intensity)
        # audits compare this tick's declarations with this tick's true need
        need = np.array([r.need_by_tier for r in results], dtype=np.int64)
        bluffs = [False] * N
        if any(spec.shock_kind is ShockKind.COMPLIANCE_AUDIT for spec in fired):
            bluffs = social.exposed_bluffs(s.declared, need, cfg.credibility.audit_tolerance).tolist()
        # 9. escalations about last tick's grant; 8. starvation and reveal
        escalating = [stance == Stance.ESCALATE for stance in stances] if t > 0 else [False] * N
        justified, unjustified = social.judge_escalations(escalating, s.starved_last.tolist())
        justified, unjustified = justified.tolist(), unjustified.tolist()
        starved = [r.starved for r in results]
        social.update_starvation(s.streak, starved, s.revealed, cfg.reveal_after)
        bluff_loss, escalation_loss = cfg.credibility.bluff_loss, cfg.credibility.unjustified_escalation_loss
        lost = social.lose_credibility(
            s.credibility,
            [bluff * bluff_loss + wrong * escalation_loss for bluff, wrong in zip(bluffs, unjustified, strict=True)],
        )
        s.escalations += escalating
        # 10. rewards
        tier_granted = [sum(column) for column in zip(*grant_rows, strict=True)]
        outcome = rewards.TickOutcome(
            completed_value=np.array([r.completed_value for r in results]),
            missed_value=np.array([r.missed_value for r in results]),
            satisfaction=np.array([r.satisfaction for r in results]),
            has_need=np.array([r.ready_gpus > 0 for r in results]),
            credibility_lost=lost,
            purchase_cost=purchase_cost,
            operating_cost=float(np.array(tier_granted) @ self._op_cost),
            idle_gpus=sum(tier_granted) - sum(tier_used),
            carbon_over_kg=(
                carbon.over_cap_increment(carbon_before, s.carbon_used, cfg.carbon.cap_kg)
                if not self._hard_cap
                else 0.0
            ),
            # a sum, not numpy's dot: with 0/1 weights every product is exact, so they agree to the bit
            justified_pressure=sum((p for p, yes in zip(self._board_pressure, justified, strict=True) if yes), 0.0),
            allocator_invalid=offer_cut + budget_cut + grant_cut + carbon_cut,  # every repaired unit (docstring)
            broker_profit=market.broker_profit(buys, s.offer_price, self._unit_cost),
            broker_invalid=broker_cut,
        )
        terms = {ALLOCATOR: self._rubric.allocator_terms(outcome)}
        for i, team in enumerate(self.teams):
            terms[team] = self._rubric.team_terms(outcome, i)
        terms[BROKER] = self._rubric.broker_terms(outcome)

        # advance to the next tick
        s.t = t + 1
        s.declared = np.array(requests, dtype=np.int64)
        s.stance = np.array(stances, dtype=np.int64)
        s.last_grant = granted
        s.starved_last = np.array(starved)
        s.last_sold, s.last_price = buys, s.offer_price
        s.offer_qty, s.offer_price = next_qty, next_price
        s.effects = shocks.active(s.effects, s.t)
        s.online = self._online(s.effects)
        queues = self._refresh_queues(s)

        repairs = {
            "buy_over_offer": offer_cut,
            "buy_over_budget": budget_cut,
            "grant_over_capacity": grant_cut,
            "grant_over_carbon_cap": carbon_cut,
            "offer_over_inventory": broker_cut,
        }
        self._accumulate(terms, outcome, results, justified, unjustified, bluffs, tier_granted, buys, tier_used)
        self._last_tick = {
            "tick": t, "declared": declared_now, "granted": granted, "bought": buys, "used": used, "need": need,
            "events": events, "repairs": repairs, "terms": terms, "intensity": intensity,
        }

        resolved = all(q.pending == 0 for q in queues) and s.t > self._last_job_shock_tick
        terminated = resolved
        truncated = not resolved and s.t >= cfg.max_ticks
        observations = self._observe.all(s, queues)
        rewards_out = {a: float(sum(terms[a].values())) for a in self.agents}
        infos: dict[str, dict[str, Any]] = {
            a: {"reward_terms": terms[a], "scenario_hash": cfg.content_hash} for a in self.agents
        }
        infos[ALLOCATOR]["repairs"] = repairs
        infos[ALLOCATOR]["events"] = events
        if terminated or truncated:
            for a in self.agents:
                infos[a]["episode"] = self.episode_summary(a)
        terminations = dict.fromkeys(self.agents, terminated)
        truncations = dict.fromkeys(self.agents, truncated)
        if terminated or truncated:
            self.agents = []
        if self.render_mode == "human":
            self.render()  # prints
        return observations, rewards_out, terminations, truncations, infos

    def render(self) -> str | np.ndarray | None:
        if self.render_mode is None:
            return None
        if self.render_mode == "rgb_array":
            return render_rgb(self)
        text = "commons_arena: not reset" if self._state is None else render_ansi(self.config, self._state, self._last_tick)
        if self.render_mode == "human":
            print(text)
            return None
        return text

    def close(self) -> None:
        pass

    # ------------------------------------------------------------------ helpers
    def _checked_actions(self, actions: dict[str, Any]) -> dict[str, list[int]]:
        """Validate every action before touching state; missing agents play all zeros."""
        if not isinstance(actions, dict):
            raise ValueError(f"step() takes a dict of agent -> action, got {type(actions).__name__}")
        for agent in actions:
            if agent not in self.possible_agents:
                raise ValueError(f"unknown agent {agent!r}; agents are {self.possible_agents}")
            if agent not in self.agents:
                raise ValueError(f"agent {agent!r} has finished this episode and cannot act")
        return {
            a: check_action(a, actions[a], self._nvec[a]) if a in actions else [0] * len(self._nvec[a])
            for a in self.possible_agents
        }

    def _online(self, effects: list[shocks.Effect]) -> np.ndarray:
        """Owned GPUs not offline from incidents."""
        if not effects:
            return self._owned.copy()
        return np.maximum(self._owned - shocks.offline_gpus(effects, self._n_tiers), 0)

    def _refresh_queues(self, s: ArenaState) -> list[jobs.Queue]:
        """Each team's queue at tick ``s.t``: sets the true need, and the observations use it."""
        queues = [jobs.queue_at(s.jobs[i], s.orders[i], s.t, self._n_tiers) for i in range(len(self.teams))]
        s.need[:] = [q.need for q in queues]
        return queues

    def _fire(self, s: ArenaState, spec, t: int) -> dict[str, Any]:
        """Start a shock's effect and inject its job; return the event record."""
        kind = spec.shock_kind
        s.shocks_seen[kind] += 1
        tier = self._tier_index[spec.tier] if spec.tier is not None else -1
        s.effects.append(shocks.Effect(spec=spec, tier_index=tier, until=t + spec.duration - 1))
        event: dict[str, Any] = {"tick": t, "kind": kind.label, "until": t + spec.duration - 1}
        if spec.job is not None:
            team = self._team_index[spec.target_team]
            s.injected += 1
            job = jobs.urgent_job(spec.job, f"{kind.label}_{s.injected}", t, self.config.gpu_tiers)
            s.jobs[team].append(job)
            s.orders[team] = jobs.edf_order(s.jobs[team])
            event.update(team=spec.target_team, job=job.id)
        if tier >= 0:
            event.update(tier=spec.tier, gpus_offline=spec.gpus_offline)
        return event

    def _accumulate(
        self, terms, outcome, results, justified, unjustified, bluffs, tier_granted, buys, tier_used
    ) -> None:
        """Add this tick to the episode's running totals (``episode_summary`` reports them)."""
        for agent, agent_terms in terms.items():  # same terms, same order, every step
            self._totals[agent] = list(map(operator.add, self._totals[agent], agent_terms.values()))
        st = self._stats
        st["completed"] += sum([len(r.completed) for r in results])
        st["missed"] += sum([len(r.missed) for r in results])
        st["completed_value"] += outcome.completed_total
        st["missed_value"] += outcome.missed_total
        st["spend"] += outcome.purchase_cost + outcome.operating_cost
        st["purchased_gpus"] += sum(buys.tolist())
        st["granted_gpu_ticks"] += sum(tier_granted)
        st["used_gpu_ticks"] += sum(tier_used)
        st["idle_gpu_ticks"] += outcome.idle_gpus
        st["invalid_units"] += outcome.allocator_invalid
        st["carbon_kg"] = self._state.carbon_used if self._state else 0.0
        st["fairness_sum"] += outcome.fairness
        st["justified_escalations"] += sum(justified)
        st["unjustified_escalations"] += sum(unjustified)
        st["exposed_bluffs"] += sum(bluffs)
        st["ticks"] += 1

    def episode_summary(self, agent: str) -> dict[str, float]:
        """Episode totals: ``return`` and each reward term for ``agent``, plus shared stats."""
        st = dict(self._stats)
        # before the first step no term has been seen yet: no term totals
        seen = zip(self._term_names[agent], self._totals[agent], strict=True) if st["ticks"] else ()
        totals = {f"term/{name}": total for name, total in seen}
        ticks = max(st.pop("ticks"), 1)
        st["fairness"] = st.pop("fairness_sum") / ticks
        capacity = ticks * (self._owned.sum()) + st["purchased_gpus"]
        st["utilisation"] = float(st["used_gpu_ticks"] / capacity) if capacity else 0.0
        st["ticks"] = ticks
        return {"return": float(sum(totals.values())), **totals, **st}
