"""The reference env: the per-arena ParallelEnv as first written, over the list-based rules of
this package (``tick.py``, ``mechanics/``, ``state.py``, ``observations.py``).

It plays exactly what ``commons_arena.parallel_env`` plays (the batched core at a batch of one),
and its documentation is that env's docstring (``commons_arena/arena.py``). The equivalence test
(``tests/commons_arena/test_batched.py``) steps the batched core beside one of these per arena.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np
from pettingzoo import ParallelEnv

from commons_arena import rewards
from commons_arena.arena import RENDER_MODES, ArenaEnv
from commons_arena.enums import ALLOCATOR
from commons_arena.errors import EpisodeStateError
from commons_arena.ledger import EPISODE_STATS, episode_summary
from commons_arena.render import Dashboard
from commons_arena.rules import rules_for
from commons_arena.scenario import ScenarioConfig, load_scenario
from commons_arena.spaces import AgentSpaces, IntentDecoder, check_seed, role_of
from commons_arena.version import ENV_NAME
from tests.reference.mechanics import jobs
from tests.reference.observations import ObservationBuilder
from tests.reference.state import ArenaState, initial_state
from tests.reference.tick import TickReport, play_tick

__all__ = ["EpisodeLedger", "ReferenceEnv"]



class EpisodeLedger:
    """Running totals of one episode (reset by building a new ledger)."""

    def __init__(self, term_names: dict[str, tuple[str, ...]], owned_gpus: int) -> None:
        self.term_names = term_names  # every tick's terms of an agent come in this order
        self.owned_gpus = owned_gpus  # GPUs owned, all tiers: the utilisation's capacity per tick
        self.totals = {agent: [0.0] * len(names) for agent, names in term_names.items()}
        self.stats = dict.fromkeys(EPISODE_STATS, 0.0)

    def add(self, report: TickReport, carbon_kg: float) -> None:
        """Count a played tick; ``carbon_kg``: emissions so far, after the tick."""
        for agent, agent_terms in report.terms.items():
            self.totals[agent] = list(map(operator.add, self.totals[agent], agent_terms.values()))
        o, st = report.outcome, self.stats
        st["completed"] += sum([len(team.completed) for team in report.teams])
        st["missed"] += sum([len(team.missed) for team in report.teams])
        st["completed_value"] += o.completed_total
        st["missed_value"] += o.missed_total
        st["spend"] += o.purchase_cost + o.operating_cost
        st["purchased_gpus"] += sum(report.bought.tolist())
        st["granted_gpu_ticks"] += report.granted_total
        st["used_gpu_ticks"] += report.used_total
        st["idle_gpu_ticks"] += o.idle_gpus
        st["invalid_units"] += o.allocator_invalid
        st["carbon_kg"] = carbon_kg
        st["fairness_sum"] += o.fairness
        st["justified_escalations"] += sum(report.justified)
        st["unjustified_escalations"] += sum(report.unjustified)
        st["exposed_bluffs"] += sum(report.exposed_bluffs)
        st["ticks"] += 1

    def summary(self, agent: str) -> dict[str, float]:
        """``return`` and each reward term total of ``agent``, plus the shared statistics."""
        seen = self.stats["ticks"] > 0  # before the first step no term has been seen yet: no term totals
        names, totals = (self.term_names[agent], self.totals[agent]) if seen else ((), [])
        summary = episode_summary(names, totals, self.stats, self.owned_gpus)
        return {key: float(value) for key, value in summary.items()}


class ReferenceEnv(AgentSpaces, ParallelEnv):
    metadata = {"name": ENV_NAME, "render_modes": list(RENDER_MODES), "is_parallelizable": True}
    # the env's own: they read the agents, the spaces, the state and the last tick only
    render = ArenaEnv.render
    close = ArenaEnv.close
    _checked_actions = ArenaEnv._checked_actions

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

    def _refresh_queues(self, s: ArenaState) -> list[jobs.Queue]:
        """Each team's queue at tick ``s.t``: sets the true need, and the observations use it."""
        queues = [jobs.queue_at(s.jobs[i], s.orders[i], s.t, self.rules.n_tiers) for i in range(len(self.teams))]
        s.need[:] = [q.need for q in queues]
        return queues
