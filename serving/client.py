"""Python clients of a ``commons-arena serve`` server, and remote agents as policies.

:class:`ArenaClient` plays the remote seats of one session, over the WebSocket (default,
one round trip per step on a kept connection) or plain HTTP::

    with ArenaClient("http://127.0.0.1:8000") as client:
        result = client.reset(seed=7, seats=["allocator"])
        while not result.done:
            result = client.step({"grant": {"search": {"small": 2}}})
        print(client.state()["returns"])

:func:`play_episode` puts local :class:`~policies.base.Policy` objects in the remote seats
(seeded like :func:`policies.focal.run_episode`, so the same seed gives the same
episode as in-process).

:class:`RemotePolicy` goes the other way: it *is* a ``Policy`` whose decisions come from
an agent in another process, so that agent can be placed in any population, evaluation
or tournament. The agent answers two JSON requests (:func:`agent_app` builds such a
server around any function or policy)::

    POST /reset {"scenario", "seat", "seed"}                  -> {}
    POST /act   {"scenario", "seat", "observation"} -> {"action": {...named parts...}}
                                                     or {"text": "...free text with the JSON action..."}

``observation`` is the seat's named fields (plus ``briefing``, the text a language model
reads, when ``text=True``). An answer that is not a valid action is counted
(``invalid``, ``errors``) and played as the no-op, so one bad answer does not stop a
tournament; an agent that cannot be reached raises.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from commons_arena.scenario import ScenarioConfig, load_scenario
from policies.base import Policy
from policies.focal import policy_seed
from serving.briefing import parse_text_action, render_briefing
from serving.wire import (
    ActionError,
    decode_action,
    decode_observation,
    encode_action,
    encode_observation,
    seat_spec,
)


class ServerError(RuntimeError):
    """The server refused a request: ``status`` (HTTP, or 0 over the WebSocket), ``code``, ``data``."""

    def __init__(self, status: int, data: Mapping[str, Any]) -> None:
        self.status = status
        self.data = dict(data)
        self.code = str(self.data.get("code", ""))
        super().__init__(f"{self.code or status}: {self.data.get('message', data)}")


@dataclass
class StepResult:
    observation: dict[str, Any]
    reward: float | None
    done: bool
    metadata: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> StepResult:
        """A reset or step body; the session's metadata travels as ``observation["metadata"]`` (openenv's models)."""
        observation = dict(data["observation"])
        metadata = observation.pop("metadata", None) or {}
        return cls(observation, data.get("reward"), bool(data.get("done")), dict(metadata))


class ArenaClient:
    """One session on a server (module docstring). ``transport`` is ``"ws"`` or ``"http"``."""

    def __init__(self, base_url: str = "http://127.0.0.1:8000", transport: str = "ws", timeout: float = 30.0) -> None:
        import httpx

        if transport not in ("ws", "http"):
            raise ValueError(f"transport must be 'ws' or 'http', got {transport!r}")
        self.base_url = base_url.rstrip("/")
        self.transport = transport
        self.timeout = timeout
        self.http = httpx.Client(base_url=self.base_url, timeout=timeout)
        self.session_id: str | None = None
        self._ws: Any = None
        self._stack = contextlib.ExitStack()  # holds the WebSocket connection

    # ------------------------------------------------------------------ session
    def reset(self, **params: Any) -> StepResult:
        """Start an episode; ``params`` are the server's reset parameters (seed, seats, scenario, ...)."""
        if self.transport == "ws":
            data = self._ws_call("reset", params)
        else:
            body = {**params, **({"session_id": self.session_id} if self.session_id else {})}
            data = self._http("POST", "/reset", body)
        result = StepResult.parse(data)
        self.session_id = result.metadata.get("session_id", self.session_id)
        return result

    def step(self, action: Any) -> StepResult:
        """One tick: ``action`` is the seat's named parts (``{seat: parts}`` for several seats)."""
        if self.transport == "ws":
            return StepResult.parse(self._ws_call("step", action))
        return StepResult.parse(self._http("POST", "/step", {"session_id": self.session_id, "action": action}))

    def state(self) -> dict[str, Any]:
        if self.transport == "ws":
            return self._ws_call("state", None)
        return self._http("GET", "/state", params={"session_id": self.session_id})

    def recording(self) -> str:
        """The ended episode's JSONL recording (reset with ``record=True``)."""
        response = self.http.get(f"/sessions/{self.session_id}/recording")
        if response.status_code != 200:
            raise ServerError(response.status_code, response.json().get("error", {}))
        return response.text

    def close(self) -> None:
        if self._ws is not None:
            with contextlib.suppress(Exception):
                self._ws.send(json.dumps({"type": "close"}))
            self._stack.close()
            self._ws = None
        elif self.session_id is not None:
            with contextlib.suppress(Exception):
                self.http.post("/close", json={"session_id": self.session_id})
        self.session_id = None
        self.http.close()

    def __enter__(self) -> ArenaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ server info
    def metadata(self) -> dict[str, Any]:
        return self._http("GET", "/metadata")

    def info(self) -> dict[str, Any]:
        """The server's scenarios, seats, defaults, limits and open sessions."""
        return self._http("GET", "/info")

    def schema(self, seat: str | None = None, scenario: str | None = None) -> dict[str, Any]:
        params = {k: v for k, v in (("seat", seat), ("scenario", scenario)) if v is not None}
        return self._http("GET", "/schema", params=params)

    # ------------------------------------------------------------------ transport
    def _http(self, method: str, path: str, body: Any = None, params: Mapping[str, Any] | None = None) -> Any:
        response = self.http.request(method, path, json=body, params=params)
        data = response.json()
        if response.status_code >= 400:
            raise ServerError(response.status_code, data.get("error", data))
        return data

    def _ws_call(self, kind: str, data: Any) -> Any:
        if self._ws is None:
            from websockets.sync.client import connect

            url = "ws" + self.base_url.removeprefix("http") + "/ws"
            self._ws = self._stack.enter_context(connect(url, open_timeout=self.timeout, max_size=None,
                                                         compression=None))
        message = {"type": kind} if data is None else {"type": kind, "data": data}
        self._ws.send(json.dumps(message))
        reply = json.loads(self._ws.recv(timeout=self.timeout))
        if reply.get("type") == "error":
            raise ServerError(0, reply["data"])
        return reply["data"]


# --------------------------------------------------------------------------- local policies, remote seats
def play_episode(client: ArenaClient, policies: Mapping[str, Policy], seed: int, **params: Any) -> dict[str, Any]:
    """Play one episode of the server with ``policies`` (seat → policy) in the remote seats.

    Each policy is reset with :func:`policy_seed` of its seat's position, as in-process
    :func:`~policies.focal.run_episode` does; returns the final ``state()`` plus the
    last step's ``metadata`` (``metadata["info"][seat]["episode"]`` holds the totals)."""
    seats = list(policies)
    result = client.reset(seed=seed, seats=seats, **params)
    config = load_scenario(result.metadata["scenario"])
    specs = {seat: seat_spec(config, seat) for seat in seats}
    for seat in seats:
        policies[seat].reset(policy_seed(seed, config.agents.index(seat)))
    while not result.done:
        views = {seats[0]: result.observation} if len(seats) == 1 else result.observation
        actions = {seat: encode_action(specs[seat], policies[seat].act(decode_observation(specs[seat], views[seat])))
                   for seat in seats}
        result = client.step(actions[seats[0]] if len(seats) == 1 else actions)
    return {**client.state(), "metadata": result.metadata}


# --------------------------------------------------------------------------- remote agents, local seats
class RemotePolicy:
    """A :class:`~policies.base.Policy` played by an agent in another process (module docstring)."""

    def __init__(self, url: str, config: ScenarioConfig | str, agent: str, text: bool = False,
                 timeout: float = 30.0) -> None:
        import httpx

        self.config = load_scenario(config)
        self.agent = agent
        self.spec = seat_spec(self.config, agent)
        self.text = text
        self.http = httpx.Client(base_url=url.rstrip("/"), timeout=timeout)
        self.invalid = 0
        self.errors: list[str] = []
        self._reward: float | None = None

    def reset(self, seed: int | None = None) -> None:
        self._call("/reset", {"scenario": self.config.name, "seat": self.agent, "seed": seed})

    def act(self, observation: np.ndarray) -> np.ndarray:
        view = encode_observation(self.spec, observation)
        if self.text:
            view["briefing"] = render_briefing(self.spec, view, invalid=self.errors[-1] if self.errors else None)
        answer = self._call("/act", {"scenario": self.config.name, "seat": self.agent, "observation": view})
        try:
            if isinstance(answer, Mapping) and "text" in answer:
                action = decode_action(self.spec, parse_text_action(self.spec, answer["text"]))
            elif isinstance(answer, Mapping) and "action" in answer:
                action = decode_action(self.spec, answer["action"])
            else:
                raise ActionError('the agent must answer {"action": {...}} or {"text": "..."}', "", None, answer)
        except ActionError as err:
            self.invalid += 1
            self.errors.append(err.message)
            action = [0] * self.spec.action_size  # counted, and played as the no-op
        return np.asarray(action, dtype=np.int64)

    def close(self) -> None:
        self.http.close()

    def _call(self, path: str, body: Mapping[str, Any]) -> Any:
        response = self.http.post(path, json=body)
        if response.status_code >= 400:
            raise ServerError(response.status_code, {"message": response.text[:500]})
        return response.json()


def policy_agent(make: Callable[[ScenarioConfig, str], Policy]) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    """An agent function (for :func:`agent_app`) that plays a local policy per (scenario, seat)."""
    playing: dict[tuple[str, str], Policy] = {}

    def decide(request: Mapping[str, Any]) -> dict[str, Any]:
        config = load_scenario(request["scenario"])
        key = (config.name, request["seat"])
        if "observation" not in request:  # reset
            playing[key] = make(config, request["seat"])
            playing[key].reset(request.get("seed"))
            return {}
        spec = seat_spec(config, request["seat"])
        vector = decode_observation(spec, request["observation"])
        return {"action": encode_action(spec, playing[key].act(vector))}

    return decide


def agent_app(decide: Callable[[Mapping[str, Any]], Mapping[str, Any]]):
    """A FastAPI app serving ``decide`` as a remote agent: POST /reset and POST /act."""
    from fastapi import FastAPI

    app = FastAPI(title="commons_arena agent", docs_url=None, redoc_url=None)

    @app.post("/reset")
    async def reset(body: dict[str, Any]) -> Mapping[str, Any]:
        return decide(body)

    @app.post("/act")
    async def act(body: dict[str, Any]) -> Mapping[str, Any]:
        return decide(body)

    return app


__all__ = ["ArenaClient", "RemotePolicy", "ServerError", "StepResult", "agent_app", "play_episode", "policy_agent"]
