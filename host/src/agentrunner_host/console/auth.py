"""Access to the console. Three modes, picked by `console_mode`:

- `sign-in`: the host has `auth.clients`. A user signs in with one of those clients' API keys and the
  console calls the host as that client (`sessions.py`). Off loopback this needs `console.tls` (or
  `console.allow_plaintext` behind a proxy that terminates TLS): keys and session cookies must not
  cross a network in clear.
- `token`: no `auth.clients`, bound off loopback: the bearer token of `console.token_env` (`TokenGate`).
- `open`: no `auth.clients`, bound to loopback.

A browser cannot put a header on a page load or an `EventSource`, so the token is accepted three ways:
an `Authorization: Bearer` header (scripts), a cookie set by the console after a page load carrying
`?token=...` (browsers), or the login form posting it. Tokens are compared in constant time and never
logged. In every mode a request that changes something must come from the console's own page
(`SameOriginGuard`).
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import socket
from collections.abc import Mapping, MutableMapping
from typing import Any
from urllib.parse import urlsplit

from agentrunner_host.config.model import HostConfig

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


def console_mode(config: HostConfig) -> str:
    """`sign-in`, `token` or `open` (module docstring); raises `ConsoleAccessError` for a console that
    would serve sign-in over plain HTTP off loopback."""
    console = config.console
    assert console.address
    if not config.auth.clients:
        return "token" if resolve_token(console.address, console.token_env) else "open"
    host = console.address.rsplit(":", 1)[0]
    if console.tls is None and not console.allow_plaintext and not is_loopback(host):
        raise ConsoleAccessError(
            f"console.address {console.address} is not a loopback address, and signing in to the console "
            "sends an API key: configure console.tls (cert_file, key_file) to serve it over HTTPS, bind it "
            "to 127.0.0.1, or set console.allow_plaintext: true behind a proxy that terminates TLS"
        )
    return "sign-in"


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

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
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


class SameOriginGuard:
    """ASGI middleware: an API request that changes something (any method but GET / HEAD / OPTIONS)
    must come from the console's own page: a JSON body (an HTML form on another site cannot send one
    without a CORS preflight, which the console never answers), and no `Origin` / `Sec-Fetch-Site`
    saying another origin (the host part is compared: a proxy that terminates TLS changes the scheme)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] not in ("GET", "HEAD", "OPTIONS"):
            why = _cross_origin_reason(scope)
            if why:
                from starlette.responses import JSONResponse

                await JSONResponse({"error": "CSRF_REFUSED", "message": why}, 403)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def cross_origin(headers: Mapping[str, str]) -> str:
    """Why a request (its lower-case headers) does not come from the console's own origin; '' when it
    does, or the browser did not say (scripts). Only the host part of `Origin` is compared with `Host`:
    a proxy that terminates TLS changes the scheme."""
    site = headers.get("sec-fetch-site", "")
    if site in ("cross-site", "same-site"):
        return f"cross-origin request refused: the browser marked it {site}"
    origin = headers.get("origin", "")
    if origin == "null" or (origin and urlsplit(origin).netloc != headers.get("host", "")):
        return f"cross-origin request refused: its Origin {origin[:100]} is not this console"
    return ""


def _cross_origin_reason(scope: Mapping[str, Any]) -> str:
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
    why = cross_origin(headers)
    content_type = headers.get("content-type", "").split(";")[0].strip().lower()
    if not why and scope.get("path", "").startswith("/api/") and content_type not in ("", "application/json"):
        why = f"the console's API takes JSON bodies (Content-Type: application/json), not {content_type[:60]}"
    return why


_LOGIN = """<!doctype html><meta charset="utf-8"><title>AgentRunner console: sign in</title>
<form method="get" style="font:16px system-ui;margin:20vh auto;width:22em">
<h1 style="font-size:1.2em">AgentRunner console</h1>
<p>This console needs its bearer token.</p>
<input name="token" type="password" placeholder="token" autofocus style="width:100%;padding:.4em">
<button style="margin-top:.6em">Sign in</button></form>"""
