"""DashScope (Alibaba Cloud Model Studio / Bailian) application completion,
`POST /dashscope/api/v1/apps/{app_id}/completion` with `X-DashScope-SSE: enable`, as the public docs
describe it: SSE blocks of `id:` / `event:result` / `:HTTP_STATUS/200` / `data:{output, usage,
request_id}`, `output.finish_reason` the string `"null"` until the last event, `output.text`
incremental or cumulative as the request's `parameters.incremental_output` says; errors as
`{"code", "message", "request_id"}` (HTTP errors) or `event:error` blocks.

Scenarios (`mock:<name>` in `input.prompt`): `echo` (default), `thoughts` (agent thoughts first),
`refs` (`<ref>[n]</ref>` markers split across events, `doc_references` at the end), `workflow`
(`flow_stream_mode=message_format` messages), `error` (an error event mid-stream), `limited` (an
error event mid-stream: `:HTTP_STATUS/429`, code `LimitRequests`), `limitedbody` (the same as a JSON
body), `business` (HTTP 200 with a JSON error body), `429`, `500`, `slow`, `drop`. An API key `wrong-key` gets HTTP 401
`InvalidApiKey` as JSON, although the request asked for a stream.
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


def _block(seq: int, data: dict[str, Any], event: str = "result", status: int = 200) -> bytes:
    return f"id:{seq}\nevent:{event}\n:HTTP_STATUS/{status}\ndata:{json.dumps(data, ensure_ascii=False)}\n\n".encode()


#: the model behind the app hit its request limit (HTTP 429 in the block's `:HTTP_STATUS` line)
LIMITED = {"code": "LimitRequests", "message": "You exceeded your current requests list."}


class DashScopeMock:
    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def routes(self) -> list[Route]:
        return [Route("/dashscope/api/v1/apps/{app_id}/completion", self.completion, methods=["POST"])]

    async def completion(self, request: Request) -> Response:
        record = await self.recorder.record("dashscope", request)
        request_id = str(uuid.uuid4())
        if request.headers.get("authorization", "") in ("", "Bearer wrong-key"):
            return json_error(
                401,
                {"code": "InvalidApiKey", "message": "Invalid API-key provided.", "request_id": request_id},
            )
        body = record.body if isinstance(record.body, dict) else {}
        data_in = body.get("input") or {}
        params = body.get("parameters") or {}
        scenario, text = scenario_of(str(data_in.get("prompt", "")))
        record.scenario = scenario
        if scenario == "business":
            return JSONResponse(
                {"code": "InvalidParameter", "message": "App is not published", "request_id": request_id}
            )
        if scenario == "limitedbody":  # the same limit as `limited`, as a JSON body instead of a stream
            return JSONResponse({**LIMITED, "request_id": request_id})
        if scenario == "429":
            return json_error(
                429,
                {
                    "code": "Throttling.RateQuota",
                    "message": "Requests rate limit exceeded, please try again later.",
                    "request_id": request_id,
                },
                {"retry-after": "5"},
            )
        if scenario == "500":
            return json_error(
                500,
                {
                    "code": "InternalError",
                    "message": "An internal error has occured, please try again later.",
                    "request_id": request_id,
                },
            )
        session = str(data_in.get("session_id") or uuid.uuid4().hex)
        images = len(data_in.get("image_list") or [])
        answer = f"百炼 heard: {text} (session {session[:6]})" + (
            f" (with {images} image(s))" if images else ""
        )
        events = self._events(scenario, answer, session, request_id, bool(params.get("incremental_output")))
        stream = scripted(scenario, events, slow_after=1, drop_after=2)
        return StreamedBody(stream, record, media_type="text/event-stream;charset=UTF-8")

    def _events(
        self, scenario: str, answer: str, session: str, request_id: str, incremental: bool
    ) -> list[bytes]:
        if scenario == "refs":
            answer = "Returns are free within 30 days<ref>[1]</ref>, refunds take 5 days<ref>[2]</ref>."
        parts = words(answer)
        if scenario == "refs":  # cut a marker in two across events
            parts = [
                "Returns are free within 30 days<re",
                "f>[1]</ref>, refunds take ",
                "5 days<ref>[2]",
                "</ref>.",
            ]
        out: list[bytes] = []
        sent = ""
        usage = {"models": [{"model_id": "qwen-max", "input_tokens": 25, "output_tokens": 9}]}
        thoughts = [{"thought": "The user asks a question; I will search the knowledge base.", "action_type": "api",
                     "action_name": "rag", "action": "rag"}]  # fmt: skip
        for i, part in enumerate(parts):
            sent += part
            last = i == len(parts) - 1
            output: dict[str, Any] = {"session_id": session, "finish_reason": "stop" if last else "null",
                                      "text": part if incremental else sent}  # fmt: skip
            if scenario == "thoughts":
                output["thoughts"] = thoughts
            if scenario == "workflow":
                content = output.pop("text")
                output["text"] = None
                output["workflow_message"] = {"node_id": "LLM_1", "node_name": "大模型", "node_type": "LLM",
                                              "node_status": "executing", "message": {"role": "assistant", "content": content}}  # fmt: skip
            if last and scenario == "refs":
                output["doc_references"] = [
                    {"index_id": "1", "title": "退货政策", "doc_name": "售后手册.pdf", "text": "…"},
                    {"index_id": "2", "title": "退款", "doc_name": "财务 FAQ.docx", "text": "…"},
                ]
            out.append(
                _block(i + 1, {"output": output, "usage": usage if last else {}, "request_id": request_id})
            )
            if scenario == "limited" and i == 1:
                out.append(_block(i + 2, {**LIMITED, "request_id": request_id}, "error", 429))
                return out
            if scenario == "error" and i == 1:
                out.append(
                    _block(
                        i + 2,
                        {
                            "code": "InternalError.Algo",
                            "message": "Model inference failed",
                            "request_id": request_id,
                        },
                        "error",
                        500,
                    )
                )
                return out
        return out
