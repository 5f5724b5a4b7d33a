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
cap, while shocks hit. The rules, in full: `docs/rules.md`; the numbers: the scenario file.

## Arguments

`parallel_env(scenario="standard", render_mode=None)`: `scenario` is a shipped scenario
name (`list_scenarios()`), a path to a TOML file, or a `ScenarioConfig`.
`render_mode` is `None`, `"human"` (prints the text summary after every step), `"ansi"`
(`render()` returns a text summary of the last tick) or `"rgb_array"` (a dashboard frame,
`H x W x 3` uint8; see `commons_arena/render.py`).

## One tick (all agents act at once; `commons_arena/batched/tick.py`, one function per step)

1. The broker posts next tick's offer (quantity cut to its inventory).
2. Teams declare requests for the next tick and a stance on last tick's grant.
3. The allocator buys from the offer posted last tick (cut to the offer, then to the
   budget, most expensive tier first).
4. Shocks due this tick fire; incident capacity goes offline.
5. Grants for this tick above `online + bought` are repaired (proportional, largest
   remainder); a hard carbon cap then cuts grants from the most power-hungry tier. Every
   repaired unit is an `invalid` unit and is listed in `infos["allocator"]["repairs"]`.
6. Teams run ready jobs on their grants (EDF, memory fit, dependencies, gang placement
   on one tier); carbon accrues for busy GPUs; unused granted GPUs are idle.
7. An audit exposes declarations above true need x (1 + tolerance).
8. Starvation streaks advance and reveal true needs after `reveal_after` ticks.
9. Escalations about last tick's grant are judged (justified if the team was starved).
10. Rewards; the state moves to the next tick.

`env.last_tick` is the public, typed `TickReport` of the tick the last `step()` played
(what render and recording read); `env.rules` the scenario's derived tables (`Rules`).

The rules are written once, over arrays with a leading batch axis (`commons_arena.batched`);
this env is a batch of one (`vector_env` steps many arenas at once, the fast path), and its
report and hidden state are read from that batch's row (`commons_arena/view.py`).

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

## Choices made where a rule needed one (`docs/rules.md` marks each **(choice)**)

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
* `pressure` (the allocator's coarse public signal) is 0/1/2 for how many of a team's
  arrived, unresolved jobs are due this tick or the next (2: two or more): the one
  deliberate, coarse leak of hidden state.
* Justified escalations cost the team's `board_pressure` (set per team in the scenario).
* The episode terminates when every job is resolved and no scheduled shock will inject
  another; otherwise it is truncated at `max_ticks`. All agents end on the same step.

## Privileged access

`env.unwrapped.hidden_state()` returns the live `ArenaState` (jobs, true needs): a view of the
batch's arrays, always showing the state now. It exists for the oracle allocator and for tests;
policies that use it say so.

## Version history

* v0: initial release. Later within v0 (observations unchanged): every observation bound is
  finite (derived from the scenario limits, identical across the curriculum tiers), and no
  dimension has zero width; `reset(seed=...)` takes None or a non-negative integer.

Any change of behaviour bumps the version (`commons_arena/version.py`) and regenerates the
trajectory digests and golden recordings (`docs/rules.md` §10); `commons-arena verify`
re-plays a recording and refuses one made with another version.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pettingzoo import ParallelEnv

from commons_arena.batched.env import STAT, BatchLedger, fresh_seed
from commons_arena.batched.observations import BatchObserver
from commons_arena.batched.state import BatchState, Tables
from commons_arena.batched.tick import Effects, Queue, TickResult, effects_at, play_tick, queue_at
from commons_arena.enums import ALLOCATOR
from commons_arena.errors import EpisodeStateError
from commons_arena.ledger import EPISODE_STATS
from commons_arena.render import Dashboard, render_ansi
from commons_arena.rewards import Repairs
from commons_arena.rules import rules_for
from commons_arena.scenario import ScenarioConfig, load_scenario
from commons_arena.spaces import AgentSpaces, IntentDecoder, check_action, check_seed, role_of
from commons_arena.version import ENV_NAME
from commons_arena.view import ArenaState, Before, Event, TickReport

__all__ = ["EPISODE_STATS", "RENDER_MODES", "ArenaEnv", "EpisodeStateError"]


RENDER_MODES = ("human", "ansi", "rgb_array")
ONE = np.zeros(1, dtype=np.int64)  # the batch's one arena


class ArenaEnv(AgentSpaces, ParallelEnv):
    metadata = {"name": ENV_NAME, "render_modes": list(RENDER_MODES), "is_parallelizable": True}

    def __init__(self, scenario: str | ScenarioConfig = "standard", render_mode: str | None = None) -> None:
        if render_mode is not None and render_mode not in RENDER_MODES:
            raise ValueError(f"render_mode {render_mode!r} not supported; choose from {list(RENDER_MODES)}")
        self.config = load_scenario(scenario)
        self.rules = rules_for(self.config)
        self.tables = Tables.of(self.rules)
        self.render_mode = render_mode
        self.possible_agents = list(self.config.agents)
        self.agents: list[str] = []
        self.teams = self.config.team_names
        self.build_spaces(self.config)
        self._decode = IntentDecoder(self.config)
        self._observe = BatchObserver(self.tables)
        self._term_names = {a: self.tables.rubric.term_names(role_of(self.config, a)) for a in self.possible_agents}
        self._ledger = BatchLedger(self._term_names, int(self.rules.owned.sum()), 1)
        self._batch: BatchState | None = None
        self._state: ArenaState | None = None
        self._effects: Effects | None = None  # active at the current tick
        self._queue: Queue | None = None  # the jobs' queue at the current tick
        self._played: tuple[Before, TickResult, list[Event], dict, dict] | None = None
        self._report: TickReport | None = None
        self._dashboard: Dashboard | None = None

    # ------------------------------------------------------------------ api
    def reset(self, seed: int | None = None, options: dict | None = None):
        seed = check_seed(seed)
        batch = self._batch = BatchState.started(self.tables, [fresh_seed() if seed is None else seed])
        self._state = ArenaState.of(self.tables, batch)
        self.agents = list(self.possible_agents)
        self._ledger.clear(ONE)
        self._played = self._report = None
        info = {"scenario": self.config.name, "scenario_hash": self.config.content_hash}
        return self._observations(batch, None)[0], {a: dict(info) for a in self.agents}

    def hidden_state(self) -> ArenaState:
        """Privileged: the live state, hidden truth included. For the oracle and tests."""
        if self._state is None:
            raise RuntimeError("call reset() before hidden_state()")
        return self._state

    @property
    def last_tick(self) -> TickReport | None:
        """The report of the tick the last ``step()`` played (``None`` before the first step of an episode)."""
        if self._report is None and self._played is not None:
            self._report = TickReport.of(*self._played)
        return self._report

    def step(self, actions: dict[str, Any]):
        s, state = self._checked_state()
        checked = self._checked_actions(actions)
        before = Before.of(s)
        n_jobs, injected = s.n_jobs[0].copy(), int(s.injected[0])
        queue, self._queue = (None if state.touched else self._queue), None  # a job written through the view: made again
        state.touched = False
        tick = play_tick(self.tables, s, self._decode({a: np.array([v]) for a, v in checked.items()}), self._effects,
                         queue)
        self._ledger.add(tick, s.carbon_used)
        events = state.fire(tick.fired[0], before.tick, n_jobs, injected) if tick.fired.any() else []
        observations, pending = self._observations(s, tick.effects)
        t = int(s.t[0])
        terminated = pending == 0 and t > self.rules.last_job_shock_tick
        truncated = not terminated and t >= self.config.max_ticks
        terms = {a: dict(zip(names, tick.terms[a][0].tolist(), strict=True)) for a, names in self._term_names.items()}
        rewards_out = {a: tick.rewards[a][0].item() for a in self.possible_agents}  # every agent acts until the end
        self._played, self._report = (before, tick, events, terms, rewards_out), None
        infos: dict[str, dict[str, Any]] = {
            a: {"reward_terms": terms[a], "scenario_hash": self.config.content_hash} for a in self.agents
        }
        infos[ALLOCATOR]["repairs"] = {rule: int(u[0]) for rule, u in zip(Repairs._fields, tick.repair_units(), strict=True)}
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
            if self._dashboard is None:
                self._dashboard = Dashboard()
            return self._dashboard.frame_from_play(self.config, self._state, self.last_tick)
        text = "commons_arena: not reset" if self._state is None else render_ansi(self.config, self._state, self.last_tick)
        if self.render_mode == "human":
            print(text)
            return None
        return text

    def close(self) -> None:
        pass

    def episode_summary(self, agent: str) -> dict[str, float]:
        """Episode totals: ``return`` and each reward term for ``agent``, plus shared stats."""
        seen = self._ledger.stats[0, STAT["ticks"]] > 0  # before the first step no term has been seen yet: no term totals
        return {key: float(value[0]) for key, value in self._ledger.summary(agent).items()
                if seen or not key.startswith("term/")}

    # ------------------------------------------------------------------ helpers
    def _checked_state(self) -> tuple[BatchState, ArenaState]:
        if self._batch is None or self._state is None:
            raise EpisodeStateError("step() called before reset(); call reset(seed=...) first")
        if not self.agents:
            raise EpisodeStateError(
                "step() called after the episode ended (every agent has finished); call reset() to start a new one"
            )
        return self._batch, self._state

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

    def _observations(self, s: BatchState, effects: Effects | None) -> tuple[dict[str, np.ndarray], int]:
        """Every agent's observation at tick ``s.t`` and the jobs still pending; keeps the true need
        and the effects active now (``effects``, when known) for the next step."""
        queue = self._queue = queue_at(self.tables, s)
        s.need = queue.need
        self._effects = effects_at(self.tables, s) if effects is None else effects
        observations = self._observe.all(s, queue, self._effects)
        return {a: obs[0] for a, obs in observations.items()}, int(queue.pending.sum())
