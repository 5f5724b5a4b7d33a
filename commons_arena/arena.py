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

## One tick (all agents act at once; `commons_arena/tick.py`, one function per step)

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

`env.unwrapped.hidden_state()` returns the live `ArenaState` (jobs, true needs). It exists
for the oracle allocator and for tests; policies that use it say so.

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

from commons_arena import rewards
from commons_arena.enums import ALLOCATOR
from commons_arena.errors import EpisodeStateError
from commons_arena.ledger import EPISODE_STATS, EpisodeLedger
from commons_arena.mechanics import jobs
from commons_arena.observations import ObservationBuilder
from commons_arena.render import Dashboard, render_ansi
from commons_arena.rules import rules_for
from commons_arena.scenario import ScenarioConfig, load_scenario
from commons_arena.spaces import AgentSpaces, IntentDecoder, check_action, check_seed, role_of
from commons_arena.state import ArenaState, initial_state
from commons_arena.tick import TickReport, play_tick
from commons_arena.version import ENV_NAME

__all__ = ["EPISODE_STATS", "RENDER_MODES", "ArenaEnv", "EpisodeStateError"]


RENDER_MODES = ("human", "ansi", "rgb_array")


class ArenaEnv(AgentSpaces, ParallelEnv):
    metadata = {"name": ENV_NAME, "render_modes": list(RENDER_MODES), "is_parallelizable": True}

    def __init__(self, scenario: str | ScenarioConfig = "standard", render_mode: str | None = None) -> None:
        if render_mode is not None and render_mode not in RENDER_MODES:
            raise ValueError(f"render_mode {render_mode!r} not supported; choose from {list(RENDER_MODES)}")
        self.config = load_scenario(scenario)
        self.rules = rules_for(self.config)
        self.render_mode = render_mode
        self.possible_agents = list(self.config.agents)
        self.agents: list[str] = []
        self.teams = self.config.team_names
        self._observe = ObservationBuilder(self.config)
        self.build_spaces(self.config)
        self._decode = IntentDecoder(self.config)
        self._rubric = rewards.Rubric(self.config.rewards)
        self._term_names = {a: self._rubric.term_names(role_of(self.config, a)) for a in self.possible_agents}
        self._state: ArenaState | None = None
        self._rng = np.random.default_rng()
        self._ledger = EpisodeLedger(self._term_names, int(self.rules.owned.sum()))
        self.last_tick: TickReport | None = None
        """The report of the tick the last ``step()`` played (``None`` before the first step of an episode)."""
        self._dashboard: Dashboard | None = None

    # ------------------------------------------------------------------ api
    def reset(self, seed: int | None = None, options: dict | None = None):
        self._rng = np.random.default_rng(check_seed(seed))
        self._state = initial_state(self.config, self._rng, self.rules.job_sources)
        queues = self._refresh_queues(self._state)
        self.agents = list(self.possible_agents)
        self._ledger = EpisodeLedger(self._term_names, self._ledger.owned_gpus)
        self.last_tick = None
        info = {"scenario": self.config.name, "scenario_hash": self.config.content_hash}
        return self._observe.all(self._state, queues), {a: dict(info) for a in self.agents}

    def hidden_state(self) -> ArenaState:
        """Privileged: the live state, hidden truth included. For the oracle and tests."""
        if self._state is None:
            raise RuntimeError("call reset() before hidden_state()")
        return self._state

    def step(self, actions: dict[str, Any]):
        s = self._checked_state()
        intents = self._decode(self._checked_actions(actions))
        report = self.last_tick = play_tick(self.rules, self._rubric, s, intents, self._rng)
        self._ledger.add(report, s.carbon_used)
        queues = self._refresh_queues(s)
        terminated = all(q.pending == 0 for q in queues) and s.t > self.rules.last_job_shock_tick
        truncated = not terminated and s.t >= self.config.max_ticks
        observations = self._observe.all(s, queues)
        rewards_out = dict(report.rewards)  # every agent acts until the common end
        infos: dict[str, dict[str, Any]] = {
            a: {"reward_terms": report.terms[a], "scenario_hash": self.config.content_hash} for a in self.agents
        }
        infos[ALLOCATOR]["repairs"] = report.repairs.as_dict()
        infos[ALLOCATOR]["events"] = report.events
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
        return self._ledger.summary(agent)

    # ------------------------------------------------------------------ helpers
    def _checked_state(self) -> ArenaState:
        if self._state is None:
            raise EpisodeStateError("step() called before reset(); call reset(seed=...) first")
        if not self.agents:
            raise EpisodeStateError(
                "step() called after the episode ended (every agent has finished); call reset() to start a new one"
            )
        return self._state

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

    def _refresh_queues(self, s: ArenaState) -> list[jobs.Queue]:
        """Each team's queue at tick ``s.t``: sets the true need, and the observations use it."""
        queues = [jobs.queue_at(s.jobs[i], s.orders[i], s.t, self.rules.n_tiers) for i in range(len(self.teams))]
        s.need[:] = [q.need for q in queues]
        return queues
