"""Langflow's run endpoint (`POST /langflow/api/v1/run/{flow_id}`) as its docs show it: with
`?stream=true`, `{"event": ..., "data": ...}` objects separated by blank lines (`add_message`, `token`,
`end` with the whole result, `error`); otherwise one JSON result whose answer is at
`outputs[0].outputs[0].results.message.text`. An `x-api-key` of `wrong-key` is refused (403); a flow id
`missing` is not found (404).

Scenarios (`mock:<name>` in `input_value`): `echo` (default), `old` (the older
`outputs.message.message` shape), `messages` (only `messages[0].message`), `notokens` (a stream with
no `token` events, the answer only in messages), `unknown` (unknown event types), `error` (an error
event), `empty`, `429`, `500`, `slow`, `drop`.
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


def _event(event: str, data: dict[str, Any]) -> bytes:
    return json.dumps({"event": event, "data": data}, ensure_ascii=False).encode() + b"\n\n"


def _result(session: str, text: str, scenario: str, flow_id: str) -> dict[str, Any]:
    message = {
        "text": text,
        "sender": "Machine",
        "sender_name": "AI",
        "session_id": session,
        "flow_id": flow_id,
    }
    if scenario == "old":
        output: dict[str, Any] = {"outputs": {"message": {"message": text, "type": "text"}}}
    elif scenario in ("messages", "empty"):
        output = {"results": {}}
    else:
        output = {"results": {"message": message}, "artifacts": {"message": text}}
    result: dict[str, Any] = {
        "session_id": session,
        "outputs": [{"inputs": {"input_value": "…"}, "outputs": [output]}],
    }
    if scenario == "messages":
        result["outputs"][0]["outputs"][0]["messages"] = [{"message": text, "sender": "Machine"}]
    return result


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
            return json_error(500, {"detail": "Error running graph: component failed"})
        session = str(body.get("session_id") or uuid.uuid4())
        answer = "" if scenario == "empty" else f"Langflow heard: {text} ({session[:8]})"
        result = _result(session, answer, scenario, flow_id)
        if request.query_params.get("stream", "false").lower() != "true":
            return JSONResponse(result)
        return self._stream(record, scenario, session, text, answer, result)

    def _stream(
        self, record: Any, scenario: str, session: str, text: str, answer: str, result: dict[str, Any]
    ) -> Response:
        ai_id = str(uuid.uuid4())
        user = {
            "sender": "User",
            "sender_name": "User",
            "session_id": session,
            "text": text,
            "id": str(uuid.uuid4()),
        }
        machine = {"sender": "Machine", "sender_name": "AI", "session_id": session, "id": ai_id}
        out = [_event("add_message", user), _event("add_message", {**machine, "text": ""})]
        if scenario == "unknown":
            out.append(_event("vertices_sorted", {"ids": ["ChatInput-1"]}))
        if scenario != "notokens":
            for piece in words(answer):
                out.append(
                    _event("token", {"chunk": piece, "id": ai_id, "timestamp": "2026-01-01 00:00:00 UTC"})
                )
        if scenario == "error":
            out.append(_event("error", {"error": "Error running graph: OpenAI quota exceeded", "id": ai_id}))
        else:
            out.append(_event("add_message", {**machine, "text": answer}))
            out.append(_event("end", {"result": result}))
        body = scripted(scenario, out, slow_after=3, drop_after=4)
        return StreamedBody(body, record, media_type="application/x-ndjson")
