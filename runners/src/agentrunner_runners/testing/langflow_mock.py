"""Langflow's run endpoint (`POST /langflow/api/v1/run/{flow_id}`) as Langflow 1.13 answers it.

With `?stream=true` (content type `text/event-stream`, but not SSE): `{"event": ..., "data": ...}`
objects separated by blank lines. The user's message as a complete `add_message`; then per Chat
Output, a `partial` `add_message` whose text is the **first chunk**, the same chunk again as the first
`token`, the other tokens, the complete `add_message`; then `end` with the whole result. A failing flow
sends `error` (`data.text` the message, `data.error` a boolean, `category: "error"`) and then keeps the
connection open without a word, as the real server does. Without `stream`: one JSON result, one
`outputs[0].outputs[i]` per Chat Output, the text at `results.message.text`; a failing flow is an HTTP
500 whose `detail` is a JSON text `{"message": "Error running graph: …", "traceback": …}`.

An `x-api-key` of `wrong-key` is refused (403); a flow id `missing` is not found (404).

Scenarios (`mock:<name>` in `input_value`): `echo` (default), `two` (two Chat Outputs: the one that
is listed second in the result is a whole message that arrives first in the stream), `old` (the
older `outputs.message.message` shape), `messages` (only `messages[0].message`), `notokens` (a stream
with no `token` events, the answer only in messages), `unknown` (unknown event types), `fail` (the
flow fails), `ratelimited` (the flow fails on its LLM's 429), `empty`, `429`, `500` (a bare server
error, not a flow failure), `slow`, `drop`.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from agentrunner_runners.testing.mockkit import (
    Recorder,
    StreamedBody,
    json_error,
    pieces,
    scenario_of,
    scripted,
    slow,
    words,
)

FAILURES = {
    "fail": "Error building Component Streamer: \n\nthe flow failed on purpose: käse",
    "ratelimited": "Error building Component OpenAI: \n\nError code: 429 - {'error': {'message': "
    "'Rate limit reached for gpt-4o-mini', 'type': 'requests', 'code': 'rate_limit_exceeded'}}",
}


def _event(event: str, data: dict[str, Any]) -> bytes:
    return json.dumps({"event": event, "data": data}).encode() + b"\n\n"  # ASCII, as Langflow writes


def _message(session: str, text: str, *, sender: str, msg_id: str, state: str = "complete") -> dict[str, Any]:
    """A stored message as Langflow 1.13 serializes it (the fields a client reads, and some it doesn't)."""
    properties = {"text_color": None, "edited": False, "state": state, "source": {"id": None}}
    return {
        "text_key": "text",
        "sender": sender,
        "sender_name": "AI" if sender == "Machine" else "User",
        "session_id": session,
        "text": text,
        "files": [],
        "error": False,
        "properties": properties,
        "category": "message",
        "content_blocks": [],
        "id": msg_id,
        "flow_id": str(uuid.uuid4()),
    }


def _output(session: str, text: str, scenario: str, component: str) -> dict[str, Any]:
    if scenario == "old":
        return {"outputs": {"message": {"message": text, "type": "text"}}}
    if scenario in ("messages", "empty"):
        out: dict[str, Any] = {"results": {}}
        if scenario == "messages":
            out["messages"] = [{"message": text, "sender": "Machine"}]
        return out
    message = _message(session, text, sender="Machine", msg_id=str(uuid.uuid4()))
    return {
        "results": {"message": message},
        "artifacts": {"message": text},
        "outputs": {"message": {"message": text, "type": "text"}},
        "component_display_name": "Chat Output",
        "component_id": component,
    }


def _answers(scenario: str, text: str, session: str) -> list[str]:
    if scenario == "empty":
        return [""]
    first = f"Langflow heard: {text} ({session[:8]})"
    return [first, f"Second output: {text}"] if scenario == "two" else [first]


class LangflowMock:
    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def routes(self) -> list[Route]:
        return [Route("/langflow/api/v1/run/{flow_id}", self.run, methods=["POST"])]

    async def run(self, request: Request) -> Response:
        record = await self.recorder.record("langflow", request)
        if request.headers.get("x-api-key") == "wrong-key":
            return json_error(403, {"detail": "Invalid API key"})
        flow_id = request.path_params["flow_id"]
        if flow_id == "missing":
            return json_error(404, {"detail": f"Flow identifier {flow_id} not found"})
        body = record.body if isinstance(record.body, dict) else {}
        scenario, text = scenario_of(str(body.get("input_value", "")))
        record.scenario = scenario
        if scenario == "429":
            return json_error(429, {"detail": "Rate limit exceeded"}, {"retry-after": "2"})
        if scenario == "500":
            return PlainTextResponse("Internal Server Error", status_code=500)
        session = str(body.get("session_id") or uuid.uuid4())
        answers = _answers(scenario, text, session)
        streaming = request.query_params.get("stream", "false").lower() == "true"
        if scenario in FAILURES and not streaming:
            detail = {"message": f"Error running graph: {FAILURES[scenario]}", "traceback": None,
                      "description": None, "code": None, "suggestion": None}  # fmt: skip
            return JSONResponse({"detail": json.dumps(detail, separators=(",", ":"))}, status_code=500)
        outputs = [_output(session, a, scenario, f"ChatOutput-{i}") for i, a in enumerate(answers)]
        result = {"session_id": session, "outputs": [{"inputs": {"input_value": text}, "outputs": outputs}]}
        if not streaming:
            return JSONResponse(result)
        return self._stream(record, scenario, session, text, answers, result)

    def _stream(
        self, record: Any, scenario: str, session: str, text: str, answers: list[str], result: dict[str, Any]
    ) -> Response:
        out = [_event("add_message", _message(session, text, sender="User", msg_id=str(uuid.uuid4())))]
        if scenario == "unknown":
            out.append(_event("vertices_sorted", {"ids": ["ChatInput-1"]}))
        if scenario in FAILURES:
            error = {**_message(session, FAILURES[scenario].rpartition("\n")[2] + "\n", sender="Streamer",
                                msg_id=str(uuid.uuid4())), "category": "error"}  # fmt: skip
            out.append(_event("error", error))
            record.scenario = scenario
            return StreamedBody(slow(out, total=60), record, media_type="text/event-stream; charset=utf-8")
        if scenario == "two":  # the echoing output finishes first but is listed last in the result
            echo = _message(session, answers[1], sender="Machine", msg_id=str(uuid.uuid4()))
            out.append(_event("add_message", echo))
            answers = answers[:1]
        for answer in answers:
            out.extend(self._ai_message(scenario, session, answer))
        out.append(_event("end", {"result": result}))
        body = (
            pieces(out)
            if scenario not in ("slow", "drop")
            else scripted(scenario, out, slow_after=3, drop_after=4)
        )
        return StreamedBody(body, record, media_type="text/event-stream; charset=utf-8")

    @staticmethod
    def _ai_message(scenario: str, session: str, answer: str) -> list[bytes]:
        """One streamed Chat Output: the first chunk in a partial message and again as a token."""
        msg_id = str(uuid.uuid4())
        chunks = words(answer)
        out = []
        if scenario != "notokens" and chunks:
            partial = _message(session, chunks[0], sender="Machine", msg_id=msg_id, state="partial")
            out.append(_event("add_message", partial))
            for chunk in chunks:
                out.append(_event("token", {"chunk": chunk, "id": msg_id}))
        out.append(_event("add_message", _message(session, answer, sender="Machine", msg_id=msg_id)))
        return out
