"""A fake `claude` CLI for tests and the demo: prints real-shaped `stream-json` transcripts.

Install it as an executable named `claude` with `install_fake(directory, "claude")`; it checks its
invocation like the real CLI would be used by the runner (print mode, `--verbose`,
`--output-format stream-json`, a session flag, `--permission-mode`, `--max-turns`, the prompt on stdin
and never in argv) and exits 2 with `fake claude: protocol violation: ...` otherwise.

The behaviour is chosen by the prompt's first word (the rest is the message):

| word | transcript |
| --- | --- |
| (anything else) | init, streamed answer `Claude heard: <prompt> (turn N)`, result with usage and cost |
| `tools` | commentary + a `Bash` tool_use, its tool_result, then the answer |
| `think` | a thinking block, then the answer |
| `big` | one assistant line over 200 KB, then its answer |
| `multibyte` | an answer of emoji and CJK split across text deltas mid-character |
| `u2028` | an answer with raw U+2028 / U+2029 inside the JSON string |
| `jsonsplit` | a tool_use whose `input_json_delta` pieces split a token |
| `garbage` | non-JSON lines and unknown line types mid-stream, then the answer |
| `subagent` | a sub-agent's text (`parent_tool_use_id`) that must not become the answer |
| `noresult` | an answer but no `result` line, exit 0 |
| `crash` | stderr with secrets, exit 3, no result |
| `maxturns` | `result` subtype `error_max_turns` |
| `overloaded` | `result` with `is_error` and `API Error: 529 overloaded` |
| `empty` | `result` success with an empty answer |
| `hang` | starts a grandchild and both sleep until killed |
| `outbox` | writes `outbox/report.txt` (+ a symlink escaping the workspace), then answers |
| `context` | answers with what it read from `agent-context.json` (attachments, skills) |
| `mcp <server> <tool> [<json args>]` | calls `tool` on the configured MCP server (http or stdio); answers `MCP_PREFIX` + JSON |

Sessions live in `$FAKE_CLAUDE_HOME` (default `~/.fake-claude`): `--resume` of an unknown id fails like
the real CLI ("No conversation found with session ID"). With `FAKE_CLAUDE_LOG` set, every invocation
appends `{argv, cwd, stdin, env keys, pid}` as a JSON line there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

_SESSION_FLAGS = ("--session-id", "--resume")
#: the `mcp` scenario answers `MCP_PREFIX` + JSON `{tools, is_error, text}`
MCP_PREFIX = "The MCP tool answered: "


def _cuts(data: bytes) -> list[int]:
    """Two cut points, moved inside a multi-byte UTF-8 sequence when there is one nearby."""
    cuts = []
    for at in (len(data) // 3, 2 * len(data) // 3):
        for probe in range(at, min(at + 8, len(data) - 1)):
            if data[probe] & 0xC0 == 0x80:  # a continuation byte: cutting here splits a character
                at = probe
                break
        cuts.append(at)
    return cuts


def write_line(text: str) -> None:
    """Writes one line to stdout in three flushed pieces (cut inside UTF-8 sequences where possible),
    the way a pipe delivers a long write in several reads."""
    data = (text + "\n").encode()
    out = sys.stdout.buffer
    start = 0
    for cut in [*_cuts(data), len(data)]:
        if cut > start:
            out.write(data[start:cut])
            out.flush()
            time.sleep(0.001)
            start = cut


def _emit(line: dict[str, Any] | str) -> None:
    write_line(line if isinstance(line, str) else json.dumps(line, ensure_ascii=False))


def _violation(message: str) -> None:
    print(f"fake claude: protocol violation: {message}", file=sys.stderr)
    sys.exit(2)


def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv and argv.index(name) + 1 < len(argv) else None


class Transcript:
    def __init__(self, argv: list[str], session: str, partial: bool) -> None:
        self.argv = argv
        self.session = session
        self.partial = partial
        self.count = 0

    def base(self, kind: str, **fields: Any) -> dict[str, Any]:
        return {"type": kind, **fields, "session_id": self.session, "uuid": str(uuid.uuid4())}

    def init(self) -> None:
        mcp = []
        path = _flag(self.argv, "--mcp-config")
        if path:
            servers = json.loads(Path(path).read_text())["mcpServers"]
            mcp = [{"name": name, "status": "connected"} for name in servers]
        _emit(
            self.base(
                "system",
                subtype="init",
                cwd=os.getcwd(),
                model="claude-fake-1",
                tools=["Bash", "Read"],
                mcp_servers=mcp,
                permissionMode=_flag(self.argv, "--permission-mode"),
            )
        )

    def text(
        self,
        text: str,
        *,
        pieces: list[str] | None = None,
        parent: str | None = None,
        message_id: str | None = None,
    ) -> str:
        self.count += 1
        mid = message_id or f"msg_{self.count:03d}_{uuid.uuid4().hex[:6]}"
        if self.partial and parent is None:
            self._stream(
                {"type": "message_start", "message": {"id": mid, "role": "assistant", "content": []}}
            )
            self._stream(
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
            )
            for piece in pieces or [text]:
                self._stream(
                    {
                        "type": "content_block_delta",
                        "index": 0,
                        "delta": {"type": "text_delta", "text": piece},
                    }
                )
            self._stream({"type": "content_block_stop", "index": 0})
        _emit(
            self.base(
                "assistant",
                message={"id": mid, "role": "assistant", "content": [{"type": "text", "text": text}]},
                parent_tool_use_id=parent,
            )
        )
        return mid

    def tool(
        self,
        message_id: str,
        tool_id: str,
        name: str,
        params: dict[str, Any],
        json_pieces: list[str] | None = None,
    ) -> None:
        if self.partial:
            self._stream(
                {
                    "type": "content_block_start",
                    "index": 1,
                    "content_block": {"type": "tool_use", "id": tool_id, "name": name, "input": {}},
                }
            )
            for piece in json_pieces or [json.dumps(params)]:
                self._stream(
                    {
                        "type": "content_block_delta",
                        "index": 1,
                        "delta": {"type": "input_json_delta", "partial_json": piece},
                    }
                )
            self._stream({"type": "content_block_stop", "index": 1})
        _emit(
            self.base(
                "assistant",
                message={
                    "id": message_id,
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": tool_id, "name": name, "input": params}],
                },
                parent_tool_use_id=None,
            )
        )

    def tool_result(self, tool_id: str, text: str, is_error: bool = False) -> None:
        _emit(
            self.base(
                "user",
                message={
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": tool_id, "content": text, "is_error": is_error}
                    ],
                },
                parent_tool_use_id=None,
            )
        )

    def thinking(self, text: str) -> None:
        self.count += 1
        mid = f"msg_{self.count:03d}_think"
        if self.partial:
            self._stream(
                {"type": "message_start", "message": {"id": mid, "role": "assistant", "content": []}}
            )
            self._stream(
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "thinking", "thinking": ""},
                }
            )
            for piece in (text[: len(text) // 2], text[len(text) // 2 :]):
                self._stream(
                    {
                        "type": "content_block_delta",
                        "index": 0,
                        "delta": {"type": "thinking_delta", "thinking": piece},
                    }
                )
            self._stream({"type": "content_block_stop", "index": 0})
        _emit(
            self.base(
                "assistant",
                message={
                    "id": mid,
                    "role": "assistant",
                    "content": [{"type": "thinking", "thinking": text, "signature": "sig"}],
                },
                parent_tool_use_id=None,
            )
        )

    def _stream(self, event: dict[str, Any]) -> None:
        _emit(self.base("stream_event", event=event, parent_tool_use_id=None))

    def result(self, text: str, *, subtype: str = "success", is_error: bool = False, turns: int = 1) -> None:
        _emit(
            self.base(
                "result",
                subtype=subtype,
                is_error=is_error,
                result=text,
                num_turns=turns,
                duration_ms=42,
                duration_api_ms=30,
                total_cost_usd=0.0123,
                usage={"input_tokens": 11, "cache_read_input_tokens": 5, "output_tokens": 7},
            )
        )


def _sessions_dir() -> Path:
    path = Path(os.environ.get("FAKE_CLAUDE_HOME") or Path.home() / ".fake-claude")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _session_turn(argv: list[str]) -> tuple[str, int]:
    new, resume = _flag(argv, "--session-id"), _flag(argv, "--resume")
    directory = _sessions_dir()
    if resume is not None:
        file = directory / f"{resume}.json"
        if not file.exists():
            print(f"No conversation found with session ID: {resume}", file=sys.stderr)
            sys.exit(1)
        data = json.loads(file.read_text())
        data["turns"] += 1
        file.write_text(json.dumps(data))
        return resume, data["turns"]
    assert new is not None
    uuid.UUID(new)  # the runner mints real UUIDs
    (directory / f"{new}.json").write_text(json.dumps({"turns": 1}))
    return new, 1


def _check(argv: list[str], prompt: str) -> None:
    for flag in ("-p", "--verbose"):
        if flag not in argv:
            _violation(f"missing {flag}")
    if _flag(argv, "--output-format") != "stream-json":
        _violation("expected --output-format stream-json")
    if sum(f in argv for f in _SESSION_FLAGS) != 1:
        _violation("expected exactly one of --session-id / --resume")
    if not _flag(argv, "--permission-mode") or not (_flag(argv, "--max-turns") or "").isdigit():
        _violation("expected --permission-mode and --max-turns N")
    if ("--mcp-config" in argv) != ("--strict-mcp-config" in argv):
        _violation("--mcp-config goes with --strict-mcp-config")
    path = _flag(argv, "--mcp-config")
    if path is not None:
        mode = os.stat(path).st_mode & 0o777
        if mode != 0o600:
            _violation(f"the MCP config file has mode {oct(mode)}, not 0600")
    if prompt.strip() and any(prompt.strip() in a for a in argv):
        _violation("the prompt is in argv")
    if not prompt.strip():
        _violation("no prompt on stdin")


def _log(argv: list[str], prompt: str) -> None:
    path = os.environ.get("FAKE_CLAUDE_LOG")
    if path:
        entry = {
            "argv": argv,
            "cwd": os.getcwd(),
            "stdin": prompt,
            "env": sorted(os.environ),
            "pid": os.getpid(),
        }
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry) + "\n")


def _mcp_call(argv: list[str], words: list[str]) -> str:
    """Calls a tool on a configured MCP server the way Claude Code would (the `mcp` SDK's client)."""
    import anyio

    server_name, tool = words[1], words[2]
    arguments = json.loads(" ".join(words[3:])) if len(words) > 3 else {}
    config = json.loads(Path(_flag(argv, "--mcp-config") or "").read_text())["mcpServers"][server_name]

    async def call() -> str:
        from mcp import ClientSession

        if config.get("type") == "http":
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            async with (
                create_mcp_http_client(headers=config.get("headers") or {}) as client,
                streamable_http_client(config["url"], http_client=client) as (read, write),
                ClientSession(read, write) as session,
            ):
                return await _use(session, tool, arguments)
        from mcp.client.stdio import StdioServerParameters, stdio_client

        params = StdioServerParameters(
            command=config["command"],
            args=config.get("args") or [],
            env={**os.environ, **(config.get("env") or {})},
        )
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            return await _use(session, tool, arguments)

    return anyio.run(call)


async def _use(session: Any, tool: str, arguments: dict[str, Any]) -> str:
    await session.initialize()
    listed = [t.name for t in (await session.list_tools()).tools]
    result = await session.call_tool(tool, arguments)
    text = "".join(getattr(c, "text", "") for c in result.content)
    return MCP_PREFIX + json.dumps({"tools": listed, "is_error": bool(result.is_error), "text": text})


def _hang(t: Transcript, answer: str, argv: list[str], words: list[str]) -> None:
    subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(1)"])
    while True:
        time.sleep(1)


def _crash(t: Transcript, answer: str, argv: list[str], words: list[str]) -> None:
    print(
        "fatal: upstream said: invalid x-api-key sk-ant-api03-SECRETSECRETSECRET1234 (Authorization: Bearer abc123abc123abc123)",
        file=sys.stderr,
    )
    sys.exit(3)


def _tools(t: Transcript, answer: str, argv: list[str], words: list[str]) -> None:
    mid = t.text("I'll list the files first.")
    t.tool(mid, "toolu_01", "Bash", {"command": "ls"})
    t.tool_result("toolu_01", "README.md\nsrc")
    answer = "There are two entries: README.md and src."
    t.text(answer)
    t.result(answer, turns=2)


def _think(t: Transcript, answer: str, argv: list[str], words: list[str]) -> None:
    t.thinking("The user wants a short answer. ")
    answer = "Short answer."
    t.text(answer)
    t.result(answer)


def _answer(text: str) -> Callable[[Transcript, str, list[str], list[str]], None]:
    """A scenario that answers `text` whole."""

    def scenario(t: Transcript, answer: str, argv: list[str], words: list[str]) -> None:
        t.text(text)
        t.result(text)

    return scenario


def _multibyte(t: Transcript, answer: str, argv: list[str], words: list[str]) -> None:
    # deltas split between the code points of one grapheme (👋 + skin tone); on the wire the JSON
    # lines are written in small flushes that cut UTF-8 sequences (see `_emit_split`)
    answer = "héllo 👋🏽 世界"
    t.text(answer, pieces=["hé", "llo 👋", "🏽 世", "界"])
    t.result(answer)


def _jsonsplit(t: Transcript, answer: str, argv: list[str], words: list[str]) -> None:
    mid = t.text("Looking it up.")
    t.tool(
        mid,
        "toolu_js",
        "Grep",
        {"pattern": "déjà vu", "path": "src"},
        json_pieces=['{"patt', 'ern": "déj', 'à vu", "pa', 'th": "src"}'],
    )
    t.tool_result("toolu_js", "no matches")
    answer = "Nothing matched."
    t.text(answer)
    t.result(answer, turns=2)


def _garbage(t: Transcript, answer: str, argv: list[str], words: list[str]) -> None:
    _emit("this is not json")
    _emit(t.base("mystery_event", payload={"x": 1}))
    _emit("[1, 2, 3]")
    t.text(answer)
    _emit("{broken json")
    t.result(answer)


def _subagent(t: Transcript, answer: str, argv: list[str], words: list[str]) -> None:
    mid = t.text("Delegating to a helper.")
    t.tool(mid, "toolu_task", "Task", {"prompt": "find it"})
    t.text("SUB-AGENT SECRET NOTES", parent="toolu_task")
    t.tool_result("toolu_task", "found it")
    answer = "The helper found it."
    t.text(answer)
    t.result(answer, turns=2)


def _noresult(t: Transcript, answer: str, argv: list[str], words: list[str]) -> None:
    t.text(answer)


def _maxturns(t: Transcript, answer: str, argv: list[str], words: list[str]) -> None:
    t.text("Still working...")
    t.result("", subtype="error_max_turns", is_error=True)


def _overloaded(t: Transcript, answer: str, argv: list[str], words: list[str]) -> None:
    t.result(
        'API Error: 529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
        is_error=True,
    )


def _empty(t: Transcript, answer: str, argv: list[str], words: list[str]) -> None:
    t.result("")


def _outbox(t: Transcript, answer: str, argv: list[str], words: list[str]) -> None:
    Path("outbox").mkdir(exist_ok=True)
    Path("outbox/report.txt").write_text("report body\n" * 30000)
    with_link = Path("outbox/escape.txt")
    if not with_link.exists():
        with_link.symlink_to("/etc/hostname")
    answer = "I wrote outbox/report.txt."
    t.text(answer)
    t.result(answer)


def _context(t: Transcript, answer: str, argv: list[str], words: list[str]) -> None:
    document = json.loads(Path("agent-context.json").read_text())
    skills = (
        sorted(p.parent.name for p in Path(".claude/skills").glob("*/SKILL.md"))
        if Path(".claude/skills").is_dir()
        else []
    )
    inputs = [
        (a.get("path"), Path(a["path"]).read_bytes().decode(errors="replace"))
        for a in document["input"]["attachments"]
        if a.get("path")
    ]
    answer = json.dumps(
        {
            "schema": document["schema"],
            "inputs": inputs,
            "skills": skills,
            "mcp": document.get("mcp"),
            "md": Path("LANGBOT_CONTEXT.md").exists(),
        }
    )
    t.text(answer)
    t.result(answer)


def _mcp(t: Transcript, answer: str, argv: list[str], words: list[str]) -> None:
    answer = _mcp_call(argv, words)
    t.text(answer)
    t.result(answer)


def _echo(t: Transcript, answer: str, argv: list[str], words: list[str]) -> None:
    t.text(answer, pieces=[answer[: len(answer) // 2], answer[len(answer) // 2 :]])
    t.result(answer)


#: the prompt's first word -> what the fake does (anything else: `_echo`)
SCENARIOS: dict[str, Callable[[Transcript, str, list[str], list[str]], None]] = {
    "hang": _hang,
    "crash": _crash,
    "tools": _tools,
    "think": _think,
    "big": _answer("B" * 250_000),
    "multibyte": _multibyte,
    "u2028": _answer("line\u2028separator\u2029paragraph"),
    "jsonsplit": _jsonsplit,
    "garbage": _garbage,
    "subagent": _subagent,
    "noresult": _noresult,
    "maxturns": _maxturns,
    "overloaded": _overloaded,
    "empty": _empty,
    "outbox": _outbox,
    "context": _context,
    "mcp": _mcp,
}


def main() -> None:
    argv = sys.argv[1:]
    prompt = sys.stdin.read()
    _log(argv, prompt)
    _check(argv, prompt)
    session, turn = _session_turn(argv)
    words = prompt.split()
    word = words[0].lower().rstrip(":,.!?") if words else ""
    t = Transcript(argv, session, "--include-partial-messages" in argv)
    t.init()
    answer = f"Claude heard: {prompt.strip()} (turn {turn})"
    SCENARIOS.get(word, _echo)(t, answer, argv, words)


if __name__ == "__main__":
    main()
