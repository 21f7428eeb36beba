"""A local OpenAI-compatible HTTP server for tests and the offline demo (real sockets, the real wire format).

Tests script replies through `MockState.script(...)` (in process) or `POST /_admin/script` (subprocess)
and read what reached the "model" from `MockState.requests` / `GET /_admin/requests`. Without a script,
chat replies echo the last user text; a scripted `template` reply is filled from the request it answers
(so a reply can only quote history, a tool result or the prompt when they really reached the model).
Faults, per endpoint (`script` for chat, `script_embeddings`, `script_rerank`): `status` with
`retry_after` / `retry_after_ms` headers, `times` (serve the reply this many requests in a row; 0: every
request until reset), `delay` (stall before the first byte), `drop_after` (cut the connection after N
streamed content chunks; 0: before the first, for a non-streamed answer: after the headers),
`error_after` (an `error` event after N chunks), `choices` (several choices). Each request is recorded
with its arrival time (`at`, monotonic seconds), so tests can measure the waits between retries.
Every API answer, streamed or not, errors included, is written in several pieces cut at awkward bytes
(`openai_stream.awkward_pieces`: inside a key, a number, a UTF-8 character, an SSE frame's newlines).
Run standalone with `python -m agentrunner_host.testing.openai_mock --port 0` (or the re-export
`python -m tests.mocks.openai_server`); it prints `MOCK_OPENAI_LISTENING <port>` once it accepts
connections.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import hashlib
import json
import math
import re
import socket
import sys
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from agentrunner_host.testing.openai_stream import DropConnection, StreamPlan, StreamRecord, awkward_pieces

EMBED_DIM = 256
_WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


_STOPWORDS = frozenset(
    "a an and are as at be by can do does for from how i in is it my of on or our the this to we what "
    "when where which with you your".split()
)


def hashed_embedding(text: str, dim: int = EMBED_DIM) -> list[float]:
    """Deterministic bag-of-words vector: each non-stopword adds ±1 to a hashed bucket; L2-normalised."""
    vec = [0.0] * dim
    for word in (w for w in words(text) if w not in _STOPWORDS):
        digest = hashlib.sha1(word.encode()).digest()
        vec[int.from_bytes(digest[:4], "big") % dim] += 1.0 if digest[4] & 1 else -1.0
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


ENDPOINTS = ("chat", "embeddings", "rerank")


@dataclasses.dataclass
class MockState:
    """Scripted replies (one FIFO queue per endpoint) and everything received."""

    replies: deque[dict[str, Any]] = dataclasses.field(default_factory=deque)
    embedding_replies: deque[dict[str, Any]] = dataclasses.field(default_factory=deque)
    rerank_replies: deque[dict[str, Any]] = dataclasses.field(default_factory=deque)
    requests: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    streams: list[StreamRecord] = dataclasses.field(default_factory=list)

    def script(self, *replies: dict[str, Any]) -> None:
        """Queue chat replies. Keys: content, chunks (list[str]), choices (list of texts: one choice
        each), tool_calls ([{id,name,arguments}]), status (429/500/...), error_message, retry_after,
        retry_after_ms, times, delay (s before answering), chunk_delay (s between chunks), drop_after,
        error_after, usage ({prompt_tokens, completion_tokens, ...details}), finish_reason, template
        (content from the request: `{last_user}`, `{first_user}`, `{previous_user}`, `{last_tool}`,
        `{system}`, `{images}`, `{messages}`; see `template_fields`)."""
        self.replies.extend(replies)

    def script_embeddings(self, *replies: dict[str, Any]) -> None:
        """Queue embedding replies (faults only: status, retry_after(_ms), times, delay, drop_after)."""
        self.embedding_replies.extend(replies)

    def script_rerank(self, *replies: dict[str, Any]) -> None:
        self.rerank_replies.extend(replies)

    def queue(self, endpoint: str) -> deque[dict[str, Any]]:
        return {"chat": self.replies, "embeddings": self.embedding_replies, "rerank": self.rerank_replies}[
            endpoint
        ]

    def next_reply(self, endpoint: str) -> dict[str, Any]:
        """The next scripted reply; one with `times` stays at the head until served that often."""
        queue = self.queue(endpoint)
        if not queue:
            return {}
        reply = queue[0]
        times = int(reply.get("times", 1))
        if times == 1:
            return queue.popleft()
        if times > 1:
            queue[0] = {**reply, "times": times - 1}
        return reply

    def record(self, endpoint: str, path: str, body: Any, request: Request) -> int:
        self.requests.append(
            {"path": path, "endpoint": endpoint, "body": body, "headers": dict(request.headers),
             "at": time.monotonic()}
        )  # fmt: skip
        return len(self.requests) - 1

    def attempts(self, endpoint: str = "chat") -> list[float]:
        """Arrival times of the requests to `endpoint`."""
        return [r["at"] for r in self.requests if r.get("endpoint") == endpoint]

    def reset(self) -> None:
        for endpoint in ENDPOINTS:
            self.queue(endpoint).clear()
        self.requests.clear()
        self.streams.clear()


class SplitJSONResponse(JSONResponse):
    """A JSON answer (with its Content-Length, so not chunked) written in the awkward pieces of
    `awkward_pieces`: the client reassembles a body cut inside a key, a number and a UTF-8 character."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        pieces = awkward_pieces(bytes(self.body))
        for i, piece in enumerate(pieces):
            await send({"type": "http.response.body", "body": piece, "more_body": i < len(pieces) - 1})
            await asyncio.sleep(0)  # one write each: let the socket send this piece before the next


async def _paced(pieces: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """One write per piece: the event loop runs between them, so the socket sends each on its own."""
    async for piece in pieces:
        yield piece
        await asyncio.sleep(0)


def _error(reply: dict[str, Any]) -> JSONResponse:
    status = int(reply["status"])
    kinds = {429: ("rate_limit_exceeded", "requests"), 500: ("server_error", "server_error")}
    code, typ = kinds.get(status, ("invalid_request_error", "invalid_request_error"))
    message = reply.get("error_message", "scripted failure")
    body = {"error": {"message": message, "type": typ, "param": None, "code": code}}
    headers = {}
    if "retry_after" in reply:
        headers["retry-after"] = str(reply["retry_after"])
    if "retry_after_ms" in reply:
        headers["retry-after-ms"] = str(reply["retry_after_ms"])
    return SplitJSONResponse(body, status_code=status, headers=headers)


async def _fault(reply: dict[str, Any], record: StreamRecord | None = None) -> Response | None:
    """The scripted fault of a reply, if any: a stall, an error answer, or a cut connection."""
    if reply.get("delay"):
        await asyncio.sleep(reply["delay"])
    if reply.get("status", 200) != 200:
        return _error(reply)
    if reply.get("drop_after") is not None and record is None:

        async def cut() -> AsyncIterator[bytes]:
            yield b'{"id": "'
            raise DropConnection()

        return StreamingResponse(cut(), media_type="application/json")
    return None


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return " ".join(p.get("text", "") for p in content if p.get("type") == "text")
    return ""


def _texts(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def template_fields(messages: list[dict[str, Any]]) -> dict[str, str]:
    """What a `template` reply may quote from the request: the first, previous and last user texts, the
    last tool result, the system prompt, how many images the last user message has, the message count."""
    users = [m for m in messages if m.get("role") == "user"]
    tools = [m for m in messages if m.get("role") == "tool"]
    last = users[-1].get("content") if users else None
    images = sum(1 for p in last if p.get("type") == "image_url") if isinstance(last, list) else 0
    return {
        "first_user": _texts(users[0].get("content")) if users else "",
        "previous_user": _texts(users[-2].get("content")) if len(users) > 1 else "",
        "last_user": _texts(last),
        "last_tool": _texts(tools[-1].get("content")) if tools else "",
        "system": " ".join(_texts(m.get("content")) for m in messages if m.get("role") == "system"),
        "images": str(images),
        "messages": str(len(messages)),
    }


def _usage(reply: dict[str, Any], body: dict[str, Any], content: str) -> dict[str, Any]:
    if "usage" in reply:
        usage = dict(reply["usage"])
    else:
        prompt = sum(len(words(json.dumps(m.get("content")))) for m in body.get("messages", []))
        usage = {"prompt_tokens": prompt, "completion_tokens": len(words(content))}
    usage.setdefault("total_tokens", usage["prompt_tokens"] + usage["completion_tokens"])
    return usage


def _message(content: str, tool_calls: list[dict[str, Any]]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if tool_calls:
        message["tool_calls"] = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in tool_calls
        ]
    return message


def _pieces(text: str) -> list[str]:
    return [text[i : i + 4] for i in range(0, len(text), 4)] if text else []


class _Endpoints:
    """The mock's HTTP handlers, over one `MockState`."""

    def __init__(self, state: MockState) -> None:
        self.state = state

    async def chat(self, request: Request) -> Response:
        body = await request.json()
        index = self.state.record("chat", "/v1/chat/completions", body, request)
        reply = self.state.next_reply("chat")
        streaming = bool(body.get("stream"))
        record = StreamRecord(request_index=index) if streaming else None
        fault = await _fault(reply, record)
        if fault is not None:
            return fault
        content = reply.get("content", f"echo: {_last_user_text(body.get('messages', []))}")
        if "template" in reply:
            content = reply["template"].format_map(template_fields(body.get("messages", [])))
        choices = list(reply.get("choices") or [content])
        tool_calls = reply.get("tool_calls", [])
        finish = reply.get("finish_reason", "tool_calls" if tool_calls else "stop")
        usage = _usage(reply, body, choices[0])
        cid = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        created = int(time.time())
        model = body.get("model", "mock")
        if record is None:
            return SplitJSONResponse(
                {
                    "id": cid,
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": [
                        {
                            "index": i,
                            "message": _message(text, tool_calls if i == 0 else []),
                            "logprobs": None,
                            "finish_reason": finish if i == 0 else "stop",
                        }
                        for i, text in enumerate(choices)
                    ],
                    "usage": usage,
                }
            )
        self.state.streams.append(record)
        plan = StreamPlan(
            cid=cid,
            created=created,
            model=model,
            choices=[reply.get("chunks") or _pieces(choices[0]), *(_pieces(c) for c in choices[1:])],
            tool_calls=tool_calls,
            finish=finish,
            usage=usage if (body.get("stream_options") or {}).get("include_usage") else None,
            chunk_delay=reply.get("chunk_delay", 0.0),
            drop_after=reply.get("drop_after"),
            error_after=reply.get("error_after"),
        )
        return StreamingResponse(_paced(plan.body(record)), media_type="text/event-stream")

    async def embeddings(self, request: Request) -> Response:
        body = await request.json()
        self.state.record("embeddings", "/v1/embeddings", body, request)
        fault = await _fault(self.state.next_reply("embeddings"))
        if fault is not None:
            return fault
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        tokens = sum(len(words(t)) for t in inputs)
        return SplitJSONResponse(
            {
                "object": "list",
                "data": [
                    {"object": "embedding", "index": i, "embedding": hashed_embedding(t)}
                    for i, t in enumerate(inputs)
                ],
                "model": body.get("model", "mock-embedding"),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    async def rerank(self, request: Request) -> Response:
        body = await request.json()
        self.state.record("rerank", "/v1/rerank", body, request)
        fault = await _fault(self.state.next_reply("rerank"))
        if fault is not None:
            return fault
        query = set(words(body["query"]))
        scored = []
        for i, doc in enumerate(body["documents"]):
            doc_words = set(words(doc))
            score = len(query & doc_words) / math.sqrt(len(doc_words) or 1)
            scored.append({"index": i, "relevance_score": round(score, 6)})
        scored.sort(key=lambda r: -r["relevance_score"])
        top_n = body.get("top_n") or len(scored)
        return SplitJSONResponse(
            {"id": uuid.uuid4().hex, "model": body.get("model"), "results": scored[:top_n], "usage": {}}
        )

    async def models(self, _: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "mock-chat", "object": "model"}]})

    async def admin_script(self, request: Request) -> Response:
        body = await request.json()
        endpoint = request.query_params.get("endpoint", "chat")
        if endpoint not in ENDPOINTS:
            return JSONResponse({"error": f"unknown endpoint {endpoint}"}, status_code=400)
        self.state.queue(endpoint).extend(body if isinstance(body, list) else [body])
        return JSONResponse({"queued": len(self.state.queue(endpoint))})

    async def admin_requests(self, _: Request) -> Response:
        return JSONResponse(self.state.requests)

    async def admin_streams(self, _: Request) -> Response:
        return JSONResponse(
            [dataclasses.asdict(s) | {"closed": s.closed.is_set()} for s in self.state.streams]
        )

    async def admin_reset(self, _: Request) -> Response:
        self.state.reset()
        return JSONResponse({})


def build_app(state: MockState) -> Starlette:
    """The mock's Starlette app: the OpenAI endpoints it serves and its `/_admin` scripting endpoints."""
    e = _Endpoints(state)
    return Starlette(
        routes=[
            Route("/v1/chat/completions", e.chat, methods=["POST"]),
            Route("/v1/embeddings", e.embeddings, methods=["POST"]),
            Route("/v1/rerank", e.rerank, methods=["POST"]),
            Route("/v1/models", e.models, methods=["GET"]),
            Route("/_admin/script", e.admin_script, methods=["POST"]),
            Route("/_admin/requests", e.admin_requests, methods=["GET"]),
            Route("/_admin/streams", e.admin_streams, methods=["GET"]),
            Route("/_admin/reset", e.admin_reset, methods=["POST"]),
        ]
    )


class MockOpenAIServer:
    """The mock served by uvicorn inside the current event loop (`async with MockOpenAIServer() as m`)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.state = MockState()
        self._host, self._port = host, port
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://{self._host}:{self.port}/v1"

    async def start(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind((self._host, self._port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            build_app(self.state), log_level="warning", lifespan="off", timeout_graceful_shutdown=1
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
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(self._task, 5)

    async def __aenter__(self) -> MockOpenAIServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


async def _main(port: int, host: str = "127.0.0.1") -> None:
    server = MockOpenAIServer(host=host, port=port)
    await server.start()
    print(f"MOCK_OPENAI_LISTENING {server.port}", flush=True)
    assert server._task is not None
    await server._task


def main() -> None:
    """`python -m ... --port 0`: serve until killed."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (0.0.0.0 in a container)")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_main(args.port, args.host))
    sys.exit(0)


if __name__ == "__main__":
    main()
