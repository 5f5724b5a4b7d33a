"""Sessions: one episode table per client, with remote seats and a background population.

A :class:`Session` holds one environment, the seats its client plays (``seats``) and the
policies of every other agent (the *background*, from the server's population and the
client's overrides), joined by :class:`~policies.focal.FocalEnv`: the client's seats are
focal, the background acts inside, seeded by the one rule ``policy_seed(seed, seat)``. ``reset`` / ``step`` / ``state`` return plain JSON data in the shapes
of openenv-core's ``ResetResponse`` / ``StepResponse`` / ``State`` (which allow nothing beside
``observation``, ``reward`` and ``done``: the session's own ``metadata`` is the observation's
``"metadata"`` entry); a bad request raises
:class:`ServeError` (an HTTP status, a code and a message) before anything changes.

:class:`SessionStore` opens, finds, expires and closes sessions under the server's
:class:`ServerLimits`. Environments and their background policies are reused through a small
pool (:class:`TablePool`): building a table costs milliseconds, a ``reset(seed)`` starts
everything afresh, and the pool keeps memory flat however many sessions come and go.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import secrets
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import commons_arena
from commons_arena.arena import ArenaEnv
from commons_arena.recording import RecordEpisode, jsonable
from commons_arena.scenario import ScenarioConfig, ScenarioError, load_scenario
from commons_arena.spaces import MAX_SEED, role_of
from commons_arena.view import TickReport
from policies.base import Policy
from policies.focal import FocalEnv
from policies.population import Entry, Population, PopulationError
from serving.briefing import parse_text_action, render_briefing
from serving.causes import CauseCounter
from serving.wire import ActionError, SeatSpec, decode_action, encode_observation, seat_spec

ON_INVALID = ("reject", "noop")
RESET_KEYS = ("seed", "episode_id", "scenario", "seats", "population", "text", "record", "on_invalid")


class ServeError(Exception):
    """A request the server refuses: HTTP ``status``, a machine ``code`` and a message saying what to fix."""

    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.extra = status, code, message, extra

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, **self.extra}

    @classmethod
    def from_action(cls, err: ActionError, seat: str) -> ServeError:
        data = err.to_dict()
        data.pop("code"), data.pop("message")
        return cls(422, err.code, f"seat {seat}: {err.message}", seat=seat, **data)


@dataclass(frozen=True)
class ServerLimits:
    """What one server allows."""

    max_sessions: int = 64
    """sessions open at once (HTTP and WebSocket together)"""
    idle_seconds: float = 300.0
    """a session with no request for this long is closed"""
    max_body_bytes: int = 64 * 1024
    """largest request body or WebSocket message"""


@dataclass(frozen=True)
class ServeSettings:
    """What a server hosts: its default scenario and seats, the background, the limits."""

    scenario: str | Path = "standard"
    seats: tuple[str, ...] = ("allocator",)
    population: Population | None = None
    """background policies (None: each scenario's own population)"""
    scenarios: tuple[str, ...] = ()
    """scenario names a client may choose (empty: every shipped scenario)"""
    limits: ServerLimits = field(default_factory=ServerLimits)
    clock: Callable[[], float] = field(default=time.monotonic, repr=False, compare=False)
    """seconds, for the idle limit (a test passes its own, which moves only when told)"""

    @functools.cached_property
    def configs(self) -> dict[str, ScenarioConfig]:
        """The scenarios this server hosts, by name, the default first; loaded (parsed, validated) once."""
        default = load_scenario(self.scenario)
        names = [n for n in (list(self.scenarios) or commons_arena.list_scenarios()) if n != default.name]
        try:
            return {default.name: default, **{n: load_scenario(n) for n in names}}
        except (ScenarioError, OSError) as err:
            raise ValueError(f"serve: a listed scenario does not load: {err}") from None

    def config(self, name: str | None) -> ScenarioConfig:
        """The scenario a client asked for (only the default or a listed one: never a path)."""
        if name is None:
            return next(iter(self.configs.values()))
        if name not in self.configs:
            allowed = list(self.configs)
            raise ServeError(422, "INVALID_REQUEST", f"unknown scenario {_short_id(repr(name))}; this server hosts {allowed}",
                             field="scenario", allowed=allowed)
        return self.configs[name]

    def allowed_scenarios(self) -> list[str]:
        return list(self.configs)


# --------------------------------------------------------------------------- tables
@dataclass
class Table:
    """An environment and one policy per agent (the background picks from them)."""

    key: tuple[str, str]
    env: ArenaEnv
    policies: dict[str, Policy]


class TablePool:
    """Idle tables by (scenario content, population), reused by later sessions.

    Clients choose populations, so the keys are theirs: at most ``total`` idle tables are
    kept, the least recently returned dropped first; memory stays flat however many
    different populations come and go."""

    def __init__(self, per_key: int = 16, total: int = 64) -> None:
        self.per_key, self.total = per_key, total
        self._idle: dict[tuple[str, str], list[Table]] = {}  # oldest key first
        self._count = 0

    def take(self, config: ScenarioConfig, population: Population) -> Table:
        resolved = population.resolve(config, strict=False)
        key = (config.content_hash, repr(sorted((a, e.policy, sorted(e.params.items())) for a, e in resolved.items())))
        idle = self._idle.get(key)
        if idle:
            self._count -= 1
            table = idle.pop()
            if not idle:
                del self._idle[key]
            return table
        env = commons_arena.parallel_env(config)
        return Table(key, env, population.build(config, env=env, strict=False))

    def give_back(self, table: Table) -> None:
        idle = self._idle.pop(table.key, [])
        self._idle[table.key] = idle  # now the most recent key
        if len(idle) < self.per_key:
            idle.append(table)
            self._count += 1
        while self._count > self.total:
            oldest = next(iter(self._idle))
            self._idle[oldest].pop(0)
            self._count -= 1
            if not self._idle[oldest]:
                del self._idle[oldest]

    def __len__(self) -> int:
        return self._count


class _MemoryRecording(RecordEpisode):
    """RecordEpisode that keeps its JSON lines in memory (one episode per session)."""

    def __init__(self, env: ArenaEnv) -> None:
        super().__init__(env, Path("memory.jsonl"))
        self.lines: list[str] = []

    def _write(self, record: Mapping[str, Any]) -> None:
        self.lines.append(json.dumps(jsonable(record), separators=(",", ":"), allow_nan=False))


# --------------------------------------------------------------------------- options
@dataclass(frozen=True)
class Options:
    seed: int | None
    episode_id: str | None
    config: ScenarioConfig
    seats: tuple[str, ...]
    population: Population
    text: bool
    record: bool
    on_invalid: str


def _bad(message: str, key: str, allowed: list[Any] | None = None) -> ServeError:
    """A reset parameter refused: 422 naming the parameter (and, for a choice, what it may be)."""
    return ServeError(422, "INVALID_REQUEST", message, field=key, **({} if allowed is None else {"allowed": allowed}))


def parse_options(data: Mapping[str, Any], settings: ServeSettings) -> Options:
    """Reset parameters → :class:`Options`, every problem named (module docstring)."""
    unknown = [k for k in data if k not in RESET_KEYS]
    if unknown:
        raise _bad(f"unknown reset parameter(s) {unknown}; known: {list(RESET_KEYS)}", unknown[0])
    seed = data.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED):
        raise _bad(f"seed must be an integer in [0, 2**63), got {_short_id(repr(seed))}", "seed")
    episode_id = data.get("episode_id")
    if episode_id is not None and (not isinstance(episode_id, str) or len(episode_id) > 255):
        raise _bad("episode_id must be a string of at most 255 characters", "episode_id")
    scenario = data.get("scenario")
    if scenario is not None and not isinstance(scenario, str):
        raise _bad(f"scenario must be a scenario name, got {_short_id(repr(scenario))}", "scenario")
    config = settings.config(scenario)
    seats_value = data.get("seats", list(settings.seats))
    seats_list = [seats_value] if isinstance(seats_value, str) else seats_value
    if (not isinstance(seats_list, list) or not seats_list or len(set(map(str, seats_list))) != len(seats_list)
            or any(s not in config.agents for s in seats_list)):
        raise _bad(f"seats must be one or more distinct seats of scenario {config.name!r}: {list(config.agents)}; "
                   f"got {_short_id(repr(seats_value))}", "seats", list(config.agents))
    population = settings.population or Population.default(config)
    overrides = data.get("population")
    if overrides is not None:
        if not isinstance(overrides, Mapping):
            raise _bad("population must be an object like {\"roles\": {\"team\": \"truthful\"}, "
                       "\"agents\": {\"broker\": \"fixed_price\"}}", "population")
        if _names_learned(overrides):  # before anything reads a path: a client must not probe the disk
            raise _bad("learned policies are chosen by the server's operator (serve --population), "
                       "not in a reset request", "population")
        try:
            extra = Population.from_dict(overrides, source="in the reset request")
        except PopulationError as err:
            raise _bad(str(err), "population") from None
        ghosts = [a for a in extra.agents if a not in config.agents]
        if ghosts:  # the server's own population may span scenarios; a client names this table's agents
            raise _bad(f"population.agents: scenario {config.name!r} has no agent {_short_id(ghosts[0])!r}; "
                       f"its agents: {list(config.agents)}", "population", list(config.agents))
        # checkpoints are files on the server: only its operator chooses them
        entries = [Entry.parse(e, "population") for e in [*extra.agents.values(), *extra.roles.values()]]
        if any(e.policy == "oracle" for e in entries):
            raise _bad("the oracle (it reads hidden state and runs a solver for seconds per tick) is chosen by the "
                       "server's operator (serve --population), not in a reset request", "population")
        # the client's roles replace the server's entries for those roles, its agents replace agents
        kept = {a: e for a, e in population.agents.items()
                if a in config.agents and role_of(config, a) not in extra.roles}
        population = Population(agents={**kept, **extra.agents},
                                roles={**population.roles, **extra.roles}, name=population.name)
        try:
            population.resolve(config, strict=False)
        except PopulationError as err:
            raise _bad(str(err), "population") from None
    flags = {}
    for key in ("text", "record"):
        value = data.get(key, False)
        if not isinstance(value, bool):
            raise _bad(f"{key} must be true or false, got {_short_id(repr(value))}", key)
        flags[key] = value
    on_invalid = data.get("on_invalid", "reject")
    if on_invalid not in ON_INVALID:
        raise _bad(f"on_invalid must be one of {list(ON_INVALID)}, got {_short_id(repr(on_invalid))}", "on_invalid",
                   list(ON_INVALID))
    return Options(seed, episode_id, config, tuple(seats_list), population, flags["text"], flags["record"], on_invalid)


def _names_learned(value: Any) -> bool:
    """Whether any string in a client's (already depth-checked) JSON names a ``learned:`` checkpoint."""
    if isinstance(value, str):
        return value.strip().lower().startswith("learned:")
    if isinstance(value, Mapping):
        return any(_names_learned(k) or _names_learned(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_names_learned(v) for v in value)
    return False


MAX_LOG_CHARS = 4_000  # longest server log entry about one request


def internal_error(err: Exception) -> ServeError:
    """What the client hears of an error the server did not foresee (a bug: the server log has the rest, at most
    :data:`MAX_LOG_CHARS` of it: a client's input can make a traceback long, a deep value's repeated frames).
    Every transport's last resort: HTTP, WebSocket and the MCP tools."""
    text = "".join(traceback.format_exception(err))
    if len(text) > MAX_LOG_CHARS:
        text = text[:MAX_LOG_CHARS // 2] + f"\n... ({len(text) - MAX_LOG_CHARS} characters left out) ...\n" \
            + text[-MAX_LOG_CHARS // 2:]
    logging.getLogger("commons_arena.serve").error("unexpected error: %s", text)
    return ServeError(500, "INTERNAL", f"the server failed on this request ({type(err).__name__}); nothing changed "
                      "in the episode")


# --------------------------------------------------------------------------- session
async def off_loop(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a worker thread (the event loop stays free for /health and other sessions)."""
    return await asyncio.to_thread(fn, *args)


class Session:
    """One client's table (module docstring)."""

    def __init__(self, session_id: str, settings: ServeSettings, pool: TablePool, kind: str) -> None:
        self.id, self.settings, self.pool, self.kind = session_id, settings, pool, kind
        self.created = self.last_active = settings.clock()
        self.table: Table | None = None
        self.env: Any = None  # FocalEnv over the table's env (or the recording wrapper around it)
        self.options: Options | None = None
        self.specs: dict[str, SeatSpec] = {}
        self.observations: dict[str, np.ndarray] = {}
        self.seed: int | None = None
        self.episode_id = ""
        self.steps = 0
        self.done = False
        self.returns: dict[str, float] = {}
        self.invalid: Counter[str] = Counter()
        self.last_invalid: dict[str, str] = {}
        self.recording: list[str] | None = None
        self.causes: CauseCounter | None = None
        self.turn = asyncio.Lock()  # one request at a time on this session, in arrival order (asyncio's Lock is FIFO)

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in a worker thread, while this session's :attr:`turn` is held: a step (whose background may
        solve the oracle's MILP) or a reset (which builds and checks policies) never runs on the server's event
        loop, and concurrent requests on one session still play the sequential episode. A caller that reads the
        session after (a view of the new observation) holds ``turn`` itself and calls ``fn`` through
        :func:`off_loop`."""
        async with self.turn:
            return await off_loop(fn, *args)

    # ------------------------------------------------------------------ api
    def reset(self, data: Mapping[str, Any]) -> dict[str, Any]:
        options = parse_options(data, self.settings)
        self._release()
        try:
            table = self.pool.take(options.config, options.population)
        except ValueError as err:  # a policy parameter the policy refuses (make_policy names it)
            self.options = None  # the session waits for a reset that works
            raise _bad(f"population: {err}", "population") from None
        recorder = _MemoryRecording(table.env) if options.record else None
        self.causes = CauseCounter(recorder or table.env, options.seats[0])  # what the end screen names
        # the focal/background substrate: the client's seats are focal, the table's other policies act inside
        self.env = FocalEnv(self.causes, options.seats, table.policies)
        self.table, self.options = table, options
        self.specs = {seat: seat_spec(options.config, seat) for seat in options.seats}
        self.seed = options.seed if options.seed is not None else secrets.randbelow(2**31)
        self.episode_id = options.episode_id or uuid.uuid4().hex
        observations, infos = self.env.reset(seed=self.seed)
        self.observations = observations
        self.steps, self.done = 0, False
        self.returns = dict.fromkeys(options.seats, 0.0)
        self.invalid.clear()
        self.last_invalid = {}
        self.recording = recorder.lines if recorder is not None else None
        return self._frame(None, infos)

    def step(self, action: Any) -> dict[str, Any]:
        if self.options is None:
            raise ServeError(409, "NOT_RESET", "no episode yet: send reset first")
        if self.done:
            raise ServeError(409, "EPISODE_DONE", "the episode has ended: send reset to start a new one")
        seats = self.options.seats
        if len(seats) == 1:
            per_seat = {seats[0]: action}
        elif not isinstance(action, Mapping) or set(action) != set(seats):
            got = sorted(action) if isinstance(action, Mapping) else type(action).__name__
            raise ServeError(422, "INVALID_ACTION", f"this session plays seats {list(seats)}: send "
                             f"{{seat: action}} for each of them, got {got}", field="action", allowed=list(seats))
        else:
            per_seat = dict(action)
        actions: dict[str, Any] = {}
        self.last_invalid = {}
        for seat in seats:
            try:
                actions[seat] = self._decode(seat, per_seat[seat])
            except ActionError as err:
                self.invalid[err.code] += 1
                if self.options.on_invalid == "reject":
                    raise ServeError.from_action(err, seat) from None
                self.last_invalid[seat] = err.message
                actions[seat] = [0] * self.specs[seat].action_size  # counted, then played as the no-op
        observations, rewards, terminations, truncations, infos = self.env.step(actions)
        self.observations = observations
        self.steps += 1
        for seat in seats:
            self.returns[seat] += rewards[seat]
        self.done = self.env.episode_over
        extra = {"terminated": any(terminations.values()), "truncated": any(truncations.values())}
        report = self.env.arena.last_tick
        infos = {seat: seat_tick_info(self.options.config, report, seat, info) for seat, info in infos.items()}
        return self._frame(rewards, infos, extra)

    def state(self) -> dict[str, Any]:
        opts = self.options
        return {
            "episode_id": self.episode_id or None,
            "step_count": self.steps,
            "session_id": self.id,
            "scenario": opts.config.name if opts else None,
            "scenario_hash": opts.config.content_hash if opts else None,
            "seats": list(opts.seats) if opts else [],
            "seed": self.seed,
            "tick": self.steps,
            "done": self.done,
            "returns": dict(self.returns),
            "invalid_actions": dict(self.invalid),
            "recording": self.recording is not None,
        }

    def recording_text(self) -> str:
        if self.recording is None:
            raise ServeError(404, "NO_RECORDING", "this episode is not recorded: reset with \"record\": true")
        if not self.done:
            raise ServeError(409, "EPISODE_RUNNING", "the recording holds hidden truth: it is available once "
                             "the episode has ended")
        return "\n".join(self.recording) + "\n"

    def close(self) -> None:
        self._release()

    # ------------------------------------------------------------------ helpers
    def _release(self) -> None:
        if self.table is not None:
            self.pool.give_back(self.table)
        self.table, self.env, self.recording = None, None, None

    def _decode(self, seat: str, action: Any) -> list[int]:
        spec = self.specs[seat]
        if isinstance(action, Mapping) and set(action) == {"text"}:
            action = parse_text_action(spec, action["text"])
        return decode_action(spec, action)

    def _seat_view(self, seat: str, reward: float | None) -> dict[str, Any]:
        spec = self.specs[seat]
        view = encode_observation(spec, self.observations[seat])
        if self.options is not None and self.options.text:
            view["briefing"] = render_briefing(spec, view, reward, self.last_invalid.get(seat))
        return view

    def _frame(self, rewards: Mapping[str, float] | None, infos: Mapping[str, Any],
               extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        assert self.options is not None
        seats = self.options.seats
        views = {s: self._seat_view(s, None if rewards is None else rewards[s]) for s in seats}
        single = len(seats) == 1
        metadata: dict[str, Any] = {
            "session_id": self.id,
            "episode_id": self.episode_id,
            "scenario": self.options.config.name,
            "seed": self.seed,
            "seats": list(seats),
            "tick": self.steps,
            "rewards": {s: rewards[s] for s in seats} if rewards is not None else {},  # own seats only
            "info": {seat: _info_json(info) for seat, info in infos.items()},
            "invalid_actions": dict(self.invalid),
            **(extra or {}),
        }
        if self.last_invalid:
            metadata["played_noop"] = dict(self.last_invalid)
        reward = None if rewards is None else (rewards[seats[0]] if single else float(sum(rewards[s] for s in seats)))
        observation: dict[str, Any] = views[seats[0]] if single else dict(views)
        # openenv's ResetResponse/StepResponse forbid fields beside these three: ours ride inside the observation
        observation["metadata"] = metadata
        return {"observation": observation, "reward": reward, "done": self.done}


class SessionStore:
    """The open sessions of one server, under its limits."""

    def __init__(self, settings: ServeSettings) -> None:
        self.settings = settings
        self.limits = settings.limits
        self.pool = TablePool()
        self.sessions: dict[str, Session] = {}
        self.opened = 0

    def open(self, kind: str) -> Session:
        if len(self.sessions) >= self.limits.max_sessions:
            raise ServeError(503, "CAPACITY_REACHED", f"the server is full ({self.limits.max_sessions} sessions); "
                             "close one or try again later", max_sessions=self.limits.max_sessions)
        session = Session(uuid.uuid4().hex, self.settings, self.pool, kind)
        self.sessions[session.id] = session
        self.opened += 1
        return session

    def get(self, session_id: Any) -> Session:
        session = self.sessions.get(session_id) if isinstance(session_id, str) else None
        if session is None:
            raise ServeError(404, "UNKNOWN_SESSION", f"no open session {_short_id(session_id)}: it never existed, "
                             "was closed, or expired after "
                             f"{self.limits.idle_seconds:g} s idle; send reset without session_id to open one",
                             session_id=_short_id(session_id))
        session.last_active = self.settings.clock()
        return session

    def close(self, session_id: str) -> None:
        session = self.sessions.pop(session_id, None)
        if session is not None:
            session.close()

    def expire(self, now: float | None = None) -> list[str]:
        """Close HTTP sessions idle past the limit (a WebSocket times itself out); return their ids."""
        now = self.settings.clock() if now is None else now
        stale = [s.id for s in self.sessions.values()
                 if s.kind == "http" and now - s.last_active > self.limits.idle_seconds]
        for session_id in stale:
            self.close(session_id)
        return stale


SEEN_BY_TEAMS = ("compliance_audit", "market_crisis")
"""shocks every team is told of (an audit judges every team's declaration; a crisis moves the prices it sees);
a team also hears of the job shocks aimed at it; the broker of market crises; the allocator of every shock"""


def seat_tick_info(config: ScenarioConfig, report: TickReport | None, seat: str, info: Mapping[str, Any]
                   ) -> dict[str, Any]:
    """A seat's ``infos[seat]`` for a person or a client: the shocks of the tick that touch the seat (``events``,
    each ``until`` no later than the episode's last tick) and, for a team that lost credibility, each cause
    (``credibility_lost``: the amount and its causes in words). Reads the env's public ``last_tick`` report."""
    if report is None:
        return dict(info)
    last, role = config.max_ticks - 1, role_of(config, seat)
    if role == "allocator":
        seen = list(report.events)
    elif role == "team":
        seen = [e for e in report.events if e.get("team") == seat or e["kind"] in SEEN_BY_TEAMS]
    else:
        seen = [e for e in report.events if e["kind"] == "market_crisis"]
    out = {**info, "events": [{**e, "until": min(int(e["until"]), last)} for e in seen]} if seen else dict(info)
    if role == "team":
        i = config.team_names.index(seat)
        lost = float(report.outcome.credibility_lost[i])
        if lost > 0:
            cred = config.credibility
            causes = []
            if report.exposed_bluffs[i]:
                causes.append(f"a compliance audit exposed your declaration: it was above your true need by more "
                              f"than {cred.audit_tolerance:.0%} (a bluff costs {cred.bluff_loss:g} credibility)")
            if report.unjustified[i]:
                causes.append(f"you escalated about last tick's grant though it did not starve you (costs "
                              f"{cred.unjustified_escalation_loss:g} credibility)")
            out["credibility_lost"] = {"amount": lost, "causes": causes}
    return out


def _info_json(info: Mapping[str, Any]) -> dict[str, Any]:
    """A seat's ``infos[seat]`` as JSON data; the per-tick parts by hand (this runs every step)."""
    out: dict[str, Any] = {}
    for key, value in info.items():
        if key == "reward_terms":
            out[key] = {k: float(v) for k, v in value.items()}
        elif key == "repairs":
            out[key] = {k: int(v) for k, v in value.items()}
        elif key == "events" and not value:
            out[key] = []
        elif key == "credibility_lost":
            out[key] = {"amount": float(value["amount"]), "causes": list(value["causes"])}
        else:
            out[key] = jsonable(value)
    return out


def _short_id(value: Any) -> Any:
    text = str(value)
    return text if len(text) <= 64 else text[:64] + "…"


__all__ = [
    "ServerLimits",
    "ServeError",
    "ServeSettings",
    "Session",
    "SessionStore",
    "TablePool",
    "parse_options",
    "seat_tick_info",
]
