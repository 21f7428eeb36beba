"""Sign-in to the console of a secured host (one with `auth.clients`): an API key for a session cookie.

    POST   /api/session   {"api_key": "..."}   the key is checked (`ClientGate.principal_for_key`); a
                                               session cookie (HttpOnly, SameSite=Strict, Secure over
                                               HTTPS) and the session's CSRF token come back
    GET    /api/session                        who is signed in, and the CSRF token (401 when no one)
    DELETE /api/session                        sign out

Every other `/api/` request needs the session cookie (or `Authorization: Bearer <api key>`, for
scripts); the console then calls the host as that client, with the client's key on each call, so the
host's own gate applies the client's operations and scopes. Anonymous API requests are refused (401).

Requests that change something (any method but GET / HEAD) made with the cookie must carry the
session's CSRF token in `X-CSRF-Token` and, when the browser says where they come from (`Origin`,
`Sec-Fetch-Site`), come from the console's own origin. Why both, with a SameSite=Strict cookie: SameSite
keeps the cookie off requests from other *sites*, but a sibling subdomain is the same site; the token
(read from a JSON response, which another origin cannot read) and the origin check close that, and
cover browsers that ignore SameSite. Sign-in itself needs a JSON body (a cross-site form cannot send
one without a CORS preflight, which the console never grants) and a same-origin `Origin`.

Keys live only in the memory of this process, for the session's lifetime; they are never logged, and a
refused sign-in is audited without the key.
"""

from __future__ import annotations

import dataclasses
import hmac
import secrets
import time
from collections import OrderedDict
from typing import Any

import structlog
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from agentrunner.client import ApiKey, ClientCredentialsError, checked_api_key
from agentrunner.errors import CredentialsInvalidError
from agentrunner_host.auth.clients import ClientGate, Principal
from agentrunner_host.console.auth import cross_origin

log = structlog.get_logger("agentrunner_host.console")

COOKIE = "agentrunner_session"
CSRF_HEADER = "x-csrf-token"
#: the ASGI scope key the gate leaves the caller's HostService metadata under
METADATA_SCOPE_KEY = "agentrunner.metadata"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
MAX_SESSIONS = 1000


@dataclasses.dataclass(slots=True)
class Session:
    key: ApiKey = dataclasses.field(repr=False)
    client_id: str
    operations: list[str]
    csrf: str = dataclasses.field(repr=False)
    #: `time.monotonic()` after which the session is gone
    ends: float
    #: wall-clock end, for the browser (ISO 8601)
    ends_at: str

    def view(self) -> dict[str, Any]:
        return {"client_id": self.client_id, "operations": self.operations, "csrf_token": self.csrf,
                "expires_at": self.ends_at, "auth": "api_key"}  # fmt: skip


class SessionStore:
    """Sessions by id, in memory (a host restart signs everyone out), at most `MAX_SESSIONS` (the
    oldest goes first)."""

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def create(self, key: ApiKey, principal: Principal) -> tuple[str, Session]:
        lifetime = self.ttl
        if principal.expires_at is not None:  # never past the client's own expiry
            lifetime = min(lifetime, max(0.0, principal.expires_at.timestamp() - time.time()))
        ends_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + lifetime))
        session = Session(key, principal.client_id, sorted(principal.operations), secrets.token_urlsafe(32),
                          time.monotonic() + lifetime, ends_at)  # fmt: skip
        sid = secrets.token_urlsafe(32)
        self._sessions[sid] = session
        while len(self._sessions) > MAX_SESSIONS:
            self._sessions.popitem(last=False)
        return sid, session

    def get(self, sid: str) -> Session | None:
        session = self._sessions.get(sid) if sid else None
        if session is not None and session.ends <= time.monotonic():
            del self._sessions[sid]
            return None
        return session

    def drop(self, sid: str) -> None:
        self._sessions.pop(sid, None)


def _refused(status: int, reason: str, message: str) -> JSONResponse:
    return JSONResponse({"error": reason, "message": message}, status_code=status,
                        headers={"Cache-Control": "no-store"})  # fmt: skip


class SessionGate:
    """ASGI middleware of a secured host's console: sign-in, sessions, CSRF; the caller's HostService
    metadata (its API key) goes to the app in the scope (`METADATA_SCOPE_KEY`)."""

    def __init__(self, app: Any, gate: ClientGate, *, ttl: float, secure_cookie: bool) -> None:
        self.app = app
        self.gate = gate
        self.sessions = SessionStore(ttl)
        self.secure_cookie = secure_cookie

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        path = request.url.path
        if path == "/api/session":
            await (await self._session_endpoint(request))(scope, receive, send)
            return
        if not path.startswith("/api/"):  # the page and its static files carry no data
            await self.app(scope, receive, send)
            return
        refusal, metadata = await self._admit(request)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        scope[METADATA_SCOPE_KEY] = metadata
        await self.app(scope, receive, send)

    async def _admit(self, request: Request) -> tuple[Response | None, tuple[tuple[str, str], ...]]:
        """(None, the caller's metadata) for a request that may go on; (the refusal, ()) otherwise."""
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer "):  # a script: its key on every request, no cookie
            checked = await self._check_key(request, header[7:], "the Authorization header", "Request")
            if isinstance(checked, Response):
                return checked, ()
            return None, checked[0].metadata()
        session = self.sessions.get(request.cookies.get(COOKIE, ""))
        if session is None:
            return _refused(401, "UNAUTHENTICATED", "sign in with an API key (POST /api/session)"), ()
        if request.method not in SAFE_METHODS:
            refusal = self._csrf_refusal(request, session)
            if refusal:
                return _refused(403, "CSRF_REFUSED", refusal), ()
        return None, session.key.metadata()

    @staticmethod
    def _csrf_refusal(request: Request, session: Session) -> str:
        why = cross_origin(request.headers)
        if why:
            return why
        token = request.headers.get(CSRF_HEADER, "")
        if not token or not hmac.compare_digest(token.encode(), session.csrf.encode()):
            return f"the {CSRF_HEADER} header does not carry this session's token"
        return ""

    async def _session_endpoint(self, request: Request) -> Response:
        sid = request.cookies.get(COOKIE, "")
        if request.method == "GET":
            session = self.sessions.get(sid)
            if session is None:
                return _refused(401, "UNAUTHENTICATED", "not signed in")
            return JSONResponse(session.view(), headers={"Cache-Control": "no-store"})
        if request.method == "DELETE":
            session = self.sessions.get(sid)
            if session is not None:
                refusal = self._csrf_refusal(request, session)
                if refusal:
                    return _refused(403, "CSRF_REFUSED", refusal)
                self.sessions.drop(sid)
            response: Response = JSONResponse({"signed_out": True})
            response.delete_cookie(
                COOKIE, path="/", secure=self.secure_cookie, httponly=True, samesite="strict"
            )
            return response
        if request.method != "POST":
            return _refused(
                405, "INVALID_ARGUMENT", "use POST to sign in, GET to read the session, DELETE to sign out"
            )
        return await self._sign_in(request)

    async def _sign_in(self, request: Request) -> Response:
        why = cross_origin(request.headers)
        if why:
            return _refused(403, "CSRF_REFUSED", why)
        if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
            return _refused(415, "INVALID_ARGUMENT", 'sign in with a JSON body: {"api_key": "..."}')
        try:
            body = await request.json()
        except ValueError:
            body = None
        raw = body.get("api_key") if isinstance(body, dict) else None
        if not isinstance(raw, str) or not raw.strip():
            return _refused(
                400, "INVALID_ARGUMENT", "api_key is required: the API key of one of the host's clients"
            )
        checked = await self._check_key(request, raw, "the sign-in form", "SignIn")
        if isinstance(checked, Response):
            return checked
        key, principal = checked
        sid, session = self.sessions.create(key, principal)
        log.info("console.signed_in", client=principal.client_id)
        response = JSONResponse(session.view(), headers={"Cache-Control": "no-store"})
        response.set_cookie(COOKIE, sid, max_age=max(1, round(session.ends - time.monotonic())), path="/",
                            secure=self.secure_cookie, httponly=True, samesite="strict")  # fmt: skip
        return response

    async def _check_key(
        self, request: Request, raw: str, source: str, method: str
    ) -> tuple[ApiKey, Principal] | Response:
        """The key and its client, when the client's credentials hold; else the refusal (audited as
        `Console.<method>`, without the key)."""
        try:
            key = checked_api_key(raw, source)
            principal = self.gate.principal_for_key(key.value)
        except ClientCredentialsError as exc:
            return _refused(401, "CREDENTIALS_INVALID", str(exc))
        except CredentialsInvalidError as err:
            peer = "unknown"
            if request.client:  # as gRPC writes a peer
                host, port = request.client.host, request.client.port
                peer = f"ipv6:[{host}]:{port}" if ":" in host else f"ipv4:{host}:{port}"
            await self.gate.record_refusal(_Peer(peer), method, err, client_id="", service="Console")
            return _refused(401, err.reason, err.message)
        return key, principal


@dataclasses.dataclass(frozen=True)
class _Peer:
    """What `ClientGate.record_refusal` reads of a call: its peer."""

    address: str

    def peer(self) -> str:
        return self.address

    def invocation_metadata(self) -> Any:
        return ()

    def auth_context(self) -> Any:
        return {}
