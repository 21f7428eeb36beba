"""The console server: uvicorn inside the host's event loop, on a socket bound before anything starts
(a busy port is the host's one-line start-up error), talking to the host over a private Unix socket;
HTTPS with `console.tls`. Its access gate follows `auth.console_mode`."""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import socket
import tempfile
from typing import Any

import structlog
import uvicorn

from agentrunner_host.config.model import HostConfig
from agentrunner_host.console.app import build_app
from agentrunner_host.console.auth import (
    ConsoleAccessError,
    SameOriginGuard,
    TokenGate,
    console_mode,
    resolve_token,
)
from agentrunner_host.console.backend import ConsoleBackend
from agentrunner_host.wire.transport_errors import explain_bind_failure

log = structlog.get_logger("agentrunner_host.console")


class ConsoleServer:
    """`bind()` (port and token checks, before the host starts), `start(audit)` once the host serves the
    private socket, `stop()`."""

    def __init__(self, config: HostConfig) -> None:
        assert config.console.address
        self.config = config
        self.address = config.console.address
        #: `sign-in`, `token` or `open` (raises `ConsoleAccessError` for a configuration it refuses)
        self.mode = console_mode(config)
        self.token = resolve_token(self.address, config.console.token_env) if self.mode == "token" else ""
        _check_tls(config)
        if self.mode == "sign-in" and os.environ.get(config.console.token_env):
            log.warning(
                "console.token_ignored", reason="the host has auth.clients: users sign in with API keys"
            )
        self._dir = pathlib.Path(tempfile.mkdtemp(prefix="agentrunner-console-"))
        os.chmod(self._dir, 0o700)
        #: the host's HostService for the console only (`unix:` target)
        self.host_target = f"unix:{self._dir / 'host.sock'}"
        self.sock: socket.socket | None = None
        self.port = 0
        self._server: uvicorn.Server | None = None
        self._backend: ConsoleBackend | None = None

    @property
    def url(self) -> str:
        host = self.address.rsplit(":", 1)[0].strip("[]")
        shown = "127.0.0.1" if host in ("", "0.0.0.0") else host
        if ":" in shown:
            shown = f"[{shown}]"
        scheme = "https" if self.config.console.tls else "http"
        return f"{scheme}://{shown}:{self.port}/"

    def bind(self) -> None:
        """Binds the HTTP socket; raises `ListenError` (port in use, ...)."""
        from agentrunner_host.wire.transport_errors import ListenError

        host, _, port = self.address.rpartition(":")
        host = host.strip("[]") or "0.0.0.0"
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, int(port)))
        except (OSError, ValueError) as exc:
            sock.close()
            raise ListenError(explain_bind_failure("console.address", self.address, exc)) from None
        sock.listen(128)
        sock.setblocking(False)
        self.sock = sock
        self.port = sock.getsockname()[1]

    async def start(self, audit: Any = None, gate: Any = None) -> None:
        """Serves the console; `gate` (the host's `ClientGate`) checks sign-in keys in `sign-in` mode."""
        assert self.sock is not None
        self._backend = ConsoleBackend(self.config, self.host_target, audit=audit)
        app: Any = build_app(self._backend)
        tls = self.config.console.tls
        if self.mode == "sign-in":
            from agentrunner_host.console.sessions import SessionGate

            assert gate is not None, "sign-in needs the host's client gate"
            app = SessionGate(
                app, gate, ttl=self.config.console.session_ttl_seconds, secure_cookie=tls is not None
            )
        elif self.mode == "token":
            app = TokenGate(app, self.token)
        ssl = {"ssl_certfile": str(tls.cert_file), "ssl_keyfile": str(tls.key_file)} if tls else {}
        config = uvicorn.Config(SameOriginGuard(app), log_config=None, access_log=False, lifespan="off",
                                timeout_graceful_shutdown=1, **ssl)  # type: ignore[arg-type]  # fmt: skip
        config.load()
        server = uvicorn.Server(config)
        server.lifespan = config.lifespan_class(config)
        await server.startup(sockets=[self.sock])
        self._server = server
        log.info("console.started", url=self.url, access=self.mode)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
            with contextlib.suppress(Exception):
                await self._server.shutdown(sockets=[self.sock] if self.sock else None)
            self._server = None
        if self._backend is not None:
            await self._backend.close()
        if self.sock is not None:
            self.sock.close()
        shutil.rmtree(self._dir, ignore_errors=True)


def _check_tls(config: HostConfig) -> None:
    """`console.tls` files that do not load are a one-line start-up error (not a traceback once the
    host already serves)."""
    tls = config.console.tls
    if tls is None or tls.cert_file is None or tls.key_file is None:
        return
    import ssl

    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(tls.cert_file, tls.key_file)
    except (OSError, ssl.SSLError) as exc:
        why = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or str(exc)
        raise ConsoleAccessError(
            f"console.tls: cannot load the certificate {tls.cert_file} with the key {tls.key_file}: {why}"
        ) from None
