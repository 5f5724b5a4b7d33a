"""A seat as Model Context Protocol tools, at ``/mcp`` of the same app (streamable HTTP).

Any MCP client (a language model with tool calling, an agent framework, the ``mcp`` SDK's
own ``Client``) plays one seat of one episode through six tools, listed with what they answer
in docs/serving.md ("MCP: a seat as tools"): ``start_episode``, ``act``, ``preview``,
``observe``, ``episode_state``, ``end_episode``. Every answer is compact JSON text; parameters
carry descriptions and their allowed values, ``seat`` and ``scenario`` as enums.

Errors are in plain words and name the tool to call next (``start_episode`` for an
unknown session, ``observe`` after the end, ``act`` again after a refused action);
arguments are checked here, not by a schema validator, so a wrong argument reads as one
sentence, not a validation dump.

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

import functools
import inspect
import json
import reprlib
from typing import Annotated, Any

import anyio.to_thread
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import Field
from starlette.types import Message, Receive, Scope, Send

import commons_arena
from commons_arena.inputs import MAX_DEPTH, InputError, TooDeep, loads_json
from serving.briefing import MAX_TEXT_CHARS, parse_text_action, render_briefing
from serving.explain import placement_lines, tier_cost_lines
from serving.explain import preview as explain_preview
from serving.seat_references import summary_args, summary_of
from serving.session import ServeError, ServeSettings, Session, SessionStore, internal_error, off_loop
from serving.wire import ActionError, SeatSpec, encode_observation, media_type

INSTRUCTIONS = (
    "commons_arena: a strategic GPU-allocation game. Call start_episode (choose a seat: allocator, a team name, or "
    "broker), read the briefing it returns once, then call act once per tick with one JSON action until done is "
    "true; preview shows what an action would cost before you play it. A refused action changes nothing: read the "
    "error and call act again. At the end, act and observe show your totals beside reference policies' scores."
)
PARSE_ERROR = -32700  # JSON-RPC 2.0
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602
MAX_ERROR_CHARS = 500  # a tool error (and the SDK's log line of it) quotes at most this much of the request
AFTER_ACTION_ERROR = {
    "act": " Nothing was played: call act again with a corrected action (preview checks one without playing).",
    "preview": " Nothing was played or previewed: call preview again with a corrected action.",
}
UNUSED_METHODS = ("prompts/list", "prompts/get", "resources/list", "resources/read", "resources/templates/list")
"""the SDK serves these (and so advertises prompts and resources) though this server has none: removed"""


def _tool_error(err: ServeError, tool: str = "") -> ToolError:
    """A refused call in plain words that name the tool to call next (MCP has no reset)."""
    if err.code == "UNKNOWN_SESSION":
        text = (f"no open session {err.extra.get('session_id')!r}: it was closed, expired after being idle, or never "
                "existed. Call start_episode to open one (it returns the session_id to pass to the other tools).")
    elif err.code == "NOT_RESET":
        text = "this session has no episode: call start_episode to begin one."
    elif err.code == "EPISODE_DONE":
        text = ("the episode has ended. Call observe to see your totals and the reference scores, or start_episode "
                "for a new episode.")
    elif err.code == "INVALID_REQUEST" and err.extra.get("field") == "seats":
        text = f"seat must be one of {err.extra.get('allowed')} for this scenario; call start_episode again."
    elif err.code == "INVALID_REQUEST":
        text = err.message + "; call start_episode again with a corrected value."
    elif tool in AFTER_ACTION_ERROR:
        text = err.message.rstrip(".") + "." + AFTER_ACTION_ERROR[tool]
    else:
        text = err.message
    text = f"{err.code}: {text}"
    return ToolError(text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS] + "…")


def _plain_error(message: str) -> ToolError:
    text = f"INVALID_ARGUMENT: {message}"
    return ToolError(text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS] + "…")


def _echo(value: Any) -> str:
    """A client's value as an error repeats it: a few items and characters of it (a 20,000-element seed drew a
    60 KB answer)."""
    return reprlib.repr(value)


def _tick_lines(spec: SeatSpec, observation: dict[str, Any]) -> list[str]:
    """This tick's numbers a decision needs beyond the observation (per-tick, not the whole briefing)."""
    if spec.role == "allocator":
        return tier_cost_lines(spec, observation)[1:]  # the header is in the briefing
    if spec.role == "team":
        return placement_lines(spec, observation)[2:]  # the jobs' tiers only
    return []


def _view(session: Session, briefing: bool) -> dict[str, Any]:
    """The session's one seat as the tools show it: the full briefing only when asked, else this tick's numbers."""
    assert session.options is not None
    seat = session.options.seats[0]
    spec = session.specs[seat]
    observation = encode_observation(spec, session.observations[seat])
    out: dict[str, Any] = {"tick": session.steps, "max_ticks": spec.config.max_ticks, "done": session.done}
    if session.done:
        return out
    if briefing:
        out["briefing"] = render_briefing(spec, observation, invalid=session.last_invalid.get(seat))
    else:
        out["this_tick"] = _tick_lines(spec, observation)
        if session.last_invalid.get(seat):
            out["invalid"] = session.last_invalid[seat]
    out["observation"] = observation
    return out


async def _end(session: Session) -> dict[str, Any]:
    """The seat's totals (its own, then the whole episode's) and the reference policies' returns on this seed,
    computed off the event loop (the references play whole episodes, the oracle a MILP per tick)."""
    args = summary_args(session)
    try:
        summary = await anyio.to_thread.run_sync(summary_of, *args)
    except ServeError as err:  # REFERENCES_BUSY: the totals now, the references on a later observe
        summary = {**err.extra, "text": f"{err.message}; call observe for them.", "references": {}}

    def short(values: dict[str, float]) -> dict[str, float]:
        return {k: round(float(v), 4) for k, v in values.items()}

    out = {"your_totals": short(summary["your_totals"]), "episode_totals": short(summary["episode_totals"]),
           "how_you_did": summary["text"]}
    if summary.get("causes"):  # what happened, in the game's words (serving/causes.py)
        out["what_happened"] = summary["causes"]
    if summary["references"]:
        out["references"] = short(summary["references"])
        out["reference_terms"] = {name: short(terms) for name, terms in summary["reference_terms"].items()}
        out["biggest_loss"] = {name: None if loss is None else {**loss, **short({k: loss[k] for k in
                                                                                 ("yours", "theirs", "behind")})}
                               for name, loss in summary["biggest_loss"].items()}
    return out


def _compact(value: dict[str, Any]) -> str:
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


def tool_parameters(seats: list[str], scenarios: list[str]) -> dict[str, dict[str, Any]]:
    """Every tool's parameters as a client reads them. Each is ``Any`` to the SDK's validator (this module
    checks them and says what is wrong in one sentence); its JSON Schema (type, enum, description) is what a
    client reads."""
    sid = Annotated[Any, Field(description="the session_id start_episode returned", json_schema_extra={"type": "string"})]
    an_action = Annotated[Any, Field(description="the action: a JSON object of the seat's parts (missing entries are 0), "
                                     'e.g. {"grant": {"search": {"small": 2}}}; or a text holding one such object',
                                     json_schema_extra={"type": ["object", "string"]})]
    return {
        "start_episode": {
            "seat": Annotated[Any, Field(description="the seat you play; the server's policies play the others. "
                                         "allocator: grants GPUs to teams; a team name: declares needs and runs its "
                                         "jobs; broker: sells spot GPUs. Default: allocator.",
                                         json_schema_extra={"type": "string", "enum": list[Any](seats)})],
            "scenario": Annotated[Any, Field(description=f"the scenario (cluster, teams, shocks); default {scenarios[0]!r}",
                                             json_schema_extra={"type": "string", "enum": list[Any](scenarios)})],
            "seed": Annotated[Any, Field(description="episode seed (same seed, same episode); default: drawn",
                                         json_schema_extra={"type": "integer", "minimum": 0})]},
        "observe": {"session_id": sid, "briefing": Annotated[Any, Field(
            description="true: repeat the whole briefing", json_schema_extra={"type": "boolean"})]},
        "act": {"session_id": sid, "action": an_action},
        "preview": {"session_id": sid, "action": an_action},
        "episode_state": {"session_id": sid},
        "end_episode": {"session_id": sid},
    }


def register_tool(server: MCPServer, fn: Any, parameters: dict[str, Any]) -> None:
    """``fn`` (a coroutine of :class:`SeatTools`) as the tool of its name: its docstring the description, its
    parameters typed by ``parameters``; an unforeseen error (a bug) answered as a named tool error."""

    @functools.wraps(fn)
    async def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return await fn(*args, **kwargs)
        except ToolError:
            raise
        except Exception as err:  # unforeseen (a bug): logged within the cap, answered as a named error  # noqa: BLE001
            raise ToolError(f"INTERNAL: {internal_error(err).message}") from None

    signature = inspect.signature(fn)  # the SDK reads this signature: the client's parameter schema
    guarded.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[p.replace(annotation=parameters[p.name]) for p in signature.parameters.values()],
        return_annotation=str)
    server.tool(description=inspect.cleandoc(fn.__doc__ or ""), structured_output=False)(guarded)
    # the arguments a call cannot do without are required in the schema a client reads; the tool keeps its
    # default of None so a missing one is answered in one sentence (session_of, action_of), not a validation dump
    needed = [name for name in ("session_id", "action") if name in parameters]
    registered_tool = server._tool_manager.get_tool(fn.__name__)
    if needed:
        registered_tool.parameters["required"] = needed  # type: ignore[union-attr]
    # the arguments as the client sent them: the SDK json.loads a JSON-looking string of a parameter not typed
    # str, before this module's length and depth checks (action_of) and into a value echoed back
    object.__setattr__(registered_tool.fn_metadata, "pre_parse_json", dict)  # type: ignore[union-attr]


def build_mcp(settings: ServeSettings, store: SessionStore) -> MCPServer:
    """The MCP server of one app: its tools (:class:`SeatTools`) open and play sessions of ``store``."""
    server = MCPServer(name="commons_arena", instructions=INSTRUCTIONS, version=commons_arena.__version__,
                       log_level="WARNING")
    for method in UNUSED_METHODS:  # no empty prompts/resources advertised (the SDK has no switch for it)
        server._lowlevel_server._request_handlers.pop(method, None)
    tools = SeatTools(settings, store)
    parameters = tool_parameters(tools.seats, tools.scenarios)
    for name in TOOLS:
        register_tool(server, getattr(tools, name), parameters[name])
    return server


TOOLS = ("start_episode", "observe", "act", "preview", "episode_state", "end_episode")


def action_of(action: Any, tool: str) -> Any:
    """A tool's ``action`` argument as the session takes it: a JSON object, or ``{"text": ...}``."""
    if action is None:
        raise _plain_error(f"{tool} needs action: one JSON object of the seat's action parts (the briefing "
                           'lists them), e.g. {"grant": {"search": {"small": 2}}}, or a text holding one.')
    if isinstance(action, str):
        if len(action) > MAX_TEXT_CHARS:  # the text action's limit, before any parse (every transport's rule)
            raise _plain_error(f"{tool}: the action has {len(action)} characters, over the limit of {MAX_TEXT_CHARS}; "
                               "send one JSON object of the seat's action parts." + AFTER_ACTION_ERROR.get(tool, ""))
        stripped = action.strip()
        if stripped.startswith("{"):  # a JSON object sent as a string: the one depth-limited parse
            try:
                value = loads_json(stripped, "the action")
            except TooDeep:
                raise _plain_error(f"{tool}: the action nests deeper than {MAX_DEPTH} levels; an action nests "
                                   "3 deep." + AFTER_ACTION_ERROR.get(tool, "")) from None
            except InputError:
                return {"text": action}
            return value if isinstance(value, dict) else {"text": action}
        return {"text": action}
    return action


async def _act(session: Session, request: Any) -> str:
    try:
        frame = await off_loop(session.step, request)
    except ServeError as err:
        raise _tool_error(err, "act") from None
    metadata = frame["observation"]["metadata"]
    seat = metadata["seats"][0]
    info = metadata["info"].get(seat, {})
    terms = {k: round(v, 4) for k, v in info.get("reward_terms", {}).items() if v}
    out: dict[str, Any] = {"played_tick": metadata["tick"] - 1, "reward": frame["reward"],
                           "reward_terms": terms}
    if info.get("events"):
        out["events"] = info["events"]
    cuts = {k: v for k, v in info.get("repairs", {}).items() if v}
    if cuts:
        out["cut_as_invalid"] = cuts
    out.update(_view(session, briefing=False))
    if frame["done"]:
        out.update(await _end(session))
    return _compact(out)


def _preview(session: Session, request: Any) -> str:
    if session.options is None or session.done:
        raise _tool_error(ServeError(409, "EPISODE_DONE" if session.done else "NOT_RESET", ""), "preview")
    seat = session.options.seats[0]
    spec = session.specs[seat]
    try:
        if isinstance(request, dict) and set(request) == {"text"}:
            request = parse_text_action(spec, request["text"])
        result = explain_preview(spec, encode_observation(spec, session.observations[seat]), request)
    except ActionError as err:
        raise _tool_error(ServeError.from_action(err, seat), "preview") from None
    return "\n".join(result["lines"])


class SeatTools:
    """The six tools over one server's sessions (module docstring): each coroutine of :data:`TOOLS` is one."""

    def __init__(self, settings: ServeSettings, store: SessionStore) -> None:
        self.store = store
        self.scenarios = settings.allowed_scenarios()
        self.seats = sorted({a for name in self.scenarios for a in settings.config(name).agents},
                            key=lambda a: (a != "allocator", a == "broker", a))

    def session_of(self, session_id: Any, tool: str) -> Session:
        if not isinstance(session_id, str) or not session_id:
            raise _plain_error(f"{tool} needs session_id, the string start_episode returned; call start_episode "
                               "first if you have none.")
        try:
            return self.store.get(session_id)
        except ServeError as err:
            raise _tool_error(err, tool) from None

    async def start_episode(self, seat: Any = None, scenario: Any = None, seed: Any = None) -> str:
        """Open an episode in one seat. Returns session_id, the briefing (the rules, the scoring, the action format:
        read it once, it is not repeated) and the observation of tick 0. Then call act once per tick."""
        if seat is not None and (not isinstance(seat, str) or seat not in self.seats):
            raise _plain_error(f"seat must be one of {self.seats}, got {_echo(seat)}; call start_episode again.")
        if scenario is not None and (not isinstance(scenario, str) or scenario not in self.scenarios):
            raise _plain_error(f"scenario must be one of {self.scenarios}, got {_echo(scenario)}; "
                               "call start_episode again.")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            raise _plain_error(f"seed must be a whole number, 0 or more, got {_echo(seed)}; call start_episode again.")
        try:
            session = self.store.open("http")  # reaped like an HTTP session when idle
        except ServeError as err:
            raise _tool_error(err, "start_episode") from None
        request: dict[str, Any] = {"text": False, "scenario": scenario, "seed": seed}
        if seat is not None:
            request["seats"] = [seat]
        async with session.turn:  # the reset off the event loop; the view of its observation before any other call
            try:
                frame = await off_loop(session.reset, {k: v for k, v in request.items() if v is not None})
            except ServeError as err:
                self.store.close(session.id)
                raise _tool_error(err, "start_episode") from None
            metadata = frame["observation"]["metadata"]
            return _compact({"session_id": session.id, "seat": metadata["seats"][0], "scenario": metadata["scenario"],
                             "seed": metadata["seed"], **_view(session, briefing=True)})

    async def observe(self, session_id: Any = None, briefing: Any = False) -> str:
        """The seat's observation now (changes nothing); with briefing=true the whole briefing again. After the end:
        your totals, the episode's, and what reference policies scored in your seat on the same seed."""
        if not isinstance(briefing, bool):
            raise _plain_error(f"briefing must be true or false, got {_echo(briefing)}; call observe again.")
        session = self.session_of(session_id, "observe")
        async with session.turn:
            if session.options is None:
                raise _tool_error(ServeError(409, "NOT_RESET", ""), "observe")
            out = _view(session, briefing=briefing)
            if session.done:
                out.update(await _end(session))
            return _compact(out)

    async def act(self, session_id: Any = None, action: Any = None) -> str:
        """Play one tick. Returns the reward and its non-zero terms, shock events, and the next observation with this
        tick's numbers (no briefing: observe with briefing=true repeats it). At the end: your totals and the reference
        scores. A refused action is an error naming the entry and its range; the episode does not move."""
        session = self.session_of(session_id, "act")
        request = action_of(action, "act")
        async with session.turn:  # the step off the event loop (an oracle background); the view before any other call
            return await _act(session, request)

    async def preview(self, session_id: Any = None, action: Any = None) -> str:
        """What an action would do this tick, without playing it: spend, carbon, grants beyond the declarations and
        the reward terms they make (allocator), where each job would run (team), prices and profit (broker), with
        the formula."""
        session = self.session_of(session_id, "preview")
        request = action_of(action, "preview")
        return str(await session.run(_preview, session, request))  # off the event loop, in the session's turn

    async def episode_state(self, session_id: Any = None) -> str:
        """Tick, returns so far, invalid-action counts and whether the episode is over."""
        session = self.session_of(session_id, "episode_state")
        async with session.turn:
            return _compact(session.state())

    async def end_episode(self, session_id: Any = None) -> str:
        """Close the session (sessions left open are closed after the server's idle limit)."""
        self.store.close(self.session_of(session_id, "end_episode").id)
        return _compact({"closed": session_id})


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
        if media_type(dict(scope["headers"]).get(b"content-type")) != "application/json":  # the SDK's answer to it was a plain-text 400, not JSON-RPC
            await _jsonrpc_error(send, 415, "Unsupported Media Type: POST JSON-RPC messages to /mcp with "
                                 "Content-Type: application/json")
            return
        # a media type's case means nothing (RFC 9110); the SDK compares it as written: hand it the lower case
        scope = {**scope, "headers": [(k, b"application/json" if k == b"content-type" else v)
                                      for k, v in scope["headers"]]}
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
    except InputError as err:  # the SDK's own parser takes NaN (an id of NaN was a notification, answered 202)
        return 400, f"Parse error: {str(err).removeprefix('the body: ')[:MAX_ERROR_CHARS]}", PARSE_ERROR, None
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
