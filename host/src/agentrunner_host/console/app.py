"""The console's HTTP surface (Starlette): the page, its static files and a small JSON + SSE API.

    GET  /                         the single-page console (chat, runs, run, runners)
    GET  /api/info                 version, instance id, agents, bindings
    GET  /api/runners              ListRunners: endpoints with health, runners with manifests
    GET  /api/runs?status=&agent=&runner=&conversation=&binding=&page_token=   ListRuns
    GET  /api/runs/watch?...       SSE: the first page of that listing whenever it changes
    GET  /api/runs/{id}            the record
    GET  /api/runs/{id}/timeline   SSE: record + timeline snapshots until the run ended
    GET  /api/runs/{id}/audit      the run's proxy-call audit records
    POST /api/runs/{id}/cancel     CancelRun
    POST /api/chat                 SSE: a message event's run, item by item
    POST /api/interactions/{id}    SSE: the run an interaction's answer starts
    GET  /api/session              how this console is accessed (sign-in on a secured host: sessions.py)

Streams answer `text/event-stream` with one `update` event per item (`backend.update_event`);
errors are JSON `{"error": REASON, "message": ...}` with the HTTP status of the gRPC code. Every
HostService call carries the caller's metadata, which the access gate in front (`sessions.SessionGate`
on a host with `auth.clients`) leaves in the request's scope.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from sse_starlette import EventSourceResponse
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from agentrunner_host.console.backend import ConsoleBackend, ConsoleError, Metadata
from agentrunner_host.console.sessions import METADATA_SCOPE_KEY

STATIC = pathlib.Path(__file__).parent / "static"
#: how often a runs-list watcher re-reads the listing
WATCH_INTERVAL = 1.0


def _error(err: ConsoleError) -> JSONResponse:
    return JSONResponse({"error": err.reason, "message": err.message}, status_code=err.status)


def _sse(events: AsyncIterator[dict[str, Any]]) -> EventSourceResponse:
    async def encoded() -> AsyncIterator[dict[str, str]]:
        try:
            async for event in events:
                yield {"event": "update", "data": json.dumps(event, ensure_ascii=False)}
        except ConsoleError as err:
            yield {"event": "update", "data": json.dumps({"type": "error", "reason": err.reason,
                                                          "message": err.message})}  # fmt: skip

    return EventSourceResponse(encoded(), ping=15, headers={"Cache-Control": "no-store"})


async def _body(request: Request) -> dict[str, Any]:
    try:
        data = await request.json()
    except ValueError:
        raise ConsoleError("INVALID_ARGUMENT", "the body must be a JSON object", 400) from None
    if not isinstance(data, dict):
        raise ConsoleError("INVALID_ARGUMENT", "the body must be a JSON object", 400)
    return data


def _md(request: Request) -> Metadata:
    """The caller's HostService metadata (its API key on a secured host; none elsewhere)."""
    return request.scope.get(METADATA_SCOPE_KEY, ())  # type: ignore[no-any-return]


def _json_route(handler: Callable[[Request], Awaitable[Any]]) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        try:
            result = await handler(request)
        except ConsoleError as err:
            return _error(err)
        return result if isinstance(result, Response) else JSONResponse(result)

    return endpoint


async def _index(_: Request) -> Response:
    return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})


class _Api:
    """The JSON + SSE endpoints, one method a route, each asking `backend` with the caller's metadata."""

    def __init__(self, backend: ConsoleBackend) -> None:
        self.backend = backend

    async def info(self, _: Request) -> Any:
        return self.backend.info()

    async def session(self, _: Request) -> Any:
        return {"auth": "open", "csrf_token": ""}  # (a secured host's gate answers this path itself)

    async def runners(self, request: Request) -> Any:
        return await self.backend.runners(_md(request))

    async def runs(self, request: Request) -> Any:
        return await self.backend.runs(dict(request.query_params), _md(request))

    async def watch(self, request: Request) -> Any:
        filters, md = dict(request.query_params), _md(request)

        async def pages() -> AsyncIterator[dict[str, Any]]:
            last = None
            while True:
                page = await self.backend.runs(filters, md)
                if page != last:
                    last = page
                    yield {"type": "runs", **page}
                await asyncio.sleep(WATCH_INTERVAL)

        return _sse(pages())

    async def run(self, request: Request) -> Any:
        return await self.backend.run(request.path_params["run_id"], _md(request))

    async def timeline(self, request: Request) -> Any:
        run_id, md = request.path_params["run_id"], _md(request)
        await self.backend.run(run_id, md)  # a run that does not exist is a 404, not an empty stream
        return _sse(self.backend.timeline(run_id, md))

    async def audit(self, request: Request) -> Any:
        run_id = request.path_params["run_id"]
        await self.backend.run(run_id, _md(request))  # only the audit of a run the caller may see
        return {"audit": await self.backend.run_audit(run_id)}

    async def cancel(self, request: Request) -> Any:
        body = await _body(request) if await request.body() else {}
        reason = str(body.get("reason") or "")
        return await self.backend.cancel(request.path_params["run_id"], reason, _md(request))

    async def chat(self, request: Request) -> Any:
        body = await _body(request)
        if not str(body.get("text") or "").strip():
            raise ConsoleError("INVALID_ARGUMENT", "text is required", 400)
        return _sse(self.backend.chat(body, _md(request)))

    async def submit(self, request: Request) -> Any:
        interaction_id, body = request.path_params["interaction_id"], await _body(request)
        return _sse(self.backend.submit(interaction_id, body, _md(request)))


def build_app(backend: ConsoleBackend) -> Starlette:
    """The console as an ASGI app (the access gate, `auth.py` / `sessions.py`, wraps it)."""
    api = _Api(backend)
    routes = [
        Route("/", _index),
        Route("/api/info", _json_route(api.info)),
        Route("/api/session", _json_route(api.session)),
        Route("/api/runners", _json_route(api.runners)),
        Route("/api/runs", _json_route(api.runs)),
        Route("/api/runs/watch", _json_route(api.watch)),
        Route("/api/runs/{run_id}", _json_route(api.run)),
        Route("/api/runs/{run_id}/timeline", _json_route(api.timeline)),
        Route("/api/runs/{run_id}/audit", _json_route(api.audit)),
        Route("/api/runs/{run_id}/cancel", _json_route(api.cancel), methods=["POST"]),
        Route("/api/chat", _json_route(api.chat), methods=["POST"]),
        Route("/api/interactions/{interaction_id}", _json_route(api.submit), methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    return Starlette(routes=routes)
