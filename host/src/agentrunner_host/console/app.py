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


def build_app(backend: ConsoleBackend) -> Starlette:
    """The console as an ASGI app (the access gate, `auth.py` / `sessions.py`, wraps it)."""

    async def index(_: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})

    async def info(_: Request) -> Any:
        return backend.info()

    async def session(_: Request) -> Any:
        return {"auth": "open", "csrf_token": ""}  # (a secured host's gate answers this path itself)

    async def runners(request: Request) -> Any:
        return await backend.runners(_md(request))

    async def runs(request: Request) -> Any:
        return await backend.runs(dict(request.query_params), _md(request))

    async def watch(request: Request) -> Any:
        filters, md = dict(request.query_params), _md(request)

        async def pages() -> AsyncIterator[dict[str, Any]]:
            last = None
            while True:
                page = await backend.runs(filters, md)
                if page != last:
                    last = page
                    yield {"type": "runs", **page}
                await asyncio.sleep(WATCH_INTERVAL)

        return _sse(pages())

    async def run(request: Request) -> Any:
        return await backend.run(request.path_params["run_id"], _md(request))

    async def timeline(request: Request) -> Any:
        run_id, md = request.path_params["run_id"], _md(request)
        await backend.run(run_id, md)  # a run that does not exist is a 404, not an empty stream
        return _sse(backend.timeline(run_id, md))

    async def audit(request: Request) -> Any:
        run_id = request.path_params["run_id"]
        await backend.run(run_id, _md(request))  # only the audit of a run the caller may see
        return {"audit": await backend.run_audit(run_id)}

    async def cancel(request: Request) -> Any:
        body = await _body(request) if await request.body() else {}
        reason = str(body.get("reason") or "")
        return await backend.cancel(request.path_params["run_id"], reason, _md(request))

    async def chat(request: Request) -> Any:
        body = await _body(request)
        if not str(body.get("text") or "").strip():
            raise ConsoleError("INVALID_ARGUMENT", "text is required", 400)
        return _sse(backend.chat(body, _md(request)))

    async def submit(request: Request) -> Any:
        interaction_id, body = request.path_params["interaction_id"], await _body(request)
        return _sse(backend.submit(interaction_id, body, _md(request)))

    routes = [
        Route("/", index),
        Route("/api/info", _json_route(info)),
        Route("/api/session", _json_route(session)),
        Route("/api/runners", _json_route(runners)),
        Route("/api/runs", _json_route(runs)),
        Route("/api/runs/watch", _json_route(watch)),
        Route("/api/runs/{run_id}", _json_route(run)),
        Route("/api/runs/{run_id}/timeline", _json_route(timeline)),
        Route("/api/runs/{run_id}/audit", _json_route(audit)),
        Route("/api/runs/{run_id}/cancel", _json_route(cancel), methods=["POST"]),
        Route("/api/chat", _json_route(chat), methods=["POST"]),
        Route("/api/interactions/{interaction_id}", _json_route(submit), methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    return Starlette(routes=routes)
