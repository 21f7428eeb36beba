"""The console server: uvicorn inside the host's event loop, on a socket bound before anything starts
(a busy port is the host's one-line start-up error), talking to the host over a private Unix socket."""

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
from agentrunner_host.console.auth import resolve_token
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
        self.token = resolve_token(self.address, config.console.token_env)
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
        return f"http://{shown}:{self.port}/"

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

    async def start(self, audit: Any = None) -> None:
        assert self.sock is not None
        self._backend = ConsoleBackend(self.config, self.host_target, audit=audit)
        config = uvicorn.Config(build_app(self._backend, self.token), log_config=None, access_log=False,
                                lifespan="off", timeout_graceful_shutdown=1)  # fmt: skip
        config.load()
        server = uvicorn.Server(config)
        server.lifespan = config.lifespan_class(config)
        await server.startup(sockets=[self.sock])
        self._server = server
        log.info("console.started", url=self.url, token_required=bool(self.token))

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
