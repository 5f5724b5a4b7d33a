"""N arenas of one scenario behind PettingZoo's dicts, every value stacked over the batch.

:class:`VectorArenaEnv` is the public face of the batched core (``commons_arena.vector_env``;
docs/environment.md, "The batched core"). Arena *i* plays exactly the episode the reference
:class:`~commons_arena.arena.ArenaEnv` plays with the same seed and actions (the equivalence
test, ``tests/commons_arena/test_batched.py``, holds the two together bit for bit).

* ``reset(seed=s)``: arena *i* gets seed ``s + i`` (Gymnasium's convention); a list gives one
  seed per arena; ``None`` draws a fresh base seed. ``episode_seeds[i]`` is arena *i*'s
  current episode seed; its next episode is seeded ``episode_seeds[i] + num_envs``, so the
  arenas tile ``s, s+1, s+2, ...`` with no collision.
* Autoreset, Gymnasium's ``NEXT_STEP`` mode: the step after an arena's last step ignores its
  actions and returns its reset observation, reward 0, no termination or truncation.
* ``infos[agent]["reward_terms"]``: term name -> ``(N,)``; ``infos["allocator"]["repairs"]``:
  rule -> ``(N,)`` units; for arenas that just ended, ``infos[agent]["episode"]`` (key ->
  ``(N,)``, the reference's ``episode_summary`` keys) with the mask ``infos[agent]["_episode"]``
  (the entries of other arenas are 0).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

from commons_arena.batched.draws import DrawCache
from commons_arena.batched.observations import BatchObserver
from commons_arena.batched.state import BatchState, Tables
from commons_arena.batched.tick import Effects, TickResult, effects_at, play_tick, queue_at
from commons_arena.enums import ALLOCATOR
from commons_arena.errors import EpisodeStateError
from commons_arena.ledger import EPISODE_STATS, episode_summary
from commons_arena.rewards import Repairs
from commons_arena.rules import Rules, rules_for
from commons_arena.scenario import ScenarioConfig, load_scenario
from commons_arena.spaces import AgentSpaces, IntentDecoder, check_seed, role_of

STAT = {name: k for k, name in enumerate(EPISODE_STATS)}
ADDED = [STAT[name] for name in EPISODE_STATS if name != "carbon_kg"]  # the statistics that add up tick by tick


class BatchLedger:
    """:class:`commons_arena.ledger.EpisodeLedger` of every arena: term totals and statistics as arrays."""

    def __init__(self, term_names: dict[str, tuple[str, ...]], owned_gpus: int, num_envs: int) -> None:
        self.term_names = term_names
        self.owned_gpus = owned_gpus
        self.totals = {agent: np.zeros((num_envs, len(names))) for agent, names in term_names.items()}
        self.stats = np.zeros((num_envs, len(EPISODE_STATS)))

    def clear(self, index: np.ndarray) -> None:
        for totals in self.totals.values():
            totals[index] = 0.0
        self.stats[index] = 0.0

    def add(self, tick: TickResult, carbon_kg: np.ndarray) -> None:
        for agent, terms in tick.terms.items():
            self.totals[agent] += terms
        o, run = tick.outcome, tick.run
        self.stats[:, ADDED] += np.array([  # in the order of ADDED
            run.completed.sum(axis=1),
            run.missed.sum(axis=1),
            o.completed_total,
            o.missed_total,
            o.purchase_cost + o.operating_cost,
            tick.purchase.bought.sum(axis=1),
            run.granted_total,
            run.used_total,
            o.idle_gpus,
            o.allocator_invalid,
            o.fairness,
            tick.justified.sum(axis=1),
            tick.unjustified.sum(axis=1),
            tick.bluffs.sum(axis=1),
            np.ones_like(carbon_kg),
        ], dtype=np.float64).T
        self.stats[:, STAT["carbon_kg"]] = carbon_kg

    def summary(self, agent: str) -> dict[str, np.ndarray]:
        """``EpisodeLedger.summary`` of every arena: key -> ``(N,)``."""
        stats = {name: self.stats[:, k] for k, name in enumerate(EPISODE_STATS)}
        return episode_summary(self.term_names[agent], list(self.totals[agent].T), stats, self.owned_gpus)


def fresh_seed() -> int:
    """A seed from fresh entropy (what ``reset(seed=None)`` plays), below 2**63."""
    return int(np.random.SeedSequence().generate_state(1, np.uint64)[0]) >> 1


MAX_NUM_ENVS = 4_096  # arenas of one batch (an env runner's most; each holds a scenario's arrays of every job)


class VectorArenaEnv(AgentSpaces):
    """``num_envs`` arenas of one scenario, stepped at once (module docstring)."""

    metadata = {"name": "commons_arena_vector_v0", "autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, scenario: str | ScenarioConfig = "standard", num_envs: int = 1) -> None:
        if isinstance(num_envs, bool) or not isinstance(num_envs, int | np.integer) or not 1 <= num_envs <= MAX_NUM_ENVS:
            raise ValueError(f"num_envs must be an integer in [1, {MAX_NUM_ENVS}], got {str(num_envs)[:40]}")
        self.config = load_scenario(scenario)
        self.rules: Rules = rules_for(self.config)
        self.num_envs = int(num_envs)
        self.possible_agents = list(self.config.agents)
        self.agents = list(self.possible_agents)  # every arena plays on: ended ones reset in place
        self.tables = Tables.of(self.rules)
        self.build_spaces(self.config)
        self._decode = IntentDecoder(self.config)
        self._observe = BatchObserver(self.tables)
        self._term_names = {a: self.tables.rubric.term_names(role_of(self.config, a)) for a in self.possible_agents}
        self._ledger = BatchLedger(self._term_names, int(self.rules.owned.sum()), self.num_envs)
        self._state: BatchState | None = None
        self._ended = np.zeros(self.num_envs, dtype=bool)
        self._effects: Effects | None = None  # active at the current tick of every arena
        self._draws = DrawCache(self.rules, self.tables.n_random, self.num_envs)
        self.episode_seeds: list[int] = []
        """Each arena's current episode seed (its next episode: this + ``num_envs``)."""

    # ------------------------------------------------------------------ api
    def reset(self, seed: int | Sequence[int | None] | None = None, options: dict | None = None):
        """Every arena's first observation: ``agent -> (N, obs_dim)``, and infos."""
        self.episode_seeds = self._seeds(seed)
        self._state = BatchState.empty(self.tables, self.num_envs)
        every = np.arange(self.num_envs)
        self._draws.clear()
        self._state.reset(self.tables, every, self.episode_seeds)
        self._ledger.clear(every)
        self._ended[:] = False
        info = {"scenario": self.config.name, "scenario_hash": self.config.content_hash}
        return self._observations(self._state)[0], {a: dict(info) for a in self.agents}

    def step(self, actions: dict[str, Any]):
        """One tick of every arena; arenas whose episode ended at the last step reset instead (NEXT_STEP)."""
        s = self._state
        if s is None:
            raise EpisodeStateError("step() called before reset(); call reset(seed=...) first")
        checked = self._checked_actions(actions)
        tick = play_tick(self.tables, s, self._decode(checked), self._effects)
        self._ledger.add(tick, s.carbon_used)
        restart = np.flatnonzero(self._ended)
        if restart.size:
            seeds = [self.episode_seeds[i] + self.num_envs for i in restart.tolist()]
            for i, seed in zip(restart.tolist(), seeds, strict=True):
                self.episode_seeds[i] = seed
            upcoming = [seed + self.num_envs for seed in self.episode_seeds]
            s.reset(self.tables, restart, seeds, self._draws.take(restart, seeds, upcoming))
            self._ledger.clear(restart)
        observations, pending = self._observations(s, None if restart.size else tick.effects)
        terminated = (pending == 0) & (s.t > self.rules.last_job_shock_tick)
        truncated = ~terminated & (s.t >= self.config.max_ticks)
        terminated[restart], truncated[restart] = False, False
        rewards_out = {}
        infos: dict[str, dict[str, Any]] = {}
        for agent in self.possible_agents:
            reward, terms = tick.rewards[agent], tick.terms[agent]
            if restart.size:
                reward, terms = reward.copy(), terms.copy()
                reward[restart], terms[restart] = 0.0, 0.0
            rewards_out[agent] = reward
            names = self._term_names[agent]
            infos[agent] = {"reward_terms": {name: terms[:, k] for k, name in enumerate(names)},
                            "scenario_hash": self.config.content_hash}
        infos[ALLOCATOR]["repairs"] = {rule: np.where(self._ended, 0, unit)
                                       for rule, unit in zip(Repairs._fields, tick.repair_units(), strict=True)}
        ended = terminated | truncated
        if ended.any():
            for agent in self.possible_agents:
                summary = self._ledger.summary(agent)
                infos[agent]["episode"] = {key: np.where(ended, values, 0.0) for key, values in summary.items()}
                infos[agent]["_episode"] = ended.copy()
        self._ended = ended
        terminations = {a: terminated.copy() for a in self.possible_agents}
        truncations = {a: truncated.copy() for a in self.possible_agents}
        return observations, rewards_out, terminations, truncations, infos

    @property
    def state(self) -> BatchState:
        """Privileged: the live batched state, hidden truth included (for tests and the oracle's kind)."""
        if self._state is None:
            raise RuntimeError("call reset() before state")
        return self._state

    def close(self) -> None:
        pass

    # ------------------------------------------------------------------ helpers
    def _observations(self, s: BatchState, effects: Effects | None = None) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Every agent's observations at tick ``s.t``, and each arena's pending jobs; ``effects``:
        those active now when known. Keeps the queue's true need and the effects for the next step."""
        queue = queue_at(self.tables, s)
        s.need = queue.need
        self._effects = effects_at(self.tables, s) if effects is None else effects
        return self._observe.all(s, queue, self._effects), queue.pending.sum(axis=1)

    def _seeds(self, seed: int | Sequence[int | None] | None) -> list[int]:
        n = self.num_envs
        if seed is None or isinstance(seed, int | np.integer) and not isinstance(seed, bool):
            base = check_seed(seed)
            if base is None:  # fresh entropy, then the same tiling as an explicit seed
                base = fresh_seed()
            return [base + i for i in range(n)]
        if isinstance(seed, str | bytes) or not isinstance(seed, Sequence | np.ndarray):
            raise ValueError(f"seed must be None, a non-negative integer or one per arena, got {seed!r}")
        seeds = list(seed)
        if len(seeds) != n:
            raise ValueError(f"reset got {len(seeds)} seeds for {n} arenas; give one per arena, one int, or None")
        checked = [check_seed(s) for s in seeds]
        return [fresh_seed() if s is None else s for s in checked]

    def _checked_actions(self, actions: dict[str, Any]) -> dict[str, np.ndarray]:
        """Every action checked before any state changes; missing agents play all zeros."""
        if not isinstance(actions, dict):
            raise ValueError(f"step() takes a dict of agent -> actions (N, act_dim), got {type(actions).__name__}")
        for agent in actions:
            if agent not in self._nvec:
                raise ValueError(f"unknown agent {agent!r}; agents are {self.possible_agents}")
        return {agent: self._checked(agent, actions[agent]) if agent in actions
                else np.zeros((self.num_envs, len(nvec)), dtype=np.int64) for agent, nvec in self._nvec.items()}

    def _checked(self, agent: str, action: object) -> np.ndarray:
        nvec = self._nvec[agent]
        shape = (self.num_envs, len(nvec))
        try:
            arr = np.asarray(action)
        except Exception as err:  # pragma: no cover - exotic objects
            raise ValueError(f"actions for {agent!r} are not array-like: {err}") from None
        if arr.shape != shape:
            raise ValueError(f"actions for {agent!r} have shape {arr.shape}; expected {shape} (num_envs x act_dim)")
        if arr.dtype.kind == "f":
            if not np.all(np.isfinite(arr)):
                raise ValueError(f"actions for {agent!r} contain NaN or infinity")
            if not np.all(arr == np.round(arr)):
                raise ValueError(f"actions for {agent!r} must hold integers")
        elif arr.dtype.kind == "O":
            if not all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in arr.ravel().tolist()):
                raise ValueError(f"actions for {agent!r} must be integers, got dtype {arr.dtype}")
        elif arr.dtype.kind not in "iub":
            raise ValueError(f"actions for {agent!r} must be integers, got dtype {arr.dtype}")
        if arr.dtype.kind in "fO":
            bad = (arr < 0) | (arr >= nvec)
        else:
            bad = (arr < 0) | (arr >= nvec) if arr.dtype.kind != "u" else arr >= nvec
        if np.any(bad):
            arena, index = (int(v) for v in np.argwhere(bad)[0])
            raise ValueError(
                f"actions for {agent!r} are outside the space in arena {arena} at index {index}: "
                f"{arr[arena, index]} not in [0, {int(nvec[index]) - 1}]")
        return arr.astype(np.int64)
