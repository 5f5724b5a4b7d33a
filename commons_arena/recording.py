"""Episode recordings: one JSON object per line (JSONL), readable by any tool.

:class:`RecordEpisode` wraps any commons_arena ``ParallelEnv`` (also one already wrapped)
and writes, per episode::

    {"type": "header", ...}    scenario name and hash, seed, agents, teams, tiers, caps
    {"type": "tick", ...}      one line per tick (below)
    {"type": "summary", ...}   returns and every agent's ``infos[agent]["episode"]``

Several episodes (resets) go to the same file, one after another; ``episode`` counts
them from 0. An episode abandoned by a ``reset()`` or ``close()`` before it ended gets a
summary with ``"complete": false``.

A tick line holds, for the played tick ``t``:

========================  ============================================================
key                       meaning
========================  ============================================================
``tick``                  the tick played
``seen``                  what the allocator acted on: ``declared`` (teams x tiers,
                          requests made last tick for this tick), ``offer_qty``,
                          ``offer_price``, ``budget`` before the purchase
``actions``               each agent's action as given, split into named parts
                          (``action_layout``); agents left out played the no-op
``outcome``               ``bought`` (tiers), ``granted`` (teams x tiers, repaired),
                          ``used`` (tiers), ``intensity``, ``events`` (shocks fired),
                          ``repairs`` (units cut, per rule)
``rewards``               reward per agent; ``reward_terms``: the weighted terms
``after``                 public state after the tick: budget, carbon_used, carbon_cap,
                          online (for the next tick), credibility, revealed,
                          escalations, stance, next offer, active shocks
``hidden``                **privileged truth, never observed by the allocator**:
                          ``true_need`` (teams x tiers) this tick, ``starved``,
                          ``streak`` and every team's ``jobs`` with their status
``observations``          only with ``include_observations=True``: each agent's next
                          observation as named fields (the header holds the first)
========================  ============================================================

All values are plain JSON (numbers, strings, lists, objects); non-finite floats are
written as ``null``. :func:`read_recording` parses a file back into episodes.
"""

from __future__ import annotations

import enum
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pettingzoo.utils.wrappers import BaseParallelWrapper

from commons_arena.enums import JobStatus, Stance
from commons_arena.files import OutputStream, make_folder
from commons_arena.inputs import MAX_RECORDING_BYTES, InputError, check_regular, loads_json, remember_input
from commons_arena.scenario import MAX_TICKS, ScenarioConfig
from commons_arena.spaces import action_layout, observation_layout
from commons_arena.version import ENV_NAME, __version__
from commons_arena.view import ArenaState, TickReport

MAX_EPISODES = 10_000_000  # episodes of one recording (a header counts them from 0)
FORMAT = "commons_arena.recording"
FORMAT_VERSION = 1


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data: numpy scalars/arrays, tuples, enums and non-finite
    floats (→ ``None``) converted, recursively."""
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    if isinstance(value, enum.Enum):  # ShockKind → its label, other enums → their value
        return value.label if hasattr(value, "label") else jsonable(value.value)
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        value = float(value)
        return value if math.isfinite(value) else None
    if isinstance(value, str) or value is None:
        return value
    return str(value)


def header_record(config: ScenarioConfig, seed: int | None, episode: int, state: ArenaState) -> dict[str, Any]:
    """First line of an episode: what was played and the state at reset."""
    return {
        "type": "header",
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "env": ENV_NAME,
        "package_version": __version__,
        "episode": episode,
        "scenario": config.name,
        "scenario_hash": config.content_hash,
        "description": config.description,
        "seed": seed,
        "agents": list(config.agents),
        "teams": list(config.team_names),
        "tiers": [t.model_dump() for t in config.gpu_tiers],
        "max_ticks": config.max_ticks,
        "budget": config.budget,
        "carbon": {"cap_kg": config.carbon.cap_kg, "mode": config.carbon.mode},
        "hidden": {"true_need": state.need.copy(), "jobs": jobs_record(config, state)},
    }


def seen_record(report: TickReport) -> dict[str, Any]:
    """What the allocator saw when it acted in the tick of ``report``."""
    return {
        "declared": report.declared.copy(),
        "offer_qty": report.offer_qty.copy(),
        "offer_price": report.offer_price.copy(),
        "budget": float(report.budget_before),
    }


def jobs_record(config: ScenarioConfig, state: ArenaState) -> dict[str, list[dict[str, Any]]]:
    return {
        team: [
            {
                "id": j.id,
                "status": JobStatus(j.status).label,
                "gpus": j.gpus,
                "min_memory_gb": j.min_memory_gb,
                "work": j.work,
                "remaining": j.remaining,
                "arrival": j.arrival,
                "deadline": j.deadline,
                "value": j.value,
                "priority": j.priority,
                "done_tick": j.done_tick,
            }
            for j in state.jobs[i]
        ]
        for i, team in enumerate(config.team_names)
    }


def tick_record(config: ScenarioConfig, state: ArenaState, report: TickReport, episode: int = 0) -> dict[str, Any]:
    """One tick line (without actions) from the env's :class:`TickReport` and the state it left."""
    return {
        "type": "tick",
        "episode": episode,
        "tick": report.tick,
        "seen": seen_record(report),
        "outcome": {
            "bought": report.bought.copy(),
            "granted": report.granted.copy(),
            "used": report.used.copy(),
            "intensity": report.intensity,
            "events": [dict(e) for e in report.events],
            "repairs": report.repairs.as_dict(),
        },
        "rewards": dict(report.rewards),
        "reward_terms": {agent: dict(t) for agent, t in report.terms.items()},
        "after": {
            "budget": state.budget,
            "carbon_used": state.carbon_used,
            "carbon_cap": config.carbon.cap_kg,
            "online": state.online.copy(),
            "credibility": state.credibility.copy(),
            "revealed": state.revealed.copy(),
            "escalations": state.escalations.copy(),
            "stance": [Stance(int(s)).name.lower() for s in state.stance],
            "declared_next": state.declared.copy(),
            "offer_qty_next": state.offer_qty.copy(),
            "offer_price_next": state.offer_price.copy(),
            "price_paid": state.last_price.copy(),
            "active_shocks": sorted({e.spec.shock_kind.label for e in state.effects if e.until >= state.t}),
        },
        "hidden": {
            "true_need": report.need.copy(),
            "starved": state.starved_last.copy(),
            "streak": state.streak.copy(),
            "true_need_next": state.need.copy(),
            "jobs": jobs_record(config, state),
        },
    }


def summary_record(episode: int, ticks: int, returns: Mapping[str, float], infos: Mapping[str, Any] | None) -> dict:
    complete = infos is not None
    return {
        "type": "summary",
        "episode": episode,
        "complete": complete,
        "ticks": ticks,
        "returns": dict(returns),
        "episode_info": {a: info.get("episode", {}) for a, info in infos.items()} if infos else {},
    }


def named(layout, vector) -> dict[str, Any]:
    return {k: v for k, v in layout.view(np.asarray(vector)).items()}


@dataclass
class _Episode:
    index: int
    ticks: int = 0
    returns: dict[str, float] = field(default_factory=dict)
    done: bool = False


class RecordEpisode(BaseParallelWrapper):
    """Write every episode played through this env to ``path`` as JSONL (module docstring).

    ``path`` is created (with its parent folders) at the first ``reset`` and truncated;
    later episodes append. Lines are flushed as they are written, so a crashed run keeps
    what it played. ``include_observations`` adds every agent's observation per tick."""

    def __init__(self, env, path: str | os.PathLike[str], include_observations: bool = False) -> None:
        super().__init__(env)
        self.path = Path(path)
        self.include_observations = include_observations
        self._file: OutputStream | None = None
        self._episode: _Episode | None = None
        self._episodes = 0

    # ----------------------------------------------------------------- api
    def reset(self, seed: int | None = None, options: dict | None = None):
        observations, infos = self.env.reset(seed=seed, options=options)
        self._finish_abandoned()
        base = self.env.unwrapped
        config: ScenarioConfig = base.config
        header = header_record(config, seed, self._episodes, base.hidden_state())
        if self.include_observations:
            header["observations"] = self._named_observations(config, observations)
        self._write(header)
        self._episode = _Episode(index=self._episodes)
        self._episodes += 1
        return observations, infos

    def step(self, actions: dict[str, Any]):
        observations, rewards, terminations, truncations, infos = self.env.step(actions)
        base = self.env.unwrapped
        config: ScenarioConfig = base.config
        episode = self._episode or _Episode(index=self._episodes)
        report = base.last_tick
        played = {
            agent: named(action_layout(config, agent), np.asarray(action).astype(np.int64))
            for agent, action in actions.items()
        }
        record = tick_record(config, base.hidden_state(), report, episode.index)
        record = {"type": "tick", "episode": episode.index, "tick": report.tick, "seen": record["seen"],
                  "actions": played, **record}
        record["rewards"] = dict(rewards)
        if self.include_observations:
            record["observations"] = self._named_observations(config, observations)
        self._write(record)
        episode.ticks += 1
        for agent, r in rewards.items():
            episode.returns[agent] = episode.returns.get(agent, 0.0) + float(r)
        ended = [a for a in rewards if terminations.get(a) or truncations.get(a)]
        if ended and len(ended) == len(rewards):
            self._write(summary_record(episode.index, episode.ticks, episode.returns, infos))
            episode.done = True
            if self._file is not None:
                self._file.flush()
        self._episode = episode
        return observations, rewards, terminations, truncations, infos

    def close(self) -> None:
        self._finish_abandoned()
        if self._file is not None:
            self._file.close()
            self._file = None
        self.env.close()

    # ----------------------------------------------------------------- helpers
    def _named_observations(self, config: ScenarioConfig, observations: Mapping[str, Any]) -> dict[str, Any]:
        return {agent: named(observation_layout(config, agent), obs) for agent, obs in observations.items()}

    def _finish_abandoned(self) -> None:
        ep = self._episode
        if ep is not None and not ep.done:
            self._write(summary_record(ep.index, ep.ticks, ep.returns, None))
            ep.done = True

    def _write(self, record: Mapping[str, Any]) -> None:
        if self._file is None:
            make_folder(self.path.parent)
            self._file = OutputStream(self.path)  # temp file + rename at close: never through a link
        self._file.write(json.dumps(jsonable(record), separators=(",", ":"), allow_nan=False) + "\n")
        self._file.flush()


def _numbered_lines(f: Any, path: Any) -> Any:
    try:
        yield from enumerate(f, 1)
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None


def _check_count(record: Mapping[str, Any], key: str, place: int, where: str, exact: bool = True) -> None:
    """A header's ``episode`` (an integer in [0, MAX_EPISODES]) or a tick line's ``tick`` (its place in the episode,
    below MAX_TICKS): a recording that says otherwise is not one this module wrote."""
    value = record.get(key)
    if key not in record and not exact:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= (MAX_TICKS - 1 if exact else MAX_EPISODES) \
            or (exact and value != place):
        wanted = f"{place} (its place in the episode)" if exact else f"an integer in [0, {MAX_EPISODES}]"
        raise ValueError(f"{where}: not a recording line: {key} must be {wanted}, got {str(value)[:40]}")


def read_recording(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Parse a recording into episodes: ``[{"header": ..., "ticks": [...], "summary": ... | None}]``."""
    episodes: list[dict[str, Any]] = []
    check_regular(path, "recording", MAX_RECORDING_BYTES)  # a FIFO or /dev/zero is refused before it is opened
    remember_input(path)  # an input: never written over by this command (commons_arena.files)
    with Path(path).open(encoding="utf-8", errors="strict") as f:
        for number, line in _numbered_lines(f, path):
            line = line.strip()
            if not line:
                continue
            try:  # the one strict, depth-limited JSON reader
                record = loads_json(line, f"{path}:{number}")
            except InputError as exc:
                raise ValueError(f"{path}:{number}: not a JSON line ({exc.reason})") from None
            if not isinstance(record, dict):
                raise ValueError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
            kind = record.get("type")
            if kind == "header":
                _check_count(record, "episode", len(episodes), f"{path}:{number}", exact=False)
                episodes.append({"header": record, "ticks": [], "summary": None})
            elif not episodes:
                raise ValueError(f"{path}:{number}: {kind!r} line before any header line")
            elif kind == "tick":
                _check_count(record, "tick", len(episodes[-1]["ticks"]), f"{path}:{number}")
                if "episode" in record and record["episode"] != episodes[-1]["header"].get("episode"):
                    raise ValueError(f"{path}:{number}: not a recording line: episode must be its header's "
                                     f"({episodes[-1]['header'].get('episode')!r:.20}), got {record['episode']!r:.40}")
                episodes[-1]["ticks"].append(record)
            elif kind == "summary":
                episodes[-1]["summary"] = record
            else:
                raise ValueError(f"{path}:{number}: unknown line type {kind!r}")
    if not episodes:
        raise ValueError(f"{path}: no episodes (no header line)")
    return episodes
