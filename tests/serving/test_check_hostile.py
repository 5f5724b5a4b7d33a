"""``serve-check`` against hostile servers (in process, through an httpx transport): a server that never ends an
episode, drips its body, answers too much, too deep or in the wrong shape is a one-line CheckError within the
check's deadlines, never a hang or a traceback."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from serving import check
from serving.check import MAX_RESPONSE_BYTES, MAX_TICKS, CheckError, check_server

SCHEMA = {"action": {"properties": {"grant": {"type": "array", "prefixItems": [{"minimum": 0, "maximum": 3}]}}}}


def _frame(done: bool = False, reward: Any = 0.0) -> dict[str, Any]:
    return {"observation": {"tick": 0, "metadata": {"session_id": "s1"}}, "reward": reward, "done": done}


def _server(**answers: Callable[[httpx.Request], Any]) -> httpx.MockTransport:
    """A fake server: ``answers[route]`` gives the JSON (or an httpx.Response) for each route; an honest default."""
    routes: dict[str, Callable[[httpx.Request], Any]] = {
        "info": lambda r: {"scenarios": [{"name": "standard"}]},
        "reset": lambda r: _frame(),
        "schema": lambda r: SCHEMA,
        "step": lambda r: _frame(done=True, reward=1.0),
        "state": lambda r: {"step_count": 1, "done": True, "returns": {"allocator": 1.0}},
        "summary": lambda r: {"references": {"oracle": 10.0, "planner": 5.0}},
        "close": lambda r: {"closed": "s1"},
    }
    routes.update(answers)

    def handle(request: httpx.Request) -> httpx.Response:
        path = request.url.path.strip("/")
        name = "summary" if path.endswith("summary") else path
        answer = routes[name](request)
        return answer if isinstance(answer, httpx.Response) else httpx.Response(200, json=answer)

    return httpx.MockTransport(handle)


def test_an_honest_fake_server_is_checked():
    results = check_server("http://fake", seed=1, transport=_server())
    assert [r.scenario for r in results] == ["standard"] and results[0].references["oracle"] == 10.0


def test_a_server_that_never_ends_an_episode(monkeypatch):
    monkeypatch.setattr(check, "MAX_TICKS", 50)
    with pytest.raises(CheckError, match="did not end the episode .* after 50 steps"):
        check_server("http://fake", transport=_server(step=lambda r: _frame(done=False)))
    assert MAX_TICKS == 1_000  # the real cap: the longest episode a scenario may have


class _Drip(httpx.SyncByteStream):
    def __iter__(self) -> Iterator[bytes]:
        yield b'{"scenarios": ['
        while True:
            time.sleep(0.05)
            yield b" "


def test_a_server_that_drips_its_body_hits_the_whole_request_deadline():
    started = time.monotonic()
    with pytest.raises(CheckError, match=r"no complete answer within 0\.3 s"):  # a byte every 0.05 s: 6 in time
        check_server("http://fake", timeout=0.3, transport=_server(info=lambda r: httpx.Response(200, stream=_Drip())))
    assert time.monotonic() - started < 5


def test_the_whole_check_has_a_budget():
    def slow_step(request):
        time.sleep(0.05)
        return _frame(done=False)

    started = time.monotonic()
    with pytest.raises(CheckError, match="over its time budget"):
        check_server("http://fake", timeout=1.0, budget=0.2, transport=_server(step=slow_step))  # either deadline word
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(("route", "answer", "match"), [
    ("info", lambda r: httpx.Response(200, content=b"x" * (MAX_RESPONSE_BYTES + 10)), "over 8388608 bytes"),
    ("info", lambda r: httpx.Response(200, content=b"[" * 5000 + b"]" * 5000), "nests deeper than 32"),
    ("info", lambda r: httpx.Response(200, content=b'{"scenarios": NaN}'), "not JSON"),
    ("info", lambda r: {"scenarios": [{"name": str(i)} for i in range(1_001)]}, "over the 1000 a check plays"),
    ("info", lambda r: {"scenarios": "standard"}, "/info.scenarios must be list"),
    ("info", lambda r: {"scenarios": [{"name": 5}]}, "name must be str"),
    ("reset", lambda r: {"observation": [], "done": False}, "/reset.observation must be dict"),
    ("reset", lambda r: {"observation": {"metadata": {}}, "done": False}, "session_id must be str"),
    ("step", lambda r: _frame(done=True, reward="1"), "/step.reward must be a number"),
    ("step", lambda r: _frame(done="yes"), "/step.done must be bool"),
    ("step", lambda r: httpx.Response(500, text="boom" * 1000), "HTTP 500"),
    ("schema", lambda r: {"action": {"properties": {"g": {"minimum": 5, "maximum": 1}}}}, r"has bounds \[5, 1\]"),
    ("schema", lambda r: {"action": {"properties": {"g": {"type": "array", "prefixItems": [{}] * 5_000}}}},
     "more than 4096 entries"),
    ("schema", lambda r: {"action": {"properties": {"g": {"minimum": 0, "maximum": 1e300}}}}, "has bounds"),
    ("state", lambda r: {"step_count": True, "done": True, "returns": {"allocator": 1.0}}, "step_count must be int"),
    ("summary", lambda r: {"references": {"planner": 5.0}}, "references.oracle must be a number"),
    ("summary", lambda r: {"references": {"oracle": 1.0, "x": [1]}}, "references.x must be a number"),
])
def test_an_answer_of_the_wrong_shape_is_one_line(route, answer, match):
    with pytest.raises(CheckError, match=match) as err:
        check_server("http://fake", timeout=5.0, transport=_server(**{route: answer}))
    assert "\n" not in str(err.value) and len(str(err.value)) < 600


JSONISH = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                       | st.text(max_size=5),
                       lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                       max_leaves=10)


@settings(max_examples=150, deadline=None)
@given(route=st.sampled_from(["info", "reset", "schema", "step", "state", "summary"]), answer=JSONISH)
def test_any_answer_is_checked_or_a_check_error(route, answer):
    """A property over every route: whatever JSON the server sends, the checker finishes or says CheckError."""
    try:
        check_server("http://fake", timeout=5.0, transport=_server(**{route: lambda r: answer}))
    except CheckError as err:
        assert "\n" not in str(err)


def test_the_command_words_a_hostile_server_in_one_line(monkeypatch, capsys):
    from commands.cli import main

    real = check.check_server
    monkeypatch.setattr(check, "check_server",
                        lambda *a, **k: real(*a, **k, transport=_server(step=lambda r: _frame(done="no"))))
    with pytest.raises(SystemExit) as exit_info:
        main(["serve-check", "--url", "http://fake", "--timeout", "5"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and "/step.done must be bool" in err
    assert json.dumps  # (the module's json import is used by the fake server's answers)


def test_headers_dripped_a_byte_at_a_time_run_into_the_one_deadline():
    """Issue 52: httpx's timeouts are per read, so a server dripping its headers ran past 90 s with --timeout 5;
    one deadline covers the whole request, headers included (a real socket: the fake transports have none)."""
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def drip() -> None:
        conn, _ = server.accept()
        with conn:
            for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 2000:  # 100 s at this pace
                if stop.is_set():
                    return
                try:
                    conn.sendall(bytes([byte]))
                except OSError:
                    return
                time.sleep(0.05)

    thread = threading.Thread(target=drip, daemon=True)
    thread.start()
    started = time.monotonic()
    try:
        with pytest.raises(CheckError, match=r"GET /info: no complete answer within 0\.3 s"):
            check_server(f"http://127.0.0.1:{server.getsockname()[1]}", timeout=0.3)
        assert time.monotonic() - started < 4
    finally:
        stop.set()
        server.close()
        thread.join(timeout=5)
