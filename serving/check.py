"""Semantic checks of a running server, over HTTP only: what OpenEnv's auto-validation proposal (RFC 008)
calls runtime and semantic properties, checked per scenario (``commons-arena serve-check --url``).

For each scenario the checker plays the allocator seat through ``/reset`` and ``/step`` as any
client would, and asks the server for the reference returns of the seat on the same seed
(``GET /sessions/{id}/summary``: ``proportional``, ``planner`` and the ``oracle``, computed by the
server with the same engine and seeding rule):

=========================  ===========================================================================
check                      holds when
=========================  ===========================================================================
``oracle_at_the_top``      the oracle's return is the maximum of the seat's references and of the
                           floors played here (do-nothing, uniform random)
``floor_well_below``       the best floor is below the oracle by at least :data:`FLOOR_GAP` of the
                           oracle's distance to the worst floor (and by more than 1 point)
``same_seed_same_episode`` the same seed and actions give the same observations and rewards
``sessions_isolated``      two sessions on the same seed, stepped in turn with different actions, each
                           see exactly what they see alone
``state_contract``         ``/state`` at the end: step count = ticks played, done, returns = the sum of
                           the rewards the steps returned
=========================  ===========================================================================

Reported, not checked: whether another seed gives another episode (``seed_matters``; a scenario
with fixed jobs and no random shock is the same episode on every seed, as it should be).

The random floor draws each action entry uniformly within the space's ranges (``/schema``),
seeded, so a run is reproducible.

The checker is a client of a server it does not trust: each request has a deadline for the whole
answer (``timeout``; a body dripped a byte at a time does not reset it) and the check a total budget,
an episode at most :data:`MAX_TICKS` steps, an answer at most :data:`MAX_RESPONSE_BYTES` read with
the one depth-limited JSON reader, and every answer's shape is checked before it is used: anything
else is a :class:`CheckError` naming the request (one line, exit 2), never a hang or a traceback.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from typing import Any

import httpcore
import httpx

from commons_arena.inputs import InputError, loads_json
from commons_arena.scenario import MAX_TICKS  # no scenario is longer: a server still playing after it never ends

FLOOR_GAP = 0.25
SEAT = "allocator"
MAX_RESPONSE_BYTES = 8 * 2**20  # largest answer read (an observation is a few kB; a summary less)
MAX_SCENARIOS = 1_000  # scenarios a server may list in /info
MAX_ACTION_ENTRIES = 4_096  # entries of an action the schema may ask for (a scenario's largest is a few hundred)
MAX_ACTION_VALUE = 10**9
BUDGET_PER_SCENARIO = 1_800.0  # seconds: six episodes and their references (the oracle's) take about a minute


class CheckError(RuntimeError):
    """The server could not be checked (not reachable, a request refused, an answer too slow, too large or not
    of the documented shape)."""


@dataclass
class ScenarioCheck:
    """One scenario's figures and checks."""

    scenario: str
    seed: int
    references: dict[str, float]
    floors: dict[str, float]
    seed_matters: bool
    checks: dict[str, bool] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(self.checks.values())


class _Deadline(httpcore.NetworkBackend):
    """httpcore's sockets under one deadline (``at``, monotonic seconds) over a whole request: every connect,
    write and read waits at most what is left of it. httpx's own timeouts are per read, so headers dripped a
    byte a second never ran out; a body was already cut by the read loop, the headers come before it."""

    def __init__(self, backend: httpcore.NetworkBackend) -> None:
        self.backend, self.at = backend, math.inf

    def left(self, timeout: float | None) -> float:
        left = self.at - time.monotonic()
        if left <= 0:
            raise httpcore.ReadTimeout("the request's deadline passed")
        return left if timeout is None else min(timeout, left)

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self.backend.connect_tcp(host, port, self.left(timeout), local_address, socket_options),
                               self)

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Any = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self.backend.connect_unix_socket(path, self.left(timeout), socket_options), self)

    def sleep(self, seconds: float) -> None:
        self.backend.sleep(seconds)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream, deadline: _Deadline) -> None:
        self.stream, self.deadline = stream, deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.stream.read(max_bytes, self.deadline.left(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.stream.write(buffer, self.deadline.left(timeout))

    def close(self) -> None:
        self.stream.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self.stream.start_tls(ssl_context, server_hostname, self.deadline.left(timeout)),
                               self.deadline)

    def get_extra_info(self, info: str) -> Any:
        return self.stream.get_extra_info(info)


class _Http:
    """The checker's only way to the server: every request within ``timeout`` seconds in all, headers included
    (:class:`_Deadline`; a body or headers dripped a byte at a time do not reset it), every answer at most
    :data:`MAX_RESPONSE_BYTES` and parsed by the one strict, depth-limited JSON reader; the whole check within
    ``budget`` seconds."""

    def __init__(self, url: str, timeout: float, budget: float = float("inf"),
                 transport: httpx.BaseTransport | None = None) -> None:
        if transport is None:  # a real server: its sockets under the request's deadline
            transport = httpx.HTTPTransport()
            pool = transport._pool  # httpx names no hook for the network backend; httpcore's pool holds it here
            self.sockets: _Deadline | None = _Deadline(pool._network_backend)
            pool._network_backend = self.sockets
        else:  # a test's in-process server: no sockets
            self.sockets = None
        self.client = httpx.Client(base_url=url.rstrip("/"), timeout=timeout, transport=transport)
        self.timeout = timeout
        self.ends = time.monotonic() + budget

    def call(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None) -> Any:
        now = time.monotonic()
        if now > self.ends:
            raise CheckError(f"{method} {path}: the check ran over its time budget; give a larger --timeout or "
                             "fewer --scenarios")
        deadline = min(now + self.timeout, self.ends)
        if self.sockets is not None:
            self.sockets.at = deadline
        chunks, size = [], 0
        try:
            with self.client.stream(method, path, json=body, params=params) as response:
                for chunk in response.iter_bytes():
                    size += len(chunk)
                    if size > MAX_RESPONSE_BYTES:
                        raise CheckError(f"{method} {path}: the answer is over {MAX_RESPONSE_BYTES} bytes")
                    if time.monotonic() > deadline:
                        raise CheckError(f"{method} {path}: the check ran over its time budget" if deadline == self.ends
                                         else f"{method} {path}: no complete answer within {self.timeout:g} s")
                    chunks.append(chunk)
                status = response.status_code
        except httpx.HTTPError as err:
            if time.monotonic() >= deadline:
                raise CheckError(f"{method} {path}: the check ran over its time budget" if deadline == self.ends
                                 else f"{method} {path}: no complete answer within {self.timeout:g} s") from None
            raise CheckError(f"{method} {path}: {type(err).__name__}: {str(err)[:200]}") from None
        text = b"".join(chunks)
        if status != 200:
            raise CheckError(f"{method} {path}: HTTP {status}: {text[:300].decode('utf-8', 'replace')}")
        try:
            return loads_json(text, f"{method} {path}")
        except InputError as err:
            raise CheckError(f"{method} {path}: the answer is not JSON: {err.reason[:200]}") from None


def _shape(value: Any, what: str, kind: type | tuple[type, ...]) -> Any:
    """``value`` if it is of ``kind`` (a bool is no number), else CheckError naming the answer and key."""
    numbers = kind in (float, (int, float))
    if (numbers and (isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value))) or \
            (not numbers and (not isinstance(value, kind) or (kind is int and isinstance(value, bool)))):
        raise CheckError(f"the server's answer: {what} must be {'a number' if numbers else getattr(kind, '__name__', kind)}, "
                         f"got {str(value)[:80]!r}")
    return value


def _frame(frame: Any, what: str) -> dict[str, Any]:
    """A /reset or /step answer: observation (an object with metadata.session_id), reward, done."""
    _shape(frame, what, dict)
    observation = _shape(frame.get("observation"), f"{what}.observation", dict)
    metadata = _shape(observation.get("metadata"), f"{what}.observation.metadata", dict)
    _shape(metadata.get("session_id"), f"{what}.observation.metadata.session_id", str)
    _shape(frame.get("done"), f"{what}.done", bool)
    if frame.get("reward") is not None:
        _shape(frame["reward"], f"{what}.reward", float)
    return frame


def _random_action(schema: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """Uniform in every entry's [minimum, maximum] (the action schema's list form), the schema's shape checked."""
    entries = 0

    def draw(node: Any, where: str) -> Any:
        nonlocal entries
        _shape(node, where, dict)
        if "anyOf" in node:
            node = _shape(_shape(node["anyOf"], f"{where}.anyOf", list)[0] if node["anyOf"] else None,
                          f"{where}.anyOf[0]", dict)
        if node.get("type") == "array":
            return [draw(item, f"{where}[{i}]")
                    for i, item in enumerate(_shape(node.get("prefixItems"), f"{where}.prefixItems", list))]
        entries += 1
        if entries > MAX_ACTION_ENTRIES:
            raise CheckError(f"the server's action schema has more than {MAX_ACTION_ENTRIES} entries")
        low, high = node.get("minimum", 0), node.get("maximum", 0)
        if not all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
                   and abs(v) <= MAX_ACTION_VALUE for v in (low, high)) or low > high:
            raise CheckError(f"the server's action schema: {where} has bounds [{str(low)[:20]}, {str(high)[:20]}]")
        return rng.randint(int(low), int(high))

    properties = _shape(schema.get("properties"), "the action schema's properties", dict)
    return {name: draw(part, f"action.{name}") for name, part in properties.items()}


def _episode(http: _Http, scenario: str, seed: int, actions: Any) -> dict[str, Any]:
    """Play one episode; ``actions``: None (do nothing) or a seeded random.Random (uniform random)."""
    trace = _Trace(http, scenario, seed)
    while not trace.done:
        trace.step(actions)
    return trace.finish()


class _Trace:
    """One session's episode, stepped one call at a time (so two can be interleaved)."""

    def __init__(self, http: _Http, scenario: str, seed: int) -> None:
        self.http = http
        frame = _frame(http.call("POST", "/reset", {"scenario": scenario, "seed": seed, "seats": [SEAT]}), "/reset")
        self.session = frame["observation"]["metadata"]["session_id"]
        schema = _shape(http.call("GET", "/schema", params={"scenario": scenario, "seat": SEAT}), "/schema", dict)
        self.schema = _shape(schema.get("action"), "/schema.action", dict)
        self.observations = [_fields(frame["observation"])]
        self.rewards: list[float] = []
        self.done = bool(frame["done"])

    def step(self, actions: random.Random | None) -> None:
        if len(self.rewards) >= MAX_TICKS:
            raise CheckError(f"the server did not end the episode of session {self.session[:40]!r} after "
                             f"{MAX_TICKS} steps")
        action = {} if actions is None else _random_action(self.schema, actions)
        frame = _frame(self.http.call("POST", "/step", {"session_id": self.session, "action": action}), "/step")
        self.observations.append(_fields(frame["observation"]))
        self.rewards.append(float(_shape(frame.get("reward"), "/step.reward", float)))
        self.done = bool(frame["done"])

    def finish(self) -> dict[str, Any]:
        state = _shape(self.http.call("GET", "/state", params={"session_id": self.session}), "/state", dict)
        _shape(state.get("step_count"), "/state.step_count", int)
        _shape(state.get("done"), "/state.done", bool)
        _shape(_shape(state.get("returns"), "/state.returns", dict).get(SEAT), f"/state.returns.{SEAT}", float)
        summary = _shape(self.http.call("GET", f"/sessions/{self.session}/summary"), "/summary", dict)
        references = _shape(summary.get("references"), "/summary.references", dict)
        for name in ("oracle", *references):
            _shape(references.get(name), f"/summary.references.{str(name)[:40]}", float)
        self.http.call("POST", "/close", {"session_id": self.session})
        return {"observations": self.observations, "rewards": self.rewards, "state": state, "summary": summary}


def _fields(observation: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in observation.items() if k != "metadata"}


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return a["observations"] == b["observations"] and a["rewards"] == b["rewards"]


def check_served_scenario(http: _Http, scenario: str, seed: int) -> ScenarioCheck:
    nothing = _episode(http, scenario, seed, None)
    again = _episode(http, scenario, seed, None)
    other = _episode(http, scenario, seed + 1, None)
    rand = _episode(http, scenario, seed, random.Random(seed))
    # two sessions on the same seed, stepped in turn, different actions: each must see what it saw alone
    a, b, rng = _Trace(http, scenario, seed), _Trace(http, scenario, seed), random.Random(seed)
    while not (a.done and b.done):
        if not a.done:
            a.step(rng)
        if not b.done:
            b.step(None)
    together = (a.finish(), b.finish())
    references = {k: float(v) for k, v in nothing["summary"]["references"].items()}
    floors = {"do_nothing": sum(nothing["rewards"]), "random": sum(rand["rewards"])}
    oracle = references["oracle"]
    top, bottom = max(floors.values()), min(floors.values())
    state = nothing["state"]
    checks = {
        "oracle_at_the_top": oracle >= max([*references.values(), *floors.values()]) - 1e-6,
        "floor_well_below": oracle - top > max(1.0, FLOOR_GAP * (oracle - bottom)),
        "same_seed_same_episode": _same(nothing, again),
        "sessions_isolated": _same(together[0], rand) and _same(together[1], nothing),
        "state_contract": (state["step_count"] == len(nothing["rewards"]) and state["done"]
                           and abs(state["returns"][SEAT] - sum(nothing["rewards"])) < 1e-6),
    }
    return ScenarioCheck(scenario, seed, references, floors, not _same(nothing, other), checks)


def check_server(url: str, scenarios: list[str] | None = None, seed: int = 7, timeout: float = 60.0,
                 budget: float | None = None, transport: httpx.BaseTransport | None = None) -> list[ScenarioCheck]:
    """Every check (module docstring) for each of ``scenarios`` (default: every scenario the server hosts). Each
    request within ``timeout`` seconds in all; the whole check within ``budget`` seconds (default:
    :data:`BUDGET_PER_SCENARIO`, or ten requests' timeouts if longer, per scenario). ``transport``: an httpx
    transport to reach the server by (tests: a hostile server in process)."""
    listed = _shape(_shape(_Http(url, timeout, transport=transport).call("GET", "/info"), "/info", dict)
                    .get("scenarios"), "/info.scenarios", list)
    if len(listed) > MAX_SCENARIOS:
        raise CheckError(f"the server lists {len(listed)} scenarios, over the {MAX_SCENARIOS} a check plays")
    hosted = [_shape(_shape(s, "/info.scenarios[]", dict).get("name"), "/info.scenarios[].name", str) for s in listed]
    per_scenario = max(BUDGET_PER_SCENARIO, 10 * timeout)
    http = _Http(url, timeout, budget if budget is not None else per_scenario * max(1, len(scenarios or hosted)),
                 transport)
    unknown = [s for s in scenarios or [] if s not in hosted]
    if unknown:
        raise CheckError(f"the server does not host {unknown}; it hosts {hosted}")
    return [check_served_scenario(http, name, seed) for name in (scenarios or hosted)]


def report(results: list[ScenarioCheck]) -> str:
    """A plain table: one row per scenario, the figures and each check."""
    names = list(results[0].checks) if results else []
    lines = ["scenario           oracle  planner  proport.  nothing   random  seed matters  " + "  ".join(names)]
    for r in results:
        refs = r.references
        lines.append(f"{r.scenario:<17} {refs['oracle']:7.1f} {refs.get('planner', float('nan')):8.1f} "
                     f"{refs.get('proportional', float('nan')):9.1f} {r.floors['do_nothing']:8.1f} "
                     f"{r.floors['random']:8.1f}  {'yes' if r.seed_matters else 'no':<12}  "
                     + "  ".join(("ok" if r.checks[n] else "FAIL").ljust(len(n)) for n in names))
    failed = [r.scenario for r in results if not r.passed]
    lines.append(f"{len(results) - len(failed)}/{len(results)} scenarios pass every check"
                 + (f"; failing: {', '.join(failed)}" if failed else ""))
    return "\n".join(lines)


__all__ = ["FLOOR_GAP", "MAX_RESPONSE_BYTES", "MAX_TICKS", "CheckError", "ScenarioCheck", "check_server", "report"]
