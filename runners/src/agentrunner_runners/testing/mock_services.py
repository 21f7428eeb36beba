"""One mock server for every external service the official runners front, each under its own path
prefix: `/dify/v1/...`, `/n8n/webhook/...`, `/langflow/api/v1/...`, `/coze/...`, `/dashscope/api/v1/...`,
`/tbox/api/...`. Admin: `GET /_admin/requests` (every request recorded, with whether the client
disconnected before the body was complete), `POST /_admin/reset`.

In a test: `async with MockServices() as mock: base = mock.url("/dify/v1")`. As a process:
`python -m agentrunner_runners.testing.mock_services --port 0` prints `MOCK_SERVICES_LISTENING <port>`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import sys
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from agentrunner_runners.testing.coze_mock import CozeMock
from agentrunner_runners.testing.dashscope_mock import DashScopeMock
from agentrunner_runners.testing.dify_mock import DifyMock
from agentrunner_runners.testing.langflow_mock import LangflowMock
from agentrunner_runners.testing.mockkit import Recorded, Recorder
from agentrunner_runners.testing.n8n_mock import N8nMock
from agentrunner_runners.testing.tbox_mock import TboxMock

READY = "MOCK_SERVICES_LISTENING"


def build_app(recorder: Recorder) -> Starlette:
    mocks: list[Any] = [
        DifyMock(recorder),
        N8nMock(recorder),
        LangflowMock(recorder),
        CozeMock(recorder),
        DashScopeMock(recorder),
        TboxMock(recorder),
    ]

    async def requests(_: Request) -> JSONResponse:
        return JSONResponse([r.to_json() for r in recorder.requests])

    async def reset(_: Request) -> JSONResponse:
        recorder.requests.clear()
        return JSONResponse({"ok": True})

    routes = [Route("/_admin/requests", requests), Route("/_admin/reset", reset, methods=["POST"])]
    for mock in mocks:
        routes.extend(mock.routes())
    return Starlette(routes=routes)


class MockServices:
    """The mock served by uvicorn inside the current event loop, on a free loopback port."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.recorder = Recorder()
        self._host, self._port = host, port
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None
        self.port = 0

    def url(self, path: str = "") -> str:
        return f"http://{self._host}:{self.port}{path}"

    @property
    def requests(self) -> list[Recorded]:
        return self.recorder.requests

    def of(self, service: str) -> list[Recorded]:
        return [r for r in self.recorder.requests if r.service == service]

    async def start(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((self._host, self._port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            build_app(self.recorder), log_level="critical", lifespan="off", timeout_graceful_shutdown=1
        )
        self._server = uvicorn.Server(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        if self._server and self._task:
            self._server.should_exit = True
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(self._task, 5)

    async def __aenter__(self) -> MockServices:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


async def _main(port: int) -> None:
    server = MockServices(port=port)
    await server.start()
    print(f"{READY} {server.port}", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    """`python -m agentrunner_runners.testing.mock_services --port 0`: serve until killed."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(args.port))
    sys.exit(0)


if __name__ == "__main__":
    main()
