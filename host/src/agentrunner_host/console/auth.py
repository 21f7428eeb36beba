"""Access to the console: open on loopback, a bearer token everywhere else (the one place it is checked).

A browser cannot put a header on a page load or an `EventSource`, so the token is accepted three ways:
an `Authorization: Bearer` header (scripts), a cookie set by the console after a page load carrying
`?token=...` (browsers), or the login form posting it. Tokens are compared in constant time and never
logged.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import socket
from typing import Any

COOKIE = "agentrunner_console"


class ConsoleAccessError(ValueError):
    """The console cannot be served as configured (e.g. not loopback and no token)."""


def is_loopback(host: str) -> bool:
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        try:
            return all(ipaddress.ip_address(a[4][0]).is_loopback for a in socket.getaddrinfo(host, None))
        except OSError:
            return False


def resolve_token(address: str, token_env: str) -> str:
    """The token the console requires ('' for none); refuses a non-loopback address without one."""
    token = os.environ.get(token_env, "")
    host = address.rsplit(":", 1)[0]
    if not token and not is_loopback(host):
        raise ConsoleAccessError(
            f"console.address {address} is not a loopback address: set {token_env} to a bearer token "
            "(or bind the console to 127.0.0.1)"
        )
    return token


class TokenGate:
    """ASGI middleware: every request needs the token when one is set (the login page excepted)."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.token = token.encode()

    def _matches(self, value: str) -> bool:
        return bool(value) and hmac.compare_digest(value.encode(), self.token)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not self.token:
            await self.app(scope, receive, send)
            return
        from starlette.requests import Request
        from starlette.responses import JSONResponse, RedirectResponse

        request = Request(scope)
        header = request.headers.get("authorization", "")
        bearer = header[7:] if header.lower().startswith("bearer ") else ""
        query = request.query_params.get("token", "")
        if self._matches(bearer) or self._matches(request.cookies.get(COOKIE, "")):
            await self.app(scope, receive, send)
            return
        if self._matches(query) and request.method == "GET":
            # a link with the token: set the cookie and drop the token from the address bar
            response = RedirectResponse(request.url.remove_query_params("token"), status_code=303)
            response.set_cookie(COOKIE, self.token.decode(), httponly=True, samesite="strict")
            await response(scope, receive, send)
            return
        if request.url.path.startswith("/api/"):
            await JSONResponse({"error": "UNAUTHENTICATED", "message": "a bearer token is required"}, 401)(
                scope, receive, send
            )
            return
        from starlette.responses import HTMLResponse

        await HTMLResponse(_LOGIN, status_code=401)(scope, receive, send)


_LOGIN = """<!doctype html><meta charset="utf-8"><title>AgentRunner console: sign in</title>
<form method="get" style="font:16px system-ui;margin:20vh auto;width:22em">
<h1 style="font-size:1.2em">AgentRunner console</h1>
<p>This console needs its bearer token.</p>
<input name="token" type="password" placeholder="token" autofocus style="width:100%;padding:.4em">
<button style="margin-top:.6em">Sign in</button></form>"""
