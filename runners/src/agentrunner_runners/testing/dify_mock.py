"""Dify's service API (`/v1/chat-messages`, `/v1/workflows/run`, `/v1/files/upload`) as the public docs
describe it: `data: {json}` SSE lines, `event: ping` keep-alives, `message_end` with usage, errors as
`{"code", "message", "status"}` bodies.

Scenarios (`mock:<name>` in the query): `echo` (default), `agent` (agent_message + agent_thought tool
call + message_file image), `think`, `replace`, `unknown` (unknown event types), `empty`, `error` (error
event in a 200 stream), `ratelimited` (an error event with `status` 429 after a partial answer),
`invalid` (a non-JSON data line), `401`, `429` (Retry-After: 7), `500`, `slow` (one piece, then
silence), `drop` (connection broken mid-stream); workflow: `echo`, `fail` (`workflow_finished` with
`status: failed`), `ratelimited` (the same, its error a model's 429). A request
with a conversation id the mock never issued gets Dify's 404 "Conversation Not Exists.".
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

BAD_KEY = "wrong-key"


def _sse(data: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


#: chat scenarios that fail mid-answer: the `error` event's fields after a partial answer
_CHAT_FAILURES: dict[str, dict[str, Any]] = {
    # the model behind the app was throttled mid-answer
    "ratelimited": {
        "status": 429,
        "code": "completion_request_error",
        "message": "[openai] Rate Limit Error, Error code: 429 - Rate limit reached",
    },
    "error": {"status": 400, "code": "completion_request_error", "message": "Model quota exceeded"},
}


def _agent_events(base: dict[str, Any], text: str) -> list[bytes]:
    """An agent app's tool round (`agent_thought` started and finished) and the image it made."""
    thought = {"event": "agent_thought", **base, "id": "t1", "position": 1}
    started = {
        "thought": "",
        "tool": "web_search",
        "tool_input": json.dumps({"query": text}),
        "observation": "",
    }
    image = {"id": "f1", "type": "image", "belongs_to": "assistant", "url": "/files/tools/chart.png?sign=abc"}
    return [
        _sse({**thought, **started}),
        _sse({**thought, "thought": "found it", "tool": "web_search", "observation": "3 results"}),
        _sse({"event": "message_file", **base, **image}),
    ]


class DifyMock:
    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.conversations: set[str] = set()
        self.files: dict[str, dict[str, Any]] = {}

    def routes(self) -> list[Route]:
        return [
            Route("/dify/v1/chat-messages", self.chat, methods=["POST"]),
            Route("/dify/v1/workflows/run", self.workflow, methods=["POST"]),
            Route("/dify/v1/files/upload", self.upload, methods=["POST"]),
        ]

    def _auth(self, request: Request) -> Response | None:
        if request.headers.get("authorization", "") in ("", f"Bearer {BAD_KEY}"):
            return json_error(
                401, {"code": "unauthorized", "message": "Access token is invalid", "status": 401}
            )
        return None

    async def upload(self, request: Request) -> Response:
        record = await self.recorder.record("dify", request)
        denied = self._auth(request)
        if denied is not None:
            return denied
        if not record.files:
            return json_error(
                400, {"code": "no_file_uploaded", "message": "Please upload your file.", "status": 400}
            )
        file = record.files[0]
        file_id = str(uuid.uuid4())
        self.files[file_id] = file
        return JSONResponse(
            {
                "id": file_id,
                "name": file["filename"],
                "size": file["size"],
                "extension": (file["filename"] or "").rpartition(".")[2],
                "mime_type": file["content_type"],
                "created_by": "mock",
                "created_at": 1705407629,
            },
            status_code=201,
        )

    async def chat(self, request: Request) -> Response:
        record = await self.recorder.record("dify", request)
        denied = self._auth(request)
        if denied is not None:
            return denied
        body = record.body if isinstance(record.body, dict) else {}
        scenario, text = scenario_of(str(body.get("query", "")))
        record.scenario = scenario
        conversation = str(body.get("conversation_id") or "")
        if conversation and conversation not in self.conversations:
            return json_error(
                404, {"code": "not_found", "message": "Conversation Not Exists.", "status": 404}
            )
        early = _early(scenario)
        if early is not None:
            return early
        if not conversation:
            conversation = str(uuid.uuid4())
            self.conversations.add(conversation)
        files = [f for f in body.get("files") or [] if f.get("upload_file_id") in self.files]
        events = self._chat_events(scenario, text, conversation, len(files), body)
        return self._stream(scenario, events, record)

    def _chat_events(
        self, scenario: str, text: str, conversation: str, files: int, body: dict[str, Any]
    ) -> list[bytes]:
        message_id = str(uuid.uuid4())
        base = {"conversation_id": conversation, "message_id": message_id, "task_id": "task-1"}
        answer = f"Dify heard: {text}" + (f" (with {files} file(s))" if files else "")
        event = "agent_message" if scenario == "agent" else "message"
        out: list[bytes] = [_sse({"event": "workflow_started", **base, "data": {"id": "wr-1"}})]
        if scenario == "agent":
            out.extend(_agent_events(base, text))
        if scenario == "think":
            answer = "<think>Let me think about größe…</think>\n\n" + answer
        if scenario == "unknown":
            out.append(_sse({"event": "mystery_event", **base, "payload": {"x": 1}}))
            out.append(b'event: tts_message\ndata: {"event": "tts_message", "audio": ""}\n\n')
        failure = _CHAT_FAILURES.get(scenario)
        if failure is not None:  # a partial answer, then the error event that ends the stream
            out.append(_sse({"event": event, **base, "answer": "Partial "}))
            out.append(_sse({"event": "error", **base, **failure}))
            return out
        if scenario == "invalid":
            out.append(b"data: {not json at all\n\n")
        if scenario != "empty":
            for i, piece in enumerate(words(answer)):
                out.append(_sse({"event": event, **base, "answer": piece}))
                if i == 1:
                    out.append(b"event: ping\n\n")
        if scenario == "replace":
            out.append(_sse({"event": "message_replace", **base, "answer": "Replaced by moderation."}))
        usage = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18, "total_price": "0.0001"}
        out.append(_sse({"event": "message_end", **base, "id": message_id, "metadata": {"usage": usage}}))
        return out

    async def workflow(self, request: Request) -> Response:
        record = await self.recorder.record("dify", request)
        denied = self._auth(request)
        if denied is not None:
            return denied
        body = record.body if isinstance(record.body, dict) else {}
        inputs = body.get("inputs") or {}
        scenario, text = scenario_of(str(inputs.get("langbot_user_message_text", "")))
        record.scenario = scenario
        early = _early(scenario)
        if early is not None:
            return early
        answer = f"Workflow heard: {text} (conversation {inputs.get('langbot_conversation_id', '-')})"
        return self._stream(scenario, _workflow_events(scenario, answer), record)

    def _stream(self, scenario: str, events: list[bytes], record: Any) -> Response:
        body = scripted(scenario, events, slow_after=2, drop_after=max(2, len(events) // 2))
        return StreamedBody(body, record, media_type="text/event-stream")


def _workflow_events(scenario: str, answer: str) -> list[bytes]:
    """The events of a workflow run: started, its nodes, then failed (`fail`) or the answer in chunks."""
    run = {"task_id": "task-w", "workflow_run_id": "wr-2"}
    out = [
        _sse({"event": "workflow_started", **run, "data": {"id": "wr-2", "workflow_id": "wf-1"}}),
        _sse(
            {
                "event": "node_started",
                **run,
                "data": {
                    "id": "n0",
                    "node_id": "start",
                    "node_type": "start",
                    "title": "Start",
                    "index": 1,
                },
            }
        ),
        _sse(
            {
                "event": "node_started",
                **run,
                "data": {"id": "n1", "node_id": "llm", "node_type": "llm", "title": "LLM", "index": 2},
            }
        ),
    ]
    if scenario in ("fail", "ratelimited"):
        error = (
            "Node LLM run failed: LLM timeout"
            if scenario == "fail"
            else "[openai] Rate Limit Error, Error code: 429 - Rate limit reached for requests"
        )
        return out + _workflow_failed(run, error)
    return out + _workflow_answered(run, answer)


def _workflow_failed(run: dict[str, str], error: str) -> list[bytes]:
    """The LLM node fails, and with it the workflow."""
    out: list[bytes] = []
    out.append(
        _sse(
            {
                "event": "node_finished",
                **run,
                "data": {"id": "n1", "node_type": "llm", "status": "failed", "error": "LLM timeout"},
            }
        )
    )
    out.append(
        _sse(
            {
                "event": "workflow_finished",
                **run,
                "data": {
                    "id": "wr-2",
                    "status": "failed",
                    "outputs": None,
                    "error": error,
                },
            }
        )
    )
    return out


def _workflow_answered(run: dict[str, str], answer: str) -> list[bytes]:
    """The answer in text chunks, then the LLM node and the workflow succeed."""
    out: list[bytes] = []
    for piece in words(answer):
        out.append(
            _sse(
                {
                    "event": "text_chunk",
                    **run,
                    "data": {"text": piece, "from_variable_selector": ["llm", "text"]},
                }
            )
        )
    out.append(
        _sse(
            {
                "event": "node_finished",
                **run,
                "data": {
                    "id": "n1",
                    "node_type": "llm",
                    "status": "succeeded",
                    "outputs": {"text": answer},
                    "execution_metadata": {"total_tokens": 21},
                },
            }
        )
    )
    out.append(
        _sse(
            {
                "event": "workflow_finished",
                **run,
                "data": {
                    "id": "wr-2",
                    "status": "succeeded",
                    "outputs": {"answer": answer},
                    "error": None,
                    "total_tokens": 21,
                    "total_steps": 3,
                },
            }
        )
    )
    return out


def _early(scenario: str) -> Response | None:
    """Scenarios answered before any stream."""
    if scenario == "401":
        return json_error(401, {"code": "unauthorized", "message": "Access token is invalid", "status": 401})
    if scenario == "429":
        return json_error(
            429,
            {
                "code": "too_many_requests",
                "message": "Too many requests, please try again later.",
                "status": 429,
            },
            {"retry-after": "7"},
        )
    if scenario == "500":
        return json_error(
            500, {"code": "internal_server_error", "message": "Internal Server Error", "status": 500}
        )
    return None
