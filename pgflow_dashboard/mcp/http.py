"""Streamable HTTP from a Django view: the SDK's transport in stateless JSON-response mode.

Why this shape: the project is WSGI, with no event loop living between requests, so no
MCP session can outlive a request. In the SDK's stateless mode every POST carries a whole
exchange and its JSON answer, so the view needs no state: it authenticates the bearer
token, builds the server for that token's user, and hands the request to a fresh
``StreamableHTTPSessionManager`` as an ASGI call inside ``async_to_sync`` (which lets the
tools' ORM work run back in this request's thread and connection). An ASGI deployment
runs the same view.

No token, or one that is unknown, revoked or whose user is inactive: 401 with an empty
body, so a caller learns nothing about which.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

import anyio
from asgiref.sync import async_to_sync
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from . import tokens
from .server import Principal, build

MAX_BODY = 4 * 1024 * 1024  # bytes of one MCP request


@csrf_exempt
def endpoint(request: HttpRequest) -> HttpResponse:
    token = _token(request)
    if token is None:
        response = HttpResponse(status=401)
        response["WWW-Authenticate"] = "Bearer"
        return response
    # No GET: it opens the stream of server-sent messages, which a stateless exchange never
    # ends, holding a worker of the site for ever. MCP's answer for a server without one is 405.
    if request.method not in ("POST", "DELETE"):
        return HttpResponse(status=405, headers={"Allow": "POST, DELETE"})
    server = build(Principal(user_id=token.user_id, token_name=token.name))
    status, headers, body = async_to_sync(_serve)(server, _scope(request), request.body)
    response = HttpResponse(body, status=status)
    for name, value in headers:
        if name.lower() not in ("content-length", "transfer-encoding", "connection"):
            response[name] = value
    return response


def _token(request: HttpRequest) -> Any:
    scheme, _, secret = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        return None
    return tokens.authenticate(secret.strip())


def _scope(request: HttpRequest) -> dict[str, Any]:
    host = request.get_host()
    server_name, _, port = host.partition(":")
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.path.encode(),
        "query_string": request.META.get("QUERY_STRING", "").encode(),
        "root_path": "",
        "headers": [
            (name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in request.headers.items()
        ],
        "server": (server_name, int(port) if port.isdigit() else 80),
        "client": (request.META.get("REMOTE_ADDR", ""), 0),
    }


async def _serve(server: Any, scope: dict[str, Any], body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
    manager = StreamableHTTPSessionManager(app=server._lowlevel_server, json_response=True, stateless=True)
    sent = False
    done = anyio.Event()
    status = 500
    headers: list[tuple[str, str]] = []
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()  # the client stays connected until the whole answer is written
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
            headers.extend((k.decode("latin-1"), v.decode("latin-1")) for k, v in message.get("headers", []))
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                done.set()

    async with manager.run():
        await manager.handle_request(scope, receive, send)
    done.set()
    return status, headers, b"".join(chunks)
