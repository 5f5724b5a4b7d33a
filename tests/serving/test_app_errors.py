"""Every answer of the app in its own shape (issue 52, item 8): the router's refusals (a path
no route has, a method a route does not take), ``/openapi.json``, text no UTF-8 writer can
encode, and ``/mcp``'s parse errors and media types. In process (``TestClient``): no port."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from serving.app import create_app

pytestmark = [pytest.mark.slow, pytest.mark.server]  # the app and the MCP SDK (~2 s to import)

MCP_HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(), raise_server_exceptions=False) as client:
        yield client


def project_error(response) -> dict:
    body = response.json()
    assert set(body) == {"detail", "error"} and body["detail"] == body["error"]["message"], body
    return body["error"]


@pytest.mark.parametrize(("method", "path", "allow"), [
    ("POST", "/openapi.json", "GET, HEAD"), ("PUT", "/openapi.json", "GET, HEAD"), ("DELETE", "/health", "GET"),
    ("GET", "/reset", "POST"), ("PATCH", "/step", "POST"), ("POST", "/sessions/x/summary", "GET"),
])
def test_a_method_a_route_does_not_take_is_a_405_in_the_project_shape(client, method, path, allow):
    response = client.request(method, path)
    assert response.status_code == 405 and response.headers["allow"] == allow
    error = project_error(response)
    assert error["code"] == "METHOD_NOT_ALLOWED" and error["allowed"] == allow.split(", ")
    assert error["message"] == f"{method} {path}: this route takes {allow}"


@pytest.mark.parametrize("path", ["/nope", "/docs", "/redoc", "/%2e%2e/etc/passwd", "/x" * 500])
def test_a_path_no_route_has_is_a_404_in_the_project_shape(client, path):
    response = client.get(path)
    assert response.status_code == 404
    error = project_error(response)
    assert error["code"] == "NOT_FOUND" and "GET /openapi.json" in error["message"]
    assert len(error["message"]) < 200  # the path is echoed short


def test_openapi_documents_the_errors_the_server_sends(client):
    schema = client.get("/openapi.json").json()
    text = json.dumps(schema)
    assert "HTTPValidationError" not in text and "ValidationError" not in text  # FastAPI's 422 shape: never sent
    assert schema["components"]["schemas"]["Error"]["required"] == ["detail", "error"]
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            assert "422" not in operation["responses"], (method, path)
            assert operation["responses"]["4XX"]["content"]["application/json"]["schema"] == {
                "$ref": "#/components/schemas/Error"}, (method, path)
    assert not any(word in text for word in ("/work/", "site-packages", "Traceback"))  # no internals


@pytest.mark.parametrize("body", [rb'{"episode_id": "\ud800"}', rb'{"session_id": "\udfff"}'])
def test_a_lone_surrogate_in_a_body_is_a_400_not_a_500(client, body):
    response = client.post("/reset", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text  # was 500 INTERNAL (UnicodeEncodeError)
    assert project_error(response)["code"] == "INVALID_JSON"
    assert "not valid JSON: not valid JSON" not in response.text  # said once
    assert client.get("/info").json()["sessions"] == 0
    step = client.post("/step", content=rb'{"session_id": "\ud800", "action": 0}')
    assert step.status_code == 400 and project_error(step)["code"] == "INVALID_JSON"
    with client.websocket_connect("/ws") as ws:
        ws.send_text(r'{"type": "reset", "data": {"episode_id": "\ud800"}}')
        frame = json.loads(ws.receive_text())
        assert frame["type"] == "error" and frame["data"]["code"] == "INVALID_JSON"


@pytest.mark.parametrize("body", [b'{"jsonrpc": "2.0", "id": NaN, "method": "ping"}', b'{"jsonrpc": "2.0", "id": 1e400}',
                                  rb'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"x": "\ud800"}}',
                                  b'', b'{"a": "\xff"}'])
def test_an_mcp_body_that_is_not_strict_json_is_a_jsonrpc_parse_error(client, body):
    response = client.post("/mcp", content=body, headers=MCP_HEADERS)
    assert response.status_code == 400, response.text  # NaN was taken by the SDK's parser: a notification, 202
    assert response.json()["error"]["code"] == -32700 and response.json()["id"] is None


@pytest.mark.parametrize("content_type", ["APPLICATION/JSON", "Application/Json; charset=utf-8"])
def test_an_mcp_media_type_in_any_case_is_json(client, content_type):
    response = client.post("/mcp", json=INITIALIZE, headers={**MCP_HEADERS, "content-type": content_type})
    assert response.status_code == 200 and "result" in response.json(), response.text  # was the SDK's 415


@pytest.mark.parametrize(("content_type", "status"), [
    # what a browser sends cross-site without asking first: refused, so another page cannot drive the server
    ("text/plain;charset=UTF-8", 415), ("application/x-www-form-urlencoded", 415), ("multipart/form-data; b=x", 415),
    ("application/xml", 415),
    ("application/json", 200), ("APPLICATION/JSON; charset=utf-8", 200), ("application/merge-patch+json", 200),
    (None, 200),  # a script's bare POST
])
def test_a_body_declared_as_anything_but_json_is_refused(client, content_type, status):
    headers = {} if content_type is None else {"content-type": content_type}
    response = client.post("/reset", content=b'{"seed": 3}', headers=headers)
    assert response.status_code == status, response.text
    if status == 415:
        error = project_error(response)
        assert error["code"] == "UNSUPPORTED_MEDIA_TYPE" and "application/json" in error["message"]
    else:
        client.post("/close", json={"session_id": response.json()["observation"]["metadata"]["session_id"]})
