"""The scripted turns of the fake ACP agent (`fake_acp.py`), one per prompt word (its table)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentrunner_runners.testing.fake_acp import Agent


class Turns:
    """`turn_<word>(text, blocks)` emits one turn's updates through `agent` and returns its answer (or
    `(answer, stopReason)`, or `{"error": ...}` for the prompt's JSON-RPC error)."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    def turn_echo(self, text: str, blocks: list[dict[str, Any]]) -> str:
        self.agent.chunk("Thinking about it.", "agent_thought_chunk")
        answer = f"Fake heard: {text} (turn {len(self.agent.history) + 1})"
        third = len(answer) // 3
        for piece in (answer[:third], answer[third : 2 * third], answer[2 * third :]):
            self.agent.chunk(piece)
        return answer

    def turn_multibyte(self, text: str, blocks: list[dict[str, Any]]) -> str:
        answer = "héllo 👋🏽 世界 ✓"
        for piece in ("hé", "llo 👋", "🏽 世", "界 ✓"):
            self.agent.chunk(piece)
        return answer

    def turn_tools(self, text: str, blocks: list[dict[str, Any]]) -> str:
        self.agent.chunk("Let me look at the workspace.")
        where = os.path.join(os.getcwd(), "README.md")
        self.agent.update(
            {
                "sessionUpdate": "tool_call",
                "toolCallId": "call-1",
                "title": "Read README.md",
                "kind": "read",
                "status": "pending",
                "locations": [{"path": where}],
                "rawInput": {"path": where},
                "_meta": {"fake": {"toolName": "Read"}},
            }
        )
        self.agent.update(
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": "call-1",
                "status": "completed",
                "content": [{"type": "content", "content": {"type": "text", "text": "# readme"}}],
            }
        )
        # announced without its input (as Claude's agent does), the input in the next update
        self.agent.update(
            {
                "sessionUpdate": "tool_call",
                "toolCallId": "call-3",
                "title": "grep",
                "kind": "search",
                "status": "pending",
                "rawInput": {},
            }
        )
        self.agent.update(
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": "call-3",
                "status": "completed",
                "rawInput": {"pattern": "TODO"},
                "rawOutput": "no match",
            }
        )
        self.agent.update(
            {
                "sessionUpdate": "plan",
                "entries": [
                    {"content": "Read the files", "priority": "high", "status": "completed"},
                    {"content": "Answer", "priority": "medium", "status": "in_progress"},
                ],
            }
        )
        self.agent.update(
            {
                "sessionUpdate": "tool_call",
                "toolCallId": "call-2",
                "title": "Left open",
                "kind": "other",
                "status": "in_progress",
            }
        )
        answer = "The workspace has a README."
        self.agent.chunk(answer)
        return answer

    def _permit(self, title: str, kind: str, path: str, *, by_id: bool = False) -> str:
        options = [
            {"optionId": "yes", "name": "Allow", "kind": "allow_once"},
            {"optionId": "always", "name": "Always", "kind": "allow_always"},
            {"optionId": "no", "name": "Reject", "kind": "reject_once"},
        ]
        call = {
            "toolCallId": f"perm-{title}",
            "title": title,
            "kind": kind,
            "locations": [{"path": path}] if path else [],
            "rawInput": {"path": path},
        }
        if by_id:  # announced as a tool call first, then asked about by its id alone (as codex-acp does)
            self.agent.update({"sessionUpdate": "tool_call", **call, "status": "pending"})
            call = {"toolCallId": call["toolCallId"]}
        answer = self.agent.call(
            "session/request_permission",
            {"sessionId": self.agent.session, "toolCall": call, "options": options},
        )
        outcome = (answer.get("result") or {}).get("outcome") or {}
        return str(outcome.get("optionId") or outcome.get("outcome"))

    def turn_permit(self, text: str, blocks: list[dict[str, Any]]) -> str:
        decisions = [
            self._permit("edit-inside", "edit", os.path.join(os.getcwd(), "outbox", "a.txt")),
            self._permit("edit-outside", "edit", "/etc/passwd"),
            self._permit("command", "execute", ""),
            self._permit("known-edit", "edit", os.path.join(os.getcwd(), "b.txt"), by_id=True),
        ]
        answer = "decisions: " + ",".join(decisions)
        self.agent.chunk(answer)
        return answer

    def turn_fs(self, text: str, blocks: list[dict[str, Any]]) -> str:
        target = os.path.join(os.getcwd(), "outbox", "note.txt")
        wrote = self.agent.call(
            "fs/write_text_file", {"sessionId": self.agent.session, "path": target, "content": "nöte\n"}
        )
        read = self.agent.call("fs/read_text_file", {"sessionId": self.agent.session, "path": target})
        outside = self.agent.call(
            "fs/read_text_file", {"sessionId": self.agent.session, "path": "/etc/hostname"}
        )
        answer = (
            f"write: {'error' if 'error' in wrote else 'ok'}; read: "
            f"{(read.get('result') or {}).get('content', read.get('error'))!r}; "
            f"outside: {(outside.get('error') or {}).get('code', 'allowed')}"
        )
        self.agent.chunk(answer)
        return answer

    def turn_terminal(self, text: str, blocks: list[dict[str, Any]]) -> str:
        made = self.agent.call(
            "terminal/create", {"sessionId": self.agent.session, "command": "echo", "args": ["from-terminal"]}
        )
        if "error" in made:
            answer = f"terminal refused: {made['error'].get('code')}"
        else:
            tid = made["result"]["terminalId"]
            exited = self.agent.call(
                "terminal/wait_for_exit", {"sessionId": self.agent.session, "terminalId": tid}
            )
            output = self.agent.call("terminal/output", {"sessionId": self.agent.session, "terminalId": tid})
            self.agent.call("terminal/release", {"sessionId": self.agent.session, "terminalId": tid})
            answer = f"terminal: {output['result']['output'].strip()} exit {exited['result'].get('exitCode')}"
        self.agent.chunk(answer)
        return answer

    def turn_blocks(self, text: str, blocks: list[dict[str, Any]]) -> str:
        seen = []
        for b in blocks:
            resource = b.get("resource") or {}
            seen.append(
                {
                    "type": b.get("type"),
                    "mime": b.get("mimeType") or resource.get("mimeType"),
                    "uri": b.get("uri") or resource.get("uri"),
                    "text": resource.get("text"),
                }
            )
        answer = json.dumps({"blocks": seen, "text": text}, ensure_ascii=False)
        self.agent.chunk(answer)
        return answer

    def turn_notice(self, text: str, blocks: list[dict[str, Any]]) -> str:
        self.agent.chunk(
            "**Warning:** this is the agent's notice", meta={"claudeCode": {"kind": "informational"}}
        )
        self.agent.chunk("The real answer.")
        return "The real answer."

    def turn_die(self, text: str, blocks: list[dict[str, Any]]) -> str:
        self.agent.chunk("I was about to")
        print(f"fatal: lost my key {os.environ.get('FAKE_ACP_SECRET', '')}", file=sys.stderr, flush=True)
        self.agent.flush_log()
        os._exit(3)

    def _wait_cancel(self, honour: bool) -> tuple[str, str]:
        child = subprocess.Popen(["sleep", "300"])  # a grandchild of the runner
        self.agent.log["child"] = child.pid
        self.agent.chunk("Working on it...")
        while True:
            message = self.agent.read()
            if message is None:
                sys.exit(0)
            if message.get("method") == "session/cancel" and honour:
                child.terminate()
                return "", "cancelled"

    def turn_hang(self, text: str, blocks: list[dict[str, Any]]) -> tuple[str, str]:
        return self._wait_cancel(honour=True)

    def turn_stubborn(self, text: str, blocks: list[dict[str, Any]]) -> tuple[str, str]:
        return self._wait_cancel(honour=False)

    def turn_maxtokens(self, text: str, blocks: list[dict[str, Any]]) -> tuple[str, str]:
        self.agent.chunk("A long answer that was cut")
        return "cut", "max_tokens"

    def turn_maxturns(self, text: str, blocks: list[dict[str, Any]]) -> tuple[str, str]:
        return "", "max_turn_requests"

    def turn_refusal(self, text: str, blocks: list[dict[str, Any]]) -> tuple[str, str]:
        return "", "refusal"

    def turn_autherror(self, text: str, blocks: list[dict[str, Any]]) -> dict[str, Any]:
        return {"error": {"code": -32000, "message": "Authentication required"}}

    def turn_empty(self, text: str, blocks: list[dict[str, Any]]) -> str:
        return ""
