"""The fake `codex app-server --listen stdio://` (JSON-RPC over stdio), for tests and the demo.

`codex app-server ...` runs this (from `fake_codex.main`). It speaks the v2 wire format of the public
codex sources (`codex-rs/app-server-protocol`, `codex-rs/app-server/README.md`; no `"jsonrpc"` member
on the wire, one JSON object per line, each line written in pieces that cut UTF-8 sequences) and
checks every message the client sends: `initialize` first, `initialized` before anything else, unique
request ids, `cwd` = its working directory, valid `approvalPolicy` / `sandbox`, `turn/start` on the
loaded thread with text input, the prompt never in argv, `turn/interrupt` naming the running turn,
exactly one answer per server request with the right shape (-32601 for a method the client does not
know), a private `CODEX_HOME`. A violation prints `fake codex: protocol violation: ...` on stderr and
exits 2.

The turn's behaviour is chosen by the prompt's first word, like `codex exec` in `fake_codex.py`
(`tools`, `dup`, `multibyte`, `big`, `transient`, `ratelimit`, `turnfail`, `nothing`, `noanswer`,
`noturn`, `hang`, `slow`, `outbox`, `context`, `mcp ...`), plus:

| word | turn |
| --- | --- |
| `approve` | asks to run a command, to change a file in the workspace and one outside it; answers with the decisions |
| `elicit` | an MCP elicitation, a user-input request and an unknown server request; answers with the replies |
| `interrupted` | `turn/completed` with status `interrupted` on its own |
| (env `FAKE_CODEX_THREAD_START=fail`) | `thread/start` answers a JSON-RPC error |
| `stubborn` | like `hang`, but ignores `turn/interrupt` |

Waiting scenarios (`hang`, `slow`, approvals) honour `turn/interrupt`: the turn ends `interrupted`.
Threads live in `$CODEX_HOME/sessions/<id>.json` (shared with the exec fake); `thread/tokenUsage/updated`
reports the thread's running total. `thread/resume` of an unknown id is a JSON-RPC error, like a
missing rollout. With `FAKE_CODEX_LOG` set, each process appends `{argv, cwd, stdin (the prompt),
resumed, thread, client (methods received), answers, env, pid, started, ended}` there.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from agentrunner_runners.testing import fake_codex as base
from agentrunner_runners.testing.fake_claude import write_line

POLICIES = ("untrusted", "on-failure", "on-request", "never")
DECISIONS = ("accept", "acceptForSession", "decline", "cancel")
UNKNOWN_REQUEST = "item/unknownThing/request"


class Interrupted(Exception):
    """The client sent `turn/interrupt` for the running turn."""


def _violation(message: str) -> None:
    base._violation(message)


class Wire:
    """The client's messages (stdin) and ours (stdout), checked."""

    def __init__(self) -> None:
        self.buffer = b""
        self.ids: set[Any] = set()
        self.initialized = False
        self.got_initialize = False
        self.thread = ""
        self.turn = ""
        self.next_id = 0
        self.client: list[str] = []
        self.answers: dict[str, Any] = {}

    def send(self, message: dict[str, Any]) -> None:
        write_line(json.dumps(message, ensure_ascii=False))

    def notify(self, method: str, **params: Any) -> None:
        self.send({"method": method, "params": params})

    def read(self, timeout: float | None = None) -> dict[str, Any] | None:
        """The next client message (None after `timeout`); the end of stdin ends the fake."""
        end = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = None if end is None else max(end - time.monotonic(), 0)
            ready, _, _ = select.select([0], [], [], left)
            if not ready:
                return None
            chunk = os.read(0, 65536)
            if not chunk:
                finish(self, 0)
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        try:
            message = json.loads(line)
        except ValueError:
            _violation(f"not JSON: {line[:80]!r}")
        if not isinstance(message, dict):
            _violation("a message that is not an object")
        assert isinstance(message, dict)
        if "jsonrpc" in message and message["jsonrpc"] != "2.0":
            _violation("jsonrpc must be 2.0")
        if "method" in message:
            self.client.append(str(message["method"]))
            if "id" in message:
                if message["id"] in self.ids:
                    _violation(f"request id {message['id']} reused")
                self.ids.add(message["id"])
            if message["method"] != "initialize" and not self.got_initialize:
                _violation(f"{message['method']} before initialize")
            if message["method"] not in ("initialize", "initialized") and not self.initialized:
                _violation(f"{message['method']} before the initialized notification")
        return message

    def respond(self, message: dict[str, Any], result: dict[str, Any]) -> None:
        self.send({"id": message["id"], "result": result})

    def error(self, message: dict[str, Any], code: int, text: str) -> None:
        self.send({"id": message["id"], "error": {"code": code, "message": text}})

    def ask(self, method: str, params: dict[str, Any], timeout: float = 30.0) -> dict[str, Any]:
        """A server request; returns the client's answer (`result`, or `{"error": ...}`)."""
        self.next_id += 1
        request_id = self.next_id
        self.send({"id": request_id, "method": method, "params": params})
        end = time.monotonic() + timeout
        while True:
            message = self.read(max(end - time.monotonic(), 0))
            if message is None:
                _violation(f"no answer to {method} (request {request_id}) within {timeout:g} s")
            assert message is not None
            if "method" in message:
                self.between(message)
                continue
            if message.get("id") != request_id:
                _violation(f"an answer to unknown request {message.get('id')!r}")
            if ("result" in message) == ("error" in message):
                _violation("an answer needs exactly one of result / error")
            self.answers[method] = message.get("result", {"error": message.get("error")})
            return dict(self.answers[method])

    def between(self, message: dict[str, Any]) -> None:
        """A client message while the turn runs: only `turn/interrupt` is expected."""
        if message.get("method") != "turn/interrupt":
            _violation(f"unexpected {message.get('method')} during a turn")
        params = message.get("params") or {}
        if params.get("threadId") != self.thread or params.get("turnId") != self.turn:
            _violation("turn/interrupt names another turn")
        self.respond(message, {})
        raise Interrupted()

    def wait(self, seconds: float) -> None:
        """Sleeps, but a `turn/interrupt` ends the turn."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            message = self.read(left)
            if message is not None:
                self.between(message)


def _check_thread_params(params: dict[str, Any]) -> None:
    if os.path.realpath(str(params.get("cwd") or "")) != os.path.realpath(os.getcwd()):
        _violation("cwd is not the working directory")
    if params.get("approvalPolicy") not in POLICIES:
        _violation(f"approvalPolicy must be one of {POLICIES}")
    if params.get("sandbox") not in base.SANDBOXES:
        _violation(f"sandbox must be one of {base.SANDBOXES}")
    if "config" in params and not isinstance(params["config"], dict):
        _violation("config must be an object")


def _thread_file(thread: str) -> Path:
    sessions = base._home() / "sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    return sessions / f"{thread}.json"


def handshake(wire: Wire) -> tuple[str, str | None]:
    """initialize → initialized → thread/start | thread/resume → turn/start; returns (prompt, resumed)."""
    resumed: str | None = None
    while True:
        message = wire.read(30)
        if message is None:
            _violation("the client sent nothing for 30 s")
        assert message is not None
        method, params = message.get("method"), message.get("params") or {}
        if method == "initialize":
            if wire.got_initialize:
                wire.error(message, -32600, "Already initialized")
                continue
            if not (params.get("clientInfo") or {}).get("name"):
                _violation("initialize without clientInfo.name")
            wire.got_initialize = True
            wire.respond(message, {"userAgent": "fake_codex/0.0.0", "codexHome": str(base._home())})
        elif method == "initialized":
            if "id" in message:
                _violation("initialized is a notification")
            wire.initialized = True
        elif method in ("thread/start", "thread/resume"):
            _check_thread_params(params)
            if method == "thread/resume":
                thread = str(params.get("threadId") or "")
                if not _thread_file(thread).exists():
                    wire.error(message, -32600, f"no rollout found for thread id {thread}")
                    continue
                resumed = thread
            else:
                if os.environ.get("FAKE_CODEX_THREAD_START") == "fail":
                    wire.error(message, -32603, "failed to start thread: model provider unavailable")
                    continue
                thread = f"thr_{uuid.uuid4().hex[:12]}"
                _thread_file(thread).write_text(
                    json.dumps({"turns": 0, "usage": {k: 0 for k in base.PER_TURN}})
                )
            wire.thread = thread
            wire.respond(message, {"thread": {"id": thread, "preview": "", "modelProvider": "openai"}})
            if method == "thread/start":
                wire.notify("thread/started", thread={"id": thread, "status": {"type": "idle"}})
        elif method == "turn/start":
            if not wire.thread or params.get("threadId") != wire.thread:
                _violation("turn/start without the loaded thread")
            items = params.get("input")
            if (
                not isinstance(items, list)
                or not items
                or any(
                    not isinstance(i, dict) or i.get("type") not in ("text", "localImage", "image")
                    for i in items
                )
            ):
                _violation("turn/start input must be a list of text / image items")
            assert isinstance(items, list)
            prompt = "\n".join(str(i.get("text") or "") for i in items if i.get("type") == "text")
            if not prompt.strip():
                _violation("turn/start without text")
            if prompt.strip() in " ".join(a for a in sys.argv[1:] if not a.startswith("/")):
                _violation("the prompt is in argv")
            for i in items:
                if i.get("type") == "localImage" and not Path(str(i.get("path"))).is_file():
                    _violation(f"localImage {i.get('path')} is not a file")
            wire.inputs = [i.get("type") for i in items]  # type: ignore[attr-defined]
            wire.turn = f"turn_{uuid.uuid4().hex[:8]}"
            wire.respond(
                message, {"turn": {"id": wire.turn, "status": "inProgress", "items": [], "error": None}}
            )
            return prompt, resumed
        elif "id" in message:
            wire.error(message, -32601, f"unknown method {method}")
        else:
            _violation(f"unexpected notification {method}")


def finish(wire: Wire, code: int) -> None:
    entry = getattr(wire, "log_entry", None)
    if entry is not None:
        entry.update(
            client=wire.client, answers=wire.answers, inputs=getattr(wire, "inputs", []), ended=time.time()
        )
        path = os.environ.get("FAKE_CODEX_LOG")
        if path:
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(json.dumps(entry) + "\n")
    sys.stdout.flush()
    os._exit(code)


def main(argv: list[str]) -> None:
    from agentrunner_runners.testing.fake_codex_turns import run_turn

    if argv[:3] != ["app-server", "--listen", "stdio://"]:
        _violation("expected `app-server --listen stdio://`")
    home = base._home()
    if home.stat().st_mode & 0o777 != 0o700:
        _violation("CODEX_HOME is not private (0700)")
    config_file = home / "config.toml"
    if not config_file.exists():  # the runner writes one for every turn (the user's plus its defaults)
        _violation("no config.toml in CODEX_HOME")
    if config_file.stat().st_mode & 0o777 != 0o600:
        _violation("config.toml is not 0600")
    wire = Wire()
    wire.log_entry = {  # type: ignore[attr-defined]
        "argv": argv,
        "cwd": os.getcwd(),
        "env": sorted(os.environ),
        "codex_home": str(home),
        "pid": os.getpid(),
        "started": time.time(),
        "stdin": "",
        "resumed": None,
        "thread": "",
    }
    signal.signal(signal.SIGTERM, lambda *_: finish(wire, 143))
    prompt, resumed = handshake(wire)
    wire.log_entry.update(stdin=prompt, resumed=resumed, thread=wire.thread)  # type: ignore[attr-defined]
    try:
        run_turn(wire, prompt)
    except Interrupted:
        wire.notify(
            "turn/completed",
            threadId=wire.thread,
            turn={"id": wire.turn, "status": "interrupted", "items": [], "error": None},
        )
    # like the real server: stay up until the client closes stdin (or stops us)
    while True:
        message = wire.read()
        if message is not None and "id" in message and "method" in message:
            wire.error(message, -32601, f"unknown method {message['method']}")


def start_grandchild() -> None:
    subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(1)"])
