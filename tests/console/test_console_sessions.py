"""Console access on a secured host (`auth.clients`): sign-in with an API key for a session cookie, the
caller's key on the console's HostService calls, anonymous API requests refused, and the CSRF rules
(token header, same origin, JSON bodies); plus when the host refuses to serve such a console at all.
The gate is driven over HTTP by Starlette's test client; the host's own `ClientGate` checks the keys."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from agentrunner_host.auth.clients import ClientGate, key_digest
from agentrunner_host.config.model import HostConfig, parse_config
from agentrunner_host.console.auth import ConsoleAccessError, SameOriginGuard, console_mode
from agentrunner_host.console.sessions import COOKIE, METADATA_SCOPE_KEY, SessionGate

KEY, OTHER, OLD = "arh_console-user-0123456789", "arh_not-a-client-0123456789", "arh_expired-0123456789"
BASE = "https://console.test"


def _config(**console: Any) -> HostConfig:
    return parse_config({
        "console": {"address": "127.0.0.1:8443", **console},
        "auth": {"clients": [
            {"id": "alice", "api_key_sha256": [key_digest(KEY)], "operations": ["get", "list_runs"]},
            {"id": "old", "api_key_sha256": [key_digest(OLD)], "expires_at": "2001-01-01T00:00:00Z"},
        ]},
    })  # fmt: skip


def _client(ttl: float = 3600, secure: bool = True) -> TestClient:
    async def echo(request: Request) -> JSONResponse:
        return JSONResponse({"metadata": [list(m) for m in request.scope.get(METADATA_SCOPE_KEY, ())]})

    app = Starlette(routes=[Route("/api/echo", echo, methods=["GET", "POST"]), Route("/", echo)])
    gate = ClientGate(_config(), None, listen_address="127.0.0.1:0")
    return TestClient(SameOriginGuard(SessionGate(app, gate, ttl=ttl, secure_cookie=secure)), base_url=BASE)


def _sign_in(client: TestClient, key: str = KEY, **headers: str) -> Any:
    return client.post("/api/session", json={"api_key": key}, headers={"origin": BASE, **headers})


def test_sign_in_gives_an_httponly_strict_cookie_and_the_calls_carry_the_key() -> None:
    client = _client()
    assert client.get("/api/echo").status_code == 401  # anonymous: refused
    assert client.get("/").status_code == 200  # the page itself carries no data
    refused = _sign_in(client, OTHER)
    assert refused.status_code == 401 and refused.json()["error"] == "CREDENTIALS_INVALID"
    assert "not valid on this host" in refused.json()["message"] and COOKIE not in refused.cookies
    expired = _sign_in(client, OLD)
    assert expired.status_code == 401 and "expired" in expired.json()["message"]
    signed = _sign_in(client)
    assert signed.status_code == 200
    body = signed.json()
    assert body["client_id"] == "alice" and body["operations"] == ["get", "list_runs"] and body["csrf_token"]
    cookie = signed.headers["set-cookie"]
    for attribute in ("HttpOnly", "SameSite=strict", "Secure", "Path=/", "Max-Age=3600"):
        assert attribute in cookie, cookie
    assert KEY not in cookie and KEY not in signed.text
    assert client.get("/api/echo").json() == {"metadata": [["authorization", f"Bearer {KEY}"]]}
    assert client.get("/api/session").json()["client_id"] == "alice"


def test_state_changing_requests_need_the_token_and_the_same_origin() -> None:
    client = _client()
    token = _sign_in(client).json()["csrf_token"]
    same = {"origin": BASE, "x-csrf-token": token}
    assert client.post("/api/echo", json={}, headers=same).status_code == 200
    for headers, why in (
        ({"origin": BASE}, "x-csrf-token"),  # no token
        ({"origin": BASE, "x-csrf-token": "forged"}, "x-csrf-token"),
        ({"origin": "https://evil.test", "x-csrf-token": token}, "is not this console"),
        ({"origin": "https://sub.console.test", "x-csrf-token": token}, "is not this console"),  # same site
        ({"sec-fetch-site": "same-site", "x-csrf-token": token}, "same-site"),
        ({"origin": "null", "x-csrf-token": token}, "is not this console"),
    ):
        refused = client.post("/api/echo", json={}, headers=headers)
        assert refused.status_code == 403 and refused.json()["error"] == "CSRF_REFUSED", headers
        assert why in refused.json()["message"], (headers, refused.json())
    # a cross-site HTML form can only send form encodings and text/plain: refused before any gate
    form = client.post("/api/echo", content=b'{"text":"x"}', headers={**same, "content-type": "text/plain"})
    assert form.status_code == 403 and "JSON bodies" in form.json()["message"]


def test_scripts_use_the_key_itself_and_sign_in_needs_json_from_the_same_origin() -> None:
    client = _client()
    bearer = {"authorization": f"Bearer {KEY}"}
    assert client.post("/api/echo", json={}, headers=bearer).json()["metadata"] == [
        ["authorization", f"Bearer {KEY}"]
    ]
    wrong = client.get("/api/echo", headers={"authorization": f"Bearer {OTHER}"})
    assert wrong.status_code == 401 and wrong.json()["error"] == "CREDENTIALS_INVALID"
    forged = _sign_in(client, origin="https://evil.test")
    assert forged.status_code == 403 and COOKIE not in forged.cookies
    as_form = client.post("/api/session", data={"api_key": KEY}, headers={"origin": BASE})
    assert as_form.status_code == 403  # a form encoding: refused by the origin guard
    missing = client.post("/api/session", json={}, headers={"origin": BASE})
    assert missing.status_code == 400 and "api_key is required" in missing.json()["message"]


def test_sessions_end_on_sign_out_and_after_their_lifetime() -> None:
    client = _client()
    token = _sign_in(client).json()["csrf_token"]
    assert (
        client.delete("/api/session", headers={"origin": BASE}).status_code == 403
    )  # sign-out needs the token
    assert client.delete("/api/session", headers={"origin": BASE, "x-csrf-token": token}).status_code == 200
    assert client.get("/api/echo").status_code == 401
    short = _client(ttl=0.001, secure=False)
    signed = _sign_in(short)
    assert "Secure" not in signed.headers["set-cookie"]  # plain HTTP on loopback: no Secure attribute
    import time

    time.sleep(0.01)
    assert short.get("/api/echo").status_code == 401


def test_a_secured_console_off_loopback_needs_https(tmp_path: pathlib.Path) -> None:
    exposed = _config(address="0.0.0.0:8443")
    with pytest.raises(ConsoleAccessError, match=r"configure console\.tls .* bind it to 127\.0\.0\.1"):
        console_mode(exposed)
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    assert (
        console_mode(_config(address="0.0.0.0:8443", tls={"cert_file": str(cert), "key_file": str(key)}))
        == "sign-in"
    )
    assert console_mode(_config(address="0.0.0.0:8443", allow_plaintext=True)) == "sign-in"
    assert console_mode(_config()) == "sign-in"  # loopback: sign-in all the same (auth.clients)
    open_host = parse_config({"console": {"address": "127.0.0.1:8080"}})
    assert console_mode(open_host) == "open"


def test_console_tls_files_that_do_not_load_are_a_start_up_error(tmp_path: pathlib.Path) -> None:
    from agentrunner_host.console.server import ConsoleServer

    config = _config(tls={"cert_file": str(tmp_path / "missing.pem"), "key_file": str(tmp_path / "k.pem")})
    with pytest.raises(ConsoleAccessError, match=r"console\.tls: cannot load the certificate .*missing\.pem"):
        ConsoleServer(config)
