"""Console access: open on loopback, refused off loopback without a token, and with a token every
route needs it (header, or the cookie a `?token=` link sets), compared in constant time."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from agentrunner_host.console.auth import COOKIE, ConsoleAccessError, TokenGate, is_loopback, resolve_token


def test_loopback_needs_no_token_anything_else_does(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CONSOLE_T", raising=False)
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("[::1]")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3")
    assert resolve_token("127.0.0.1:8080", "CONSOLE_T") == ""
    with pytest.raises(ConsoleAccessError, match="set CONSOLE_T"):
        resolve_token("0.0.0.0:8080", "CONSOLE_T")
    monkeypatch.setenv("CONSOLE_T", "s3cret")
    assert resolve_token("0.0.0.0:8080", "CONSOLE_T") == "s3cret"


def test_every_route_needs_the_token() -> None:
    async def info(_: object) -> JSONResponse:
        return JSONResponse({"ok": True})

    app = TokenGate(Starlette(routes=[Route("/api/info", info), Route("/", info)]), "s3cret")
    client = TestClient(app, base_url="http://console")
    refused = client.get("/api/info")
    assert refused.status_code == 401 and refused.json()["error"] == "UNAUTHENTICATED"
    assert client.get("/").status_code == 401 and "needs its bearer token" in client.get("/").text
    assert client.get("/api/info", headers={"authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/api/info", headers={"authorization": "Bearer s3cret"}).json() == {"ok": True}
    link = client.get("/?token=s3cret", follow_redirects=False)
    assert link.status_code == 303 and "token" not in link.headers["location"]
    assert link.cookies.get(COOKIE) == "s3cret"
    assert client.get("/api/info").json() == {"ok": True}  # the cookie from now on
