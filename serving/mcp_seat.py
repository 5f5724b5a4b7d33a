"""A seat as Model Context Protocol tools, at ``/mcp`` of the same app (streamable HTTP).

Any MCP client (a language model with tool calling, an agent framework, the ``mcp`` SDK's
own ``Client``) plays one seat of one episode through five tools:

=================  ==========================================================================
tool               what it does
=================  ==========================================================================
``start_episode``  opens a session in a seat (``seat``, ``scenario``, ``seed``, all optional);
                   returns its ``session_id``, the briefing and the observation of tick 0
``observe``        the session's briefing and observation now (nothing changes)
``act``            plays one tick: ``action`` is the JSON action (an object of named parts)
                   or a text with one JSON action in it; returns the reward, its terms, the
                   next briefing and observation, and the episode's totals once it is done
``episode_state``  tick, returns, invalid-action counts, whether the episode is over
``end_episode``    closes the session
=================  ==========================================================================

An action the seat cannot play is a tool error (``is_error``) whose text names the entry
and its allowed range; the episode does not move, so the agent can answer again. The
sessions are the server's own (the same store, limits and idle expiry as ``POST /reset``);
the briefing is :func:`serving.briefing.render_briefing`, the text seat's.

The endpoint is stateless streamable HTTP with JSON answers: every tool call carries its
``session_id``, so no MCP session has to outlive a request (``GET /mcp``, a stream nothing
would close or count, is 405). The tools are ``async``: the SDK runs them on the server's
event loop, like every route and frame, so two calls on one session never run at once (a
plain function would run in a worker thread). Arguments are checked as ``POST /reset``
checks its body: strict types (a seed ``"7"`` or ``true`` is refused), and a call naming an
argument the tool does not have, or whose ``arguments`` is not an object, is a JSON-RPC
error -32602. ``POST /mcp`` with a body that
is not a JSON-RPC message (``{}``, openenv's validator's probe) is answered like
openenv-core's own ``/mcp``: HTTP 200 and a JSON-RPC error object.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import Strict
from starlette.types import Message, Receive, Scope, Send

from commons_arena.inputs import InputError, TooDeep, loads_json
from serving.briefing import render_briefing
from serving.session import ServeError, ServeSettings, Session, SessionStore
from serving.wire import encode_observation

INSTRUCTIONS = (
    "commons_arena: a strategic GPU-allocation game. Call start_episode (optionally with a seat: allocator, a "
    "team name, or broker), read the briefing, then call act once per tick with one JSON action until done is "
    "true. A refused action changes nothing: read the error and act again."
)
INVALID_REQUEST = -32600  # JSON-RPC 2.0
INVALID_PARAMS = -32602
MAX_ERROR_CHARS = 500  # a tool error (and the SDK's log line of it) quotes at most this much of the request
# strict like POST /reset: "7", true and 7.0 are not a seed, 7 is not a seat name
StrictInt = Annotated[int, Strict()]
StrictStr = Annotated[str, Strict()]


def _tool_error(err: ServeError) -> ToolError:
    text = f"{err.code}: {err.message}"
    return ToolError(text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS] + "…")


def _view(session: Session) -> dict[str, Any]:
    """The session's one seat as the tools show it: tick, briefing, named observation."""
    assert session.options is not None
    seat = session.options.seats[0]
    spec = session.specs[seat]
    observation = encode_observation(spec, session.observations[seat])
    return {"tick": session.steps, "done": session.done,
            "briefing": render_briefing(spec, observation, invalid=session.last_invalid.get(seat)),
            "observation": observation}


def build_mcp(settings: ServeSettings, store: SessionStore) -> MCPServer:
    """The MCP server of one app: its tools open and play sessions of ``store``."""
    server = MCPServer(name="commons_arena", instructions=INSTRUCTIONS, log_level="WARNING")

    def session_of(session_id: str) -> Session:
        try:
            return store.get(session_id)
        except ServeError as err:
            raise _tool_error(err) from None

    @server.tool()
    async def start_episode(seat: StrictStr | None = None, scenario: StrictStr | None = None,
                            seed: StrictInt | None = None) -> dict[str, Any]:
        """Open an episode in one seat (default: the server's first seat) and return its session_id, briefing and
        first observation. Seats you do not play are played by the server's policies."""
        try:
            session = store.open("http")  # reaped like an HTTP session when idle
        except ServeError as err:
            raise _tool_error(err) from None
        request: dict[str, Any] = {"text": True, "scenario": scenario, "seed": seed}
        if seat is not None:
            request["seats"] = [seat]
        try:
            frame = session.reset({k: v for k, v in request.items() if v is not None})
        except ServeError as err:
            store.close(session.id)
            raise _tool_error(err) from None
        metadata = frame["observation"]["metadata"]
        config = session.options.config if session.options else None
        return {"session_id": session.id, "seat": metadata["seats"][0], "scenario": metadata["scenario"],
                "seed": metadata["seed"], "max_ticks": config.max_ticks if config else None, **_view(session)}

    @server.tool()
    async def observe(session_id: StrictStr) -> dict[str, Any]:
        """The briefing and observation of the session's seat now (changes nothing)."""
        return _view(session_of(session_id))

    @server.tool()
    async def act(session_id: StrictStr, action: dict[str, Any] | StrictStr) -> dict[str, Any]:
        """Play one tick. action: the JSON action (e.g. {"grant": {"search": {"small": 2}}}) or a text holding one
        JSON action. Returns the reward and its terms, the next briefing and observation, and the totals at the end.
        A refused action is an error naming the entry and its range; the episode does not move."""
        session = session_of(session_id)
        try:
            frame = session.step({"text": action} if isinstance(action, str) else action)
        except ServeError as err:
            raise _tool_error(err) from None
        metadata = frame["observation"]["metadata"]
        seat = metadata["seats"][0]
        info = metadata["info"].get(seat, {})
        out = {"reward": frame["reward"], "reward_terms": info.get("reward_terms", {}),
               "events": info.get("events", []), **_view(session)}
        if frame["done"]:
            out["episode"] = info.get("episode", {})
            out["returns"] = dict(session.returns)
        return out

    @server.tool()
    async def episode_state(session_id: StrictStr) -> dict[str, Any]:
        """Tick, returns so far, invalid-action counts and whether the episode is over."""
        return session_of(session_id).state()

    @server.tool()
    async def end_episode(session_id: StrictStr) -> dict[str, Any]:
        """Close the session (sessions left open are closed after the server's idle limit)."""
        store.close(session_of(session_id).id)
        return {"closed": session_id}

    return server


class McpEndpoint:
    """The ASGI app at ``/mcp``: the SDK's streamable HTTP transport behind a JSON-RPC probe answer."""

    def __init__(self, server: MCPServer, limit: int) -> None:
        # the server's other routes take any Host; a remote agent must reach this one too
        security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
        self.sdk = server.streamable_http_app(streamable_http_path="/mcp", stateless_http=True, json_response=True,
                                              transport_security=security, max_request_body_size=limit)
        self.handler = self.sdk.routes[0].app  # type: ignore[attr-defined]  # StreamableHTTPASGIApp
        self.session_manager = server.session_manager
        self.server, self.limit = server, limit
        self.arguments: dict[str, frozenset[str]] | None = None  # each tool's argument names (on the first call)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.handler(scope, receive, send)
            return
        if scope["method"] != "POST":
            # stateless: no stream outlives a request, so no GET stream is held open (the spec's 405)
            await _jsonrpc_error(send, 405, "Method Not Allowed: this MCP endpoint is stateless; POST JSON-RPC "
                                 "messages to /mcp", headers=[(b"allow", b"POST")])
            return
        body, more = bytearray(), True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.limit:
                await _jsonrpc_error(send, 413, f"Invalid Request: the body is over the limit of {self.limit} bytes")
                return
        if self.arguments is None:
            self.arguments = {t.name: frozenset(t.input_schema.get("properties", {}))
                              for t in await self.server.list_tools()}
        status, error, code, request_id = _not_jsonrpc(bytes(body), self.arguments)
        if error is not None:
            await _jsonrpc_error(send, status, error, code, request_id)
            return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        await self.handler(scope, replay, send)


async def _jsonrpc_error(send: Send, status: int, message: str, code: int = INVALID_REQUEST, request_id: Any = None,
                         headers: list[tuple[bytes, bytes]] | None = None) -> None:
    payload = json.dumps({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}})
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode()),
                            *(headers or [])]})
    await send({"type": "http.response.body", "body": payload.encode()})


def _not_jsonrpc(body: bytes, arguments: dict[str, frozenset[str]]) -> tuple[int, str | None, int, Any]:
    """Why a body is not a message the tools take: HTTP status, message (None: pass it on, the SDK
    answers the rest), JSON-RPC error code and the request's id.

    Nesting deeper than the server's JSON limit is a 400, as on every route; a JSON object that
    is not JSON-RPC 2.0 gets openenv's 200 and an error object; a ``tools/call`` whose
    ``arguments`` is not an object or names an argument the tool does not have is refused
    like ``POST /reset`` refuses an unknown key (the SDK would read ``null`` as ``{}`` and
    drop unknown names)."""
    try:
        value = loads_json(body, "the body")  # the nesting rule of every route and file (commons_arena.inputs)
    except TooDeep as err:
        return 400, f"Invalid Request: {err}", INVALID_REQUEST, None
    except InputError:
        return 200, None, 0, None  # the SDK answers a parse error itself
    if isinstance(value, dict) and value.get("jsonrpc") != "2.0":
        return 200, ('Invalid Request: an MCP message is JSON-RPC 2.0, {"jsonrpc": "2.0", "id": 1, "method": '
                     '"initialize", "params": {...}}; start with initialize, then tools/list and tools/call'), \
            INVALID_REQUEST, None
    for message in value if isinstance(value, list) else [value]:
        if not isinstance(message, dict) or message.get("method") != "tools/call":
            continue
        params = message.get("params")
        if not isinstance(params, dict) or params.get("name") not in arguments:
            continue  # the SDK names what is wrong
        given, request_id = params.get("arguments", {}), message.get("id")
        request_id = request_id if isinstance(request_id, int | str) and not isinstance(request_id, bool) else None
        if not isinstance(given, dict):
            return 200, f"Invalid params: arguments must be an object of named arguments, got {_kind(given)}", \
                INVALID_PARAMS, request_id
        unknown = sorted(set(given) - arguments[params["name"]])
        if unknown:
            shown = ", ".join(repr(k[:40]) for k in unknown[:5])
            return 200, (f"Invalid params: unknown arguments {shown} of tool {params['name']}; it takes "
                         f"{sorted(arguments[params['name']])}"), INVALID_PARAMS, request_id
    return 200, None, 0, None


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


__all__ = ["INSTRUCTIONS", "McpEndpoint", "build_mcp"]
