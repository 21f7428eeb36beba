"""Coze's chat API (`POST /coze/v3/chat`, `POST /coze/v1/files/upload`) as its public docs describe it:
`event:<name>` / `data:<json>` SSE blocks (`conversation.chat.created|in_progress|completed|failed`,
`conversation.message.delta|completed`, `error`, `done` with `data:"[DONE]"`), business errors as
`{"code": <non-zero>, "msg": ...}` JSON bodies (with HTTP 200 or an error status).

Scenarios (`mock:<name>` in the user message's text): `echo` (default; the completed answer repeats
the deltas, then a verbose message and follow-ups), `reasoning` (reasoning_content before the answer),
`function` (a function_call and a tool_response message before the answer), `failed`
(conversation.chat.failed), `ratelimited` (conversation.chat.failed, `last_error.code` 4013), `error` (an error event mid-stream), `action` (requires_action),
`business` (HTTP 200 + JSON error), `429`, `500`, `slow`, `drop`. A key `wrong-key` gets 401 with a
JSON body; a conversation id the mock never issued gets `{"code": 4200, "msg": "Conversation not exist"}`.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agentrunner_runners.testing.mockkit import (
    Recorder,
    StreamedBody,
    json_error,
    scenario_of,
    scripted,
    words,
)


def _sse(event: str, data: Any) -> bytes:
    return f"event:{event}\ndata:{json.dumps(data, ensure_ascii=False)}\n\n".encode()


class CozeMock:
    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.conversations: set[str] = set()
        self.files: dict[str, dict[str, Any]] = {}

    def routes(self) -> list[Route]:
        return [
            Route("/coze/v3/chat", self.chat, methods=["POST"]),
            Route("/coze/v1/files/upload", self.upload, methods=["POST"]),
        ]

    def _denied(self, request: Request) -> Response | None:
        if request.headers.get("authorization", "") in ("", "Bearer wrong-key"):
            return json_error(
                401, {"code": 4100, "msg": "The token you entered is incorrect. Please double-check."}
            )
        return None

    async def upload(self, request: Request) -> Response:
        record = await self.recorder.record("coze", request)
        denied = self._denied(request)
        if denied is not None:
            return denied
        if not record.files:
            return JSONResponse({"code": 4000, "msg": "no file in the request"})
        file_id = f"file_{uuid.uuid4().hex[:12]}"
        self.files[file_id] = record.files[0]
        return JSONResponse(
            {"code": 0, "msg": "", "data": {"id": file_id, "bytes": record.files[0]["size"],
                                            "file_name": record.files[0]["filename"], "created_at": 1715847583}}
        )  # fmt: skip

    async def chat(self, request: Request) -> Response:
        record = await self.recorder.record("coze", request)
        denied = self._denied(request)
        if denied is not None:
            return denied
        body = record.body if isinstance(record.body, dict) else {}
        text, images = _user_text(body)
        scenario, text = scenario_of(text)
        record.scenario = scenario
        if scenario == "business":
            return JSONResponse(
                {"code": 4000, "msg": "The requested bot_id is not published as an API service"}
            )
        if scenario == "429":
            return json_error(
                429, {"code": 4013, "msg": "Your request rate is too high"}, {"retry-after": "4"}
            )
        if scenario == "500":
            return json_error(500, {"code": 5000, "msg": "Internal server error"})
        conversation = request.query_params.get("conversation_id", "")
        if conversation and conversation not in self.conversations:
            return JSONResponse({"code": 4200, "msg": "Conversation not exist"})
        if not conversation:
            conversation = str(7_000_000_000_000_000_000 + len(self.conversations))
            self.conversations.add(conversation)
        answer = f"Coze heard: {text}" + (f" (with {images} image(s))" if images else "")
        events = self._events(scenario, conversation, answer, str(body.get("bot_id", "")))
        stream = scripted(scenario, events, slow_after=3, drop_after=4)
        return StreamedBody(stream, record, media_type="text/event-stream")

    def _events(self, scenario: str, conversation: str, answer: str, bot: str) -> list[bytes]:
        chat = {"id": "chat_1", "conversation_id": conversation, "bot_id": bot, "status": "created"}
        out = [
            _sse("conversation.chat.created", chat),
            _sse("conversation.chat.in_progress", {**chat, "status": "in_progress"}),
        ]
        message = {"id": "msg_a1", "conversation_id": conversation, "bot_id": bot, "chat_id": "chat_1",
                   "role": "assistant", "content_type": "text"}  # fmt: skip
        if scenario in ("failed", "ratelimited"):
            error = (
                {"code": 5000, "msg": "The model is overloaded, try again later"}
                if scenario == "failed"
                else {"code": 4013, "msg": "Your request rate is too high"}
            )
            return [
                *out,
                _sse("conversation.chat.failed", {**chat, "status": "failed", "last_error": error}),
                _sse("done", "[DONE]"),
            ]
        if scenario == "action":
            return [
                *out,
                _sse("conversation.chat.requires_action", {**chat, "status": "requires_action"}),
                _sse("done", "[DONE]"),
            ]
        if scenario == "reasoning":
            for piece in words("Let me think about the question first. "):
                out.append(
                    _sse(
                        "conversation.message.delta",
                        {**message, "type": "answer", "content": "", "reasoning_content": piece},
                    )
                )
        if scenario == "function":
            call = {"name": "weather", "arguments": {"city": "北京"}, "plugin_id": "p1", "api_id": "a1"}
            out.append(
                _sse(
                    "conversation.message.completed",
                    {
                        **message,
                        "id": "msg_f",
                        "type": "function_call",
                        "content": json.dumps(call, ensure_ascii=False),
                    },
                )
            )
            out.append(
                _sse(
                    "conversation.message.completed",
                    {**message, "id": "msg_t", "type": "tool_response", "content": '{"temp": 21}'},
                )
            )
        for i, piece in enumerate(words(answer)):
            out.append(_sse("conversation.message.delta", {**message, "type": "answer", "content": piece}))
            if scenario == "error" and i == 1:
                out.append(
                    _sse("error", {"code": 4011, "msg": "Insufficient quota: the bot's balance is used up"})
                )
                return out
        out.append(_sse("conversation.message.completed", {**message, "type": "answer", "content": answer}))
        verbose = {"msg_type": "generate_answer_finish", "data": '{"finish_reason":0}', "from_module": None}
        out.append(
            _sse(
                "conversation.message.completed",
                {**message, "id": "msg_v", "type": "verbose", "content": json.dumps(verbose)},
            )
        )
        for i, follow in enumerate(("Tell me more", "What else?")):
            out.append(
                _sse(
                    "conversation.message.completed",
                    {**message, "id": f"msg_u{i}", "type": "follow_up", "content": follow},
                )
            )
        usage = {"token_count": 30, "output_count": 12, "input_count": 18}
        out.append(_sse("conversation.chat.completed", {**chat, "status": "completed", "usage": usage}))
        out.append(_sse("done", "[DONE]"))
        return out


def _user_text(body: dict[str, Any]) -> tuple[str, int]:
    """The user message's text and how many uploaded images it carries."""
    messages = body.get("additional_messages") or [{}]
    message = messages[-1]
    content = message.get("content", "")
    if message.get("content_type") != "object_string":
        return str(content), 0
    try:
        parts = json.loads(content)
    except json.JSONDecodeError:
        return "", 0
    text = " ".join(p.get("text", "") for p in parts if p.get("type") == "text")
    return text, sum(1 for p in parts if p.get("type") == "image" and p.get("file_id"))
