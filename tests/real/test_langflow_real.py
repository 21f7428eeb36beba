"""The Langflow runner against a real Langflow server (`.ci/install-real-tools langflow`), end to end.

The real server (one per test session, started as the session begins: `tests/conftest.py`), an API
key and flows made through its REST API (ChatInput -> a custom streaming component -> ChatOutput, no
LLM), the real runner process (`python -m agentrunner serve`) and the real host (`agentrunner_host
serve` on SQLite); the tests speak `HostService.Run` like a client. Run the file on one xdist worker
(`--dist loadfile`, as `make test` does): its fixtures are shared by every test in it.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from agentrunner.v1 import common_pb2, host_service_pb2, host_service_pb2_grpc, result_pb2
from tests.integration.conftest import CLI, Proc, cli, run_request, write_config
from tests.real.langflow_server import EARLY_ENV, LangflowServer
from tests.real.tools import real_tool

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(600)]

RUNNER = "agentrunner_runners.langflow:LangflowRunner"
RUNNER_ID = "plugin:langbot/langflow-agent/default"
#: the run deadline of the `deadline` agent, shorter than the slow answer it asks for
DEADLINE = 6.0


#: conversation -> the agent bound to it
CONVERSATIONS = {
    **{name: name for name in ("streamed", "plain", "two", "two-plain", "wrong-key", "no-key", "deadline")},
    "session": "streamed",
    "cancel": "streamed",
    "plain-cancel": "plain",
}


@dataclass
class Flows:
    server: LangflowServer
    api_key: str
    single: str
    two: str


@pytest.fixture(scope="session")
def langflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flows]:
    """The real server (the one the session started early, else one started now), healthy, with an
    API key and the suite's flows."""
    import os

    install = real_tool("langflow")
    early = os.environ.get(EARLY_ENV)
    if early:
        server = LangflowServer.attach(install, early)
    else:
        server = LangflowServer(install, tmp_path_factory.mktemp("langflow"))
        server.start()
    try:
        waited = time.monotonic()
        server.wait()
        print(f"\nlangflow healthy after waiting {time.monotonic() - waited:.1f} s here", file=sys.stderr)
        yield Flows(
            server, server.api_key(), server.create_flow("single"), server.create_flow("two", outputs=2)
        )
    finally:
        if not early:
            server.stop()


@dataclass
class Stack:
    address: str
    flows: Flows


@pytest.fixture(scope="module")
def stack(langflow: Flows, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The Langflow runner process and the host, with one agent per way of calling the flows."""
    tmp = tmp_path_factory.mktemp("langflow-host")
    procs: list[Proc] = []
    try:
        database = {"url": f"sqlite+aiosqlite:///{tmp / 'host.db'}", "artifact_dir": str(tmp / "artifacts")}
        with ThreadPoolExecutor(2) as pool:
            runner = pool.submit(
                Proc,
                [sys.executable, "-m", "agentrunner", "serve", RUNNER, "--host", "127.0.0.1", "--port", "0"],
                "AGENTRUNNER_LISTENING",
                None,
                90,
            )
            upgraded = pool.submit(
                cli, "db", "upgrade", "--config", str(write_config(tmp / "db.yaml", {"database": database}))
            )
            procs.append(runner.result())
            assert upgraded.result().returncode == 0, upgraded.result().stderr
        base = {"base-url": langflow.server.url, "api-key": langflow.api_key, "flow-id": langflow.single}
        agents = {
            "streamed": base,
            "plain": {**base, "streaming": False},
            "two": {**base, "flow-id": langflow.two},
            "two-plain": {**base, "flow-id": langflow.two, "streaming": False},
            "wrong-key": {**base, "api-key": "sk-not-a-key-of-this-server"},
            "no-key": {k: v for k, v in base.items() if k != "api-key"},
            "deadline": base,
        }
        config = write_config(
            tmp / "host.yaml",
            {
                "instance_id": "langflow-host",
                "listen": {"address": "127.0.0.1:0"},
                "database": database,
                "runners": [{"id": "langflow", "address": runner.result().value}],
                "agents": [
                    {
                        "id": name,
                        "runner_id": RUNNER_ID,
                        "runner_config": cfg,
                        "timeout_seconds": DEADLINE if name == "deadline" else 90,
                    }
                    for name, cfg in agents.items()
                ],
                "bindings": [
                    {
                        "id": conversation,
                        "scope": {"type": "conversation", "id": conversation},
                        "event": "message.*",
                        "target": {"agent": agent},
                    }
                    for conversation, agent in CONVERSATIONS.items()
                ],
            },
        )
        host = Proc(
            [*CLI, "serve", "--config", str(config), "--log-level", "WARNING"],
            "AGENTRUNNER_HOST_LISTENING",
            None,
            90,
        )
        procs.append(host)
        yield Stack(host.value, langflow)
    finally:
        for proc in reversed(procs):
            proc.kill()


@dataclass
class Outcome:
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
        done = self.of("run_completed")
        if done and done[0].message.content:
            return str(done[0].message.content)
        messages = self.of("message_completed")
        return str(messages[-1].message.content) if messages else ""

    @property
    def failure(self) -> result_pb2.RunFailed:
        [failed] = self.of("run_failed")
        return failed

    def state(self, key: str) -> str:
        values = [u.value.string_value for u in self.of("state_updated") if u.key == key]
        return values[-1] if values else ""


async def ask(stack: Stack, text: str, conversation: str) -> Outcome:
    async with grpc.aio.insecure_channel(stack.address) as channel:
        call = host_service_pb2_grpc.HostServiceStub(channel).Run(
            run_request(text, conversation_id=conversation), timeout=120
        )
        updates = [u async for u in call]
    assert updates[-1].HasField("finished"), updates[-1]
    results = [u.result for u in updates if u.HasField("result")]
    return Outcome(updates[0].accepted.run_id, results, updates[-1].finished)


async def test_a_streamed_answer_shows_the_first_chunk_once(stack: Stack) -> None:
    out = await ask(stack, "hallo wörld 😀", "streamed")
    assert out.status == "RUN_STATUS_COMPLETED", out.results
    assert out.answer == "streamed reply to hallo wörld 😀"
    deltas = out.of("message_delta")
    assert len(deltas) >= 4  # chunk by chunk, as Langflow streamed them
    # Langflow 1.13 sends the first chunk twice (a partial message, then its token): shown once, the
    # deltas add up to the answer without a rewrite (the host logs result.delta_cumulative_mismatch)
    assert "".join(d.text for d in deltas) == out.answer
    assert [d for d in deltas if d.cumulative_text] == []


async def test_a_plain_answer_is_one_message(stack: Stack) -> None:
    out = await ask(stack, "plain please", "plain")
    assert out.status == "RUN_STATUS_COMPLETED", out.results
    assert out.answer == "streamed reply to plain please"
    assert out.of("message_delta") == [] and len(out.of("message_completed")) == 1


@pytest.mark.parametrize("agent", ["two", "two-plain"])
async def test_every_chat_output_is_in_the_answer(stack: Stack, agent: str) -> None:
    out = await ask(stack, "both outputs", agent)
    assert out.status == "RUN_STATUS_COMPLETED", out.results
    # the echoing output and the streamed one, each once; their order is the arrival order when
    # streamed and Langflow's order when not (the README's rule), so both orders are right here
    assert sorted(out.answer.split("\n\n")) == ["both outputs", "streamed reply to both outputs"]
    if agent == "two":
        assert [d for d in out.of("message_delta") if d.cumulative_text] == []


@pytest.mark.parametrize(
    ("agent", "code"), [("wrong-key", "langflow.auth_error"), ("no-key", "langflow.auth_error")]
)
async def test_a_wrong_or_missing_api_key_is_refused(stack: Stack, agent: str, code: str) -> None:
    out = await ask(stack, "let me in", agent)
    assert out.status == "RUN_STATUS_FAILED", out.results
    assert (out.failure.code, out.failure.retryable) == (code, False)
    assert "sk-not-a-key" not in str(out.results)


async def test_two_turns_share_langflow_s_session(stack: Stack) -> None:
    first = await ask(stack, "turn one", "session")
    session = first.state("external.session_id")
    assert first.status == "RUN_STATUS_COMPLETED" and session, first.results
    second = await ask(stack, "turn two", "session")
    assert second.status == "RUN_STATUS_COMPLETED", second.results
    stored = stack.flows.server.messages(session)
    texts = [m["text"] for m in stored]
    # the server kept both turns, questions and answers, under the one session id
    for text in ("turn one", "streamed reply to turn one", "turn two", "streamed reply to turn two"):
        assert text in texts, texts
    assert {m["session_id"] for m in stored} == {session}


@pytest.mark.parametrize("agent", ["streamed", "plain"])
async def test_a_failing_flow_fails_the_same_way_streamed_or_not(stack: Stack, agent: str) -> None:
    out = await ask(stack, f"fail {agent}", agent)
    assert out.status == "RUN_STATUS_FAILED", out.results
    assert (out.failure.code, out.failure.retryable) == ("langflow.flow_failed", False)
    assert f"the flow failed on purpose: fail {agent}" in out.failure.message
    assert out.of("state_updated") == []  # nothing stored for a failed turn
    rate = await ask(stack, f"ratelimited {agent}", agent)
    assert (rate.failure.code, rate.failure.retryable) == ("langflow.rate_limited", True), rate.results


async def test_the_run_deadline_ends_a_slow_flow_as_langflow_timeout(stack: Stack) -> None:
    started = time.monotonic()
    out = await ask(stack, "slow 30 too slow for the deadline", "deadline")
    took = time.monotonic() - started
    # the runner's own failure (it ends the run before the host's deadline does): FAILED with its code,
    # not the host's TIMEOUT (`deadline_exceeded`), which is what the guard used to leave
    assert out.status == "RUN_STATUS_FAILED", out.results
    assert (out.failure.code, out.failure.retryable) == ("langflow.timeout", True), out.failure
    assert took < DEADLINE + 10


async def _cancel(stack: Stack, text: str, conversation: str, started: Any) -> None:
    """Starts a turn, cancels it once `started()` says the flow is running, and checks the run ends
    cancelled at once (not when the flow would have finished)."""
    async with grpc.aio.insecure_channel(stack.address) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)
        call = stub.Run(run_request(text, conversation_id=conversation), timeout=60)
        run_id = ""
        async for update in call:
            if update.HasField("accepted"):
                run_id = update.accepted.run_id
            if await started(update):
                break  # the flow is answering; the user gives up
        cancelled_at = time.monotonic()
        await stub.CancelRun(host_service_pb2.CancelRunRequest(run_id=run_id, reason="user left"), timeout=10)
        call.cancel()
        status = ""
        while time.monotonic() - cancelled_at < 20:
            run = (await stub.GetRun(host_service_pb2.GetRunRequest(run_id=run_id), timeout=10)).run
            status = common_pb2.RunStatus.Name(run.status)
            if status != "RUN_STATUS_RUNNING":
                break
            await asyncio.sleep(0.2)
    assert status == "RUN_STATUS_CANCELLED", status
    assert time.monotonic() - cancelled_at < 5


def _answers_stored(stack: Stack, question: str) -> list[str]:
    """The AI texts Langflow stored in the session where `question` was asked."""
    server = stack.flows.server
    asked = [m for m in server.messages() if m.get("text") == question]
    if not asked:
        return []
    return [m["text"] for m in server.messages(asked[0]["session_id"]) if m.get("sender") == "Machine"]


async def test_cancel_of_a_streamed_run_stops_the_flow(stack: Stack) -> None:
    question = "slow 3 streamed then cancelled"

    async def first_delta(update: Any) -> bool:
        return bool(update.HasField("result") and update.result.HasField("message_delta"))

    await _cancel(stack, question, "cancel", first_delta)
    # Langflow cancels a streamed flow when its caller leaves: its answer is never completed (the
    # message it stored when the stream began stays empty), even after the flow would have finished
    await asyncio.sleep(6)
    assert f"streamed reply to {question}" not in _answers_stored(stack, question)


async def test_cancel_of_a_plain_run_leaves_the_flow_running(stack: Stack) -> None:
    question = "slow 3 plain then cancelled"

    async def flow_started(update: Any) -> bool:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # ChatInput stored the question: the flow is running
            if any(m.get("text") == question for m in stack.flows.server.messages()):
                return True
            await asyncio.sleep(0.3)
        raise AssertionError("the flow never started")

    await _cancel(stack, question, "plain-cancel", flow_started)
    # without streaming Langflow does not notice the caller left: the flow runs to its end and its
    # answer is stored (what the README says a cancel does upstream)
    answer = f"streamed reply to {question}"
    for _ in range(60):
        if answer in _answers_stored(stack, question):
            break
        await asyncio.sleep(0.5)
    assert f"streamed reply to {question}" in _answers_stored(stack, question)


@pytest.mark.asyncio(loop_scope="function")
async def test_install_is_the_pinned_version() -> None:
    install: Path = real_tool("langflow")
    from tests.real.tools import pinned_versions

    assert (install / ".installed").read_text().strip() == pinned_versions()["LANGFLOW_VERSION"]
