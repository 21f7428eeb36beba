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
| `apierror` | two `api_retry` lines (HTTP 500), Claude Code's synthetic "API Error: 500" text, an error result |
| `badkey` | an `api_retry` line with HTTP 401, then retries (sleeps) for 60 s like the real CLI |
| `leak` | a `Bash` tool call whose result prints the API key the fake got |
| `empty` | `result` success with an empty answer |
| `hang` | starts a grandchild and both sleep until killed |
| `outbox` | writes `outbox/report.txt` (+ a symlink escaping the workspace), then answers |
| `context` | answers with what it read from `agent-context.json` (attachments, skills) |
| `mcp <server> <tool> [<json args>]` | calls `tool` on the configured MCP server (http or stdio); answers `MCP_PREFIX` + JSON |

Sessions live in `$FAKE_CLAUDE_HOME` (default `~/.fake-claude`): `--resume` of an unknown id fails like
the real CLI (an `is_error` result line with "No conversation found with session ID", exit 1), and like
the real CLI `total_cost_usd` / `duration_api_ms` are the session's totals (0.0123 / 30 per turn). The
API key is `ANTHROPIC_API_KEY` or what the `--settings` file's `apiKeyHelper` prints. With
`FAKE_CLAUDE_LOG` set, every invocation appends `{argv, cwd, stdin, env keys, env values of
ANTHROPIC_*/CLAUDE_*, api_key, pid}` as a JSON line there.
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
from typing import Any, NamedTuple

from agentrunner_runners.testing.fake_claude_lines import Transcript, _emit, _flag
from agentrunner_runners.testing.fake_claude_lines import write_line as write_line  # fake_codex uses it

_SESSION_FLAGS = ("--session-id", "--resume")
#: the `mcp` scenario answers `MCP_PREFIX` + JSON `{tools, is_error, text}`
MCP_PREFIX = "The MCP tool answered: "


def _violation(message: str) -> None:
    print(f"fake claude: protocol violation: {message}", file=sys.stderr)
    sys.exit(2)


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
            message = f"No conversation found with session ID: {resume}"
            _emit(
                {"type": "result", "subtype": "error_during_execution", "is_error": True, "num_turns": 0}
                | {"session_id": resume, "total_cost_usd": 0, "duration_api_ms": 0, "errors": [message]}
            )
            print(message, file=sys.stderr)
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
            "claude_env": {k: v for k, v in os.environ.items() if k.startswith(("ANTHROPIC_", "CLAUDE_"))},
            "api_key": _api_key(argv),
            "pid": os.getpid(),
        }
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry) + "\n")


def _api_key(argv: list[str]) -> str:
    """The key the real CLI would send: `ANTHROPIC_API_KEY`, else the `apiKeyHelper`'s output."""
    if os.environ.get("ANTHROPIC_API_KEY"):
        return os.environ["ANTHROPIC_API_KEY"]
    settings = _flag(argv, "--settings")
    helper = json.loads(Path(settings).read_text()).get("apiKeyHelper") if settings else None
    if not helper:
        return ""
    return subprocess.run(helper, shell=True, capture_output=True, text=True, check=False).stdout.strip()


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


class _Prompt(NamedTuple):
    """What a scenario is given: the CLI's arguments, the prompt's words, and the default answer."""

    argv: list[str]
    words: list[str]
    answer: str


def _answer(t: Transcript, answer: str, turns: int = 1) -> None:
    t.text(answer)
    t.result(answer, turns=turns)


def _hang(t: Transcript, p: _Prompt) -> None:
    subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(1)"])
    while True:
        time.sleep(1)


def _crash(t: Transcript, p: _Prompt) -> None:
    print(
        "fatal: upstream said: invalid x-api-key sk-ant-api03-SECRETSECRETSECRET1234 (Authorization: Bearer abc123abc123abc123)",
        file=sys.stderr,
    )
    sys.exit(3)


def _tools(t: Transcript, p: _Prompt) -> None:
    mid = t.text("I'll list the files first.")
    t.tool(mid, "toolu_01", "Bash", {"command": "ls"})
    t.tool_result("toolu_01", "README.md\nsrc")
    _answer(t, "There are two entries: README.md and src.", turns=2)


def _think(t: Transcript, p: _Prompt) -> None:
    t.thinking("The user wants a short answer. ")
    _answer(t, "Short answer.")


def _big(t: Transcript, p: _Prompt) -> None:
    _answer(t, "B" * 250_000)


def _multibyte(t: Transcript, p: _Prompt) -> None:
    # deltas split between the code points of one grapheme (👋 + skin tone); on the wire the JSON
    # lines are written in small flushes that cut UTF-8 sequences (see `_emit_split`)
    answer = "héllo 👋🏽 世界"
    t.text(answer, pieces=["hé", "llo 👋", "🏽 世", "界"])
    t.result(answer)


def _u2028(t: Transcript, p: _Prompt) -> None:
    _answer(t, "line\u2028separator\u2029paragraph")


def _jsonsplit(t: Transcript, p: _Prompt) -> None:
    mid = t.text("Looking it up.")
    t.tool(
        mid,
        "toolu_js",
        "Grep",
        {"pattern": "déjà vu", "path": "src"},
        json_pieces=['{"patt', 'ern": "déj', 'à vu", "pa', 'th": "src"}'],
    )
    t.tool_result("toolu_js", "no matches")
    _answer(t, "Nothing matched.", turns=2)


def _garbage(t: Transcript, p: _Prompt) -> None:
    _emit("this is not json")
    _emit(t.base("mystery_event", payload={"x": 1}))
    _emit("[1, 2, 3]")
    t.text(p.answer)
    _emit("{broken json")
    t.result(p.answer)


def _subagent(t: Transcript, p: _Prompt) -> None:
    mid = t.text("Delegating to a helper.")
    t.tool(mid, "toolu_task", "Task", {"prompt": "find it"})
    t.text("SUB-AGENT SECRET NOTES", parent="toolu_task")
    t.tool_result("toolu_task", "found it")
    _answer(t, "The helper found it.", turns=2)


def _noresult(t: Transcript, p: _Prompt) -> None:
    t.text(p.answer)


def _maxturns(t: Transcript, p: _Prompt) -> None:
    t.text("Still working...")
    t.result("", subtype="error_max_turns", is_error=True)


def _overloaded(t: Transcript, p: _Prompt) -> None:
    t.result(
        'API Error: 529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
        is_error=True,
    )


def _empty(t: Transcript, p: _Prompt) -> None:
    t.result("")


def _apierror(t: Transcript, p: _Prompt) -> None:
    t.retry(500, "server_error", 1)
    t.retry(500, "server_error", 2)
    notice = "API Error: 500 Internal server error. This is a server-side issue, usually temporary."
    t.synthetic(notice)
    t.result(notice, is_error=True, api_error_status=500, api_error_type="api_error")
    sys.exit(1)


def _badkey(t: Transcript, p: _Prompt) -> None:
    t.retry(401, "authentication_failed", 1, most=10)
    time.sleep(60)  # the real CLI keeps retrying a refused key for minutes


def _leak(t: Transcript, p: _Prompt) -> None:
    mid = t.text("Let me look at the environment.")
    t.tool(mid, "toolu_env", "Bash", {"command": "env"})
    t.tool_result("toolu_env", f"HOME=/home/x\nKEY_SEEN={_api_key(p.argv)}\n")
    _answer(t, "Done looking.", turns=2)


def _outbox(t: Transcript, p: _Prompt) -> None:
    Path("outbox").mkdir(exist_ok=True)
    Path("outbox/report.txt").write_text("report body\n" * 30000)
    with_link = Path("outbox/escape.txt")
    if not with_link.exists():
        with_link.symlink_to("/etc/hostname")
    _answer(t, "I wrote outbox/report.txt.")


def _context(t: Transcript, p: _Prompt) -> None:
    document = json.loads(Path("agent-context.json").read_text())
    skills = (
        sorted(f.parent.name for f in Path(".claude/skills").glob("*/SKILL.md"))
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
    _answer(t, answer)


def _mcp(t: Transcript, p: _Prompt) -> None:
    _answer(t, _mcp_call(p.argv, p.words))


def _echo(t: Transcript, p: _Prompt) -> None:
    answer = p.answer
    t.text(answer, pieces=[answer[: len(answer) // 2], answer[len(answer) // 2 :]])
    t.result(answer)


#: the prompt's first word -> its transcript (the module docstring's table); anything else: `_echo`
SCENARIOS: dict[str, Callable[[Transcript, _Prompt], None]] = {
    "hang": _hang,
    "crash": _crash,
    "tools": _tools,
    "think": _think,
    "big": _big,
    "multibyte": _multibyte,
    "u2028": _u2028,
    "jsonsplit": _jsonsplit,
    "garbage": _garbage,
    "subagent": _subagent,
    "noresult": _noresult,
    "maxturns": _maxturns,
    "overloaded": _overloaded,
    "empty": _empty,
    "apierror": _apierror,
    "badkey": _badkey,
    "leak": _leak,
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
    t = Transcript(argv, session, "--include-partial-messages" in argv, turn)
    t.init()
    scenario = SCENARIOS.get(word, _echo)
    scenario(t, _Prompt(argv, words, f"Claude heard: {prompt.strip()} (turn {turn})"))


if __name__ == "__main__":
    main()
