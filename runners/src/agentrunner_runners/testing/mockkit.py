"""The mock servers' shared parts: request recording, awkward write splitting, streamed bodies that
notice a client disconnect, and scenario selection from the user's text.

A scenario is chosen by the text the runner sends: `mock:<name> rest of the text` (e.g. `mock:429`);
without the prefix the service echoes. Choosing by request keeps one mock process usable by tests that
run in parallel: no shared switch to flip.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from collections.abc import AsyncIterator, Iterable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

#: Pause between two pieces of a split write, so they leave as separate TCP segments.
PIECE_DELAY = 0.002


@dataclasses.dataclass
class Recorded:
    """One request the mock received."""

    service: str
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any = None
    files: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    scenario: str = ""
    started: float = dataclasses.field(default_factory=time.time)
    #: the client went away before the body was complete
    disconnected: bool = False
    #: the mock finished writing the body
    completed: bool = False
    #: the mock broke the connection on purpose (the `drop` scenarios)
    aborted: bool = False

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class Recorder:
    def __init__(self) -> None:
        self.requests: list[Recorded] = []

    async def record(self, service: str, request: Request) -> Recorded:
        headers = {k.lower(): v for k, v in request.headers.items()}
        entry = Recorded(service, request.method, request.url.path, dict(request.query_params), headers)
        kind = headers.get("content-type", "")
        if kind.startswith("multipart/form-data"):
            form = await request.form()
            fields: dict[str, Any] = {}
            for key, value in form.multi_items():
                if isinstance(value, str):
                    fields[key] = value
                else:
                    data = await value.read()
                    entry.files.append(
                        {
                            "field": key,
                            "filename": value.filename,
                            "content_type": value.content_type,
                            "size": len(data),
                        }
                    )
            entry.body = fields
        else:
            raw = await request.body()
            try:
                entry.body = json.loads(raw) if raw else None
            except json.JSONDecodeError:
                entry.body = raw.decode("utf-8", errors="replace")
        self.requests.append(entry)
        return entry


def scenario_of(text: str) -> tuple[str, str]:
    """`mock:<name> rest` -> (name, rest); anything else -> ("echo", text)."""
    stripped = text.strip()
    if stripped.startswith("mock:"):
        name, _, rest = stripped[5:].partition(" ")
        return name, rest
    return "echo", text


def awkward(data: bytes) -> list[bytes]:
    """`data` cut where parsers break: inside the first multi-byte UTF-8 sequence, two bytes in (inside
    `data:` / `event:` / `{"`), in the middle, and between the last two bytes (the two newlines of an
    event terminator)."""
    cuts = {2, len(data) // 2, len(data) - 1}
    for i, byte in enumerate(data):
        if byte >= 0xC0:  # lead byte of a multi-byte sequence: cut right after it
            cuts.add(i + 1)
            break
    points = sorted(c for c in cuts if 0 < c < len(data))
    pieces, last = [], 0
    for point in points:
        pieces.append(data[last:point])
        last = point
    pieces.append(data[last:])
    return [p for p in pieces if p]


async def pieces(items: Iterable[bytes], *, delay: float = 0.0) -> AsyncIterator[bytes]:
    """Each item split awkwardly, with a short pause between pieces and `delay` between items."""
    for item in items:
        for piece in awkward(item):
            yield piece
            await asyncio.sleep(PIECE_DELAY)
        if delay:
            await asyncio.sleep(delay)


class StreamedBody(Response):
    """A streamed body that watches for the client going away: the record's `disconnected` is set and
    the body generator is cancelled at once (a slow mock is not left writing to nobody)."""

    def __init__(
        self,
        body: AsyncIterator[bytes],
        record: Recorded,
        *,
        media_type: str,
        status_code: int = 200,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.body_iterator = body
        self.record = record
        self.status_code = status_code
        self.media_type = media_type
        self.background = None
        self.init_headers(headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def listen() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return

        async def stream() -> None:
            await send(
                {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
            )
            async for chunk in self.body_iterator:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        writer = asyncio.create_task(stream())
        listener = asyncio.create_task(listen())
        try:
            done, _ = await asyncio.wait({writer, listener}, return_when=asyncio.FIRST_COMPLETED)
            if writer in done:
                if isinstance(writer.exception(), ConnectionAbortedError):
                    self.record.aborted = True  # return without finishing: the server drops the connection
                elif writer.exception() is None:
                    self.record.completed = True
            if not (self.record.completed or self.record.aborted):
                self.record.disconnected = True
        finally:
            for task in (writer, listener):
                task.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.gather(writer, listener, return_exceptions=True)


def json_error(status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(body, status_code=status, headers=headers)


async def dropped(items: Iterable[bytes]) -> AsyncIterator[bytes]:
    """Some body, then the connection breaks (the handler raises so the server aborts the response)."""
    async for piece in pieces(items):
        yield piece
    raise ConnectionAbortedError("mock: connection dropped mid-stream")


async def slow(
    first: Iterable[bytes], *, keepalive: bytes = b"", every: float = 0.2, total: float = 60
) -> AsyncIterator[bytes]:
    """Some body, then nothing but (optional) keep-alives for `total` seconds."""
    async for piece in pieces(first):
        yield piece
    waited = 0.0
    while waited < total:
        await asyncio.sleep(every)
        waited += every
        if keepalive:
            yield keepalive


def scripted(scenario: str, events: list[bytes], *, slow_after: int, drop_after: int) -> AsyncIterator[bytes]:
    """The body of a streamed answer: `slow` stops after `slow_after` events (then silence), `drop`
    breaks the connection after `drop_after`, anything else sends every event, split awkwardly."""
    if scenario == "slow":
        return slow(events[:slow_after])
    if scenario == "drop":
        return dropped(events[:drop_after])
    return pieces(events)


def words(text: str) -> list[str]:
    """`text` as streaming pieces: words with their trailing space."""
    out, current = [], ""
    for ch in text:
        current += ch
        if ch == " ":
            out.append(current)
            current = ""
    if current:
        out.append(current)
    return out
