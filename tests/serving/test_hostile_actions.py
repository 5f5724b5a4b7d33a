"""No parser off the leash: every JSON or text action on every transport (an HTTP body, a WebSocket
message, an MCP tool argument, a JSON object sent as an MCP *string*) goes through one length check
and the one depth-limited parse, and is answered with a named error, never a bare one.

In process (the MCP tools through the SDK server's ``call_tool``, the HTTP and WebSocket parsers
directly): quick enough for the fast loop; tests/serving/test_app_hostile.py drives a real server.
"""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp.server.mcpserver.exceptions import ToolError

from commons_arena.inputs import MAX_DEPTH
from serving.app import _handle_message, loads
from serving.briefing import MAX_TEXT_CHARS
from serving.mcp_seat import MAX_ERROR_CHARS, build_mcp
from serving.session import ServeError, ServeSettings, SessionStore


def _deep(n: int, opener: str = "[") -> str:
    closer = {"[": "]", "{": "}"}[opener]
    return '{"request": ' + opener * n + closer * n + "}"


HOSTILE = st.one_of(
    st.text(max_size=300),
    st.builds(_deep, st.integers(MAX_DEPTH - 2, 3_000)),
    st.builds(lambda n: "{" * n, st.integers(1, 5_000)),
    st.builds(lambda n: '{"request": "' + "x" * n + '"}', st.integers(MAX_TEXT_CHARS - 20, MAX_TEXT_CHARS + 50)),
    st.builds(lambda n: '{"request": {"small": ' + "9" * n + "}}", st.integers(1, 5_000)),
    st.sampled_from(['{"request": NaN}', '{"request": 1e999}', '{"a": Infinity}', "{\ud800}", '{"request": {"small": 2}}',
                     "{}", "{" + '"a": 1, ' * 2000 + '"b": 2}']),
)


@pytest.fixture(scope="module")
def mcp():
    settings_ = ServeSettings()
    return build_mcp(settings_, SessionStore(settings_))


def _call(server, tool, **arguments):
    """(is an error, text): a refused call's text is the tool's own message (the SDK prefixes "Error executing
    tool <name>: " to it over the wire; in process it raises ``ToolError``)."""
    try:
        result = asyncio.run(server.call_tool(tool, arguments))
    except ToolError as err:
        return True, re.sub(r"^Error executing tool \w+: ", "", str(err))
    return result.is_error, result.content[0].text


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(action=HOSTILE)
def test_mcp_act_and_preview_answer_any_string_with_a_named_error_or_a_tick(mcp, action):
    error, text = _call(mcp, "start_episode", seat="search", seed=3)
    sid = json.loads(text)["session_id"]
    try:
        for tool in ("preview", "act"):
            error, text = _call(mcp, tool, session_id=sid, action=action)
            assert "Traceback" not in text, text[:300]
            if error:  # a named error (CODE: what to fix), never a bare exception's text, within the cap
                assert re.match(r"^[A-Z][A-Z_]+: ", text), text[:300]
                assert len(text) <= MAX_ERROR_CHARS + 400, len(text)  # the documented cap, plus the advice
    finally:
        _call(mcp, "end_episode", session_id=sid)


def test_a_deep_json_string_action_is_refused_in_one_sentence(mcp):
    """Issue 44: 2.4 KB of nested brackets sent as a JSON *string* was parsed with no depth limit."""
    _, text = _call(mcp, "start_episode", seat="search", seed=3)
    sid = json.loads(text)["session_id"]
    error, text = _call(mcp, "act", session_id=sid, action=_deep(1_200))
    assert error and f"nests deeper than {MAX_DEPTH} levels" in text and "call act again" in text
    error, text = _call(mcp, "act", session_id=sid, action="{" + "x" * (MAX_TEXT_CHARS + 1))
    assert error and f"over the limit of {MAX_TEXT_CHARS}" in text
    error, text = _call(mcp, "episode_state", session_id=sid)
    assert json.loads(text)["step_count"] == 0  # nothing was played
    _call(mcp, "end_episode", session_id=sid)


@settings(max_examples=300, deadline=None)
@given(raw=st.one_of(HOSTILE, st.binary(max_size=200)))
def test_an_http_body_is_data_or_a_400(raw):
    try:
        loads(raw)
    except ServeError as err:
        assert err.status == 400 and err.code in ("INVALID_JSON", "TOO_DEEP")


@settings(max_examples=300, deadline=None)
@given(raw=HOSTILE)
def test_a_websocket_message_is_handled_or_a_named_error(raw):
    store = SessionStore(ServeSettings())
    session = store.open("ws")
    try:
        for text in (raw, json.dumps({"type": "step", "data": raw}), json.dumps({"type": "reset", "data": raw})):
            try:
                _handle_message(text, session, 64 * 1024)
            except ServeError as err:
                assert 400 <= err.status < 500
    finally:
        store.close(session.id)


def test_an_unforeseen_error_in_a_tool_is_named_and_its_log_capped(mcp, monkeypatch, caplog):
    """Issue 44: 13 KB of traceback were logged per bare "Error executing tool" against the 4,000-character cap."""
    from serving.session import MAX_LOG_CHARS, Session

    _, text = _call(mcp, "start_episode", seat="search", seed=3)
    sid = json.loads(text)["session_id"]

    def deep(n: int) -> None:
        if n:
            deep(n - 1)
        raise RuntimeError("x" * 20_000)

    monkeypatch.setattr(Session, "step", lambda self, action: deep(200))
    with caplog.at_level("ERROR", logger="commons_arena.serve"):
        error, text = _call(mcp, "act", session_id=sid, action={})
    assert error and text.startswith("INTERNAL: the server failed on this request (RuntimeError)")
    logged = [r.getMessage() for r in caplog.records if r.name == "commons_arena.serve"]
    assert len(logged) == 1 and len(logged[0]) <= MAX_LOG_CHARS + 200
    _call(mcp, "end_episode", session_id=sid)


def test_the_guarded_tools_keep_their_argument_schemas(mcp):
    tools = {t.name: t for t in asyncio.run(mcp.list_tools())}
    seat = tools["start_episode"].input_schema["properties"]["seat"]
    assert seat["description"] and "allocator" in seat["enum"]
    assert set(tools["act"].input_schema["properties"]) == {"session_id", "action"}
