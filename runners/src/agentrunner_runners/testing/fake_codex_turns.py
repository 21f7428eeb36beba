"""The turns of the fake `codex app-server` (`fake_codex_app.py`), one per prompt word, in v2 wire shapes."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentrunner_runners.testing import fake_codex as base
from agentrunner_runners.testing.fake_codex_app import (
    UNKNOWN_REQUEST,
    Wire,
    _thread_file,
    _violation,
    start_grandchild,
)

#: the command `approve` asks to run: it carries a credential the runner must not show anyone
SECRET_COMMAND = (
    "curl -H 'Authorization: Bearer sk-proj-SECRETSECRETSECRET1234' https://example.invalid; rm -rf /tmp/x"
)


class Turn:
    """Emits one turn's notifications on `wire`."""

    def __init__(self, wire: Wire) -> None:
        self.wire = wire
        self.count = 0

    def _ids(self) -> dict[str, str]:
        return {"threadId": self.wire.thread, "turnId": self.wire.turn}

    def item(self, phase: str, item: dict[str, Any]) -> str:
        if "id" not in item:
            self.count += 1
            item = {"id": f"item_{self.count}", **item}
        self.wire.notify(f"item/{phase}", **self._ids(), item=item)
        return str(item["id"])

    def message(self, text: str, *, phase: str = "final_answer", pieces: int = 3) -> str:
        """An agent message: `item/started`, its text in `pieces` deltas, `item/completed`."""
        self.count += 1
        item_id = f"msg_{self.count}"
        self.item("started", {"id": item_id, "type": "agentMessage", "text": "", "phase": phase})
        step = max(1, -(-len(text) // pieces))
        for start in range(0, len(text), step):
            self.wire.notify(
                "item/agentMessage/delta", **self._ids(), itemId=item_id, delta=text[start : start + step]
            )
        self.item("completed", {"id": item_id, "type": "agentMessage", "text": text, "phase": phase})
        return item_id

    def reasoning(self, text: str) -> None:
        self.count += 1
        item_id = f"rs_{self.count}"
        self.item("started", {"id": item_id, "type": "reasoning", "summary": [], "content": []})
        self.wire.notify(
            "item/reasoning/summaryTextDelta", **self._ids(), itemId=item_id, delta=text, summaryIndex=0
        )
        self.item("completed", {"id": item_id, "type": "reasoning", "summary": [text], "content": []})

    def usage(self) -> None:
        file = _thread_file(self.wire.thread)
        data = json.loads(file.read_text())
        data["turns"] += 1
        for key, value in base.PER_TURN.items():
            data["usage"][key] += value
        file.write_text(json.dumps(data))
        total = data["usage"]
        breakdown = {
            "inputTokens": total["input_tokens"],
            "cachedInputTokens": total["cached_input_tokens"],
            "outputTokens": total["output_tokens"],
            "reasoningOutputTokens": 0,
            "totalTokens": total["input_tokens"] + total["output_tokens"],
        }
        last = {k: v // max(data["turns"], 1) for k, v in breakdown.items()}
        self.wire.notify(
            "thread/tokenUsage/updated",
            **self._ids(),
            tokenUsage={"total": breakdown, "last": last, "modelContextWindow": 200000},
        )
        self.turns = data["turns"]

    def completed(self, status: str = "completed", error: dict[str, Any] | None = None) -> None:
        self.wire.notify(
            "turn/completed",
            threadId=self.wire.thread,
            turn={"id": self.wire.turn, "status": status, "items": [], "error": error},
        )


def _tools(t: Turn) -> str:
    t.message("I'll look at the workspace first.", phase="commentary")
    t.wire.notify(
        "turn/plan/updated", turnId=t.wire.turn, plan=[{"step": "List the files", "status": "inProgress"}]
    )
    command = {"type": "commandExecution", "command": "bash -lc ls", "cwd": os.getcwd(), "commandActions": []}
    cmd = t.item("started", {**command, "status": "inProgress", "aggregatedOutput": None, "exitCode": None})
    t.item(
        "completed",
        {"id": cmd, **command, "status": "completed", "aggregatedOutput": "README.md\nsrc\n", "exitCode": 0},
    )
    change = {
        "type": "fileChange",
        "changes": [{"path": "notes.md", "kind": {"type": "add"}, "diff": "+notes\n"}],
    }
    fc = t.item("started", {**change, "status": "inProgress"})
    t.item("completed", {"id": fc, **change, "status": "completed"})
    call = {"type": "mcpToolCall", "server": "docs", "tool": "search", "arguments": {"q": "readme"}}
    mcp = t.item("started", {**call, "status": "inProgress", "result": None, "error": None})
    t.item(
        "completed",
        {"id": mcp, **call, "status": "failed", "result": None, "error": {"message": "docs server offline"}},
    )
    web = t.item("started", {"type": "webSearch", "query": "codex app-server"})
    t.item("completed", {"id": web, "type": "webSearch", "query": "codex app-server"})
    t.wire.notify(
        "turn/plan/updated", turnId=t.wire.turn, plan=[{"step": "List the files", "status": "completed"}]
    )
    return "There are two entries: README.md and src."


def _approve(t: Turn) -> str:
    """Asks for a command, a change inside the workspace and one outside; reports the decisions."""
    wire = t.wire
    command = {
        "type": "commandExecution",
        "command": SECRET_COMMAND,
        "cwd": os.getcwd(),
        "commandActions": [],
    }
    cmd = t.item("started", {**command, "status": "inProgress"})
    answer = wire.ask(
        "item/commandExecution/requestApproval",
        {
            "threadId": wire.thread,
            "turnId": wire.turn,
            "itemId": cmd,
            "command": SECRET_COMMAND,
            "cwd": os.getcwd(),
            "reason": "needs to delete files outside the sandbox",
        },
    )
    decisions = [_decision(answer)]
    t.item(
        "completed", {"id": cmd, **command, "status": "completed" if decisions[0] == "accept" else "declined"}
    )
    for path in ("notes.md", "../outside.txt"):
        change = {"type": "fileChange", "changes": [{"path": path, "kind": {"type": "add"}, "diff": "+x\n"}]}
        fc = t.item("started", {**change, "status": "inProgress"})
        answer = wire.ask(
            "item/fileChange/requestApproval",
            {"threadId": wire.thread, "turnId": wire.turn, "itemId": fc, "reason": None},
        )
        decisions.append(_decision(answer))
        if decisions[-1] == "accept" and path == "notes.md":
            Path(path).write_text("x\n")
        t.item(
            "completed",
            {"id": fc, **change, "status": "completed" if decisions[-1] == "accept" else "declined"},
        )
    return "decisions: command={}, inside={}, outside={}".format(*decisions)


def _decision(answer: dict[str, Any]) -> str:
    decision = answer.get("decision")
    if decision not in ("accept", "acceptForSession", "decline", "cancel"):
        _violation(f"an approval answer needs a decision, got {answer!r}")
    return str(decision)


def _elicit(t: Turn) -> str:
    wire = t.wire
    elicited = wire.ask(
        "mcpServer/elicitation/request",
        {
            "threadId": wire.thread,
            "turnId": wire.turn,
            "serverName": "docs",
            "mode": "form",
            "message": "Which repository?",
            "requestedSchema": {"type": "object", "properties": {"repo": {"type": "string"}}},
        },
    )
    if elicited.get("action") not in ("accept", "decline", "cancel"):
        _violation(f"an elicitation answer needs an action, got {elicited!r}")
    asked = wire.ask(
        "item/tool/requestUserInput",
        {
            "threadId": wire.thread,
            "turnId": wire.turn,
            "itemId": "call_1",
            "questions": [
                {"id": "q1", "header": "Color", "question": "Which color?", "isOther": False, "options": None}
            ],
        },
    )
    if not isinstance(asked.get("answers"), dict):
        _violation(f"a user-input answer needs answers, got {asked!r}")
    unknown = wire.ask(UNKNOWN_REQUEST, {"threadId": wire.thread})
    code = (unknown.get("error") or {}).get("code")
    if code != -32601:
        _violation(f"an unknown server request must get JSON-RPC error -32601, got {unknown!r}")
    return f"elicitation={elicited['action']}, input={json.dumps(asked['answers'])}, unknown={code}"


def run_turn(wire: Wire, prompt: str) -> None:
    """One turn of the fake app server; the prompt's first word picks how it behaves."""
    t = Turn(wire)
    words = prompt.split()
    word = words[0].lower().rstrip(":,.!?") if words else ""
    wire.notify(
        "turn/started",
        threadId=wire.thread,
        turn={"id": wire.turn, "status": "inProgress", "items": [], "error": None},
    )
    t.item("completed", {"type": "userMessage", "content": [{"type": "text", "text": prompt}]})
    _misbehave(wire, t, word)
    t.usage()
    if _ends_without_answer(wire, t, word):
        return
    scenario = ANSWERS.get(word)
    answer = scenario(t, words) if scenario is not None else None
    if answer is None:
        answer = f"Codex heard: {prompt.strip()} (turn {t.turns})"
    if word not in ("tools",):
        t.reasoning("**Answering** the user directly.")
    item = t.message(answer, pieces=7 if word == "multibyte" else 3)
    if word == "dup":
        wire.notify(
            "item/completed",
            **t._ids(),
            item={"id": item, "type": "agentMessage", "text": answer, "phase": "final_answer"},
        )
        wire.notify(
            "thread/somethingNew/updated",
            threadId=wire.thread,
            detail="a notification the client does not know",
        )
    if word == "noturn":
        _finish(wire, 0)
    t.completed()


def _misbehave(wire: Wire, t: Turn, word: str) -> None:
    """What happens before the answer: the process dies, hangs (with a grandchild), is slow, or the
    stream reconnects twice."""
    if word == "nothing":
        print(
            "fatal: upstream said: invalid key sk-proj-SECRETSECRETSECRET1234 (Authorization: Bearer abc123abc123abc123)",
            file=sys_stderr(),
        )
        _finish(wire, 1)
    if word in ("hang", "stubborn"):
        start_grandchild()
        if word == "stubborn":
            while True:
                time.sleep(1)
        wire.wait(3600)
    if word == "slow":
        wire.wait(1.5)
    if word == "transient":
        for n in (1, 2):
            wire.notify(
                "error",
                **t._ids(),
                error={"message": f"Reconnecting... {n}/5", "codexErrorInfo": "responseStreamDisconnected"},
                willRetry=True,
            )


def _ends_without_answer(wire: Wire, t: Turn, word: str) -> bool:
    """The turns that end without an answer: rate limited, failed, interrupted, completed empty."""
    if word == "ratelimit":
        error = {
            "message": "exceeded retry limit, last status: 429 Too Many Requests",
            "codexErrorInfo": "usageLimitExceeded",
        }
        wire.notify("error", **t._ids(), error=error, willRetry=False)
        t.completed("failed", error)
    elif word == "turnfail":
        t.completed("failed", {"message": "the model produced an invalid patch", "codexErrorInfo": "other"})
    elif word == "interrupted":
        t.completed("interrupted")
    elif word == "noanswer":
        t.completed()
    else:
        return False
    return True


def _outbox(t: Turn, words: list[str]) -> str:
    Path("outbox").mkdir(exist_ok=True)
    Path("outbox/report.txt").write_text("codex report\n" * 1000)
    return "I wrote outbox/report.txt."


def _context(t: Turn, words: list[str]) -> str:
    document = json.loads(Path("agent-context.json").read_text())
    home = base._home()
    config = _config()
    return json.dumps(
        {
            "schema": document["schema"],
            "skills": sorted(p.parent.name for p in (home / "skills").glob("*/SKILL.md")),
            "links": sorted(p.name for p in home.iterdir() if p.is_symlink()),
            "servers": sorted(config.get("mcp_servers") or {}),
            "md": Path("LANGBOT_CONTEXT.md").exists(),
        }
    )


def _mcp(t: Turn, words: list[str]) -> str:
    server, tool, arguments, answer, failed = base._mcp_call(_config(), words)
    call = {"type": "mcpToolCall", "server": server, "tool": tool, "arguments": arguments}
    item = t.item("started", {**call, "status": "inProgress"})
    result = None if failed else {"content": [{"type": "text", "text": answer}]}
    t.item(
        "completed",
        {
            "id": item,
            **call,
            "status": "failed" if failed else "completed",
            "result": result,
            "error": {"message": answer} if failed else None,
        },
    )
    return answer


#: the prompt's first word -> the turn's answer (anything else: an echo of the prompt)
ANSWERS: dict[str, Callable[[Turn, list[str]], str]] = {
    "tools": lambda t, words: _tools(t),
    "approve": lambda t, words: _approve(t),
    "elicit": lambda t, words: _elicit(t),
    "multibyte": lambda t, words: "héllo 👋🏽 世界 ✓",
    "big": lambda t, words: "C" * 250_000,
    "outbox": _outbox,
    "context": _context,
    "mcp": _mcp,
}


def _config() -> dict[str, Any]:
    import tomllib

    file = base._home() / "config.toml"
    return tomllib.loads(file.read_text(encoding="utf-8")) if file.exists() else {}


def sys_stderr() -> Any:
    import sys

    return sys.stderr


def _finish(wire: Wire, code: int) -> None:
    from agentrunner_runners.testing.fake_codex_app import finish

    finish(wire, code)
