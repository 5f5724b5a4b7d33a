"""The ASGI app: openenv-core's endpoints over sessions of remote seats.

The routes, one named coroutine each below, are listed with their bodies in docs/serving.md
("Routes"): openenv-core's (``/health``, ``/metadata``, ``/schema``, ``/reset``, ``/step``,
``/state``, ``/ws``), the session's own (``/close``, ``/preview``, ``/sessions/{id}/...``), the
play page (``/play``) and the Model Context Protocol endpoint (``/mcp``, :mod:`serving.mcp_seat`).

openenv-core's own ``/reset`` and ``/step`` are stateless (a fresh env per request); here
plain HTTP keeps an episode across requests through ``session_id`` (returned by ``/reset``
in ``observation.metadata.session_id``), and ``/ws`` works as openenv-core's does. Every
body of ``/health``, ``/metadata``, ``/schema``, ``/reset``, ``/step`` and ``/state`` is one
of openenv-core's response models (which forbid extra fields): what is ours beyond them is
in ``observation.metadata`` or at ``/info``.

Errors are JSON with a status that says whose fault it is: 400 malformed JSON (also NaN,
Infinity, a number that overflows, a lone surrogate escape, nesting deeper than :data:`MAX_JSON_DEPTH`, a binary
WebSocket frame), 404 unknown session or a path no route has, 405 a method the route does not take, 409 step before reset or after the end, 413 body
too large, 422 an invalid action or parameter (``error.field`` names the entry, ``error.allowed`` its range), 503 the server
is full. Over the WebSocket the same error is a frame ``{"type": "error", "data": {"code",
"message", ...}}`` and the connection stays open. Nothing changes in the episode on an error
(a reset refused after the old table was released leaves the session waiting for a reset).
Every limit, its value and its error are listed in ``docs/limits.md``.

Every route, WebSocket frame and MCP tool that touches a session is a coroutine that takes the
session's turn (:meth:`serving.session.Session.run`): a reset or a step (whose background may
solve the oracle's MILP) runs in a worker thread while the turn is held, so the event loop stays
free for ``/health`` and other sessions, and concurrent calls on one session play one after another.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI, Request, WebSocket, WebSocketDisconnect
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException
from starlette.routing import Route

import commons_arena
from commons_arena.inputs import MAX_DEPTH, InputError, TooDeep
from commons_arena.scenario import ScenarioConfig, load_scenario
from serving.briefing import seat_guide
from serving.explain import default_action as explain_default
from serving.explain import preview as explain_preview
from serving.page_assets import SHARED_STYLE, shared_asset_path
from serving.seat_references import summary_args, summary_of
from serving.session import ServeError, ServeSettings, Session, SessionStore
from serving.session import internal_error as _internal
from serving.wire import (
    ActionError,
    SeatSpec,
    action_schema,
    encode_observation,
    form_spec,
    media_type,
    observation_schema,
    seat_spec,
    strict_json,
)

ASSETS = Path(__file__).parent / "assets"
# the play page reuses the replay page's style sheet (serving/page_assets.py: both pages' shared files)
PLAY_ASSETS = {
    "play.js": (ASSETS / "play.js", "text/javascript"),
    "play.css": (ASSETS / "play.css", "text/css"),
    SHARED_STYLE: (shared_asset_path(SHARED_STYLE), "text/css"),
}
# The page may load and call only this server; no inline script, no plugins, no framing.
PLAY_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src data:; "
            "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
STEP_KEYS = ("session_id", "action", "timeout_s", "request_id")  # the last two: openenv's StepRequest
STATE_SCHEMA = {
    "type": "object",
    "properties": {
        "episode_id": {"type": ["string", "null"]},
        "step_count": {"type": "integer", "minimum": 0},
        "session_id": {"type": "string"},
        "scenario": {"type": ["string", "null"]},
        "seats": {"type": "array", "items": {"type": "string"}},
        "seed": {"type": ["integer", "null"]},
        "tick": {"type": "integer"},
        "done": {"type": "boolean"},
        "returns": {"type": "object", "additionalProperties": {"type": "number"}},
        "invalid_actions": {"type": "object", "additionalProperties": {"type": "integer"}},
        "recording": {"type": "boolean"},
    },
}

# Beside a seat's fields, an observation body carries these (openenv's models have no other place for them).
OBSERVATION_EXTRAS = {
    "briefing": {"type": "string", "description": "the seat's briefing in plain text (reset with \"text\": true)"},
    "metadata": {
        "type": "object", "required": ["session_id", "episode_id", "scenario", "seed", "seats", "tick"],
        "description": "the session's: session_id, episode_id, scenario, seed, seats, tick, rewards of each seat, "
                       "info (each seat's infos), invalid_actions, played_noop, terminated, truncated",
        "properties": {"session_id": {"type": "string"}, "episode_id": {"type": "string"},
                       "scenario": {"type": "string"}, "seed": {"type": "integer"},
                       "seats": {"type": "array", "items": {"type": "string"}}, "tick": {"type": "integer"},
                       "rewards": {"type": "object"}, "info": {"type": "object"},
                       "invalid_actions": {"type": "object"}, "played_noop": {"type": "object"}},
    },
}


MAX_JSON_DEPTH = MAX_DEPTH  # deepest nesting of a body or message (an action nests 3 deep): every input's rule


def _error_response(err: ServeError, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"detail": err.message, "error": err.to_dict()}, status_code=err.status, headers=headers)


ERROR_SCHEMA = {  # every error body, the routes' and the router's own (an unknown path or method)
    "type": "object", "required": ["detail", "error"], "title": "Error",
    "properties": {"detail": {"type": "string"},
                   "error": {"type": "object", "required": ["code", "message"], "additionalProperties": True,
                             "properties": {"code": {"type": "string"}, "message": {"type": "string"}}}},
}
ROUTER_CODES = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def _router_error(request: Request, err: HTTPException) -> JSONResponse:
    """The router's own refusals (no route at the path, a method the route does not take) in the
    project's error shape, not Starlette's ``{"detail": "Not Found"}``; ``Allow`` kept on a 405."""
    where = f"{request.method} {_short(request.url.path)}"
    headers = dict(err.headers or {})
    allowed = sorted(m.strip() for m in headers.get("Allow", "").split(",") if m.strip())  # Starlette's: a set
    if allowed:
        headers["Allow"] = ", ".join(allowed)
    if err.status_code == 405:
        message = f"{where}: this route takes {', '.join(allowed) or 'another method'}"
        error = ServeError(405, ROUTER_CODES[405], message, allowed=allowed)
    elif err.status_code == 404:
        error = ServeError(404, ROUTER_CODES[404], f"{where}: no such route; the routes are listed at GET /openapi.json")
    else:
        error = ServeError(err.status_code, "HTTP_ERROR", f"{where}: {_short(str(err.detail))}")
    return _error_response(error, headers or None)


def _validation_error(request: Request, err: RequestValidationError) -> JSONResponse:
    """A parameter FastAPI itself refused, in the project's shape (422, naming the first field)."""
    first: dict[str, Any] = next(iter(err.errors()), {})
    field = ".".join(str(part) for part in first.get("loc", ())[1:]) or None
    return _error_response(ServeError(422, "INVALID_REQUEST", f"{field or 'the request'}: "
                                      f"{_short(str(first.get('msg', 'invalid')))}", field=field))


def _openapi(app: FastAPI) -> dict[str, Any]:
    """``/openapi.json`` as the server answers: every route's errors in :data:`ERROR_SCHEMA` (FastAPI
    would document a ``422`` of its own validation shape, which no route sends), nothing else of FastAPI's."""
    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version=app.version, routes=app.routes,
                             description="commons_arena's OpenEnv routes; /mcp is Model Context Protocol "
                                         "(POST JSON-RPC), /ws a WebSocket; limits: docs/limits.md")
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for name in ("HTTPValidationError", "ValidationError"):
            components.pop(name, None)
        components["Error"] = ERROR_SCHEMA
        error = {"description": "refused: error.code says why, error.message what to fix",
                 "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
        for operations in schema.get("paths", {}).values():
            for operation in operations.values():
                responses = operation.setdefault("responses", {})
                responses.pop("422", None)
                responses["4XX"] = error
        app.openapi_schema = schema
    return app.openapi_schema


def loads(raw: str | bytes, what: str = "the body") -> Any:
    """Client JSON → data, or a 400: strict JSON (no NaN or Infinity), at most :data:`MAX_JSON_DEPTH` deep
    (:func:`commons_arena.inputs.loads_json`, the one strict, depth-limited reader)."""
    try:
        value = strict_json(raw)
    except TooDeep:
        raise ServeError(400, "TOO_DEEP", f"{what} nests deeper than {MAX_JSON_DEPTH} levels",
                         limit=MAX_JSON_DEPTH) from None
    except InputError as err:
        raise ServeError(400, "INVALID_JSON", f"{what} is not valid JSON: {err.reason.removeprefix('not valid JSON: ')}") from None
    return value


def json_media_type(content_type: str | None) -> bool:
    """Whether a request's ``Content-Type`` may carry the JSON body: absent (a script's bare POST), or JSON
    (``application/json``, ``application/*+json``; any case, any parameters). A browser sends a cross-site
    POST without asking first only as ``text/plain`` or a form: refusing those keeps another web page from
    driving a local server."""
    media = media_type(content_type)
    return media is None or media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


async def read_json(request: Request, limit: int) -> Any:
    """The request's JSON body, refusing more than ``limit`` bytes before reading them all, and a body declared
    as anything but JSON (:func:`json_media_type`)."""
    if not json_media_type(request.headers.get("content-type")):
        raise ServeError(415, "UNSUPPORTED_MEDIA_TYPE", f"the body is declared {request.headers['content-type']!r}; "
                         "send JSON with Content-Type: application/json")
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ServeError(413, "PAYLOAD_TOO_LARGE", f"request body of {declared} bytes is over the limit of {limit}",
                         limit=limit)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise ServeError(413, "PAYLOAD_TOO_LARGE", f"request body is over the limit of {limit} bytes", limit=limit)
    if not body.strip():
        return None
    return loads(bytes(body))


def _object(value: Any, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ServeError(422, "INVALID_REQUEST", f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def _metadata() -> dict[str, Any]:
    """openenv's ``EnvironmentMetadata`` (which forbids other fields: the rest is :func:`_info`)."""
    return {
        "name": "commons_arena_v0",
        "description": "Strategic GPU allocation: an allocator, bluffing product teams and a spot broker, under "
                       "shocks and a carbon cap. Seats you do not play are scripted or learned policies.",
        "version": commons_arena.__version__,
        "readme_content": None,
        "author": "commons_arena",
        "documentation_url": None,
    }


def _info(settings: ServeSettings, store: SessionStore) -> dict[str, Any]:
    """What this server hosts: scenarios and their seats, the defaults, its limits."""
    scenarios = []
    for name in settings.allowed_scenarios():
        cfg = settings.config(name)
        scenarios.append({"name": cfg.name, "hash": cfg.content_hash, "seats": list(cfg.agents),
                          "teams": list(cfg.team_names), "tiers": list(cfg.tier_names), "max_ticks": cfg.max_ticks,
                          "description": " ".join(cfg.description.split())})
    limits = store.limits
    return {
        "default_scenario": load_scenario(settings.scenario).name,
        "default_seats": list(settings.seats),
        "scenarios": scenarios,
        "limits": {"max_sessions": limits.max_sessions, "idle_seconds": limits.idle_seconds,
                   "max_body_bytes": limits.max_body_bytes},
    }


@dataclass(frozen=True)
class Hosted:
    """What one app serves (``app.state.hosted``): its settings, its sessions, what ``/info`` says of them."""

    settings: ServeSettings
    store: SessionStore
    info: dict[str, Any]

    @property
    def limit(self) -> int:
        return self.settings.limits.max_body_bytes


def hosted(connection: Request | WebSocket) -> Hosted:
    """The app's :class:`Hosted`, from a request or a socket."""
    return connection.app.state.hosted


def _requested_seat(config: ScenarioConfig, seat: str) -> SeatSpec:
    """The spec of the ``?seat=`` a route was asked for, or a 422 naming the scenario's seats."""
    try:
        return seat_spec(config, seat)
    except ValueError as err:
        raise ServeError(422, "INVALID_REQUEST", str(err), field="seat", allowed=list(config.agents)) from None


routes = APIRouter()


@routes.get("/health")
async def health() -> dict[str, Any]:
    return {"status": "healthy"}


@routes.get("/metadata")
async def get_metadata() -> dict[str, Any]:
    return _metadata()


@routes.get("/info")
async def get_info(request: Request) -> dict[str, Any]:
    served = hosted(request)
    return {**served.info, "sessions": len(served.store.sessions)}


@routes.get("/schema")
async def schema(request: Request, scenario: str | None = None, seat: str | None = None) -> dict[str, Any]:
    settings = hosted(request).settings
    config = settings.config(scenario)
    spec = _requested_seat(config, seat or (settings.seats[0] if settings.seats[0] in config.agents else config.agents[0]))
    observation = observation_schema(spec)
    observation["properties"].update(OBSERVATION_EXTRAS)
    return {"action": action_schema(spec), "observation": observation, "state": STATE_SCHEMA}


@routes.post("/reset")
async def reset(request: Request) -> dict[str, Any]:
    served = hosted(request)
    data = _object(await read_json(request, served.limit), "the reset body")
    session_id = data.pop("session_id", None)
    session = served.store.get(session_id) if session_id is not None else served.store.open("http")
    try:
        frame = await session.run(session.reset, data)  # off the event loop: it builds and checks policies
    except BaseException:
        if session_id is None:  # a session opened by a failed request is not left behind
            served.store.close(session.id)
        raise
    return frame


@routes.post("/step")
async def step(request: Request) -> dict[str, Any]:
    served = hosted(request)
    data = _object(await read_json(request, served.limit), "the step body")
    unknown = [k for k in data if k not in STEP_KEYS]
    if unknown:
        raise ServeError(422, "INVALID_REQUEST", f"unknown step key(s) {unknown}; send {{\"session_id\", \"action\"}}",
                         field=unknown[0])
    if "action" not in data:
        raise ServeError(422, "INVALID_REQUEST", "the step body needs \"action\" (and \"session_id\")",
                         field="action")
    if "session_id" not in data:
        raise ServeError(422, "INVALID_REQUEST", "the step body needs \"session_id\" (from /reset's response)",
                         field="session_id")
    session = served.store.get(data["session_id"])
    return await session.run(session.step, data["action"])  # off the event loop: the background may be the oracle


@routes.get("/state")
async def state(request: Request, session_id: str | None = None) -> dict[str, Any]:
    if session_id is None:
        raise ServeError(422, "INVALID_REQUEST", "GET /state needs ?session_id=", field="session_id")
    session = hosted(request).store.get(session_id)
    async with session.turn:
        return session.state()


@routes.post("/close")
async def close(request: Request) -> dict[str, Any]:
    served = hosted(request)
    data = _object(await read_json(request, served.limit), "the close body")
    session = served.store.get(data.get("session_id"))
    served.store.close(session.id)
    return {"closed": session.id}


@routes.get("/sessions/{session_id}/recording")
async def recording(request: Request, session_id: str) -> Response:
    session = hosted(request).store.get(session_id)
    async with session.turn:
        text = session.recording_text()
    return PlainTextResponse(text, media_type="application/x-ndjson", headers={
        "Content-Disposition": f'attachment; filename="commons_arena_{session_id[:12]}.jsonl"'})


@routes.post("/preview")
async def post_preview(request: Request) -> dict[str, Any]:
    served = hosted(request)
    data = _object(await read_json(request, served.limit), "the preview body")
    session = served.store.get(data.get("session_id"))
    return await session.run(preview_of, session, data.get("action"))


@routes.get("/sessions/{session_id}/default")
async def default(request: Request, session_id: str) -> dict[str, Any]:
    session = hosted(request).store.get(session_id)
    return await session.run(default_of, session)


@routes.get("/sessions/{session_id}/summary")
async def summary(request: Request, session_id: str) -> dict[str, Any]:
    args = summary_args(hosted(request).store.get(session_id))
    return await asyncio.to_thread(summary_of, *args)  # the references play whole episodes: off the event loop


@routes.get("/play/spec")
async def play_spec(request: Request, scenario: str | None = None, seat: str | None = None) -> dict[str, Any]:
    config = hosted(request).settings.config(scenario)
    spec = _requested_seat(config, seat or config.agents[0])
    return {**form_spec(spec), "guide": seat_guide(spec)}  # the text briefing's facts: one source


@routes.get("/")
async def index() -> Response:
    return RedirectResponse("/play")


@routes.get("/play")
async def play_page() -> Response:
    return FileResponse(ASSETS / "play.html", media_type="text/html", headers={"Content-Security-Policy": PLAY_CSP})


@routes.get("/play/{asset}")
async def play_asset(asset: str) -> Response:
    if asset not in PLAY_ASSETS:
        raise ServeError(404, "NOT_FOUND", f"no asset {asset!r}")
    path, media_type = PLAY_ASSETS[asset]
    return FileResponse(path, media_type=media_type)


@routes.websocket("/ws")
async def websocket(ws: WebSocket) -> None:
    served = hosted(ws)
    await ws.accept()
    try:
        session = served.store.open("ws")
    except ServeError as err:
        await ws.send_text(json.dumps({"type": "error", "data": err.to_dict()}))
        await ws.close(code=1013, reason="server full")
        return
    try:
        await _serve_socket(ws, session, served.store, served.limit)
    except WebSocketDisconnect:
        pass
    finally:
        served.store.close(session.id)


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Idle sessions reaped while the app runs; the MCP endpoint's session manager running."""
    served: Hosted = app.state.hosted

    async def reap() -> None:
        while True:
            await asyncio.sleep(max(0.05, min(5.0, served.settings.limits.idle_seconds / 4)))
            served.store.expire()

    task = asyncio.create_task(reap())
    try:
        async with app.state.mcp.session_manager.run():
            yield
    finally:
        task.cancel()


def create_app(settings: ServeSettings | None = None) -> FastAPI:
    """The app for ``settings`` (default: the standard scenario, the allocator seat remote): the named
    routes above, ``/mcp`` (:mod:`serving.mcp_seat`) and the idle reaper."""
    settings = settings or ServeSettings()
    for seat in settings.seats:  # fail at start, not at the first reset
        seat_spec(load_scenario(settings.scenario), seat)
    store = SessionStore(settings)
    from serving.mcp_seat import McpEndpoint, build_mcp  # the mcp SDK (serve extra) costs ~1 s to import

    app = FastAPI(title="commons_arena", version=commons_arena.__version__, lifespan=lifespan,
                  docs_url=None, redoc_url=None)
    app.state.hosted = Hosted(settings, store, _info(settings, store))
    app.state.store = store
    app.state.mcp = McpEndpoint(build_mcp(settings, store), settings.limits.max_body_bytes)
    app.add_exception_handler(ServeError, lambda request, err: _error_response(err))  # type: ignore[arg-type, return-value]
    app.add_exception_handler(HTTPException, _router_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    # a bug still answers in JSON (Starlette logs it); the tests hold that no request reaches this
    app.add_exception_handler(Exception, lambda request, err: _error_response(_internal(err)))
    app.include_router(routes)
    app.router.routes.append(Route("/mcp", app.state.mcp))  # an ASGI app: every method goes to it
    return app


def _playing_seat(session: Session) -> str:
    if session.options is None or session.done:
        raise ServeError(409, "EPISODE_DONE" if session.done else "NOT_RESET",
                         "no tick to preview: the episode has ended" if session.done else "no episode yet: send reset")
    return session.options.seats[0]


def default_of(session: Session) -> dict[str, Any]:
    """``GET /sessions/{id}/default``: the form's starting entries this tick (serving/explain.py)."""
    seat = _playing_seat(session)
    spec, vector = session.specs[seat], session.observations[seat]
    return explain_default(spec, encode_observation(spec, vector), vector)


def preview_of(session: Session, action: Any) -> dict[str, Any]:
    """``POST /preview``: what ``action`` would do in the session's seat this tick (serving/explain.py)."""
    seat = _playing_seat(session)
    spec = session.specs[seat]
    try:
        return explain_preview(spec, encode_observation(spec, session.observations[seat]), action)
    except ActionError as err:
        raise ServeError.from_action(err, seat) from None


async def _serve_socket(ws: WebSocket, session: Session, store: SessionStore, limit: int) -> None:
    idle = store.limits.idle_seconds
    watchdog = asyncio.create_task(_close_when_idle(ws, session, idle, store.settings.clock))  # one timer per connection, not per message
    try:
        while True:
            try:
                message = await ws.receive()
            except RuntimeError:  # closed by the watchdog
                return
            if message["type"] == "websocket.disconnect":
                return
            session.last_active = store.settings.clock()
            try:
                reply = await session.run(_handle_message, message.get("text"), session, limit)  # off the loop
            except ServeError as err:
                reply = {"type": "error", "data": err.to_dict()}
            except Exception as err:  # a bug must not drop the client's episode without a word  # noqa: BLE001
                reply = {"type": "error", "data": _internal(err).to_dict()}
            if reply is None:  # "close"
                await ws.close(code=1000)
                return
            await ws.send_text(json.dumps(reply, allow_nan=False, separators=(",", ":")))  # 11% fewer bytes
    finally:
        watchdog.cancel()


async def _close_when_idle(ws: WebSocket, session: Session, idle: float, clock: Callable[[], float]) -> None:
    while True:
        left = session.last_active + idle - clock()
        if left <= 0:
            with contextlib.suppress(Exception):
                await ws.close(code=1000, reason=f"idle for {idle:g} s")
            return
        await asyncio.sleep(left)


def _handle_message(raw: str | None, session: Session, limit: int) -> dict[str, Any] | None:
    if raw is None:
        raise ServeError(400, "INVALID_MESSAGE", "send text frames of JSON; binary frames are not read")
    if len(raw) > limit:
        raise ServeError(413, "PAYLOAD_TOO_LARGE", f"message of {len(raw)} characters is over the limit of {limit}")
    message = loads(raw, "the message")
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise ServeError(400, "INVALID_MESSAGE", 'a message is {"type": "reset" | "step" | "state" | "close", "data": {...}}')
    kind, data = message["type"], message.get("data")
    if kind == "reset":
        return {"type": "observation", "data": session.reset(_object(data, "reset data"))}
    if kind == "step":
        if data is None:
            raise ServeError(422, "INVALID_ACTION", "a step message needs \"data\": the action", field="data")
        return {"type": "observation", "data": session.step(data)}
    if kind == "state":
        return {"type": "state", "data": session.state()}
    if kind == "close":
        return None
    raise ServeError(400, "UNKNOWN_TYPE", f"unknown message type {kind!r}; types are reset, step, state, close")


def _uvicorn_config(app: Any, settings: ServeSettings, host: str, port: int, log_level: str):
    import uvicorn

    return uvicorn.Config(app, host=host, port=port, log_level=log_level,
                          # the app answers an oversized message with an error frame; past this, uvicorn closes
                          ws_max_size=max(1 << 20, 4 * settings.limits.max_body_bytes))


def make_server(settings: ServeSettings, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info"):
    """A uvicorn server of ``create_app(settings)`` (not started)."""
    import uvicorn

    return uvicorn.Server(_uvicorn_config(create_app(settings), settings, host, port, log_level))


def bind(host: str, port: int) -> socket.socket:
    """A listening socket (``port`` 0: a free one, read it from ``getsockname()``)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


@contextlib.contextmanager
def running_server(settings: ServeSettings | None = None, host: str = "127.0.0.1", log_level: str = "warning",
                   app: Any = None) -> Iterator[str]:
    """Run a real uvicorn server on a free port in a thread; yield its base URL (for tests and scripts).

    Serves ``app`` if given (e.g. :func:`serving.client.agent_app`), else ``create_app(settings)``."""
    import uvicorn

    settings = settings or ServeSettings()
    sock = bind(host, 0)
    server = uvicorn.Server(_uvicorn_config(app or create_app(settings), settings, host, 0, log_level))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the server did not start")
        time.sleep(0.01)
    try:
        yield f"http://{host}:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


__all__ = ["bind", "create_app", "make_server", "read_json", "running_server"]
