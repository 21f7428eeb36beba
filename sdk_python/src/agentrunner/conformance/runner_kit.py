"""`agentrunner-conformance runner`: checks a runner, in any language, against the contract over gRPC.

The kit plays the host. It calls the runner's RunnerService, serves a recording ProxyService
(`agentrunner.testing.HostDouble`) as the run's `host_api_endpoint`, runs the Control stream, and runs a
fixed set of scenarios one after the other: a normal run, invalid config, each error reason injected into
every proxy call, a host that cannot be reached, a held proxy call with a cancel signal, a cancelled Run
call and a run deadline that passes while the host holds a call. Checks a scenario cannot exercise (no
proxy call made, no control capability declared) are reported as skipped, never as passed.
"""

# ruff: noqa: ASYNC109 - the kit takes explicit timeouts so that no runner can hang it.

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentrunner.conformance import checks
from agentrunner.conformance.report import Report
from agentrunner.errors import AgentRunnerError
from agentrunner.manifest import ManifestError, validate_manifest
from agentrunner.testing import (
    PROXY_METHODS,
    HostDouble,
    ProxyCall,
    RunHandle,
    RunOutcome,
    make_context,
)
from agentrunner.v1 import manifest_pb2, runner_service_pb2, runner_service_pb2_grpc

INPUT_TEXT = "hello from the conformance kit"
UNKNOWN_RUNNER = "plugin:conformance/unknown/none"
CANCEL_GRACE = 1.0
DEADLINE_SECONDS = 3.0
RATE_LIMIT_DELAY = 1.0
HISTORY_PAGE = {
    "items": [
        {
            "transcriptId": "t1",
            "role": "user",
            "itemType": "message",
            "content": "an earlier turn",
            "seq": "1",
        },
        {
            "transcriptId": "t2",
            "role": "assistant",
            "itemType": "message",
            "content": "its reply",
            "seq": "2",
        },
    ],
    "hasMore": False,
}

Script = Callable[[Any, ProxyCall], Awaitable[Any]]


@dataclasses.dataclass
class Started:
    """A run in progress: its handle, where its calls begin in the log, its deadline, its reader."""

    name: str
    handle: RunHandle
    mark: int
    deadline_mono: float
    reader: asyncio.Task[None]

    @property
    def ended(self) -> bool:
        """Whether the run's stream has ended."""
        return self.reader.done()

    def calls(self, host: HostDouble) -> list[ProxyCall]:
        """The proxy calls this run made (the host double's log from where the run started)."""
        return host.calls[self.mark :]


@dataclasses.dataclass
class Scenario:
    """One run the kit drove and everything it recorded about it."""

    name: str
    run_id: str
    token: str
    trace_id: str
    deadline_mono: float
    outcome: RunOutcome
    calls: list[ProxyCall]
    #: `time.monotonic()` when the terminal result was read (None: the stream ended without one).
    ended_at: float | None
    started_at: float
    #: The kit gave up waiting and cancelled the call.
    timed_out: bool = False

    @property
    def proxy_calls(self) -> list[ProxyCall]:
        """The run's proxy calls other than the Control stream."""
        return [c for c in self.calls if c.method != "Control"]


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def _bad_value(field: manifest_pb2.ConfigField) -> Any:
    """A value of the wrong JSON type for the field (a number for text, text for everything else)."""
    t = manifest_pb2
    stringy = {
        t.CONFIG_FIELD_TYPE_STRING,
        t.CONFIG_FIELD_TYPE_TEXT,
        t.CONFIG_FIELD_TYPE_SECRET,
        t.CONFIG_FIELD_TYPE_SELECT,
        t.CONFIG_FIELD_TYPE_LLM_MODEL_SELECTOR,
        t.CONFIG_FIELD_TYPE_RERANK_MODEL_SELECTOR,
    }
    return 12345 if field.type in stringy else "not-a-valid-value"


class RunnerKit:
    """One conformance run against the RunnerService at `target`."""

    def __init__(
        self, target: str, *, runner_id: str = "", timeout: float = 20.0, wait: float = 10.0
    ) -> None:
        self.target = target
        self.wait = wait
        self.runner_id = runner_id
        self.timeout = timeout
        self.report = Report("runner", target)
        self.manifest: manifest_pb2.RunnerManifest | None = None
        self.host = HostDouble(control=True, heartbeat_interval=0.2)
        self.scenarios: list[Scenario] = []
        self._channel: grpc.aio.Channel | None = None
        self._release = asyncio.Event()

    @property
    def stub(self) -> runner_service_pb2_grpc.RunnerServiceAsyncStub:
        """The RunnerService stub over the kit's channel to the target runner (open only during `run`)."""
        assert self._channel is not None
        return runner_service_pb2_grpc.RunnerServiceStub(self._channel)

    # -- driving --------------------------------------------------------------------------------------

    async def run(self) -> Report:
        """Starts the host double, waits for the runner, discovers it and runs every scenario; returns the
        report. The double and the channel are closed however the scenarios end."""
        self._channel = grpc.aio.insecure_channel(self.target, options=[("grpc.enable_retries", 0)])
        try:
            await self.host.start()
            # A runner started just before the kit may still be binding its port.
            with contextlib.suppress(TimeoutError, grpc.RpcError):
                await asyncio.wait_for(self._channel.channel_ready(), self.wait)
            if await self._discovery():
                await self._scenarios()
        finally:
            self._release.set()
            await self.host.stop()
            await self._channel.close()
        return self.report

    async def _scenarios(self) -> None:
        from agentrunner.conformance import runner_scenarios as s

        for step in (
            s.normal,
            s.config_invalid,
            s.injected_errors,
            s.host_dropped,
            s.cancel,
            s.call_cancelled,
        ):
            await step(self)
        await s.deadline(self)
        s.etiquette(self)

    def script_all(self, script: Script | None) -> None:
        """Answers every unary and streaming proxy call with `script` (None: the double's defaults)."""
        self.host.reset_scripts()
        if script is None:
            self.host.on("ListHistory", HISTORY_PAGE)
            return
        for method in PROXY_METHODS:
            if method != "Control":
                self.host.on(method, script)

    def hold(self) -> Script:
        """A script that keeps the call open until the kit releases it (a slow host)."""
        release = self._release = asyncio.Event()

        async def held(request: Any, call: ProxyCall) -> Any:
            await release.wait()
            return None

        return held

    @staticmethod
    def fail_with(error: AgentRunnerError) -> Script:
        """A proxy script that answers every call with `error` (to watch the runner's retry etiquette)."""

        async def failing(request: Any, call: ProxyCall) -> Any:
            raise error

        return failing

    async def start(
        self,
        name: str,
        *,
        config: dict[str, Any] | None = None,
        deadline: float = 30.0,
        host_api_endpoint: str | None = None,
    ) -> Started:
        """Starts a run of the scenario; its results are read in the background from then on."""
        manifest = self.manifest
        assert manifest is not None
        context = make_context(
            INPUT_TEXT,
            manifest=manifest,
            run_id=f"run_conf_{name.replace('.', '_')}_{uuid.uuid4().hex[:8]}",
            conversation_id=f"conv-conformance-{name}",
            config=config,
            deadline=deadline,
        )
        deadline_mono = time.monotonic() + deadline
        mark = len(self.host.calls)
        handle = await self.host.start_run(
            self.target, context=context, runner_id=manifest.id, host_api_endpoint=host_api_endpoint
        )
        return Started(name, handle, mark, deadline_mono, asyncio.create_task(self._drain(handle)))

    async def _drain(self, handle: RunHandle) -> None:
        while await handle.next(3600) is not None:
            pass

    async def finish(self, started: Started, *, timeout: float | None = None) -> Scenario:
        """Waits for the run's end (cancelling it after `timeout`), then for late calls; records it."""
        handle = started.handle
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(started.reader), timeout or self.timeout)
        timed_out = not started.reader.done()
        if timed_out:
            handle.cancel()
            started.reader.cancel()
        with contextlib.suppress(BaseException):
            await started.reader
        await asyncio.sleep(checks.AFTER_END_SLACK * 2)
        scenario = Scenario(
            name=started.name,
            run_id=handle.run_id,
            token=self.host.tokens[handle.run_id],
            trace_id=handle.context.runtime.trace_id,
            deadline_mono=started.deadline_mono,
            outcome=handle.outcome(),
            calls=list(self.host.calls[started.mark :]),
            ended_at=handle.terminal_at,
            started_at=handle.started_at,
            timed_out=timed_out,
        )
        self.scenarios.append(scenario)
        return scenario

    # -- discovery ------------------------------------------------------------------------------------

    async def _discovery(self) -> bool:
        """Health, ListRunners, manifest validity and DescribeRunner; False when nothing can run."""
        r = self.report
        try:
            assert self._channel is not None
            # (the health stubs' typing has no methods on HealthStub; the call is the generated one)
            health: Any = health_pb2_grpc.HealthStub(self._channel)
            answer = await health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
            r.add(
                "discovery.health",
                "serves grpc.health.v1.Health and reports SERVING",
                []
                if answer.status == health_pb2.HealthCheckResponse.SERVING
                else [f"status {answer.status}"],
            )
        except grpc.RpcError as exc:
            r.add(
                "discovery.health",
                "serves grpc.health.v1.Health",
                [f"Health/Check failed: {exc.code().name}"],
            )
        try:
            listed = await self.stub.ListRunners(runner_service_pb2.ListRunnersRequest(), timeout=10)
        except grpc.RpcError as exc:
            r.add("discovery.list", "ListRunners answers", [f"ListRunners failed: {exc.code().name}"])
            return False
        problems = []
        for manifest in listed.runners:
            try:
                validate_manifest(manifest)
            except ManifestError as exc:
                problems.append(f"{manifest.id or '(no id)'}: {exc}")
            if not manifest.capabilities.event_context:
                problems.append(f"{manifest.id}: capabilities.event_context must be true for v1 runners")
            if not manifest.label.translations:
                problems.append(f"{manifest.id}: label has no translation")
        if not listed.runners:
            problems.append("ListRunners returned no runner")
        r.add(
            "discovery.manifest",
            "every listed manifest is valid (id, name, version, permissions, config)",
            problems,
        )
        chosen = [m for m in listed.runners if not self.runner_id or self.runner_id in (m.id, m.name)]
        if not chosen:
            r.add("discovery.select", f"the runner {self.runner_id!r} is listed", ["not listed"])
            return False
        self.manifest = chosen[0]
        await self._describe()
        return True

    async def _describe(self) -> None:
        r = self.report
        assert self.manifest is not None
        problems = []
        try:
            got = await self.stub.DescribeRunner(
                runner_service_pb2.DescribeRunnerRequest(runner_id=self.manifest.id), timeout=10
            )
            if got.runner != self.manifest:
                problems.append("DescribeRunner's manifest differs from ListRunners'")
        except grpc.RpcError as exc:
            problems.append(f"DescribeRunner({self.manifest.id}) failed: {exc.code().name}")
        r.add("discovery.describe", "DescribeRunner returns the listed manifest", problems)
        error = None
        try:
            await self.stub.DescribeRunner(
                runner_service_pb2.DescribeRunnerRequest(runner_id=UNKNOWN_RUNNER), timeout=10
            )
        except grpc.RpcError as exc:
            error = exc
        r.add(
            "discovery.describe_unknown",
            "DescribeRunner of an unknown id: NOT_FOUND with one ErrorInfo (reason NOT_FOUND)",
            checks.rich_error(error, grpc.StatusCode.NOT_FOUND, "NOT_FOUND"),
        )
        error = None
        request = runner_service_pb2.RunRequest(
            runner_id=UNKNOWN_RUNNER,
            context=make_context(INPUT_TEXT),
            run_token="tok",
            host_api_endpoint=self.host.endpoint,
        )
        try:
            async for _ in self.stub.Run(request, timeout=10):
                pass
        except grpc.RpcError as exc:
            error = exc
        r.add(
            "discovery.run_unknown",
            "Run for a runner id not served: NOT_FOUND with one ErrorInfo, before any result",
            checks.rich_error(error, grpc.StatusCode.NOT_FOUND, "NOT_FOUND"),
        )


async def check_runner(
    target: str, *, runner_id: str = "", timeout: float = 20.0, wait: float = 10.0
) -> Report:
    """Runs the runner kit against `target` (`host:port`, answering within `wait` s) and returns its report."""
    return await RunnerKit(target, runner_id=runner_id, timeout=timeout, wait=wait).run()


__all__ = ["RunnerKit", "Scenario", "Started", "check_runner"]
