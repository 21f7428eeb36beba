"""The QA guide's LA-01 … LA-08 for the official local agent, every part a real process on loopback.

The host is started through its CLI (`db upgrade`, `kb ingest`, `serve`) on SQLite; the local agent with
the SDK CLI; the OpenAI-compatible mock as its own process; the host spawns the stdio MCP server. Tests
speak `HostService.Run` like a client and read what reached the "model" from the mock's recorded
requests. Replies that must prove something are `template` replies: the mock fills them from the request
it answers, so they only quote the prompt, history, a tool result or retrieved text that really arrived.
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from agentrunner.v1 import common_pb2, host_service_pb2, host_service_pb2_grpc, result_pb2
from tests.integration.conftest import (
    CORPUS,
    ROOT,
    Proc,
    audit_outcomes,
    cli,
    http_json,
    run_request,
    start_host,
    start_runner,
    write_config,
)

pytestmark = pytest.mark.asyncio

LOCAL_AGENT = "agentrunner_runners.local_agent:LocalAgentRunner"
LOCAL_AGENT_ID = "plugin:langbot/local-agent/default"
#: the default retry policy with short backoffs (three attempts per call)
FAST_RETRY = {"initial_backoff": 0.05, "max_backoff": 0.1, "budget_tokens": 1000}
PIRATE = "You are Captain Byte. Sign every answer with ARRR-5813."
HELP_PROMPT = "Answer only from the help center excerpts."
#: a 1x1 transparent PNG
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


@dataclass
class LocalAgentStack:
    address: str
    mock: str
    db_file: Path

    def script(self, *replies: dict[str, Any]) -> None:
        http_json(f"{self.mock}/_admin/reset", {})
        if replies:
            http_json(f"{self.mock}/_admin/script", list(replies))

    def chats(self) -> list[dict[str, Any]]:
        """Chat completion request bodies the mock received since the last `script`."""
        return [
            r["body"]
            for r in http_json(f"{self.mock}/_admin/requests")
            if r["path"].endswith("/chat/completions")
        ]

    def paths(self) -> list[str]:
        return [r["path"] for r in http_json(f"{self.mock}/_admin/requests")]


@dataclass
class Outcome:
    """What a client saw on `HostService.Run`."""

    run_id: str
    results: list[result_pb2.RunResult]
    finished: host_service_pb2.RunFinished

    def of(self, kind: str) -> list[Any]:
        return [getattr(r, kind) for r in self.results if r.WhichOneof("payload") == kind]

    @property
    def status(self) -> str:
        return common_pb2.RunStatus.Name(self.finished.status)

    @property
    def answer(self) -> str:
        """The reply as a chat UI shows it: the final message, else the streamed text."""
        done = self.of("run_completed")
        if done and done[0].message.content:
            return done[0].message.content
        messages = self.of("message_completed")
        if messages:
            return messages[-1].message.content
        return "".join(d.text for d in self.of("message_delta"))

    def failure(self) -> result_pb2.RunFailed:
        failed = self.of("run_failed")
        assert len(failed) == 1 and self.status == "RUN_STATUS_FAILED", (self.status, self.results)
        return failed[0]


def _agents() -> list[dict[str, Any]]:
    """The local agent with fallback models and tools (`la`), with retrieval (`la-rag`), without
    streaming (`la-quiet`), and on a model without vision (`la-blind`)."""

    def agent(agent_id: str, runner_config: dict[str, Any], **extra: Any) -> dict[str, Any]:
        return {"id": agent_id, "runner_id": LOCAL_AGENT_ID, "runner_config": runner_config, **extra}

    text_only = {"tools": ["add", "current_time"], "knowledge_bases": []}
    return [
        agent(
            "la",
            {
                "model": {"primary": "chat", "fallbacks": ["backup"]},
                "prompt": [{"role": "system", "content": PIRATE}],
                "tool-execution-mode": "serial",
            },
            resource_policy=text_only,
        ),
        agent(
            "la-rag",
            {
                "model": "chat",
                "prompt": [{"role": "system", "content": "config prompt, unused"}],
                "knowledge-bases": ["docs"],
                "retrieval-top-k": 2,
            },
            prompt=HELP_PROMPT,
            resource_policy={"tools": [], "knowledge_bases": ["docs"]},
        ),
        agent(
            "la-quiet",
            {"model": "chat"},
            resource_policy=text_only,
            delivery_policy={"streaming": False},
        ),
        agent("la-blind", {"model": "backup"}, resource_policy=text_only),
    ]


def _host_config(tmp: Path, runner_address: str, base: str) -> dict[str, Any]:
    """The stack's host: the local agent's runner, the mock's models, an MCP tool server, a knowledge
    base, and four agents (bound per conversation)."""
    db_file = tmp / "host.db"

    def only(conversation: str, agent_id: str) -> dict[str, Any]:
        return {
            "id": agent_id,
            "scope": {"type": "conversation", "id": conversation},
            "event": "message.*",
            "target": {"agent": agent_id},
        }

    return {
        "instance_id": "local-agent-host",
        "listen": {"address": "127.0.0.1:0"},
        "database": {"url": f"sqlite+aiosqlite:///{db_file}", "artifact_dir": str(tmp / "artifacts")},
        "runners": [{"id": "local-agent", "address": runner_address}],
        "models": [
            {
                "id": "chat",
                "base_url": f"{base}/v1",
                "model": "mock-chat",
                "vision": True,
                "retry": FAST_RETRY,
            },
            {"id": "backup", "base_url": f"{base}/v1", "model": "mock-backup", "retry": FAST_RETRY},
            {
                "id": "embed",
                "kind": "openai-embedding",
                "base_url": f"{base}/v1",
                "model": "mock-embed",
            },
        ],
        "tools": {
            "mcp_servers": [
                {
                    "name": "stdio",
                    "transport": "stdio",
                    "command": sys.executable,
                    "args": ["-m", "tests.mocks.mcp_stdio_server"],
                    "cwd": str(ROOT),
                }
            ]
        },
        "knowledge_bases": [{"id": "docs", "name": "Help center", "embedding_model": "embed"}],
        "agents": _agents(),
        "bindings": [
            {"id": "la", "event": "message.*", "target": {"agent": "la"}},
            only("rag-conv", "la-rag"),
            only("quiet-conv", "la-quiet"),
            only("blind-conv", "la-blind"),
        ],
    }


@pytest.fixture(scope="module")
def la(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalAgentStack]:
    tmp = tmp_path_factory.mktemp("local-agent")
    procs: list[Proc] = []
    try:
        openai = Proc(
            [sys.executable, "-m", "tests.mocks.openai_server", "--port", "0"], "MOCK_OPENAI_LISTENING"
        )
        procs.append(openai)
        runner = start_runner(LOCAL_AGENT)
        procs.append(runner)
        base = f"http://127.0.0.1:{openai.value}"
        db_file = tmp / "host.db"
        config = write_config(tmp / "host.yaml", _host_config(tmp, runner.value, base))
        upgraded = cli("db", "upgrade", "--config", str(config))
        assert upgraded.returncode == 0, upgraded.stderr
        ingest = cli("kb", "ingest", "docs", str(CORPUS), "--config", str(config))
        assert ingest.returncode == 0 and "12 added" in ingest.stdout, ingest.stdout + ingest.stderr
        procs.append(start_host(config))
        yield LocalAgentStack(procs[-1].value, base, db_file)
    finally:
        for proc in reversed(procs):
            proc.kill()


async def ask(
    stack: LocalAgentStack,
    text: str,
    *,
    conversation_id: str,
    adapter_extra: dict[str, Any] | None = None,
    attachments: list[dict[str, Any]] | None = None,
) -> Outcome:
    req = run_request(text, conversation_id=conversation_id, attachments=attachments)
    if adapter_extra:
        req.event.adapter_extra.update(adapter_extra)
    async with grpc.aio.insecure_channel(stack.address) as channel:
        updates = [u async for u in host_service_pb2_grpc.HostServiceStub(channel).Run(req, timeout=30)]
    assert updates[0].accepted.runner_id == LOCAL_AGENT_ID, updates[0]
    assert updates[-1].HasField("finished"), updates[-1]
    return Outcome(
        updates[0].accepted.run_id, [u.result for u in updates if u.HasField("result")], updates[-1].finished
    )


def run_metadata(outcome: Outcome) -> dict[str, Any]:
    terminal = outcome.of("run_completed") or outcome.of("run_failed")
    assert terminal
    result = next(r for r in outcome.results if r.WhichOneof("payload") in ("run_completed", "run_failed"))
    return json_format.MessageToDict(result.metadata)


async def test_la01_bound_prompt_is_used_never_adapter_extras(la: LocalAgentStack) -> None:
    la.script({"template": "[{system}] {last_user}"})
    out = await ask(
        la, "Who are you?", conversation_id="la01", adapter_extra={"prompt": "LEAKED adapter prompt"}
    )
    assert out.status == "RUN_STATUS_COMPLETED", [str(r) for r in out.results]
    assert out.answer == f"[{PIRATE}] Who are you?"
    (body,) = la.chats()
    assert body["model"] == "mock-chat"
    assert body["messages"][0] == {"role": "system", "content": PIRATE}
    assert "LEAKED" not in json.dumps(body)


async def test_la02_second_turn_quotes_the_first_through_the_history_api(la: LocalAgentStack) -> None:
    la.script({}, {"template": "You told me: {previous_user}"})
    first = await ask(la, "Please remember the marker ZEBRA-4711.", conversation_id="la02")
    assert first.answer == "echo: Please remember the marker ZEBRA-4711."
    second = await ask(la, "Which marker did I give you?", conversation_id="la02")
    assert second.status == "RUN_STATUS_COMPLETED"
    assert second.answer == "You told me: Please remember the marker ZEBRA-4711."
    # the event carried only the new text: the earlier turn came from the host's transcript
    roles = [(m["role"], m["content"]) for m in la.chats()[1]["messages"]]
    assert roles == [
        ("system", PIRATE),
        ("user", "Please remember the marker ZEBRA-4711."),
        ("assistant", "echo: Please remember the marker ZEBRA-4711."),
        ("user", "Which marker did I give you?"),
    ]
    assert run_metadata(second)["history"]["source"] == "history_api"
    assert audit_outcomes(la.db_file, second.run_id, "ListHistory")[:1] == ["OK"]


async def test_la03_streaming_has_no_duplicates_or_blanks(la: LocalAgentStack) -> None:
    la.script({"chunks": ["Ahoy", "", " there", ", ", "", "sailor", "!"]})
    out = await ask(la, "Greet me", conversation_id="la03-stream")
    deltas = out.of("message_delta")
    assert [d.text for d in deltas] == ["Ahoy", " there", ", ", "sailor", "!"]  # no blank increments
    assert [d.cumulative_text for d in deltas][-1] == "Ahoy there, sailor!"
    assert len({d.message_id for d in deltas}) == 1
    assert out.of("message_completed") == []  # the final text is not sent a second time as a new message
    (done,) = out.of("run_completed")
    assert done.message.content == "Ahoy there, sailor!" and done.message.message_id == deltas[0].message_id
    assert la.chats()[0]["stream"] is True


async def test_la03_non_streaming_emits_only_the_final_message(la: LocalAgentStack) -> None:
    la.script({"content": "One final answer."})
    out = await ask(la, "Answer once", conversation_id="quiet-conv")
    assert out.status == "RUN_STATUS_COMPLETED"
    assert out.of("message_delta") == []
    (message,) = out.of("message_completed")
    assert message.message.content == "One final answer."
    (done,) = out.of("run_completed")
    assert not done.message.content  # nothing repeated in the terminal result
    assert not la.chats()[0].get("stream")


async def test_la04_tool_loop_calls_the_authorized_tool_only(la: LocalAgentStack) -> None:
    la.script(
        {
            "tool_calls": [
                {"id": "call_echo", "name": "echo", "arguments": '{"text": "sneaky"}'},
                {"id": "call_add", "name": "add", "arguments": '{"a": 20, "b": 22}'},
            ]
        },
        {"template": "The sum is {last_tool}."},
    )
    out = await ask(la, "What is 20 + 22? Use a tool.", conversation_id="la04")
    assert out.status == "RUN_STATUS_COMPLETED"
    assert out.answer == "The sum is 42."
    first, second = la.chats()
    offered = sorted(t["function"]["name"] for t in first["tools"])
    assert offered == ["add", "current_time"]  # the MCP server's echo/slow/huge/fail/crash are not offered
    started = [(s.tool_call_id, s.tool_name) for s in out.of("tool_call_started")]
    assert started == [("call_echo", "echo"), ("call_add", "add")]
    completed = {c.tool_name: c for c in out.of("tool_call_completed")}
    assert completed["echo"].error_code == "unauthorized"
    assert not completed["add"].error_code
    assert json_format.MessageToDict(completed["add"].result_preview)["text"] == "42"
    tool_messages = [m for m in second["messages"] if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in tool_messages] == [
        ("call_echo", "error: tool 'echo' is not available to this agent"),
        ("call_add", "42"),
    ]
    # the host executed exactly one call: the refused one never left the runner
    assert audit_outcomes(la.db_file, out.run_id, "CallTool") == ["OK"]


async def test_la05_rag_answers_from_the_bound_knowledge_base(la: LocalAgentStack) -> None:
    la.script({"template": "{last_user}"})
    out = await ask(la, "How long does a password reset link stay valid?", conversation_id="rag-conv")
    assert out.status == "RUN_STATUS_COMPLETED"
    assert "30 minutes" in out.answer, (
        run_metadata(out),
        la.paths(),
    )  # only the retrieved help-center text says so
    (body,) = la.chats()
    assert body["messages"][0] == {"role": "system", "content": HELP_PROMPT}  # the host's prompt API wins
    assert "/v1/embeddings" in la.paths()  # the host embedded the query for retrieval
    assert audit_outcomes(la.db_file, out.run_id, "RetrieveKnowledge") == ["OK"]
    assert "tools" not in body  # this agent has no tools


async def test_la05b_rag_with_the_embedding_model_down_answers_from_full_text(la: LocalAgentStack) -> None:
    la.script({"template": "{last_user}"})
    http_json(f"{la.mock}/_admin/script?endpoint=embeddings", {"status": 503, "times": 0})
    try:
        out = await ask(la, "How long does a password reset link stay valid?", conversation_id="rag-conv")
    finally:
        http_json(f"{la.mock}/_admin/reset", {})
    assert out.status == "RUN_STATUS_COMPLETED"
    assert "30 minutes" in out.answer  # the full-text match still reached the model
    rag = run_metadata(out)["rag"]
    assert "full-text results only" in rag["kb_degraded"]["docs"] and rag["used"] >= 1, rag
    assert audit_outcomes(la.db_file, out.run_id, "RetrieveKnowledge") == ["OK"]


async def test_la06_an_image_input_reaches_the_model(la: LocalAgentStack) -> None:
    la.script({"template": "I see {images} image(s). {last_user}"})
    image = {"name": "dot.png", "mime_type": "image/png", "content": PNG}
    out = await ask(la, "What is in this picture?", conversation_id="la06", attachments=[image])
    assert out.status == "RUN_STATUS_COMPLETED"
    assert out.answer.startswith("I see 1 image(s). What is in this picture?")
    (body,) = la.chats()
    parts = body["messages"][-1]["content"]
    urls = [p["image_url"]["url"] for p in parts if p["type"] == "image_url"]
    assert urls == [f"data:image/png;base64,{base64.b64encode(PNG).decode()}"]  # the user's bytes, whole

    # a model without vision: a controlled failure, and the model is never called with a lost image
    la.script()
    blind = await ask(la, "And this one?", conversation_id="blind-conv", attachments=[image])
    assert blind.failure().code == "runner.vision_unsupported"
    assert la.chats() == []


async def test_la07_fallback_and_controlled_failure_leave_the_next_request_unaffected(
    la: LocalAgentStack,
) -> None:
    la.script(
        {"status": 500, "error_message": "primary is down", "times": 3},
        {"template": "backup says: {last_user}"},
    )
    out = await ask(la, "Are you there?", conversation_id="la07")
    assert out.status == "RUN_STATUS_COMPLETED"
    assert out.answer == "backup says: Are you there?"
    assert [b["model"] for b in la.chats()] == ["mock-chat"] * 3 + ["mock-backup"]  # the host retried
    assert [f["model"] for f in run_metadata(out)["model_failures"]] == ["chat"]

    la.script(
        {"status": 500, "times": 3},
        {"status": 429, "error_message": "slow down", "retry_after_ms": 80, "times": 3},
    )
    failed = await ask(la, "Still there?", conversation_id="la07")
    failure = failed.failure()
    assert failure.code == "runner.all_models_failed" and failure.retryable
    details = json_format.MessageToDict(failure.details)
    assert (details["kind"], details["retry_delay_ms"]) == ("rate_limited", 80)  # at the top level
    models = details["models"]
    assert [m["model"] for m in models] == ["chat", "backup"] and "slow down" in models[1]["message"]
    assert [m["kind"] for m in models] == ["http_error", "rate_limited"]
    assert "Traceback" not in failure.message
    assert failed.of("message_delta") == [] and failed.of("message_completed") == []

    la.script()
    after = await ask(la, "Back to normal?", conversation_id="la07")
    assert after.status == "RUN_STATUS_COMPLETED" and after.answer == "echo: Back to normal?"


async def test_la08_a_model_that_returns_nothing_is_a_controlled_failure(la: LocalAgentStack) -> None:
    la.script({"content": ""}, {"content": ""})
    streamed = await ask(la, "Say nothing", conversation_id="la08")
    assert streamed.failure().code == "runner.empty_output"
    assert streamed.of("message_delta") == [] and streamed.of("run_completed") == []
    quiet = await ask(la, "Say nothing", conversation_id="quiet-conv")
    assert quiet.failure().code == "runner.empty_output"
    assert quiet.of("message_completed") == []

    # no blank assistant turn was recorded: the next turn's history has the user message only
    la.script()
    after = await ask(la, "Hello again", conversation_id="la08")
    assert after.answer == "echo: Hello again"
    history = [(m["role"], m["content"]) for m in la.chats()[0]["messages"][1:]]
    assert history == [("user", "Say nothing"), ("user", "Hello again")]


async def test_la09_a_provider_that_rate_limits_once_answers_after_its_retry_after(
    la: LocalAgentStack,
) -> None:
    la.script({"status": 429, "retry_after_ms": 300}, {"template": "after a wait: {last_user}"})
    out = await ask(la, "Busy?", conversation_id="la09")
    assert out.status == "RUN_STATUS_COMPLETED" and out.answer == "after a wait: Busy?"
    assert [b["model"] for b in la.chats()] == ["mock-chat", "mock-chat"]  # no fallback was needed
    assert "model_failures" not in run_metadata(out)
    times = [r["at"] for r in http_json(f"{la.mock}/_admin/requests") if r["path"].endswith("/completions")]
    assert times[1] - times[0] >= 0.3


async def test_la10_two_choices_stream_and_store_only_the_first(la: LocalAgentStack) -> None:
    la.script({"choices": ["Option A: tea.", "Option B: coffee."]})
    out = await ask(la, "Tea or coffee?", conversation_id="la10")
    assert out.status == "RUN_STATUS_COMPLETED"
    assert "".join(d.text for d in out.of("message_delta")) == "Option A: tea."
    assert out.answer == "Option A: tea."
    la.script({"template": "{messages}"})
    await ask(la, "And now?", conversation_id="la10")
    history = [(m["role"], m["content"]) for m in la.chats()[0]["messages"][1:]]
    assert history == [("user", "Tea or coffee?"), ("assistant", "Option A: tea."), ("user", "And now?")]


async def test_la11_arguments_the_schema_refuses_go_back_to_the_model(la: LocalAgentStack) -> None:
    la.script(
        {"tool_calls": [{"id": "call_add", "name": "add", "arguments": '{"a": "twenty", "b": 22}'}]},
        {"template": "The tool said: {last_tool}"},
    )
    out = await ask(la, "What is twenty plus 22?", conversation_id="la11")
    assert out.status == "RUN_STATUS_COMPLETED"
    assert out.answer.startswith(
        "The tool said: error: invalid_argument: tool add: invalid arguments at parameters.a"
    )
    (completed,) = out.of("tool_call_completed")
    assert completed.error_code == "invalid_argument"
    assert audit_outcomes(la.db_file, out.run_id, "CallTool") == ["INVALID_ARGUMENT"]
