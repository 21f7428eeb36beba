"""A local mock of the OpenAI Responses API (`POST /v1/responses`, streamed), for driving real agent
CLIs (Codex, ACP agents) offline.

Every request is recorded (`requests`; as a process: `GET /_admin/requests`), and every streamed
event is written in pieces cut at awkward byte boundaries (inside `data:`, inside a multi-byte
character, between the two newlines of an event), as networks do. The wire format is in
`openai_responses_sse.py`.

What the model answers is decided per request:
- a **script** (`mock.script(marker, reply, ...)`): requests whose user prompt contains `marker` get
  the replies in order, the last one repeating (an HTTP 500 stays a 500 however often the client
  retries); a reply can be a callable of the `ModelRequest`;
- otherwise the **default model** (`default_model`), a tiny rule-based one good enough for a demo:
  "call <tool> {json}" calls that tool (after a client-side `tool_search_call` when the tool is not
  offered up front, as Codex defers MCP tools), "run `<command>`" runs a shell command through
  Codex's `exec_command`, a tool's output is answered with "<tool> returned: <output>", anything else
  is echoed as "You said: <prompt> (turn N)".

    with ResponsesMock() as mock:            # in a background thread; usable from sync or async tests
        mock.script("FAIL500", http_error(500))
        base_url = mock.url("/v1")

    python -m agentrunner_runners.testing.openai_responses_mock --port 0
    # prints: OPENAI_RESPONSES_MOCK_LISTENING <port>

`codex_config(directory, base_url)` writes a Codex home whose `config.toml` points Codex at the mock
(a `[model_providers.mock]` with `wire_api = "responses"`); `codex_demo(workdir)` is `make demo-codex`'s
setup for a real `codex`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import re
import socket
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentrunner_runners.testing.mockkit import Recorded, Recorder, StreamedBody, pieces
from agentrunner_runners.testing.openai_responses_sse import (
    Reply,
    custom_tool_call,
    events,
    failed,
    function_call,
    http_error,
    text,
    tool_search_call,
)

READY = "OPENAI_RESPONSES_MOCK_LISTENING"
SERVICE = "openai"
#: a model slug Codex 0.169 knows (`codex debug models`): full tool metadata (an unknown slug drops
#: the `apply_patch` tool)
CODEX_MODEL = "gpt-5.5"
__all__ = [
    "ModelRequest",
    "Reply",
    "ResponsesMock",
    "codex_config",
    "codex_demo",
    "custom_tool_call",
    "default_model",
    "failed",
    "function_call",
    "http_error",
    "text",
    "tool_search_call",
]

_OUTPUT_TYPES = ("function_call_output", "custom_tool_call_output", "tool_search_output")
_CALL = re.compile(
    r"\bcall (?:the )?`?(?P<tool>[A-Za-z0-9_.-]+)`?(?: tool)?(?: with)?\s*(?P<args>\{.*\})?", re.S
)
_RUN = re.compile(r"\brun `(?P<cmd>[^`]+)`")


@dataclasses.dataclass
class ModelRequest:
    """One `POST /v1/responses` as the model sees it."""

    body: dict[str, Any]
    record: Recorded

    @property
    def user_messages(self) -> list[str]:
        """The user's own messages, oldest first (not the `<environment_context>`-style ones the client
        adds as user messages)."""
        out = []
        for item in self.body.get("input") or []:
            if item.get("type") == "message" and item.get("role") == "user":
                content = _content_text(item.get("content"))
                if content.strip() and not content.lstrip().startswith("<"):
                    out.append(content.strip())
        return out

    @property
    def prompt(self) -> str:
        """The latest user message."""
        messages = self.user_messages
        return messages[-1] if messages else ""

    @property
    def since_prompt(self) -> list[dict[str, Any]]:
        """The input items after the latest user message (this turn's tool calls and their outputs)."""
        items = self.body.get("input") or []
        last = max(
            (i for i, it in enumerate(items) if it.get("type") == "message" and it.get("role") == "user"),
            default=-1,
        )
        return list(items[last + 1 :])

    @property
    def tool_names(self) -> list[str]:
        return [str(t.get("name") or t.get("type")) for t in self.body.get("tools") or []]

    def output_of(self, call_id: str) -> dict[str, Any] | None:
        return next(
            (
                it
                for it in self.body.get("input") or []
                if it.get("type") in _OUTPUT_TYPES and it.get("call_id") == call_id
            ),
            None,
        )


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


def _output_text(item: dict[str, Any]) -> str:
    output = item.get("output")
    if isinstance(output, list):
        return _content_text(output)
    return str(output if output is not None else "")


def _found_tool(item: dict[str, Any], wanted: str) -> tuple[str, str] | None:
    """(namespace, name) of `wanted` among a `tool_search_output`'s tools (functions or namespaces)."""
    for tool in item.get("tools") or []:
        if tool.get("type") == "namespace":
            for inner in tool.get("tools") or []:
                if wanted in (inner.get("name"), f"{tool.get('name')}{inner.get('name')}"):
                    return str(tool.get("name")), str(inner.get("name"))
        elif tool.get("name") and (tool["name"] == wanted or str(tool["name"]).endswith(wanted)):
            return str(tool.get("namespace") or ""), str(tool["name"])
    return None


def default_model(request: ModelRequest) -> Reply:
    """The rule-based model of the module docstring."""
    prompt, recent = request.prompt, request.since_prompt
    call = _CALL.search(prompt)
    last = recent[-1] if recent else None
    if last is not None and last.get("type") == "tool_search_output" and call:
        found = _found_tool(last, call.group("tool"))
        if found is None:
            return text(f"I could not find the tool {call.group('tool')}.")
        return function_call(found[1], _arguments(call.group("args")), namespace=found[0])
    if last is not None and last.get("type") in ("function_call_output", "custom_tool_call_output"):
        name = next(
            (it.get("name") for it in recent if it.get("call_id") == last.get("call_id") and it.get("name")),
            "the tool",
        )
        return text(f"{name} returned: {_output_text(last)}")
    if call:
        tool = call.group("tool")
        if tool in request.tool_names:
            return function_call(tool, _arguments(call.group("args")))
        return text("Let me find that tool.", phase="commentary") + tool_search_call(tool)
    run = _RUN.search(prompt)
    if run:
        return function_call("exec_command", {"cmd": run.group("cmd"), "yield_time_ms": 10000})
    return text(f"You said: {prompt} (turn {len(request.user_messages)})")


def _arguments(raw: str | None) -> dict[str, Any]:
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


Script = Reply | Callable[[ModelRequest], Reply]


class ResponsesMock:
    """The mock served by uvicorn in a background thread on a free loopback port (module docstring)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.recorder = Recorder()
        self.model: Callable[[ModelRequest], Reply] = default_model
        self._scripts: dict[str, list[Script]] = {}
        self._used: dict[str, int] = {}
        self._lock = threading.Lock()
        self._host, self._port = host, port
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    def url(self, path: str = "") -> str:
        return f"http://{self._host}:{self.port}{path}"

    @property
    def requests(self) -> list[Recorded]:
        return [r for r in self.recorder.requests if r.service == SERVICE]

    def script(self, marker: str, *replies: Script) -> None:
        """Requests whose prompt contains `marker` get `replies` in order, the last one repeating."""
        with self._lock:
            self._scripts[marker] = list(replies)
            self._used[marker] = 0

    def responses_for(self, marker: str) -> list[Recorded]:
        """The `POST /v1/responses` requests whose prompt contains `marker`."""
        return [r for r in self.requests if r.path.endswith("/responses") and marker in r.scenario]

    def reply(self, request: ModelRequest) -> Reply:
        prompt = request.prompt
        with self._lock:
            marker = next((m for m in self._scripts if m in prompt), None)
            if marker is not None:
                replies = self._scripts[marker]
                index = min(self._used[marker], len(replies) - 1)
                self._used[marker] += 1
                chosen = replies[index]
                return chosen(request) if callable(chosen) else chosen
        return self.model(request)

    # -- the app --------------------------------------------------------------------------------------

    async def _responses(self, http: Request) -> Response:
        record = await self.recorder.record(SERVICE, http)
        body = record.body if isinstance(record.body, dict) else {}
        request = ModelRequest(body, record)
        record.scenario = request.prompt
        reply = self.reply(request)
        if reply.error is not None:
            status, error = reply.error
            return JSONResponse({"error": error}, status_code=status)
        input_tokens = max(1, len(json.dumps(body.get("input") or [])) // 4)
        stream = events(reply, model=str(body.get("model") or "mock"), input_tokens=input_tokens)
        return StreamedBody(pieces(stream, delay=reply.delay), record, media_type="text/event-stream")

    async def _other(self, http: Request) -> Response:
        await self.recorder.record(SERVICE, http)
        if http.url.path.endswith("/models"):
            return JSONResponse({"object": "list", "data": [], "models": []})
        return JSONResponse(
            {"error": {"message": f"mock: no route {http.url.path}", "type": "invalid_request_error"}},
            status_code=404,
        )

    def app(self) -> Starlette:
        async def admin(_: Request) -> JSONResponse:
            return JSONResponse([r.to_json() for r in self.requests])

        return Starlette(
            routes=[
                Route("/_admin/requests", admin),
                Route("/v1/responses", self._responses, methods=["POST"]),
                Route("/responses", self._responses, methods=["POST"]),
                Route("/{path:path}", self._other, methods=["GET", "POST", "PUT", "DELETE"]),
            ]
        )

    # -- lifecycle ------------------------------------------------------------------------------------

    def start(self) -> ResponsesMock:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((self._host, self._port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.app(), log_level="critical", lifespan="off", timeout_graceful_shutdown=1)
        server = self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=lambda: asyncio.run(server.serve(sockets=[sock])),
            name="openai-responses-mock",
            daemon=True,
        )
        self._thread.start()
        while not server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the OpenAI Responses mock did not start")
            self._thread.join(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(5)
        self._server = self._thread = None

    def __enter__(self) -> ResponsesMock:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def codex_config(
    directory: Path, base_url: str, *, model: str = CODEX_MODEL, retries: int | None = None
) -> Path:
    """A Codex home at `directory` whose `config.toml` points Codex at the mock at `base_url` (`.../v1`);
    `retries` bounds Codex's own retries of a failing request (by default it retries a 500 for ~27 s)."""
    directory.mkdir(parents=True, exist_ok=True)
    lines = [
        f"model = {json.dumps(model)}",
        'model_provider = "mock"',
        "",
        "[model_providers.mock]",
        'name = "mock"',
        f"base_url = {json.dumps(base_url)}",
        'wire_api = "responses"',
        'env_key = "OPENAI_API_KEY"',
    ]
    if retries is not None:
        lines += [f"request_max_retries = {retries}", f"stream_max_retries = {retries}"]
    (directory / "config.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return directory


def codex_demo(workdir: Path) -> tuple[dict[str, str], dict[str, Any], Callable[[], None]]:
    """`make demo-codex` with a real `codex`: the mock started, a Codex home pointing at it; returns the
    runner's environment (a placeholder API key), the runner config (`codex-home`) and the stop."""
    mock = ResponsesMock().start()
    home = codex_config(workdir / "codex-home", mock.url("/v1"))
    return (
        {"OPENAI_API_KEY": "sk-demo-placeholder-key-for-the-local-mock"},
        {"codex-home": str(home)},
        mock.stop,
    )


def main() -> None:
    """`python -m agentrunner_runners.testing.openai_responses_mock --port 0`: serve until killed."""
    parser = argparse.ArgumentParser(description="A local mock of the OpenAI Responses API")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    with ResponsesMock(port=args.port) as mock:
        print(f"{READY} {mock.port}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()
    sys.exit(0)


if __name__ == "__main__":
    main()
