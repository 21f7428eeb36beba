"""The n8n runner against a real n8n (`.ci/install-real-tools n8n`): n8n started once for the session
with its workflow and credentials imported through its own CLI (`tests/real/n8n_server.py`), the real
runner process, the real host (its CLI `serve`, SQLite), and the tests speaking `HostService.Run` as a
client would. The webhook secrets reach the runner through the host's `{env: NAME}` indirection.

n8n writes its first `{"type":"keepalive"}` 30 s after an execution starts (a constant, not
configurable), so the two keepalive runs start in the background as soon as the stack is up and are
checked by the last test: the 32 s they take overlap the rest of the suite.
"""

from __future__ import annotations

import dataclasses
import http.server
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

import grpc
import httpx
import pytest

from agentrunner.v1 import common_pb2, host_service_pb2, host_service_pb2_grpc, result_pb2
from tests.integration.conftest import CLI, ROOT, cli, run_request, write_config
from tests.real.n8n_server import BASIC, HEADER, JWT_SECRET, KEEPALIVE_WAIT, N8nServer
from tests.real.tools import real_tool

pytestmark = pytest.mark.timeout(420)  # the first test waits for n8n to import, publish and start

RUNNER_ID = "plugin:langbot/n8n-agent/default"
WRONG = "wrong-secret-0123456789"
#: the host's environment: every webhook secret of the config (`{env: NAME}`), never in the file
SECRETS = {
    "N8N_E2E_BASIC": BASIC[1],
    "N8N_E2E_HEADER": HEADER[1],
    "N8N_E2E_JWT": JWT_SECRET,
    "N8N_E2E_WRONG": WRONG,
}


@dataclasses.dataclass
class Outcome:
    results: list[result_pb2.RunResult]
    finished: host_service_pb2.RunFinished
    #: seconds from the request to each `message.delta`
    delta_times: list[float]

    def of(self, kind: str) -> list[Any]:
        return [getattr(r, kind) for r in self.results if r.WhichOneof("payload") == kind]

    @property
    def status(self) -> str:
        return common_pb2.RunStatus.Name(self.finished.status)

    @property
    def answer(self) -> str:
        done = self.of("run_completed")
        return done[0].message.content if done else ""

    @property
    def failure(self) -> result_pb2.RunFailed | None:
        failed = self.of("run_failed")
        return failed[0] if failed else None

    @property
    def states(self) -> dict[str, str]:
        return {s.key: s.value.string_value for s in self.of("state_updated")}


@dataclasses.dataclass
class Stack:
    address: str
    n8n: N8nServer
    workdir: Path
    config: Path
    host_log: Path
    finished: list[str]
    late: dict[str, Future[Any]]


def ask(stack: Stack, agent: str, text: str, conversation: str = "") -> Outcome:
    req = run_request(text, conversation_id=conversation or f"{agent}-{time.monotonic_ns()}")
    req.agent_id = agent
    started, times, results = time.monotonic(), [], []
    finished = host_service_pb2.RunFinished()
    with grpc.insecure_channel(stack.address) as channel:
        for update in host_service_pb2_grpc.HostServiceStub(channel).Run(req, timeout=120):
            if update.HasField("result"):
                results.append(update.result)
                if update.result.HasField("message_delta"):
                    times.append(time.monotonic() - started)
            elif update.HasField("finished"):
                finished = update.finished
    return Outcome(results, finished, times)


def _agent(agent_id: str, webhook: str, timeout: float = 60, **config: Any) -> dict[str, Any]:
    return {"id": agent_id, "runner_id": RUNNER_ID, "timeout_seconds": timeout,
            "runner_config": {"webhook-url": webhook, **config}}  # fmt: skip


def agents(n8n: N8nServer) -> list[dict[str, Any]]:
    w = n8n.webhook
    auth: dict[str, dict[str, Any]] = {
        "basic": {"auth-type": "basic", "basic-username": BASIC[0], "basic-password": "N8N_E2E_BASIC"},
        "header": {"auth-type": "header", "header-name": HEADER[0], "header-value": "N8N_E2E_HEADER"},
        "jwt": {"auth-type": "jwt", "jwt-secret": "N8N_E2E_JWT"},
    }
    out = [
        *(_agent(path, w(path)) for path in ("plain", "stream", "fail", "fail-plain", "session", "slow")),
        _agent("keepalive", w("keepalive"), 120),
        _agent("keepalive-fail", w("keepalive-fail"), 120),
        _agent("deadline", w("slow"), 3),
    ]
    for kind, config in auth.items():
        secret = next(key for key in config if key.endswith(("password", "value", "secret")))
        for suffix, variable in (("", config[secret]), ("-wrong", "N8N_E2E_WRONG")):
            out.append(_agent(kind + suffix, w(kind), **{**config, secret: {"env": variable}}))
    return out


def _start(args: list[str], marker: str, log: Path, env: dict[str, str] | None = None) -> tuple[Any, str]:
    """A child process that prints `<marker> <address>` when ready (stderr to `log`)."""
    with log.open("wb") as err:
        proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True,
                                env={**os.environ, **(env or {})})  # fmt: skip
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 120)
    line = proc.stdout.readline() if ready else ""
    if not line.startswith(marker):
        proc.kill()
        raise RuntimeError(f"{args[2:5]} did not start: {line!r} {log.read_text()[-2000:]}")
    return proc, line.split()[1]


class _Finished(http.server.BaseHTTPRequestHandler):
    """Records the POSTs of the `slow` workflow's last step (the execution went on to its end)."""

    seen: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        self.seen.append(self.path)
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: Any) -> None:
        pass


def _raw_keepalive(n8n: N8nServer) -> tuple[float, str]:
    """What n8n itself writes first into a slow streaming response, and when."""
    started = time.monotonic()
    with httpx.stream("POST", n8n.webhook("keepalive"), json={"chatInput": "raw"}, timeout=120) as resp:
        first = next(resp.iter_lines())
        return time.monotonic() - started, first


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    install = real_tool("n8n")
    tmp = tmp_path_factory.mktemp("n8n")
    _Finished.seen = []
    finished = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Finished)
    threading.Thread(target=finished.serve_forever, daemon=True).start()
    n8n = N8nServer(install, tmp, f"http://127.0.0.1:{finished.server_address[1]}/finished")
    procs: list[Any] = []
    pool = ThreadPoolExecutor(4)
    try:
        database = {"url": f"sqlite+aiosqlite:///{tmp / 'host.db'}", "artifact_dir": str(tmp / "artifacts")}
        config = write_config(tmp / "host.yaml", {"database": database})
        # n8n's imports and start (the slowest part) overlap the runner's start and the host's migration
        n8n_up = pool.submit(n8n.up)
        runner = pool.submit(
            _start, [sys.executable, "-m", "agentrunner", "serve", "agentrunner_runners.n8n:N8nRunner",
                     "--host", "127.0.0.1", "--port", "0"], "AGENTRUNNER_LISTENING", tmp / "runner.log",
        )  # fmt: skip
        upgraded = cli("db", "upgrade", "--config", str(config))
        assert upgraded.returncode == 0, upgraded.stderr
        proc, runner_address = runner.result()
        procs.append(proc)
        write_config(config, {"listen": {"address": "127.0.0.1:0"}, "database": database,
                              "runners": [{"id": "n8n", "address": runner_address}], "agents": agents(n8n)})  # fmt: skip
        host_log = tmp / "host.log"
        args = [*CLI, "serve", "--config", str(config), "--log-level", "INFO"]
        proc, address = _start(args, "AGENTRUNNER_HOST_LISTENING", host_log, SECRETS)
        procs.append(proc)
        n8n_up.result()
        out = Stack(address, n8n, tmp, config, host_log, _Finished.seen, {})
        out.late = {
            "answer": pool.submit(ask, out, "keepalive", "slow agent"),
            "failure": pool.submit(ask, out, "keepalive-fail", "slow tool"),
            "raw": pool.submit(_raw_keepalive, n8n),
        }
        yield out
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=10)
        n8n.stop()
        pool.shutdown(wait=True, cancel_futures=True)
        finished.shutdown()


def test_a_plain_answer(stack: Stack) -> None:
    out = ask(stack, "plain", "Grüße aus dem Test 😀")
    assert out.status == "RUN_STATUS_COMPLETED", out.results
    session = out.states["external.session_id"]
    assert session.startswith("n8n_session_")
    assert out.answer == f"n8n heard: Grüße aus dem Test 😀 [{session}]"


def test_a_streamed_answer_arrives_as_n8n_sends_it(stack: Stack) -> None:
    out = ask(stack, "stream", "hello stream")
    assert out.status == "RUN_STATUS_COMPLETED", out.results
    assert out.answer == "n8n heard: hello stream"
    assert [d.text for d in out.of("message_delta")] == ["n8n heard: ", "hello stream"]
    assert out.delta_times[1] - out.delta_times[0] >= 0.4  # the first went out before the Wait node ended


def test_session_continuity(stack: Stack) -> None:
    first = ask(stack, "session", "one", conversation="continuity")
    session = first.states["external.session_id"]
    assert first.answer == f"turn 1 of {session}", first.results
    second = ask(stack, "session", "two", conversation="continuity")
    assert second.answer == f"turn 2 of {session}", second.results  # n8n saw the same session id twice
    assert second.states == {}  # nothing new to store


@pytest.mark.parametrize("agent", ["fail", "fail-plain"])
def test_a_failing_workflow_is_a_failed_run(stack: Stack, agent: str) -> None:
    out = ask(stack, agent, "please fail")
    assert out.status == "RUN_STATUS_FAILED", out.results
    assert out.of("run_completed") == [] and out.states == {}  # no answer, no conversation ids committed
    failure = out.failure
    assert failure is not None
    # one classification streamed or not: the workflow failed, not retryable
    assert (failure.code, failure.retryable) == ("n8n.workflow_failed", False)
    if agent == "fail":  # streamed: n8n's error chunk names the node (its content is null)
        assert "'Call the tool'" in failure.message
    else:  # not streamed: n8n answers HTTP 500 "Error in workflow"
        assert "Error in workflow" in failure.message


@pytest.mark.parametrize("kind", ["basic", "header", "jwt"])
def test_webhook_authentication_right_and_wrong(stack: Stack, kind: str) -> None:
    ok = ask(stack, kind, f"{kind} auth")
    assert ok.status == "RUN_STATUS_COMPLETED", ok.results
    assert ok.answer.startswith(f"n8n heard: {kind} auth [n8n_session_")
    denied = ask(stack, f"{kind}-wrong", f"{kind} auth")
    assert denied.failure is not None and denied.failure.code == "n8n.auth_error", denied.results
    assert not denied.failure.retryable and WRONG not in str(denied.results)


def _config_check(stack: Stack, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in SECRETS}
    args = [*CLI, "config", "check", "--config", str(stack.config)]
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120, env={**base, **env})


def test_the_secrets_stay_in_the_environment(stack: Stack) -> None:
    # the config names variables only; what the host logged and stored holds no secret value
    assert all(value not in stack.config.read_text() for value in SECRETS.values())
    assert ask(stack, "header", "one more").status == "RUN_STATUS_COMPLETED"
    stored = b"".join(p.read_bytes() for p in stack.workdir.glob("host.db*")) + stack.host_log.read_bytes()
    assert all(value.encode() not in stored for value in SECRETS.values())
    checked = _config_check(stack, SECRETS)
    assert checked.returncode == 0 and "warning" not in checked.stdout, checked.stdout + checked.stderr
    unset = _config_check(stack, {k: v for k, v in SECRETS.items() if k != "N8N_E2E_JWT"})
    assert unset.returncode == 1, unset.stdout + unset.stderr
    assert "runner_config.jwt-secret: environment variable N8N_E2E_JWT is not set" in unset.stdout
    assert all(value not in checked.stdout + unset.stdout for value in SECRETS.values())


def test_the_run_deadline_ends_the_run_as_n8n_timeout(stack: Stack) -> None:
    started = time.monotonic()
    out = ask(stack, "deadline", "take your time")
    elapsed = time.monotonic() - started
    assert out.failure is not None, out.results
    assert (out.failure.code, out.failure.retryable) == ("n8n.timeout", True), out.failure
    assert 2.5 < elapsed < 10, elapsed  # the agent's 3 s deadline, not the workflow's 4 s wait
    assert out.states == {}


def _run_status(stack: Stack, run_id: str, timeout: float = 15) -> str:
    """The stored run's status once it ended (polled through `HostService.GetRun`)."""
    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(stack.address) as channel:
        stub = host_service_pb2_grpc.HostServiceStub(channel)
        while True:
            run = stub.GetRun(host_service_pb2.GetRunRequest(run_id=run_id), timeout=10).run
            status = common_pb2.RunStatus.Name(run.status)
            if status not in ("RUN_STATUS_QUEUED", "RUN_STATUS_RUNNING") or time.monotonic() > deadline:
                return status
            time.sleep(0.1)


def test_cancel_ends_the_run_while_n8n_finishes_the_execution(stack: Stack) -> None:
    conversation = f"cancel-{time.monotonic_ns()}"
    req = run_request("wait for it", conversation_id=conversation)
    req.agent_id = "slow"
    req.event.actor.actor_id = conversation  # the workflow's last step reports `user_<actor id>`
    run_id, deltas = "", []
    with grpc.insecure_channel(stack.address) as channel:
        call = host_service_pb2_grpc.HostServiceStub(channel).Run(req, timeout=60)
        for update in call:
            run_id = run_id or update.accepted.run_id
            if update.HasField("result") and update.result.HasField("message_delta"):
                deltas.append(update.result.message_delta.text)
                break  # "thinking" arrived; the user gives up
        cancelled_at = time.monotonic()
        call.cancel()
    assert deltas == ["thinking"]
    assert _run_status(stack, run_id) == "RUN_STATUS_CANCELLED"
    assert time.monotonic() - cancelled_at < 5  # at once, not after the workflow's 4 s wait
    # n8n does not stop an execution whose caller left: its last steps still run (the README says so)
    deadline = time.monotonic() + 30
    while f"/finished/user_{conversation}" not in stack.finished and time.monotonic() < deadline:
        time.sleep(0.2)
    assert f"/finished/user_{conversation}" in stack.finished, stack.finished


def test_a_stream_that_starts_with_keepalives(stack: Stack) -> None:
    # started with the stack: n8n wrote a keepalive first, then the answer / the error
    waited, first = stack.late["raw"].result(timeout=120)
    assert first == '{"type":"keepalive"}' and waited >= 29, (waited, first)
    answer = stack.late["answer"].result(timeout=120)
    assert answer.status == "RUN_STATUS_COMPLETED", answer.results
    assert answer.answer == "late answer" and [d.text for d in answer.of("message_delta")] == ["late answer"]
    assert answer.delta_times[0] >= KEEPALIVE_WAIT - 1
    assert "keepalive" not in str(answer.results)
    failed = stack.late["failure"].result(timeout=120)
    assert failed.status == "RUN_STATUS_FAILED", failed.results
    assert failed.failure is not None and failed.failure.code == "n8n.workflow_failed"
    assert "'Slow tool'" in failed.failure.message
    assert failed.of("run_completed") == [] and failed.states == {} and "keepalive" not in str(failed.results)
