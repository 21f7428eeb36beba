"""A scripted ACP agent (JSON-RPC 2.0 over stdio, one JSON object per line) for the acp runner's tests.

`python -m agentrunner_runners.testing.fake_acp` (or `install_fake(dir, "acp")`) speaks the agent side
of the public ACP schema by hand, not through a library, so the runner's client is checked against the
wire itself: every line is written in pieces that cut UTF-8 sequences (with flushes in between), and
every message the client sends is checked (`initialize` first, `session/*` on a known session, one
answer per request of ours, a `cwd` that is the working directory). A violation prints `fake acp:
protocol violation: ...` on stderr and exits 2.

The turn is chosen by the prompt's first word (`fake_acp_turns.py`):

| word | turn |
| --- | --- |
| (anything else) | a thought, then `Fake heard: <prompt> (turn N)` in three chunks; usage and a cumulative cost of 0.01 per turn |
| `multibyte` | an answer of emoji and CJK, chunks cut inside characters |
| `tools` | commentary, a `read` tool call and its completion, a call whose input comes in its update, a plan, a second tool call left open, the answer |
| `permit` | asks permission for an edit inside the workspace, one outside it, a command, and an announced edit inside by its id alone; answers with the decisions |
| `fs` | writes `outbox/note.txt` through `fs/write_text_file`, reads it back, tries `/etc/hostname`; answers with what happened |
| `terminal` | runs `echo from-terminal` through `terminal/*`; answers with its output or the error |
| `blocks` | answers with the prompt's content blocks (type, mime type, uri; text) |
| `notice` | an `informational` notice chunk (Claude's `_meta`), then the answer |
| `die` | a chunk, a line on stderr carrying `$FAKE_ACP_SECRET`, exit 3 mid-turn |
| `hang` | starts a grandchild (`sleep`), then waits for `session/cancel` and answers `cancelled` |
| `stubborn` | like `hang`, but ignores `session/cancel` |
| `maxtokens`, `maxturns`, `refusal` | that stop reason |
| `autherror` | a JSON-RPC error -32000 for the prompt |
| `empty` | `end_turn` without any text |

Environment: `FAKE_ACP_NO_INIT=1` never answers `initialize`; `FAKE_ACP_CAPS` (JSON) replaces the
`agentCapabilities`; `FAKE_ACP_LOG` gets one JSON line per process (methods received, the session, the
mode set, the MCP servers, the client's capabilities, the prompt blocks, the environment's names).
Sessions are files under `$FAKE_ACP_HOME` (default `~/.fake-acp`); `session/load` replays their history
before answering, `session/resume` does not, an unknown id is error -32002.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from agentrunner_runners.testing.fake_acp_turns import Turns

CAPS = {
    "loadSession": True,
    "promptCapabilities": {"image": True, "audio": False, "embeddedContext": True},
    "mcpCapabilities": {"http": True, "sse": False},
    "sessionCapabilities": {"resume": {}},
}
MODES = {
    "currentModeId": "auto",
    "availableModes": [{"id": m, "name": m} for m in ("default", "auto", "workspace-write")],
}
_LOG: dict[str, Any] = {"methods": [], "pid": os.getpid(), "env": sorted(os.environ)}


def _violation(message: str) -> None:
    print(f"fake acp: protocol violation: {message}", file=sys.stderr, flush=True)
    _flush_log()
    sys.exit(2)


def _flush_log() -> None:
    path = os.environ.get("FAKE_ACP_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(_LOG) + "\n")


def send(message: dict[str, Any]) -> None:
    """One line in three pieces, the cuts inside a multi-byte character when there is one."""
    data = (json.dumps({"jsonrpc": "2.0", **message}, ensure_ascii=False) + "\n").encode()
    wide = next((i for i, b in enumerate(data) if b >= 0xC0), len(data) // 2)
    for piece in (data[: wide + 1], data[wide + 1 : wide + 2], data[wide + 2 :]):
        sys.stdout.buffer.write(piece)
        sys.stdout.buffer.flush()
        time.sleep(0.001)


class Agent:
    def __init__(self) -> None:
        self.home = Path(os.environ.get("FAKE_ACP_HOME") or Path.home() / ".fake-acp")
        self.home.mkdir(parents=True, exist_ok=True)
        self.initialized = False
        self.session = ""
        self.history: list[list[str]] = []
        self.next_id = 1000
        self.pending: list[dict[str, Any]] = []
        self.cancelled = False
        self.log = _LOG
        self.turns = Turns(self)

    def flush_log(self) -> None:
        _flush_log()

    # -- io -------------------------------------------------------------------------------------------

    def read(self) -> dict[str, Any] | None:
        if self.pending:
            return self.pending.pop(0)
        line = sys.stdin.buffer.readline()
        if not line:
            return None
        message: dict[str, Any] = json.loads(line)
        if message.get("method"):
            _LOG["methods"].append(message["method"])
        return message

    def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """A request to the client; its answer (other messages meanwhile are kept for later)."""
        self.next_id += 1
        rid = self.next_id
        send({"id": rid, "method": method, "params": params})
        while True:
            message = self.read()
            if message is None:
                sys.exit(0)
            if message.get("id") == rid and "method" not in message:
                return message
            if message.get("method") == "session/cancel":
                self.cancelled = True
            self.pending.append(message)

    def update(self, update: dict[str, Any]) -> None:
        send({"method": "session/update", "params": {"sessionId": self.session, "update": update}})

    def chunk(self, text: str, kind: str = "agent_message_chunk", meta: dict[str, Any] | None = None) -> None:
        update: dict[str, Any] = {"sessionUpdate": kind, "content": {"type": "text", "text": text}}
        if meta:
            update["_meta"] = meta
        self.update(update)

    # -- sessions -------------------------------------------------------------------------------------

    def _file(self, session: str) -> Path:
        return self.home / f"{session}.json"

    def _check_session(self, params: dict[str, Any]) -> None:
        if os.path.realpath(str(params.get("cwd"))) != os.path.realpath(os.getcwd()):
            _violation(f"cwd {params.get('cwd')!r} is not the working directory")
        _LOG["mcpServers"] = params.get("mcpServers")

    def open(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._check_session(params)
        if method == "session/new":
            self.session = str(uuid.uuid4())
            self.history = []
            self._file(self.session).write_text("[]")
        else:
            file = self._file(str(params.get("sessionId")))
            if not file.exists():
                raise LookupError(params.get("sessionId"))
            self.session = str(params["sessionId"])
            self.history = json.loads(file.read_text())
            if method == "session/load":
                for user, agent in self.history:
                    self.chunk(user, "user_message_chunk")
                    self.chunk(agent)
        _LOG["session"], _LOG["opened"] = self.session, method
        return {"sessionId": self.session, "modes": MODES} if method == "session/new" else {"modes": MODES}

    # -- the loop -------------------------------------------------------------------------------------

    def serve(self) -> None:
        while (message := self.read()) is not None:
            method, rid, params = message.get("method"), message.get("id"), message.get("params") or {}
            if method is None:
                _violation(f"an answer to nothing: {message}")
            if not self.initialized and method != "initialize":
                _violation(f"{method} before initialize")
            if method == "initialize":
                _LOG["clientCapabilities"] = params.get("clientCapabilities")
                if os.environ.get("FAKE_ACP_NO_INIT"):
                    continue
                self.initialized = True
                caps = json.loads(os.environ.get("FAKE_ACP_CAPS") or "null") or CAPS
                send(
                    {
                        "id": rid,
                        "result": {
                            "protocolVersion": 1,
                            "agentCapabilities": caps,
                            "agentInfo": {"name": "fake-acp", "version": "1.0"},
                        },
                    }
                )
            elif method in ("session/new", "session/load", "session/resume"):
                try:
                    send({"id": rid, "result": self.open(method, params)})
                except LookupError:
                    send({"id": rid, "error": {"code": -32002, "message": "Resource not found"}})
            elif method == "session/set_mode":
                _LOG["mode"] = params.get("modeId")
                send({"id": rid, "result": {}})
            elif method == "session/prompt":
                if params.get("sessionId") != self.session:
                    _violation("prompt for an unknown session")
                self.prompt(rid, params.get("prompt") or [])
            elif method == "session/cancel":
                self.cancelled = True
            elif rid is not None:
                send({"id": rid, "error": {"code": -32601, "message": f"Method not found: {method}"}})
        _flush_log()

    def prompt(self, rid: Any, blocks: list[dict[str, Any]]) -> None:
        _LOG["prompt"] = [{k: v for k, v in b.items() if k not in ("data",)} for b in blocks]
        text = " ".join(b.get("text", "") for b in blocks if b.get("type") == "text").strip()
        word = (text.split() or [""])[0].lower().rstrip(":,.!?")
        self.cancelled = False
        handler = getattr(self.turns, f"turn_{word}", None)
        outcome = handler(text, blocks) if handler is not None else self.turns.turn_echo(text, blocks)
        if isinstance(outcome, dict) and "error" in outcome:
            send({"id": rid, **outcome})
            return
        answer, stop = outcome if isinstance(outcome, tuple) else (outcome, "end_turn")
        self.history.append([text, answer])
        self._file(self.session).write_text(json.dumps(self.history))
        turn = len(self.history)
        self.update(
            {
                "sessionUpdate": "usage_update",
                "used": 100 * turn,
                "size": 200000,
                "cost": {"amount": round(0.01 * turn, 4), "currency": "USD"},
            }
        )
        usage = {"totalTokens": 120, "inputTokens": 100, "outputTokens": 20, "thoughtTokens": 5}
        send({"id": rid, "result": {"stopReason": stop, "usage": usage}})


def main() -> None:
    Agent().serve()


if __name__ == "__main__":
    main()
