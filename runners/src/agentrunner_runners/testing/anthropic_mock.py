"""A local mock of the Anthropic Messages API, for driving the real Claude Code CLI (and any other
Anthropic client) offline: `ANTHROPIC_BASE_URL=<mock url>`, any `ANTHROPIC_API_KEY`.

Endpoints (public API docs): `POST /v1/messages` (a JSON message, or SSE with `stream: true`, the
events of `anthropic_sse`, every event written in pieces cut at awkward bytes), `POST
/v1/messages/count_tokens`, `GET /v1/models[/<id>]`; any other path is recorded and answered 404 with
the API's error body. Every request is recorded (`requests`, `GET /_admin/requests`).

Which answer a `/v1/messages` request gets:
- a key in `rejected_keys` (`x-api-key` or `Authorization: Bearer`) gets 401 `authentication_error`;
- a request without tools is a side request (Claude Code asks for titles and suggestions): a short
  text, `side_text`;
- otherwise the conversation's *prompt* is the last text block (not a `<system-reminder>`) of the
  last user message without a `tool_result`; the first script whose `match` is in the prompt answers
  with its step number *k*, where *k* is the number of assistant messages after the prompt (so a tool
  loop walks through the steps, and a client's retry of the same request gets the same step);
- without a matching script it echoes: `Mock heard: <prompt> (turn <n>)`, n = prompts so far (a
  resumed conversation shows its earlier turns).

A step (a JSON object, so `POST /_admin/script {"match", "steps"}` takes it too): `text`, `thinking`,
`tool_use` (`{name, input}` or a list), `usage`; or `status` (+ `message`, `error_type`) for an HTTP
error; or `stream_error` (an error type, after `partial` text) for an error event in a 200 stream;
`delay` (seconds before answering); `hang` (seconds: start the message, then go silent). In texts and
tool inputs `{prompt}`, `{turn}`, `{cwd}` (the working directory Claude Code reports) and
`{tool_result}` (the text of the last tool result sent) are filled in.

In a test: `with serve_in_thread(AnthropicMock()) as mock: mock.url`. As a process:
`python -m agentrunner_runners.testing.anthropic_mock --port 0 [--log FILE]` prints
`ANTHROPIC_MOCK_LISTENING <port>`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import socket
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentrunner_runners.testing import anthropic_sse as sse
from agentrunner_runners.testing.mockkit import Recorded, Recorder, StreamedBody, pieces

READY = "ANTHROPIC_MOCK_LISTENING"
MODEL = "claude-mock-1"
_REMINDER = "<system-reminder>"
_CWD = re.compile(r"Primary working directory: ([^\s\"\\]+)")


def _texts(content: Any, kind: str = "text") -> list[str]:
    if isinstance(content, str):
        return [content] if kind == "text" else []
    return [str(b.get("text", "")) for b in content or [] if isinstance(b, dict) and b.get("type") == kind]


def _is_prompt(message: dict[str, Any]) -> bool:
    content = message.get("content")
    if message.get("role") != "user":
        return False
    if isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content
    ):
        return False
    return any(t.strip() and not t.lstrip().startswith(_REMINDER) for t in _texts(content))


def _tool_result_text(content: Any) -> str:
    for block in reversed(content if isinstance(content, list) else []):
        if isinstance(block, dict) and block.get("type") == "tool_result":
            inner = block.get("content")
            return inner if isinstance(inner, str) else "\n".join(_texts(inner))
    return ""


def conversation(body: dict[str, Any]) -> dict[str, Any]:
    """What the mock reads from a request: `prompt`, `turn`, `step`, `tool_result`, `cwd`."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    prompts = [i for i, m in enumerate(messages) if _is_prompt(m)]
    last = prompts[-1] if prompts else -1
    # the last text block: Claude Code merges a failed turn's prompt with the next one into one message
    texts = (
        [t for t in _texts(messages[last]["content"]) if not t.lstrip().startswith(_REMINDER)]
        if prompts
        else []
    )
    prompt = texts[-1].strip() if texts else ""
    after = messages[last + 1 :]
    everything = json.dumps(body.get("system")) + json.dumps(messages)
    cwd = _CWD.search(everything)
    return {
        "prompt": prompt,
        "turn": len(prompts),
        "step": sum(1 for m in after if m.get("role") == "assistant"),
        "tool_result": _tool_result_text(messages[-1].get("content")) if messages else "",
        "cwd": cwd.group(1) if cwd else "",
    }


def _fill(value: Any, facts: dict[str, Any]) -> Any:
    if isinstance(value, str):
        for key in ("prompt", "turn", "tool_result", "cwd"):
            value = value.replace("{" + key + "}", str(facts[key]))
        return value
    if isinstance(value, list):
        return [_fill(v, facts) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, facts) for k, v in value.items()}
    return value


class AnthropicMock:
    """The mock's state: scripts, rejected keys and the recorded requests; `app()` serves it."""

    def __init__(self, *, rejected_keys: tuple[str, ...] = (), side_text: str = "Mock title") -> None:
        self.recorder = Recorder()
        self.scripts: list[tuple[str, list[dict[str, Any]]]] = []
        self.rejected_keys = set(rejected_keys)
        self.side_text = side_text
        self.url = ""

    # -- scripting and inspection ---------------------------------------------------------------------

    def script(self, match: str, steps: list[dict[str, Any]]) -> None:
        """Prompts containing `match` are answered by `steps` (module docstring); newest first."""
        self.scripts.insert(0, (match, list(steps)))

    @property
    def requests(self) -> list[Recorded]:
        return self.recorder.requests

    def turns(self, match: str = "") -> list[dict[str, Any]]:
        """The bodies of the main (tool-carrying) `/v1/messages` requests whose prompt contains `match`."""
        return [
            r.body
            for r in list(self.recorder.requests)
            if r.path == "/v1/messages"
            and isinstance(r.body, dict)
            and r.body.get("tools")
            and match in conversation(r.body)["prompt"]
        ]

    def step_for(self, body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        facts = conversation(body)
        for match, steps in self.scripts:
            if match in facts["prompt"]:
                step = steps[min(facts["step"], len(steps) - 1)] if steps else {}
                return _fill(step, facts), facts
        return {"text": "Mock heard: {prompt} (turn {turn})".format(**facts)}, facts

    # -- the API --------------------------------------------------------------------------------------

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/messages", self.messages, methods=["POST"]),
                Route("/v1/messages/count_tokens", self.count_tokens, methods=["POST"]),
                Route("/v1/models", self.models, methods=["GET"]),
                Route("/v1/models/{model_id:path}", self.model, methods=["GET"]),
                Route("/_admin/requests", self._admin_requests, methods=["GET"]),
                Route("/_admin/reset", self._admin_reset, methods=["POST"]),
                Route("/_admin/script", self._admin_script, methods=["POST"]),
                Route("/{path:path}", self.other, methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"]),
            ]
        )

    def _rejected(self, request: Request) -> Response | None:
        key = request.headers.get("x-api-key") or request.headers.get("authorization", "").removeprefix(
            "Bearer "
        )
        if key in self.rejected_keys:
            return JSONResponse(sse.error_body(401), status_code=401)
        return None

    async def messages(self, request: Request) -> Response:
        record = await self.recorder.record("anthropic", request)
        denied = self._rejected(request)
        if denied is not None:
            return denied
        body = record.body if isinstance(record.body, dict) else {}
        if not body.get("messages"):
            return JSONResponse(sse.error_body(400, "messages: Field required"), status_code=400)
        model = str(body.get("model") or MODEL)
        if body.get("tools"):
            step, _ = self.step_for(body)
            record.scenario = json.dumps(step)[:200]
        else:
            step = {"text": self.side_text, "usage": {"input_tokens": 10, "output_tokens": 3}}
            record.scenario = "side"
        if step.get("delay"):
            await asyncio.sleep(float(step["delay"]))
        if step.get("status"):
            status = int(step["status"])
            error = sse.error_body(status, str(step.get("message") or ""), str(step.get("error_type") or ""))
            return JSONResponse(error, status_code=status, headers={"request-id": error["request_id"]})
        full = sse.message(model, sse.blocks(step), sse.usage_of(step))
        if not body.get("stream"):
            return JSONResponse(full, headers={"request-id": sse.new_id("req")})
        return StreamedBody(self._stream(step, full), record, media_type="text/event-stream")

    async def _stream(self, step: dict[str, Any], full: dict[str, Any]) -> AsyncIterator[bytes]:
        if step.get("stream_error"):
            events = sse.stream_error_events(full, str(step["stream_error"]), str(step.get("partial") or ""))
        elif step.get("hang"):
            events = sse.stream_events(full)[:4]  # message_start, ping, the first block's start and delta
        else:
            events = sse.stream_events(full)
        async for piece in pieces(events):
            yield piece
        if step.get("hang"):
            await asyncio.sleep(float(step["hang"]))

    async def count_tokens(self, request: Request) -> Response:
        record = await self.recorder.record("anthropic", request)
        denied = self._rejected(request)
        if denied is not None:
            return denied
        return JSONResponse({"input_tokens": max(1, len(json.dumps(record.body)) // 4)})

    def _model_info(self, model_id: str) -> dict[str, Any]:
        return {
            "type": "model",
            "id": model_id,
            "display_name": model_id,
            "created_at": "2026-01-01T00:00:00Z",
        }

    async def models(self, request: Request) -> Response:
        await self.recorder.record("anthropic", request)
        data = [self._model_info(MODEL)]
        return JSONResponse({"data": data, "has_more": False, "first_id": MODEL, "last_id": MODEL})

    async def model(self, request: Request) -> Response:
        await self.recorder.record("anthropic", request)
        return JSONResponse(self._model_info(request.path_params["model_id"]))

    async def other(self, request: Request) -> Response:
        await self.recorder.record("anthropic", request)
        return JSONResponse(sse.error_body(404, f"Not found: {request.url.path}"), status_code=404)

    async def _admin_requests(self, _: Request) -> Response:
        return JSONResponse([r.to_json() for r in self.recorder.requests])

    async def _admin_reset(self, _: Request) -> Response:
        self.recorder.requests.clear()
        self.scripts.clear()
        return JSONResponse({"ok": True})

    async def _admin_script(self, request: Request) -> Response:
        body = await request.json()
        if not isinstance(body, dict) or not isinstance(body.get("steps"), list):
            return JSONResponse(sse.error_body(400, "expected {match, steps: [...]}"), status_code=400)
        self.script(str(body.get("match") or ""), body["steps"])
        return JSONResponse({"ok": True})


def _bound_socket(port: int = 0) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    return sock


def _server(mock: AnthropicMock, sock: socket.socket) -> uvicorn.Server:
    mock.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    config = uvicorn.Config(mock.app(), log_level="critical", lifespan="off", timeout_graceful_shutdown=1)
    return uvicorn.Server(config)


@contextlib.contextmanager
def serve_in_thread(mock: AnthropicMock) -> Iterator[AnthropicMock]:
    """Serves `mock` on a free loopback port from a thread of its own (usable from sync fixtures)."""
    sock = _bound_socket()
    server = _server(mock, sock)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    while not server.started and thread.is_alive():
        threading.Event().wait(0.01)
    try:
        yield mock
    finally:
        server.should_exit = True
        thread.join(5)


@contextlib.asynccontextmanager
async def serve(mock: AnthropicMock, port: int = 0) -> AsyncIterator[AnthropicMock]:
    """Serves `mock` inside the running event loop (on `port`, 0 for a free one)."""
    sock = _bound_socket(port)
    server = _server(mock, sock)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    try:
        yield mock
    finally:
        server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(task, 5)


def _append(path: str, records: list[Recorded]) -> None:
    with open(path, "a", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(record.to_json(), ensure_ascii=False) + "\n")


async def _main(port: int, log: str) -> None:
    async with serve(AnthropicMock(), port) as mock:
        print(f"{READY} {mock.url.rsplit(':', 1)[1]}", flush=True)
        written = 0
        while True:
            await asyncio.sleep(0.2)
            if log and len(mock.requests) > written:
                await asyncio.to_thread(_append, log, mock.requests[written:])
                written = len(mock.requests)


def main() -> None:
    """`python -m agentrunner_runners.testing.anthropic_mock --port 0 [--log FILE]`: serve until killed."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--log", default="", help="append every request as a JSON line to this file")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(args.port, args.log))
    sys.exit(0)


if __name__ == "__main__":
    main()
