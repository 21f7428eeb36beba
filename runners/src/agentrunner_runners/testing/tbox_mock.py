"""Ant Group Tbox's app chat API (`POST /tbox/api/chat`, `POST /tbox/api/file/upload`) as the public
SDK speaks it: `Authorization: <key>` (no "Bearer"), `source: AGENT_SDK`; a streamed answer is SSE
`event:message` blocks whose `data` is `{"type", "lane", "payload"}` with `payload` itself a JSON
**string** (types `header`, `chunk`, `thinking`, `end`, `error`, ...; lanes interleave, e.g. text
and images); a non-streamed answer is `{"errorCode": "0", "data": {"conversationId", "result": [...]}}`;
business errors are JSON `{"errorCode": "<non-zero>", "errorMsg"}`, with HTTP 200.

Scenarios (`mock:<name>` in `query`): `echo` (default), `thinking`, `image` (a text and an image lane
interleaved), `whole` (the non-streamed JSON answer, `errorCode` "0", even to a streaming request),
`error` (an error message mid-stream), `sseerror` (an `event:error` block whose text is in
`description`, as the official SDK reads it), `ratelimited` (an error message mid-stream naming a rate
limit, or, not streamed, the same as a business error), `business` (HTTP 200 + JSON error), `429`,
`500`, `slow`, `drop`. Key `wrong-key`: HTTP 401 with a JSON body. A
conversation id the mock never issued: `{"errorCode": "20001", "errorMsg": "conversation not exist"}`.
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


def _message(kind: str, lane: str, payload: dict[str, Any]) -> bytes:
    data = {"type": kind, "lane": lane, "payload": json.dumps(payload, ensure_ascii=False)}
    return f"event:message\ndata:{json.dumps(data, ensure_ascii=False)}\n\n".encode()


class TboxMock:
    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.conversations: set[str] = set()
        self.files: set[str] = set()

    def routes(self) -> list[Route]:
        return [
            Route("/tbox/api/chat", self.chat, methods=["POST"]),
            Route("/tbox/api/file/upload", self.upload, methods=["POST"]),
        ]

    def _denied(self, request: Request) -> Response | None:
        key = request.headers.get("authorization", "")
        if not key or key == "wrong-key" or key.lower().startswith("bearer "):
            return json_error(401, {"errorCode": "401", "errorMsg": "authorization is invalid"})
        return None

    async def upload(self, request: Request) -> Response:
        record = await self.recorder.record("tbox", request)
        denied = self._denied(request)
        if denied is not None:
            return denied
        if not record.files:
            return JSONResponse({"errorCode": "40001", "errorMsg": "file is required"})
        file_id = f"f-{uuid.uuid4().hex[:10]}"
        self.files.add(file_id)
        return JSONResponse({"errorCode": "0", "errorMsg": "success", "data": file_id, "traceId": "t-1"})

    async def chat(self, request: Request) -> Response:
        record = await self.recorder.record("tbox", request)
        denied = self._denied(request)
        if denied is not None:
            return denied
        body = record.body if isinstance(record.body, dict) else {}
        scenario, text = scenario_of(str(body.get("query", "")))
        record.scenario = scenario
        if scenario == "business":
            return JSONResponse({"errorCode": "10001", "errorMsg": "app does not exist or is offline"})
        if scenario == "ratelimited" and body.get("stream") is False:
            return JSONResponse({"errorCode": "TOO_MANY_REQUESTS", "errorMsg": "请求过于频繁 (rate limit)"})
        if scenario == "429":
            return json_error(
                429, {"errorCode": "429", "errorMsg": "too many requests"}, {"retry-after": "6"}
            )
        if scenario == "500":
            return json_error(500, {"errorCode": "500", "errorMsg": "system error"})
        conversation = str(body.get("conversationId") or "")
        if conversation and conversation not in self.conversations:
            return JSONResponse({"errorCode": "20001", "errorMsg": "conversation not exist"})
        if not conversation:
            conversation = f"c-{uuid.uuid4().hex[:10]}"
            self.conversations.add(conversation)
        files = [f for f in body.get("files") or [] if f.get("fileId") in self.files]
        answer = f"Tbox heard: {text}" + (f" (with {len(files)} file(s))" if files else "")
        if body.get("stream") is False or scenario == "whole":
            return JSONResponse(
                {"errorCode": "0", "errorMsg": "success",
                 "data": {"conversationId": conversation, "messageId": "m-1",
                          "reasoningContent": [{"text": "thinking it over"}],
                          "result": [{"chunk": answer, "mediaType": "text", "lane": "default"}]}}
            )  # fmt: skip
        events = self._events(scenario, conversation, answer)
        stream = scripted(scenario, events, slow_after=2, drop_after=3)
        return StreamedBody(stream, record, media_type="text/event-stream;charset=UTF-8")

    def _events(self, scenario: str, conversation: str, answer: str) -> list[bytes]:
        ids = {"conversationId": conversation, "messageId": "m-1"}
        out = [_message("header", "default", {"mediaType": "text"})]
        if scenario == "thinking":
            for piece in words("Considering the question carefully. "):
                out.append(_message("thinking", "default", {"ext_data": {"text": piece}, **ids}))
        if scenario == "image":
            out.append(_message("header", "image", {"mediaType": "image"}))
        for i, piece in enumerate(words(answer)):
            out.append(_message("chunk", "default", {**ids, "text": piece}))
            if scenario == "image" and i == 1:
                out.append(
                    _message(
                        "chunk",
                        "image",
                        {**ids, "url": ["https://tbox.example/img/cat.png"], "expireAt": 1893456000},
                    )
                )
            if scenario == "error" and i == 1:
                out.append(
                    _message("error", "default", {"errorCode": "50001", "errorMsg": "the model is busy"})
                )
                return out
            if scenario == "ratelimited" and i == 1:
                busy = {"errorCode": "TOO_MANY_REQUESTS", "errorMsg": "请求过于频繁 (rate limit)"}
                out.append(_message("error", "default", busy))
                return out
            if scenario == "sseerror" and i == 1:
                error = {"errorCode": "APP_NOT_FOUND", "description": "应用不存在或未发布 (app not found)"}
                out.append(f"event:error\ndata:{json.dumps(error, ensure_ascii=False)}\n\n".encode())
                return out
        if scenario == "image":
            out.append(_message("end", "image", {}))
        out.append(_message("end", "default", {}))
        return out
