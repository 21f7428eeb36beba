"""A fake `codex` CLI for tests and the demo: `codex exec --json` printing real-shaped JSONL events
(`codex app-server`, JSON-RPC over stdio, is `fake_codex_app.py`).

Install it as an executable named `codex` with `install_fake(directory, "codex")`. It checks its
invocation the way the runner must use the real CLI (`exec --json`, a valid `--sandbox`, `--cd` = its
working directory, `-c approval_policy=...`, `resume <id>` last, the prompt on stdin and never in argv,
a private `CODEX_HOME` (0700) with a `config.toml` (0600) that is valid TOML) and exits 2 with
`fake codex: protocol violation: ...` otherwise.

The behaviour is chosen by the prompt's first word (the rest is the message):

| word | events |
| --- | --- |
| (anything else) | thread.started, turn.started, reasoning, `Codex heard: <prompt> (turn N)`, turn.completed |
| `tools` | commentary, then every item type (command, file change, MCP call, web search, todo list, error item), the answer |
| `dup` | the answer's `item.completed` twice |
| `multibyte` | an answer of emoji and CJK, the line written in pieces that cut UTF-8 sequences |
| `big` | an answer over 200 KB |
| `transient` | two "Reconnecting... n/5" errors, then a normal turn |
| `ratelimit` | an error and `turn.failed` with a 429 message |
| `turnfail` | `turn.failed` (not retryable) |
| `nothing` | no events, secrets on stderr, exit 1 |
| `noanswer` | `turn.completed` without an agent message |
| `noturn` | an answer, then exit 0 without `turn.completed` |
| `hang` | starts a grandchild and both sleep until killed |
| `slow` | sleeps 1.5 s before answering (concurrency tests) |
| `outbox` | writes `outbox/report.txt`, then answers |
| `context` | answers with what it read from `agent-context.json` and `CODEX_HOME` |
| `mcp <server> <tool> [<json args>]` | calls `tool` on the `[mcp_servers.<server>]` of its config.toml |

Threads live in `$CODEX_HOME/sessions/<id>.json`; the usage a turn reports is the thread's running
total (100 input, 20 cached, 10 output tokens per turn), as Codex reports it on a resumed thread.
`resume` of an unknown id fails like the real CLI's missing rollout. With `FAKE_CODEX_LOG` set, every
invocation appends `{argv, cwd, stdin, env, pid, started, ended}` as a JSON line there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tomllib
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentrunner_runners.testing.fake_claude import write_line

SANDBOXES = ("read-only", "workspace-write", "danger-full-access")
PER_TURN = {"input_tokens": 100, "cached_input_tokens": 20, "output_tokens": 10}
MCP_PREFIX = "The MCP tool answered: "


def _emit(event: dict[str, Any]) -> None:
    write_line(json.dumps(event, ensure_ascii=False))


def _violation(message: str) -> None:
    print(f"fake codex: protocol violation: {message}", file=sys.stderr)
    sys.exit(2)


def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv and argv.index(name) + 1 < len(argv) else None


def _home() -> Path:
    raw = os.environ.get("CODEX_HOME")
    if not raw:
        _violation("CODEX_HOME is not set")
    return Path(str(raw))


def _check(argv: list[str], prompt: str) -> dict[str, Any]:
    """Checks the invocation; returns the parsed config.toml."""
    if argv[:1] != ["exec"] or "--json" not in argv:
        _violation("expected `exec --json`")
    if _flag(argv, "--sandbox") not in SANDBOXES:
        _violation("expected --sandbox read-only|workspace-write|danger-full-access")
    if os.path.realpath(_flag(argv, "--cd") or "") != os.path.realpath(os.getcwd()):
        _violation("--cd is not the working directory")
    overrides = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "-c"]
    if not any(o.startswith("approval_policy=") for o in overrides):
        _violation("expected -c approval_policy=...")
    for override in overrides:
        key, _, value = override.partition("=")
        try:
            tomllib.loads(f"v = {value}")
        except tomllib.TOMLDecodeError:
            _violation(f"-c {key}: the value is not TOML")
    if "resume" in argv and argv.index("resume") != len(argv) - 2:
        _violation("`resume <thread id>` must come last")
    if not prompt.strip():
        _violation("no prompt on stdin")
    if prompt.strip() in argv or prompt.strip() in " ".join(a for a in argv if not a.startswith("/")):
        _violation("the prompt is in argv")
    home = _home()
    if home.stat().st_mode & 0o777 != 0o700:
        _violation("CODEX_HOME is not private (0700)")
    config = home / "config.toml"
    if not config.exists():  # the runner writes one for every turn (the user's plus its defaults)
        _violation("no config.toml in CODEX_HOME")
    if config.stat().st_mode & 0o777 != 0o600:
        _violation("config.toml is not 0600")
    try:
        return tomllib.loads(config.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        _violation(f"config.toml is not TOML: {exc}")
    return {}


def _thread(argv: list[str]) -> tuple[str, dict[str, Any]]:
    sessions = _home() / "sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    if "resume" in argv:
        thread = argv[argv.index("resume") + 1]
        file = sessions / f"{thread}.json"
        if not file.exists():
            print(f"Error: no rollout found for thread id {thread}", file=sys.stderr)
            _log(argv, "", time.time())
            sys.exit(1)
        data = json.loads(file.read_text())
    else:
        thread = str(uuid.uuid4())
        data = {"turns": 0, "usage": {k: 0 for k in PER_TURN}}
    data["turns"] += 1
    for key, value in PER_TURN.items():
        data["usage"][key] += value
    (sessions / f"{thread}.json").write_text(json.dumps(data))
    return thread, data


class Turn:
    def __init__(self) -> None:
        self.count = 0

    def item(self, phase: str, kind: str, *, id: str | None = None, **fields: Any) -> str:
        item_id = id or f"item_{self.count}"
        if id is None:
            self.count += 1
        _emit({"type": f"item.{phase}", "item": {"id": item_id, "type": kind, **fields}})
        return item_id

    def message(self, text: str) -> str:
        return self.item("completed", "agent_message", text=text)


def _mcp_call(config: dict[str, Any], words: list[str]) -> tuple[str, str, dict[str, Any], str, bool]:
    """Calls a tool on a configured MCP server the way Codex would (the `mcp` SDK's client)."""
    import anyio

    server_name, tool = words[1], words[2]
    arguments = json.loads(" ".join(words[3:])) if len(words) > 3 else {}
    server = (config.get("mcp_servers") or {})[server_name]

    async def call() -> tuple[list[str], str, bool]:
        from mcp import ClientSession

        if server.get("url"):
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            headers = dict(server.get("http_headers") or {})
            if server.get("bearer_token_env_var"):
                headers["Authorization"] = f"Bearer {os.environ[server['bearer_token_env_var']]}"
            async with (
                create_mcp_http_client(headers=headers) as client,
                streamable_http_client(server["url"], http_client=client) as (read, write),
                ClientSession(read, write) as session,
            ):
                return await _use(session, tool, arguments)
        from mcp.client.stdio import StdioServerParameters, stdio_client

        # like Codex: the server gets a small base environment, the variables its `env_vars` names (from
        # Codex's own environment) and its `env` table, nothing else
        names = ("PATH", "HOME", "LANG", *(server.get("env_vars") or []))
        base = {k: os.environ[k] for k in names if k in os.environ}
        params = StdioServerParameters(
            command=server["command"],
            args=server.get("args") or [],
            env={**base, **(server.get("env") or {})},
        )
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            return await _use(session, tool, arguments)

    listed, text, is_error = anyio.run(call)
    return (
        server_name,
        tool,
        arguments,
        MCP_PREFIX + json.dumps({"tools": listed, "is_error": is_error, "text": text}),
        is_error,
    )


async def _use(session: Any, tool: str, arguments: dict[str, Any]) -> tuple[list[str], str, bool]:
    await session.initialize()
    listed = [t.name for t in (await session.list_tools()).tools]
    result = await session.call_tool(tool, arguments)
    return listed, "".join(getattr(c, "text", "") for c in result.content), bool(result.is_error)


def _tools(t: Turn) -> str:
    t.message("I'll look at the workspace first.")
    plan = [{"text": "List the files", "completed": False}, {"text": "Write notes", "completed": False}]
    todo = t.item("started", "todo_list", items=plan)
    cmd = t.item(
        "started",
        "command_execution",
        command="bash -lc ls",
        aggregated_output="",
        exit_code=None,
        status="in_progress",
    )
    t.item(
        "completed",
        "command_execution",
        id=cmd,
        command="bash -lc ls",
        aggregated_output="README.md\nsrc\n",
        exit_code=0,
        status="completed",
    )
    plan[0]["completed"] = True
    t.item("updated", "todo_list", id=todo, items=plan)
    t.item("completed", "file_change", changes=[{"path": "notes.md", "kind": "add"}], status="completed")
    mcp = t.item(
        "started",
        "mcp_tool_call",
        server="docs",
        tool="search",
        arguments={"q": "readme"},
        result=None,
        error=None,
        status="in_progress",
    )
    t.item(
        "completed",
        "mcp_tool_call",
        id=mcp,
        server="docs",
        tool="search",
        arguments={"q": "readme"},
        result=None,
        error={"message": "docs server offline"},
        status="failed",
    )
    web = t.item("started", "web_search", query="codex exec json")
    t.item("completed", "web_search", id=web, query="codex exec json")
    t.item("completed", "error", message="a non-fatal warning")
    plan[1]["completed"] = True
    t.item("completed", "todo_list", id=todo, items=plan)
    return "There are two entries: README.md and src."


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["app-server"]:
        from agentrunner_runners.testing import fake_codex_app

        fake_codex_app.main(argv)
        return
    prompt = sys.stdin.read()
    started = time.time()
    config = _check(argv, prompt)
    words = prompt.split()
    word = words[0].lower().rstrip(":,.!?") if words else ""
    if word == "nothing":
        print(
            "fatal: upstream said: invalid key sk-proj-SECRETSECRETSECRET1234 (Authorization: Bearer abc123abc123abc123)",
            file=sys.stderr,
        )
        _log(argv, prompt, started)
        sys.exit(1)
    thread, data = _thread(argv)
    t = Turn()
    _emit({"type": "thread.started", "thread_id": thread})
    _emit({"type": "turn.started"})
    _misbehave(word)
    scenario = ANSWERS.get(word)
    default = f"Codex heard: {prompt.strip()} (turn {data['turns']})"
    answer = scenario(t, config, words) if scenario is not None else default
    if answer is not None:
        if word not in ("tools", "noanswer"):
            t.item("completed", "reasoning", text="**Answering** the user directly.")
        if answer:
            item = t.message(answer)
            if word == "dup":
                _emit(
                    {"type": "item.completed", "item": {"id": item, "type": "agent_message", "text": answer}}
                )
        if word != "noturn":
            _emit({"type": "turn.completed", "usage": data["usage"]})
    _log(argv, prompt, started)


def _misbehave(word: str) -> None:
    """Before the answer: hang (with a grandchild), be slow, or reconnect twice."""
    if word == "hang":
        subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(1)"])
        while True:
            time.sleep(1)
    if word == "slow":
        time.sleep(1.5)
    if word == "transient":
        for n in (1, 2):
            _emit({"type": "error", "message": f"Reconnecting... {n}/5"})


def _ratelimit(t: Turn, config: dict[str, Any], words: list[str]) -> str | None:
    message = "exceeded retry limit, last status: 429 Too Many Requests"
    _emit({"type": "error", "message": message})
    _emit({"type": "turn.failed", "error": {"message": message}})
    return None


def _turnfail(t: Turn, config: dict[str, Any], words: list[str]) -> str | None:
    _emit({"type": "turn.failed", "error": {"message": "the model produced an invalid patch"}})
    return None


def _outbox(t: Turn, config: dict[str, Any], words: list[str]) -> str | None:
    Path("outbox").mkdir(exist_ok=True)
    Path("outbox/report.txt").write_text("codex report\n" * 1000)
    return "I wrote outbox/report.txt."


def _context(t: Turn, config: dict[str, Any], words: list[str]) -> str | None:
    document = json.loads(Path("agent-context.json").read_text())
    home = _home()
    return json.dumps(
        {
            "schema": document["schema"],
            "skills": sorted(p.parent.name for p in (home / "skills").glob("*/SKILL.md")),
            "links": sorted(p.name for p in home.iterdir() if p.is_symlink()),
            "servers": sorted(config.get("mcp_servers") or {}),
            "md": Path("LANGBOT_CONTEXT.md").exists(),
        }
    )


def _mcp(t: Turn, config: dict[str, Any], words: list[str]) -> str | None:
    server, tool, arguments, answer, failed = _mcp_call(config, words)
    t.item(
        "completed",
        "mcp_tool_call",
        server=server,
        tool=tool,
        arguments=arguments,
        result=None if failed else {"content": [{"type": "text", "text": answer}]},
        error={"message": answer} if failed else None,
        status="failed" if failed else "completed",
    )
    return answer


#: the prompt's first word -> the turn's answer (None: the turn failed; '': no answer); anything
#: else: an echo of the prompt
ANSWERS: dict[str, Callable[[Turn, dict[str, Any], list[str]], str | None]] = {
    "tools": lambda t, config, words: _tools(t),
    "multibyte": lambda t, config, words: "héllo 👋🏽 世界 ✓",
    "big": lambda t, config, words: "C" * 250_000,
    "ratelimit": _ratelimit,
    "turnfail": _turnfail,
    "noanswer": lambda t, config, words: "",
    "outbox": _outbox,
    "context": _context,
    "mcp": _mcp,
}


def _log(argv: list[str], prompt: str, started: float) -> None:
    path = os.environ.get("FAKE_CODEX_LOG")
    if path:
        entry = {
            "argv": argv,
            "cwd": os.getcwd(),
            "stdin": prompt,
            "env": sorted(os.environ),
            "codex_home": os.environ.get("CODEX_HOME", ""),
            "pid": os.getpid(),
            "started": started,
            "ended": time.time(),
        }
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry) + "\n")


if __name__ == "__main__":
    main()
