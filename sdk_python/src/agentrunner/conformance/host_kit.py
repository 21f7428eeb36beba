"""`agentrunner-conformance host`: checks a host, in any language, against the contract over gRPC.

The kit plays runners. It serves its own RunnerService (`host_runner.KitRunner`) at `--runner-listen`,
which the host under test must have registered as a runner endpoint and routed an agent to (id
`plugin:conformance/kit/default`, default agent id `conformance`). It waits until the host's registry
lists it, then sends one event per scenario through `HostService.Run` (the input text names the
runner's behaviour) and checks every answer: what the client streams, the run's final status and
reason, the ledger (`GetRun`), and how the host answered the runner's own calls.
"""

# ruff: noqa: ASYNC109 - the kit takes explicit timeouts so that no host can hang it.

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import uuid
from typing import Any

import grpc

from agentrunner.client import ClientCredentials, host_service_channel
from agentrunner.conformance import checks
from agentrunner.conformance.host_runner import RUNNER_ID, KitRunner, Seen
from agentrunner.conformance.report import Report
from agentrunner.protocol import RUN_ID_HEADER, RUN_TOKEN_HEADER, is_sensitive_variable, result_type
from agentrunner.results import to_struct
from agentrunner.v1 import (
    common_pb2,
    context_pb2,
    host_service_pb2,
    host_service_pb2_grpc,
    proxy_service_pb2,
    proxy_service_pb2_grpc,
    result_pb2,
)

S = common_pb2
#: Request variables the kit sends with the context scenario: the sensitive ones must not reach the runner.
VARIABLES = {
    "topic": "conformance",
    "api_key": "sk-conformance",
    "_private": "x",
    "X-Auth-Token": "t",
    "max_tokens": 5,
}


@dataclasses.dataclass
class Outcome:
    """What the client saw of one event's run."""

    accepted: host_service_pb2.RunAccepted | None = None
    results: list[result_pb2.RunResult] = dataclasses.field(default_factory=list)
    finished: host_service_pb2.RunFinished | None = None
    error: grpc.RpcError | None = None
    seen: Seen | None = None
    record: host_service_pb2.Run | None = None

    @property
    def types(self) -> list[str | None]:
        """The spec types of the results the client saw, in order (the table shows them)."""
        return [result_type(r) for r in self.results]

    @property
    def status(self) -> str:
        """The run's final status name, or "no RunFinished" when the stream ended without one."""
        return S.RunStatus.Name(self.finished.status) if self.finished else "no RunFinished"

    def describe(self) -> str:
        """One line for a problem's detail: the final status, its reason and the results seen."""
        reason = f" ({self.finished.reason})" if self.finished and self.finished.reason else ""
        return f"{self.status}{reason}, results {self.types}"


class HostKit:
    """Checks a host against the contract: registers the kit's own runner with it, sends events to an
    agent bound to that runner and compares what clients and the runner see with the rules (`run`)."""

    def __init__(
        self,
        target: str,
        *,
        runner_listen: str,
        agent: str = "conformance",
        deadline_agent: str = "",
        timeout: float = 30.0,
        credentials: ClientCredentials | None = None,
    ) -> None:
        self.target = target
        #: how the kit reaches the host (default: the AGENTRUNNER_HOST_* variables, as for any client)
        self.credentials = credentials if credentials is not None else ClientCredentials.from_env()
        self.runner_listen = runner_listen
        self.agent = agent
        self.deadline_agent = deadline_agent
        self.timeout = timeout
        self.report = Report("host", target)
        self.runner = KitRunner()
        self.outcomes: dict[str, Outcome] = {}
        self._channel: grpc.aio.Channel | None = None

    @property
    def stub(self) -> host_service_pb2_grpc.HostServiceAsyncStub:
        """The HostService stub over the kit's channel to the target host (open only during `run`)."""
        assert self._channel is not None
        return host_service_pb2_grpc.HostServiceStub(self._channel)

    async def run(self) -> Report:
        """Starts the kit's runner, runs every host scenario in turn and returns the report; the runner and
        the channel are closed however the scenarios end."""
        self._channel = host_service_channel(self.target, self.credentials)
        try:
            await self.runner.start(self.runner_listen)
            if await self._registered():
                from agentrunner.conformance import host_scenarios as s

                for step in s.STEPS:
                    await step(self)
        finally:
            await self.runner.stop()
            await self._channel.close()
        return self.report

    async def _registered(self, limit: float = 60.0) -> bool:
        """Waits until the host's registry lists the kit's runner as available."""
        deadline = time.monotonic() + limit
        last = "HostService.ListRunners never answered"
        while time.monotonic() < deadline:
            try:
                listed = await self.stub.ListRunners(
                    host_service_pb2.HostServiceListRunnersRequest(), timeout=5
                )
                ours = [r for r in listed.runners if r.manifest.id == RUNNER_ID]
                if ours and ours[0].available:
                    self.report.add("host.discovery", "the registry lists the kit's runner as available", [])
                    return True
                last = "the kit's runner is not listed" if not ours else "listed but not available"
            except grpc.RpcError as exc:
                last = f"HostService.ListRunners failed: {exc.code().name}"
            await asyncio.sleep(0.5)
        self.report.add(
            "host.discovery",
            f"the registry lists the kit's runner ({RUNNER_ID} at {self.runner_listen})",
            [f"{last} after {limit:.0f}s (register the endpoint and route agent {self.agent!r} to it)"],
        )
        return False

    def envelope(self, text: str, **extra: Any) -> host_service_pb2.EventEnvelope:
        """An event whose text names the runner behaviour to play, with ids unique to this send so runs of
        the same behaviour never share a conversation."""
        tag = uuid.uuid4().hex[:10]
        event = host_service_pb2.EventEnvelope(
            event_id=f"evt_conformance_{tag}",
            event_type="message.received",
            source="conformance",
            bot_id="conformance-bot",
            conversation=context_pb2.ConversationContext(
                conversation_id=f"conv-conformance-{text}-{tag}", launcher_type="person", launcher_id="kit"
            ),
            actor=context_pb2.ActorContext(actor_type="user", actor_id="kit", actor_name="Conformance kit"),
            input=host_service_pb2.EventInput(text=text),
            delivery=context_pb2.DeliveryContext(surface="conformance", supports_streaming=True),
            **extra,
        )
        return event

    async def event(
        self,
        text: str,
        *,
        agent: str | None = None,
        variables: dict[str, Any] | None = None,
        during: Any = None,
    ) -> Outcome:
        """Sends one event and reads its run to the end; `during(outcome)` runs once it was accepted."""
        extra = {"variables": to_struct(variables)} if variables else {}
        request = host_service_pb2.HostServiceRunRequest(
            event=self.envelope(text, **extra), agent_id=agent or self.agent
        )
        arrived = self.runner.expect(text)
        out = Outcome()
        side: asyncio.Task[None] | None = None
        try:
            async with asyncio.timeout(self.timeout):
                async for item in self.stub.Run(request, timeout=self.timeout):
                    kind = item.WhichOneof("update")
                    if kind == "accepted":
                        out.accepted = item.accepted
                        if during is not None:
                            side = asyncio.create_task(during(out))
                    elif kind == "result":
                        out.results.append(item.result)
                    elif kind == "finished":
                        out.finished = item.finished
        except grpc.RpcError as exc:
            out.error = exc
        except TimeoutError:
            pass
        if side is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(side, 5)
        if arrived.is_set():
            out.seen = self.runner.seen.get(text)
        if out.accepted and out.accepted.run_id:
            with contextlib.suppress(grpc.RpcError):
                got = await self.stub.GetRun(
                    host_service_pb2.GetRunRequest(run_id=out.accepted.run_id), timeout=10
                )
                out.record = got.run
        self.outcomes[text] = out
        return out

    async def replay(self, seen: Seen) -> grpc.RpcError | None:
        """Calls the host with a run's token after the run ended."""
        request = seen.request
        proxy = ClientCredentials(tls=self.credentials.tls)  # the run token authorizes: no client key
        async with host_service_channel(request.host_api_endpoint, proxy) as channel:
            stub = proxy_service_pb2_grpc.ProxyServiceStub(channel)
            md = [(RUN_TOKEN_HEADER, request.run_token), (RUN_ID_HEADER, request.context.run_id)]
            try:
                await stub.ListHistory(proxy_service_pb2.ListHistoryRequest(limit=1), metadata=md, timeout=10)
            except grpc.RpcError as exc:
                return exc
        return None


def expect(
    out: Outcome,
    status: int,
    *,
    reason: str = "",
    types: list[str] | None = None,
    terminal_code: str | None = None,
) -> list[str]:
    """The client saw `status` (and `reason`), these result types, one terminal result last."""
    problems: list[str] = []
    if out.error is not None:
        code = out.error.code().name if hasattr(out.error, "code") else "?"
        return [f"HostService.Run failed with {code} instead of streaming the run"]
    if out.finished is None:
        return [f"no RunFinished within the kit's timeout ({out.describe()})"]
    if out.finished.status != status or (reason and out.finished.reason != reason):
        want = S.RunStatus.Name(status) + (f" ({reason})" if reason else "")  # type: ignore[arg-type]
        problems.append(f"finished {out.status} ({out.finished.reason}), expected {want}")
    if types is not None and out.types != types:
        problems.append(f"client saw {out.types}, expected {types}")
    terminals = [r for r in out.results if r.WhichOneof("payload") in ("run_completed", "run_failed")]
    if len(terminals) != 1 or (out.results and out.results[-1] is not terminals[0]):
        problems.append(f"{len(terminals)} terminal results, expected exactly one, last")
    if terminal_code is not None and terminals:
        got = terminals[-1].run_failed.code if terminals[-1].WhichOneof("payload") == "run_failed" else ""
        if got != terminal_code:
            problems.append(f"terminal run.failed code {got!r}, expected {terminal_code!r}")
    return problems


def client_grammar(out: Outcome) -> list[str]:
    """What the host streams to clients: the accepted run's id and its own numbering 1..n."""
    if out.accepted is None:
        return []
    problems = []
    for i, r in enumerate(out.results, start=1):
        if r.run_id != out.accepted.run_id:
            problems.append(f"result {i} has run_id {r.run_id!r}, not the run's")
        if r.sequence != i:
            problems.append(f"result {i} has sequence {r.sequence}")
    return problems


def ledger(out: Outcome) -> list[str]:
    """GetRun reports the status the client's stream finished with (the ledger agrees with the stream)."""
    if out.finished is None or out.accepted is None:
        return []
    if out.record is None:
        return ["GetRun did not return the run"]
    if out.record.status != out.finished.status:
        return [f"GetRun status {S.RunStatus.Name(out.record.status)} != RunFinished {out.status}"]
    return []


def filtered_variables(seen: Seen | None) -> list[str]:
    if seen is None:
        return ["the runner was never called"]
    got = dict(seen.request.context.variables)
    leaked = [k for k in got if is_sensitive_variable(k)]
    problems = [f"sensitive variable {k!r} reached the runner" for k in leaked]
    for key in ("topic", "max_tokens"):
        if key not in got:
            problems.append(f"public variable {key!r} was dropped")
    return problems


def answer(seen: Seen | None, label: str, code: grpc.StatusCode, reasons: tuple[str, ...]) -> list[str]:
    """The host answered the runner's `label` call with `code` and an ErrorInfo whose reason is one of
    `reasons`."""
    if seen is None or label not in seen.answers:
        return [f"the runner's {label} call did not happen"]
    got = seen.answers[label]
    problems = []
    if got.code != code:
        problems.append(f"{label}: {got.code.name}, expected {code.name}")
    if not got.has_error_info:
        problems.append(f"{label}: no ErrorInfo of domain agentrunner.langbot.app")
    elif got.reason not in reasons:
        problems.append(f"{label}: reason {got.reason!r}, expected {' or '.join(reasons)}")
    return problems


async def check_host(
    target: str,
    *,
    runner_listen: str,
    agent: str = "conformance",
    deadline_agent: str = "",
    timeout: float = 30.0,
    credentials: ClientCredentials | None = None,
) -> Report:
    """Runs the host kit against `target` (the host's HostService) and returns its report; the kit calls
    the host as a client with `credentials` (default: `ClientCredentials.from_env()`)."""
    kit = HostKit(
        target,
        runner_listen=runner_listen,
        agent=agent,
        deadline_agent=deadline_agent,
        timeout=timeout,
        credentials=credentials,
    )
    return await kit.run()


__all__ = ["HostKit", "Outcome", "answer", "check_host", "checks", "client_grammar", "expect", "ledger"]
