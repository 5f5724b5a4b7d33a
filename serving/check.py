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
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import httpx

FLOOR_GAP = 0.25
SEAT = "allocator"


class CheckError(RuntimeError):
    """The server could not be checked (not reachable, a request refused)."""


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


class _Http:
    def __init__(self, url: str, timeout: float) -> None:
        self.client = httpx.Client(base_url=url.rstrip("/"), timeout=timeout)

    def call(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None) -> Any:
        try:
            response = self.client.request(method, path, json=body, params=params)
        except httpx.HTTPError as err:
            raise CheckError(f"{method} {path}: {err}") from None
        if response.status_code != 200:
            raise CheckError(f"{method} {path}: HTTP {response.status_code}: {response.text[:300]}")
        return response.json()


def _random_action(schema: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """Uniform in every entry's [minimum, maximum] (the action schema's list form)."""
    def draw(node: dict[str, Any]) -> Any:
        if "anyOf" in node:
            node = node["anyOf"][0]
        if node.get("type") == "array":
            return [draw(item) for item in node["prefixItems"]]
        return rng.randint(int(node.get("minimum", 0)), int(node.get("maximum", 0)))

    return {name: draw(part) for name, part in schema["properties"].items()}


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
        frame = http.call("POST", "/reset", {"scenario": scenario, "seed": seed, "seats": [SEAT]})
        self.session = frame["observation"]["metadata"]["session_id"]
        self.schema = http.call("GET", "/schema", params={"scenario": scenario, "seat": SEAT})["action"]
        self.observations = [_fields(frame["observation"])]
        self.rewards: list[float] = []
        self.done = bool(frame["done"])

    def step(self, actions: random.Random | None) -> None:
        action = {} if actions is None else _random_action(self.schema, actions)
        frame = self.http.call("POST", "/step", {"session_id": self.session, "action": action})
        self.observations.append(_fields(frame["observation"]))
        self.rewards.append(float(frame["reward"]))
        self.done = bool(frame["done"])

    def finish(self) -> dict[str, Any]:
        state = self.http.call("GET", "/state", params={"session_id": self.session})
        summary = self.http.call("GET", f"/sessions/{self.session}/summary")
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


def check_server(url: str, scenarios: list[str] | None = None, seed: int = 7, timeout: float = 60.0
                 ) -> list[ScenarioCheck]:
    """Every check (module docstring) for each of ``scenarios`` (default: every scenario the server hosts)."""
    http = _Http(url, timeout)
    hosted = [s["name"] for s in http.call("GET", "/info")["scenarios"]]
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


__all__ = ["FLOOR_GAP", "CheckError", "ScenarioCheck", "check_server", "report"]
