"""An n8n webhook (`POST /n8n/webhook/<path>`) as n8n answers it: streamed `begin` / `item` / `end`
objects (newline-separated or concatenated), a plain JSON body of the last node (`{"response": ...}`),
an array of entries, plain text, or the immediate acknowledgement `{"message":"Workflow was started"}`.

The webhook path picks the authentication it checks: `/n8n/webhook/basic/...` (user `alice`, password
`s3cret-pass`), `/n8n/webhook/jwt/...` (HS256 secret `jwt-signing-secret`), `/n8n/webhook/header/...`
(`X-Webhook-Token: header-token-value`), anything else none.

Scenarios (`mock:<name>` in `chatInput`): `echo` (streamed, newline-separated; default), `concat`
(streamed, concatenated objects), `json` (`{"response": ...}`), `output` (`{"output": ...}`), `entries`
(`[{"response": ...}]`), `text` (text/plain body), `pretty` (pretty-printed JSON), `ack` (async
acknowledgement), `empty` (empty body), `error` (a streamed `error` item), `401`, `429`, `500`, `slow`,
`drop`; `keepalive` (n8n's `{"type":"keepalive"}` line, written every 30 s of a streaming execution,
before the first item and between items), `keepalive-error` (keep-alives, then the `error` chunk n8n
2.41 writes when a Code node throws: `content` null, the node in `metadata`, no `end`), `typed-json`
(a plain JSON answer that happens to have a `type` key: `{"type": "error", "response": ...}`).
"""

from __future__ import annotations

import base64
import json
from typing import Any

import jwt
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
    words,
)

BASIC = ("alice", "s3cret-pass")
JWT_SECRET = "jwt-signing-secret-" + "0123456789abcdef" * 3
HEADER = ("x-webhook-token", "header-token-value")
#: what n8n writes into a streaming response every 30 s from the execution's start
KEEPALIVE = b'{"type":"keepalive"}\n'


def _check_auth(request: Request, path: str) -> bool:
    kind = path.split("/", 1)[0]
    auth = request.headers.get("authorization", "")
    if kind == "basic":
        expected = "Basic " + base64.b64encode(f"{BASIC[0]}:{BASIC[1]}".encode()).decode()
        return auth == expected
    if kind == "jwt":
        if not auth.startswith("Bearer "):
            return False
        try:
            claims = jwt.decode(auth[7:], JWT_SECRET, algorithms=["HS256", "HS384", "HS512"])
        except jwt.PyJWTError:
            return False
        return "exp" in claims
    if kind == "header":
        return request.headers.get(HEADER[0]) == HEADER[1]
    return True


class N8nMock:
    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def routes(self) -> list[Route]:
        return [Route("/n8n/webhook/{path:path}", self.webhook, methods=["POST"])]

    async def webhook(self, request: Request) -> Response:
        record = await self.recorder.record("n8n", request)
        if not _check_auth(request, request.path_params["path"]):
            return PlainTextResponse("Authorization data is wrong!", status_code=403)
        body = record.body if isinstance(record.body, dict) else {}
        scenario, text = scenario_of(str(body.get("chatInput", "")))
        record.scenario = scenario
        answer = f"n8n heard: {text} [{body.get('session_id', '-')}]"
        if scenario == "401":
            return json_error(401, {"code": 401, "message": "Authorization is required!"})
        if scenario == "429":
            return json_error(429, {"message": "Too many requests"}, {"retry-after": "3"})
        if scenario == "500":
            return json_error(500, {"code": 0, "message": "Error in workflow"})
        if scenario == "502":  # a proxy in front of n8n, not the workflow
            return json_error(502, {"message": "Bad Gateway"})
        if scenario == "json":
            return JSONResponse({"response": answer})
        if scenario == "typed-json":
            return JSONResponse({"type": "error", "response": answer})
        if scenario == "output":
            return JSONResponse({"output": answer, "other": 1})
        if scenario == "entries":
            return JSONResponse([{"response": answer}])
        if scenario == "ack":
            return JSONResponse({"message": "Workflow was started"})
        if scenario == "empty":
            return Response(b"", media_type="application/json")
        if scenario in ("text", "pretty"):
            raw = (
                answer.encode() if scenario == "text" else json.dumps({"response": answer}, indent=2).encode()
            )
            kind = "text/plain; charset=utf-8" if scenario == "text" else "application/json"
            return StreamedBody(pieces([raw]), record, media_type=kind)
        items = self._items(scenario, answer)
        stream = scripted(scenario, items, slow_after=2, drop_after=3)
        return StreamedBody(stream, record, media_type="application/json; charset=utf-8")

    def _items(self, scenario: str, answer: str) -> list[bytes]:
        sep = b"" if scenario == "concat" else b"\n"
        meta: dict[str, Any] = {"nodeId": "agent-1", "nodeName": "AI Agent", "itemIndex": 0, "runIndex": 0}
        if scenario == "keepalive-error":
            failed = {"nodeId": "code-1", "nodeName": "Call the tool", "runIndex": 0, "itemIndex": 0}
            return [
                KEEPALIVE,
                KEEPALIVE,
                json.dumps({"type": "error", "content": None, "metadata": failed}).encode(),
            ]
        out = [KEEPALIVE, KEEPALIVE] if scenario == "keepalive" else []
        out.append(json.dumps({"type": "begin", "metadata": meta}).encode() + sep)
        for index, piece in enumerate(words(answer)):
            out.append(
                json.dumps({"type": "item", "content": piece, "metadata": meta}, ensure_ascii=False).encode()
                + sep
            )
            if scenario == "keepalive" and index == 1:
                out.append(KEEPALIVE)
        if scenario in ("error", "stream-429"):
            content = {
                "error": "Node 'AI Agent' failed: quota",
                # what an OpenAI node in the workflow reports for its provider's 429
                "stream-429": "The service is receiving too many requests from you (429 Too Many Requests)",
            }[scenario]
            out.append(json.dumps({"type": "error", "content": content, "metadata": meta}).encode() + sep)
        out.append(json.dumps({"type": "end", "metadata": meta}).encode() + sep)
        return out
